"""A schedule library: a dataset's best measured programs, replayed on a new task from its nearest stored workloads.

Why: on a whole network a TLP search's latency after ~100 trials is its first round (2 programs per task), and
those are the model's picks among random programs of a task it has never measured. A dataset already holds, for
this platform, measured programs of workloads like the task — in TenSet-style data the same layers at other input
sizes (``mobilenet_v2_240``, ``resnet50_256``) and the operators of other networks. Their fastest programs, with
tile sizes refitted to the task's loops (:mod:`tlp.search.search_strategy.transfer`), are first guesses that a search of the task
itself would take many trials to reach. (Transferring between the tasks of one run did not help: the sources
were first-round picks themselves, and the model's favourite source was a task of another shape; the library's sources are a dataset's best programs of the task's nearest shapes.)

Nearest: the same blocks (by name) with the same number of loops each, then the smallest Σ |log(extent ratio)| over
every block's iteration extents (:func:`extent_distance`). :meth:`ScheduleLibrary.records_for` gives the best stored
programs of the ``nearest`` workloads as tuning records, nearest first; which of them to measure is the cost model's
call (:class:`tlp.search.search_strategy.first_round.FirstRoundSearch`, ``library=``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable

from tlp import TLPError
from tlp._tvm import ms
from tlp.dataset.best_programs import KEEP, best_programs
from tlp.dataset.store import Dataset, ReadReport
from tlp.features.featurizer import block_extents


class LibraryError(TLPError):
    """A schedule library that cannot be built from the dataset given."""


@dataclass
class LibraryWorkload:
    """One stored workload: its MetaSchedule workload (JSON; parsed when a task draws on it), block extents and
    fastest programs (latency, trace, args)."""

    key: str
    workload_json: list[Any]
    extents: dict[str, list[int]]
    programs: list[tuple[float, Any, Any]] = field(default_factory=list)

    @cached_property
    def workload(self) -> Any:
        return ms.database.Workload.from_json(self.workload_json)


def extent_distance(a: dict[str, list[int]], b: dict[str, list[int]]) -> float:
    """Σ |log(x / y)| over the iteration extents of two workloads' blocks; infinite unless both have the same blocks
    with the same number of loops each (and equal symbolic extents, which count as -1)."""
    if set(a) != set(b):
        return math.inf
    total = 0.0
    for name, extents in a.items():
        other = b[name]
        if len(extents) != len(other):
            return math.inf
        for x, y in zip(extents, other):
            if x <= 0 or y <= 0:
                if x != y:
                    return math.inf
                continue
            total += abs(math.log(x / y))
    return total


class ScheduleLibrary:
    """The fastest stored programs of many workloads on one platform, looked up by a task's nearest workloads."""

    def __init__(self, workloads: list[LibraryWorkload], target_json: dict[str, Any],
                 skipped: dict[str, int] | None = None, platform_id: str = "") -> None:
        self.workloads = workloads
        self.target_json = target_json
        self.platform_id = platform_id  # the stored platform whose programs these are
        self.skipped = dict(skipped or {})  # stored records left out as unreadable, by reason

    def __len__(self) -> int:
        return len(self.workloads)

    @classmethod
    def from_dataset(cls, dataset: Dataset, platform_id: str, per_workload: int = 2,
                     exclude_networks: Iterable[str] = ()) -> "ScheduleLibrary":
        """The ``per_workload`` fastest valid programs of every workload ``dataset`` holds for ``platform_id``,
        leaving out the workloads of ``exclude_networks`` (by the dataset's task catalogue: a benchmark on held-out
        networks must not be handed their own measured programs). Read from the store's index of each workload's
        fastest programs (:mod:`tlp.dataset.best_programs`) plus what was stored after it."""
        if not 1 <= per_workload <= KEEP:
            raise LibraryError(f"per_workload must be between 1 and {KEEP}, not {per_workload}")
        store = dataset.store(platform_id)
        excluded = set(exclude_networks)
        catalogue = dataset.catalogue()
        known = {network for entry in catalogue.values() for network in entry.get("networks", {})}
        if excluded - known:  # a misspelt name would exclude nothing and hand a benchmark its own programs
            raise LibraryError(f"{dataset.path}: no network {', '.join(sorted(excluded - known))} in the task "
                               f"catalogue to leave out (networks there: {', '.join(sorted(known))})")
        index = best_programs(store, ReadReport())
        workloads = []
        for key, programs in index.fastest(per_workload).items():
            if set(catalogue.get(key, {}).get("networks", {})) & excluded:
                continue
            entry = LibraryWorkload(key, store.workload_json(key), {}, programs)
            entry.extents = block_extents(entry.workload.mod)
            workloads.append(entry)
        if not workloads:
            outside = f" outside {', '.join(sorted(excluded))}" if excluded else ""
            raise LibraryError(f"{dataset.path}: no valid program of platform {platform_id}{outside} to build a "
                               "schedule library from")
        return cls(workloads, store.platform.target, dict(index.skipped), platform_id)

    def nearest(self, mod: Any, count: int) -> list[tuple[float, LibraryWorkload]]:
        """Up to ``count`` stored workloads of ``mod``'s blocks, nearest in extents first (``mod`` itself included
        when stored: its own programs are the best guess)."""
        extents = block_extents(mod)
        ranked = sorted(((extent_distance(extents, w.extents), i) for i, w in enumerate(self.workloads)))
        return [(distance, self.workloads[i]) for distance, i in ranked[:count] if distance < math.inf]

    def nearest_distance(self, mod: Any) -> float:
        """The extent distance of ``mod``'s nearest stored workload (infinite when none has its blocks)."""
        nearest = self.nearest(mod, 1)
        return nearest[0][0] if nearest else math.inf

    def records_for(self, mod: Any, nearest: int = 4) -> list[Any]:
        """Tuning records of the fastest programs of ``mod``'s ``nearest`` stored workloads, nearest first, to
        replay on it (:func:`tlp.search.search_strategy.transfer.replayed_candidates`)."""
        return self.records_of(self.nearest(mod, nearest))

    def records_of(self, workloads: list[tuple[float, LibraryWorkload]]) -> list[Any]:
        """Tuning records of the fastest programs of ``workloads`` (as :meth:`nearest` gives them), in order."""
        records = []
        for _, entry in workloads:
            for _, trace_json, args_info in entry.programs:
                record = ms.database.TuningRecord.from_json([trace_json, None, self.target_json, args_info or []],
                                                            entry.workload)
                records.append(record)
        return records
