"""Each workload's fastest stored programs, indexed beside a platform's segments and brought up to date at each seal.

Why: the schedule library (:mod:`tlp.search.search_strategy.library`) needs only the few fastest programs of each
workload, but finding them in the records means parsing every one of them (100,000 records: about a minute and a
half on 2 cores). The index is committed with the segments it covers, so a fresh clone reads it in about a second;
a seal reads only the segments sealed since, and a reader adds the segments and tails the index does not cover yet.

The index file (``best_programs.json.xz``) records which sealed segments it covers, by name and checksum; an index
whose segments changed (a segment restored or rewritten) is not used, and the store is read whole instead.
Re-measurements follow the store's rule (:meth:`PlatformStore.latest_programs`): a valid measurement is preferred to a
failure, then the one taken with less foreign load, then the newer one.
"""

from __future__ import annotations

import json
import lzma
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from tlp.dataset.table import write_error

# The store (tlp.dataset.store) calls this module at seal, so this module takes its objects without importing it.
PlatformStore = MeasuredProgram = ReadReport = Any

INDEX_NAME = "best_programs.json.xz"
INDEX_FORMAT = 1
# Programs kept per workload: more than a library draws (2), so that a program re-measured slower leaves others.
KEEP = 4
# Foreign load (fraction of a core) within which a newer measurement replaces an older one.
LOAD_MARGIN = 0.05

# One kept program: [latency (s), foreign load, program id, trace JSON, args info].
Entry = list


def preferred(latency: float | None, load: float, old_latency: float | None, old_load: float) -> bool:
    """Whether a newer measurement replaces an older one of the same program."""
    if (latency is None) != (old_latency is None):
        return latency is not None
    return load <= old_load + LOAD_MARGIN


class BestPrograms:
    """The index: per workload key its ``KEEP`` fastest valid programs, fastest first, and the segments covered."""

    def __init__(self, workloads: dict[str, list[Entry]] | None = None, covered: dict[str, dict[str, str]] | None = None,
                 skipped: dict[str, int] | None = None) -> None:
        self.workloads = workloads or {}
        self.covered = covered or {}  # table file name -> {segment name: sha256}
        self.skipped: Counter = Counter(skipped or {})  # records left out as unreadable, by reason

    def add(self, program: MeasuredProgram) -> None:
        """Take one measurement (in store order)."""
        kept = self.workloads.setdefault(program.workload_key, [])
        load = float(program.meta.get("foreign_load") or 0.0)
        for position, entry in enumerate(kept):
            if entry[2] == program.id:
                if not preferred(program.latency, load, entry[0], entry[1]):
                    return
                del kept[position]
                break
        if program.latency is not None:
            kept.append([program.latency, load, program.id, program.trace_json, program.args_info])
            kept.sort(key=lambda e: e[0])
            del kept[KEEP:]
        if not kept:
            del self.workloads[program.workload_key]

    def fastest(self, per_workload: int) -> dict[str, list[tuple[float, Any, Any]]]:
        """``(latency, trace JSON, args info)`` of each workload's ``per_workload`` fastest programs."""
        return {key: [(e[0], e[3], e[4]) for e in kept[:per_workload]] for key, kept in self.workloads.items()}

    def to_json(self) -> dict[str, Any]:
        return {"format": INDEX_FORMAT, "keep": KEEP, "covered": self.covered, "skipped": dict(self.skipped),
                "workloads": self.workloads}


def _sealed(store: PlatformStore) -> dict[str, dict[str, str]]:
    """Every table's sealed segments with their recorded checksums, in order."""
    covered = {}
    for table in (store.records, store.measurements):
        manifest = table.manifest()
        covered[table.tail.name] = {s.name: manifest.get(s.name, {}).get("sha256", "") for s in table.segments()}
    return covered


def _usable(index: BestPrograms, sealed: dict[str, dict[str, str]]) -> bool:
    """An index is usable while the segments it covers are the first ones of each table, unchanged."""
    for table, segments in sealed.items():
        covered = index.covered.get(table, {})
        if list(segments.items())[: len(covered)] != list(covered.items()) or "" in covered.values():
            return False
    return set(index.covered) <= set(sealed)


def read_index(store: PlatformStore) -> BestPrograms | None:
    """The stored index as it is (None when missing, unreadable or of another format)."""
    try:
        with lzma.open(store.path / INDEX_NAME, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
        if data.get("format") != INDEX_FORMAT or data.get("keep") != KEEP:
            return None
        return BestPrograms(data["workloads"], data["covered"], data.get("skipped"))
    except (OSError, EOFError, lzma.LZMAError, ValueError, KeyError, TypeError, AttributeError):
        return None


def index_status(store: PlatformStore) -> str:
    """``current``; ``behind`` (sealed segments after it, which every reader parses); or ``missing`` (absent,
    unreadable, or its segments changed: every reader parses the whole store)."""
    index = read_index(store)
    sealed = _sealed(store)
    if index is None or not _usable(index, sealed):
        return "missing"
    return "current" if index.covered == sealed else "behind"


def best_programs(store: PlatformStore, report: ReadReport | None = None) -> BestPrograms:
    """Each workload's fastest programs as the store holds them now: the index plus every measurement it does not
    cover (later segments, the plain tails), or the whole store read when there is no usable index."""
    sealed = _sealed(store)
    index = read_index(store)
    if index is None or not _usable(index, sealed):
        index = BestPrograms()
    for program in store.iter_programs(report, skip_segments=index.covered):
        index.add(program)
    if report is not None:
        index.skipped.update(report.skipped)
    return index


def update_index(store: PlatformStore, report: ReadReport) -> Path | None:
    """Bring the index up to the store's sealed segments (a writer calls it after sealing, holding the lock).
    Nothing is written while a tail still holds lines: the index covers sealed segments only."""
    if any(table.tail.exists() and table.tail.stat().st_size for table in (store.records, store.measurements)):
        return None
    sealed = _sealed(store)
    index = best_programs(store, report)
    if index.covered == sealed:
        return None
    index.covered = sealed
    path = store.path / INDEX_NAME
    temporary = None
    try:
        with tempfile.NamedTemporaryFile("wb", dir=store.path, suffix=".tmp", delete=False) as temporary:
            with lzma.open(temporary, "wt", encoding="utf-8", preset=6) as handle:
                json.dump(index.to_json(), handle, separators=(",", ":"))
            temporary.flush()
            os.fsync(temporary.fileno())
        os.chmod(temporary.name, 0o644)  # a committed file, as the segments are
        os.replace(temporary.name, path)
    except OSError as error:  # the old index stays; readers read what it does not cover
        if temporary is not None:
            Path(temporary.name).unlink(missing_ok=True)
        raise write_error(path, error) from None
    except BaseException:
        if temporary is not None:
            Path(temporary.name).unlink(missing_ok=True)
        raise
    return path
