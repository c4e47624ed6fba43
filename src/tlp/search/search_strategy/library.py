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

import gzip
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

from tlp import TLPError
from tlp.cache import cache_root
from tlp._tvm import ms
from tlp.dataset.store import Dataset, PlatformStore, ReadReport
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
                 skipped: dict[str, int] | None = None) -> None:
        self.workloads = workloads
        self.target_json = target_json
        self.skipped = dict(skipped or {})  # stored records left out as unreadable, by reason

    def __len__(self) -> int:
        return len(self.workloads)

    @classmethod
    def from_dataset(cls, dataset: Dataset, platform_id: str, per_workload: int = 2,
                     exclude_networks: Iterable[str] = (), cache_dir: str | Path | None = None) -> "ScheduleLibrary":
        """The ``per_workload`` fastest valid programs of every workload ``dataset`` holds for ``platform_id``,
        leaving out the workloads of ``exclude_networks`` (by the dataset's task catalogue: a benchmark on held-out
        networks must not be handed their own measured programs). Read once per state of the platform's store,
        then from a cache (``cache_dir``, default ``$TLP_CACHE_DIR`` or ``~/.cache/tlp``): reading a store of
        100,000 programs takes a minute, the cache of its fastest ones a second or two."""
        if per_workload < 1:
            raise LibraryError(f"per_workload must be at least 1, not {per_workload}")
        store = dataset.store(platform_id)
        excluded = set(exclude_networks)
        catalogue = dataset.catalogue()
        known = {network for entry in catalogue.values() for network in entry.get("networks", {})}
        if excluded - known:  # a misspelt name would exclude nothing and hand a benchmark its own programs
            raise LibraryError(f"{dataset.path}: no network {', '.join(sorted(excluded - known))} in the task "
                               f"catalogue to leave out (networks there: {', '.join(sorted(known))})")
        cache = _cache_path(store, per_workload, cache_dir)
        entries, skipped = _read_cache(cache)
        if entries is None:
            entries, skipped = _fastest_programs(store, per_workload)
            _write_cache(cache, entries, skipped)
        workloads = [entry for entry in entries
                     if not set(catalogue.get(entry.key, {}).get("networks", {})) & excluded]
        if not workloads:
            outside = f" outside {', '.join(sorted(excluded))}" if excluded else ""
            raise LibraryError(f"{dataset.path}: no valid program of platform {platform_id}{outside} to build a "
                               "schedule library from")
        return cls(workloads, store.platform.target, dict(skipped))

    def nearest(self, mod: Any, count: int) -> list[tuple[float, LibraryWorkload]]:
        """Up to ``count`` stored workloads of ``mod``'s blocks, nearest in extents first (``mod`` itself included
        when stored: its own programs are the best guess)."""
        extents = block_extents(mod)
        ranked = sorted(((extent_distance(extents, w.extents), i) for i, w in enumerate(self.workloads)))
        return [(distance, self.workloads[i]) for distance, i in ranked[:count] if distance < math.inf]

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


def _fastest_programs(store: PlatformStore, per_workload: int) -> tuple[list[LibraryWorkload], dict[str, int]]:
    """Every stored workload with its ``per_workload`` fastest valid programs (reads the whole store)."""
    fastest: dict[str, list[tuple[float, Any, Any]]] = {}
    report = ReadReport()
    for program in store.latest_programs(report).values():
        latency = program.latency
        if latency is None:
            continue
        kept = fastest.setdefault(program.workload_key, [])
        kept.append((latency, program.trace_json, program.args_info))
        if len(kept) > 2 * per_workload:  # bounded memory: trim now and then
            kept.sort(key=lambda entry: entry[0])
            del kept[per_workload:]
    entries = []
    for key, programs in fastest.items():
        entry = LibraryWorkload(key, store.workload_json(key), {})
        entry.extents = block_extents(entry.workload.mod)
        entry.programs = sorted(programs, key=lambda program: program[0])[:per_workload]
        entries.append(entry)
    return entries, dict(report.skipped)


def _cache_path(store: PlatformStore, per_workload: int, cache_dir: str | Path | None) -> Path:
    """Where the library of ``store`` as it is now is cached: named by the store's files and sizes (appending to a
    store, re-measuring in it or sealing it changes them; its lock file does not count)."""
    root = Path(cache_dir) if cache_dir else cache_root()
    files = sorted((p.name, p.stat().st_size) for p in store.path.iterdir() if not p.name.startswith("."))
    digest = hashlib.sha256(json.dumps([str(store.path.resolve()), per_workload, files]).encode()).hexdigest()
    return root / "library" / f"{store.platform.id}-{digest[:20]}.json.gz"


def _read_cache(path: Path) -> tuple[list[LibraryWorkload] | None, dict[str, int]]:
    """The cached library (None when there is none or it cannot be read: then it is built again)."""
    try:
        with gzip.open(path, "rt") as file:
            data = json.load(file)
        entries = [LibraryWorkload(e["key"], e["workload"], e["extents"], [tuple(p) for p in e["programs"]])
                   for e in data["workloads"]]
        return entries, data["skipped"]
    except (OSError, EOFError, ValueError, KeyError, TypeError):
        return None, {}


def _write_cache(path: Path, entries: list[LibraryWorkload], skipped: dict[str, int]) -> None:
    """Write the cache atomically; a cache that cannot be written (read-only home) only costs the next run time."""
    data = {"workloads": [{"key": e.key, "workload": e.workload_json, "extents": e.extents,
                           "programs": [list(p) for p in e.programs]} for e in entries], "skipped": skipped}
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, suffix=".tmp", delete=False) as tmp:
            with gzip.open(tmp, "wt") as file:
                json.dump(data, file)
        os.replace(tmp.name, path)
    except OSError:
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)
