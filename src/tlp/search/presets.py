"""Named tuning settings: what ``tlp tune --preset`` fills in for the search options a user leaves out.

``metaschedule``: MetaSchedule's own search (batches of 32 from an evolutionary population of 2,048, a full first
batch per task, the gradient task rule) with whichever cost model: how the cost models are compared at equal terms.

``tlp``: the setting the whole-network search benchmarks found best for the TLP model (benchmarks/README.md, issue 11:
"Emerald Rapids: a second round of self-play, and the schedule library"): each task's first round is the model's
top 2 (the first round over all tasks is most of a small budget on a network), one of them the model's pick among
the dataset's fastest programs of the task's nearest stored workloads (:mod:`tlp.search.library`) when the dataset
holds this platform; batches of 8 from a population of 256 (at 2,048 the model's best is more often a candidate it
overrates), at most 2 of one structure per batch (:mod:`tlp.search.diverse`), the next batch for the task furthest
below the best throughput reached (:class:`tlp.search.scheduler.HeadroomScheduler`), and online fine-tuning on the
search's own measurements once a task has 3. In ``benchmarks/search_efficiency.py`` it is
``tlp-online-lr3-warm-headroom-diverse-library:2/8 --population 256``, whose library also leaves out the held-out
networks' own programs (a user's library keeps everything stored for the platform: their own tuning logs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tlp import TLPError

PRESETS: dict[str, dict[str, Any]] = {
    "metaschedule": dict(trials_per_iter=32, first_round_trials=None, first_round_transferred=0, transfer_from=None,
                         population=2048, task_scheduler="gradient", max_per_structure=0, online_steps=0,
                         online_lr=1e-4, online_min_task_measurements=0),
    "tlp": dict(trials_per_iter=8, first_round_trials=2, first_round_transferred=0, transfer_from=None,
                population=256, task_scheduler="headroom", max_per_structure=2, online_steps=5, online_lr=1e-3,
                online_min_task_measurements=3),
}
PRESET_OPTIONS = tuple(PRESETS["tlp"])  # the options a preset sets (TuneConfig fields), the same in every preset


def default_preset(cost_model: str) -> str:
    """The TLP model's own setting for the TLP cost model; MetaSchedule's for the others (XGBoost, MLP, random)."""
    return "tlp" if cost_model == "tlp" else "metaschedule"


def library_dataset(platform_id: str, path: str | Path) -> str | None:
    """``path`` when it is a dataset holding programs of ``platform_id`` (a schedule library to draw on), else None."""
    from tlp.dataset.store import Dataset  # pylint: disable=import-outside-toplevel

    return str(path) if platform_id in Dataset(path).platform_ids() else None


def preset_settings(name: str, library: str | None = None) -> dict[str, Any]:
    """The TuneConfig fields preset ``name`` sets. ``library``: a dataset for the ``tlp`` preset's library place in
    each first round (None: both first-round places are the model's own picks)."""
    if name not in PRESETS:
        raise TLPError(f"no tuning preset {name!r} (presets: {', '.join(sorted(PRESETS))})")
    settings = dict(PRESETS[name])
    if name == "tlp" and library:
        settings.update(first_round_transferred=1, transfer_from=library)
    return settings
