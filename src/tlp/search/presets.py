"""Named search settings, and the one place a tuning run's settings are resolved and checked.

``metaschedule``: MetaSchedule's own search (batches of 32 from an evolutionary population of 2,048, a full first
batch per task, the gradient task rule) with whichever cost model: how cost models are compared at equal terms.

``tlp``: the setting the whole-network searches found best for the TLP model: each task's first round is 2
programs (on a network the first round is most of a small budget), the model's best among the dataset's fastest
programs of the task's nearest stored workloads (:mod:`tlp.search.search_strategy.library`). Of this platform,
they fill the round: a model's pick among random programs costs a full evolutionary search (4 s a task, most of
MobileNetV2's wall); without it the wall to XGBoost's final fell 2-7x. Where the task's nearest stored workload is
far, one place stays the model's pick of a small search (:mod:`tlp.search.search_strategy.first_round`).
Of the nearest platform the dataset holds, when it lacks this one, they take one place beside the model's pick of a
small search (the model alone can be far off there, MobileNetV2's first rounds at 6.9-11.8 ms against 6.8-7.0 ms;
the library alone ended 7-9 % above XGBoost's final; a full search for the pick made the first round 4x longer).
Then batches of 8 from a population of 256 (at 2,048 the model's best is more often a candidate it overrates), at
most 2 of one structure per batch (:mod:`tlp.search.search_strategy.diverse`), the next batch for the task furthest
below the best throughput reached
(:class:`tlp.search.task_scheduler.scheduler.HeadroomScheduler`), and online fine-tuning on the search's own
measurements once a task has 3.

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


def library_dataset(platform: Any, path: str | Path) -> tuple[str, bool] | None:
    """``(path, exact)`` when ``path`` is a dataset holding programs of ``platform`` (a
    :class:`tlp.platform.Platform`; ``exact``) or of a platform of its kind to stand in for it (a schedule library to
    draw on), else None."""
    from tlp.dataset.store import Dataset  # pylint: disable=import-outside-toplevel

    held = Dataset(path).nearest_platform_id(platform) if Path(path, "tasks.json").is_file() else None
    return (str(path), held[1]) if held else None


def preset_settings(name: str, library: str | None = None, exact: bool = True) -> dict[str, Any]:
    """The TuneConfig fields preset ``name`` sets. ``library``: a dataset for the ``tlp`` preset's first rounds, of
    this platform (``exact``: its programs fill the round) or the nearest one (one place beside the model's pick);
    None: the model's own picks."""
    if name not in PRESETS:
        raise TLPError(f"no tuning preset {name!r} (presets: {', '.join(sorted(PRESETS))})")
    settings = dict(PRESETS[name])
    if name == "tlp" and library:
        settings.update(first_round_transferred=settings["first_round_trials"] if exact else 1, transfer_from=library)
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
    library, exact = given.get("transfer_from", FROM_PRESET), True
    if library is FROM_PRESET:
        found = library_dataset(Platform.host(parse_target(target_json)), DEFAULT_DATASET) if name == "tlp" else None
        library, exact = found or (None, True)
    settings = preset_settings(name, library, exact)
    first = given.get("first_round_trials", settings["first_round_trials"])
    batch = given.get("trials_per_iter", settings["trials_per_iter"])
    if "first_round_transferred" not in given and "transfer_from" not in given:
        if first is None or first >= batch or (first < 2 and not exact):
            # no first round of its own, or none with a place for the library beside the model's best
            settings.update(first_round_transferred=0, transfer_from=None)
        else:
            settings.update(first_round_transferred=min(first, settings["first_round_transferred"]))
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
