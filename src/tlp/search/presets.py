"""Named search settings, and the one place a tuning run's settings are resolved and checked.

``metaschedule``: MetaSchedule's own search (batches of 32 from an evolutionary population of 2,048, a full first
batch per task, the gradient task rule) with whichever cost model: how cost models are compared at equal terms.

``tlp``: the setting the whole-network searches found best for the TLP model: each task's first round is the
model's top 2 (on a network the first round is most of a small budget), one of them the model's pick among the
dataset's fastest programs of the task's nearest stored workloads (:mod:`tlp.search.search_strategy.library`) of
this platform, or of the nearest platform the dataset holds when it lacks this one (on a CPU no dataset holds the
model's own picks can be far off: MobileNetV2's first rounds ended at 6.8-7.0 ms with it, 6.9-11.8 ms without);
batches of 8 from a population of 256 (at 2,048 the model's best is more often a candidate it overrates), at most
2 of one structure per batch (:mod:`tlp.search.search_strategy.diverse`), the next batch for the task furthest
below the best throughput reached (:class:`tlp.search.task_scheduler.scheduler.HeadroomScheduler`), and online
fine-tuning on the search's own measurements once a task has 3.

:func:`resolve` is what ``tlp tune`` and ``tlp.tune.tune`` both call: preset, then the user's settings, then
:func:`validate`, so a ``TuneConfig()`` from Python runs what ``tlp tune`` runs with the same settings.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tlp import TLPError


class _FromPreset:
    """A setting left to the preset (a ``TuneConfig`` field's default)."""

    def __repr__(self) -> str:
        return "FROM_PRESET"


FROM_PRESET: Any = _FromPreset()

PRESETS: dict[str, dict[str, Any]] = {
    "metaschedule": dict(trials_per_iter=32, first_round_trials=None, first_round_transferred=0, transfer_from=None,
                         population=2048, task_scheduler="gradient", max_per_structure=0, online_steps=0,
                         online_lr=1e-4, online_min_task_measurements=0),
    "tlp": dict(trials_per_iter=8, first_round_trials=2, first_round_transferred=0, transfer_from=None,
                population=256, task_scheduler="headroom", max_per_structure=2, online_steps=5, online_lr=1e-3,
                online_min_task_measurements=3),
}
PRESET_OPTIONS = tuple(PRESETS["tlp"])  # the settings a preset sets (TuneConfig fields), the same in every preset
COST_MODELS = ("tlp", "xgb", "mlp", "random")
TASK_SCHEDULERS = ("gradient", "headroom")


def default_preset(cost_model: str) -> str:
    """The TLP model's own setting for the TLP cost model; MetaSchedule's for the others (XGBoost, MLP, random)."""
    return "tlp" if cost_model == "tlp" else "metaschedule"


def library_dataset(platform: Any, path: str | Path) -> str | None:
    """``path`` when it is a dataset holding programs of ``platform`` (a :class:`tlp.platform.Platform`) or of a
    platform of its kind to stand in for it (a schedule library to draw on), else None."""
    from tlp.dataset.store import Dataset  # pylint: disable=import-outside-toplevel

    return str(path) if Path(path, "tasks.json").is_file() and Dataset(path).nearest_platform_id(platform) else None


def preset_settings(name: str, library: str | None = None) -> dict[str, Any]:
    """The TuneConfig fields preset ``name`` sets. ``library``: a dataset for the ``tlp`` preset's library place in
    each first round (None: both first-round places are the model's own picks)."""
    if name not in PRESETS:
        raise TLPError(f"no tuning preset {name!r} (presets: {', '.join(sorted(PRESETS))})")
    settings = dict(PRESETS[name])
    if name == "tlp" and library:
        settings.update(first_round_transferred=1, transfer_from=library)
    return settings


def resolve(config: Any, target_json: dict[str, Any]) -> Any:
    """``config`` (a :class:`tlp.tune.TuneConfig`; typed loosely, as tlp.tune imports this module) with every setting
    left to the preset filled in, checked (:func:`validate`)."""
    from tlp.dataset.store import DEFAULT_DATASET  # pylint: disable=import-outside-toplevel
    from tlp.platform import Platform, parse_target  # pylint: disable=import-outside-toplevel

    if config.cost_model not in COST_MODELS:
        raise TLPError(f"unknown cost model {config.cost_model!r}; choose one of {', '.join(COST_MODELS)}")
    name = config.preset or default_preset(config.cost_model)
    given = {k: getattr(config, k) for k in PRESET_OPTIONS if getattr(config, k) is not FROM_PRESET}
    library = given.get("transfer_from", FROM_PRESET)
    if library is FROM_PRESET:
        library = library_dataset(Platform.host(parse_target(target_json)), DEFAULT_DATASET) if name == "tlp" \
            else None
    settings = preset_settings(name, library)
    first = given.get("first_round_trials", settings["first_round_trials"])
    batch = given.get("trials_per_iter", settings["trials_per_iter"])
    if "first_round_transferred" not in given and "transfer_from" not in given and (first is None or first >= batch
                                                                                   or first < 2):
        # the user's first round has no place for the library beside the model's best
        settings.update(first_round_transferred=0, transfer_from=None)
    resolved = dataclasses.replace(config, preset=name, **{**settings, **given})
    validate(resolved)
    return resolved


def validate(config: Any) -> None:
    """One-line errors for settings that cannot work together, before anything is built or measured."""
    def fail(message: str) -> None:
        raise TLPError(f"tune settings: {message}")

    if config.trials < 1:
        fail(f"trials must be at least 1, not {config.trials}")
    if config.top_tasks is not None and config.top_tasks < 1:
        fail(f"top_tasks must be at least 1 (or unset: all tasks), not {config.top_tasks}")
    if config.trials_per_iter < 1 or config.population < 2:
        fail(f"trials_per_iter must be at least 1 and population at least 2, not {config.trials_per_iter} and "
             f"{config.population}")
    if config.trials_per_task is not None and config.trials_per_task < 1:
        fail(f"trials_per_task must be at least 1, not {config.trials_per_task}")
    if config.task_scheduler not in TASK_SCHEDULERS:
        fail(f"unknown task_scheduler {config.task_scheduler!r} (choose among {', '.join(TASK_SCHEDULERS)})")
    if config.first_round_trials is not None and config.first_round_trials < 1:
        fail(f"first_round_trials must be at least 1, not {config.first_round_trials}")
    if config.max_per_structure < 0:
        fail(f"max_per_structure must be at least 1 (or 0: off), not {config.max_per_structure}")
    if config.online_steps < 0 or config.online_min_task_measurements < 0:
        fail("online_steps and online_min_task_measurements must be 0 or more")
    transferred = config.first_round_transferred
    if transferred and not config.transfer_from:
        fail("first_round_transferred places replay a schedule library's programs: set transfer_from to a dataset")
    if config.transfer_from and not transferred:
        fail("transfer_from fills first-round places with a dataset's schedules: set first_round_transferred K")
    if transferred and not ((config.first_round_trials or 0) >= transferred > 0
                            and config.first_round_trials < config.trials_per_iter):
        fail(f"first_round_transferred {transferred} takes places of a first round smaller than a batch: set "
             f"first_round_trials at least {transferred} and below trials_per_iter ({config.trials_per_iter})")
    if config.transfer_exclude_networks and not config.transfer_from:
        fail("transfer_exclude_networks leaves networks out of transfer_from's dataset: set transfer_from")
