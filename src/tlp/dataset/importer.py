"""``tlp dataset import``: a user's MetaSchedule tuning logs become a TLP dataset.

A MetaSchedule work directory (``tune_tir``/``tune_relax``/``tune_tasks``) holds ``database_workload.json`` and
``database_tuning_record.json``. Their records are exactly what ``tlp collect`` stores, minus the error text and
load of failed/busy runs, which MetaSchedule does not keep. Importing is idempotent: records already in the
dataset are skipped, so re-importing a growing work directory adds only the new ones.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from tlp._tvm import ms, register_tensor_intrinsics, structural_hash
from tlp.dataset.replay import replayed_hash
from tlp.dataset.store import BadRecord, Dataset, DatasetError, MeasuredProgram, ReadReport, parse_record_line
from tlp.interrupt import process_pool
from tlp.platform import Platform
from tlp.workloads.task import Task, flop_count


@dataclass
class ImportSummary:
    platform: str = ""
    workloads: int = 0
    imported: int = 0
    already_present: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)


def import_work_dir(
    dataset: Dataset,
    work_dir: Path,
    network: str | None = None,
    hardware: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    platform: Platform | None = None,
    origin_of: Callable[[str], dict[str, Any]] | None = None,
    tasks: list[Task] | None = None,
) -> ImportSummary:
    """Import a MetaSchedule work directory into ``dataset``.

    The platform's target is read from the records; the hardware is what the caller says it is (``hardware``; a
    function of the records' target, such as ``tlp.platform.machine_fingerprint``, for "measured here"),
    because a log file does not say which machine measured it. A caller that knows the platform (``tlp tune``
    measured here) passes ``platform``; the records' target must then be its target.
    ``origin_of(program id)`` gives a program's metadata (default ``{"source": "import"}``; a ``program_hash`` in
    it is taken as the program's, else the trace is replayed to find it); ``tasks``, when given, are
    catalogued with their own names, networks and weights instead of names guessed from the workloads.
    A program is new unless the platform holds its trace or, for its workload, the same scheduled IR (program
    hash); every new program's hash is stored, so that later collections and imports recognise it too.
    """
    work_dir = Path(work_dir)
    workload_file = work_dir / "database_workload.json"
    record_file = work_dir / "database_tuning_record.json"
    for path in (workload_file, record_file):
        if not path.exists():
            raise DatasetError(f"{path}: missing; {work_dir} is not a MetaSchedule work directory")
    report = ReadReport()
    workloads: list[list[Any] | None] = []
    for number, line in enumerate(workload_file.read_text(errors="replace").splitlines(), start=1):
        try:
            entry = json.loads(line)
            mod = ms.database.Workload.from_json(entry).mod  # validates the encoded IRModule
            # Keyed by the structural hash, as tasks are, whatever the database hashed by: a database tuned with
            # module_equality="anchor-block" stores its anchor block's hash, which no task key matches.
            workloads.append([str(structural_hash(mod)), *entry[1:]])
        except Exception:  # pylint: disable=broad-except
            workloads.append(None)  # keep indices aligned with the records that point at later workloads
            report.skip(f"{workload_file}:{number}", "corrupt workload line")
    records = _records(record_file, workloads, report, origin_of)
    first = next(records, None)
    if first is None:
        raise DatasetError(f"{record_file}: no usable tuning record")
    records_target = _normalize_target(first[2])
    register_tensor_intrinsics(records_target)  # CUDA traces replay their tensorize steps
    if callable(hardware) and platform is None:
        hardware = hardware(records_target)
    if platform is None:
        platform = Platform(target=records_target, hardware=hardware or {"description": "unknown"})
    elif _normalize_target(platform.target) != records_target:
        raise DatasetError(f"{record_file}: records are for target {json.dumps(records_target)}, not platform "
                           f"{platform.id}'s {json.dumps(platform.target)}")
    created = platform.id not in dataset.platform_ids()
    try:
        summary = _store_new_programs(dataset, platform, itertools.chain([first], records), first[2], work_dir,
                                      record_file, report, network, tasks)
    except BaseException:
        if created:  # a failed write (a full disk) or a stop leaves no half-made platform behind
            dataset.remove_if_empty(platform.id)
        raise
    if created and not summary.imported:
        dataset.remove_if_empty(platform.id)  # nor an empty one when nothing was usable
    summary.skipped = dict(report.skipped)
    summary.examples = report.examples
    return summary


def _records(record_file: Path, workloads: list[list[Any] | None], report: ReadReport,
             origin_of: Callable[[str], dict[str, Any]] | None) -> Iterator[tuple[list[Any], MeasuredProgram, Any]]:
    """``(workload, program, target)`` of each usable line of the record file, read as a stream."""
    with open(record_file, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            location = f"{record_file}:{number}"
            if not line.strip():
                continue
            try:
                index, trace_json, run_secs, target, args_info = parse_record_line(line)
            except BadRecord as error:
                report.skip(location, str(error))
                continue
            workload = workloads[index] if index < len(workloads) else None
            if workload is None:
                report.skip(location, "record of a corrupt workload")
                continue
            program = MeasuredProgram(str(workload[0]), trace_json, args_info, run_secs, meta={"source": "import"})
            if origin_of is not None:
                program.meta = dict(origin_of(program.id))
            if run_secs is not None and program.latency is None:
                report.skip(location, "invalid latency (NaN, inf, non-positive or failure marker) stored as failure")
            if program.latency is None:
                program.run_secs = None
                program.error = "failed in the imported MetaSchedule run (its database keeps no error text)"
            yield workload, program, target


def _store_new_programs(dataset: Dataset, platform: Platform, records: Iterator[Any], target: Any, work_dir: Path,
                        record_file: Path, report: ReadReport, network: str | None, tasks: list[Task] | None
                        ) -> ImportSummary:
    """The import's writes, a chunk of records at a time (memory bounded by the chunk, not the log): catalogue,
    workloads and records all or nothing (a full disk or a second target undoes them), then seal."""
    store = dataset.store_for(platform)
    summary = ImportSummary(platform=platform.id)
    network = network or work_dir.resolve().name
    known = {t.key: t for t in tasks or []}
    with store, store.all_or_nothing(), _Replayer() as replayer, _no_cyclic_collection():
        # What the platform holds, as ids and (workload, program hash) pairs: never its traces.
        stored = store.latest_programs(keep=lambda p: (p.workload_key, p.meta.get("program_hash")))
        present = set(stored)
        hashes_present = {pair for pair in stored.values() if pair[1]}
        del stored
        added_workloads: set[str] = set()
        chunks = iter(lambda: list(itertools.islice(records, IMPORT_CHUNK)), [])
        chunk = next(chunks, [])
        replays = replayer.start(_unhashed(chunk, present))
        while chunk:
            if any(record_target != target for _, _, record_target in chunk):
                raise DatasetError(f"{record_file}: records of more than one target; import each target's "
                                   "records separately")
            hashes = replays.result()
            following = next(chunks, [])
            # The next chunk replays in the workers while this one is stored (its programs may hold ids stored
            # now: replaying one twice costs time, never correctness, since a hash depends only on the trace).
            replays = replayer.start(_unhashed(following, present))
            fresh: dict[str, tuple[list[Any], MeasuredProgram]] = {}
            for workload, program, _ in chunk:
                if program.id in present or program.id in fresh:
                    summary.already_present += 1
                else:
                    fresh[program.id] = (workload, program)
            catalogue_entries, new_programs = [], []
            for workload, program in fresh.values():
                phash = program.meta.get("program_hash") or hashes[program.id]
                if phash is None:
                    report.skip(f"{record_file}: {program.id}", "trace does not replay on its workload")
                    continue
                if (program.workload_key, phash) in hashes_present:
                    summary.already_present += 1  # the same scheduled program, reached by another trace
                    continue
                program.meta["program_hash"] = phash
                hashes_present.add((program.workload_key, phash))
                key = str(workload[0])
                if key not in added_workloads:
                    store.add_workload(workload)
                    added_workloads.add(key)
                    mod = ms.database.Workload.from_json(workload).mod
                    names = [gv.name_hint for gv in mod.get_global_vars()]
                    name = names[0] if names and names[0] != "main" else f"imported_{key[:8]}"
                    catalogue_entries.append((key, name, network, 1, flop_count(mod)))
                present.add(program.id)
                new_programs.append(program)
            # The log's known tasks by their own names and weights; its other workloads as guessed above (function
            # name, weight 1), but a guess never overrides what the catalogue already knows of a task (another
            # platform's collection or a --workload import named it and gave its real weight). Before the records:
            # a record is never stored without its task in the catalogue.
            in_chunk = {str(workload[0]) for workload, _, _ in chunk}
            catalogued = dataset.catalogue()
            dataset.register_tasks([(t.key, t.name, t.network or network, t.own_weight, t.flops)
                                    for t in known.values() if t.key in in_chunk]
                                   + [entry for entry in catalogue_entries
                                      if entry[0] not in known and entry[0] not in catalogued])
            store.append(new_programs)
            summary.imported += len(new_programs)
            chunk = following
        summary.workloads = len(added_workloads)
    with store:
        store.seal()  # a full disk here keeps every record in the plain tail; the next writer seals it
    return summary


@contextlib.contextmanager
def _no_cyclic_collection() -> Iterator[None]:
    """Python's cyclic collector off: an import parses millions of traces into lists, which reference counting
    frees (JSON holds no cycles), while each full collection walks every live object again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# Records parsed, replayed and stored at a time: an import's memory is bounded by this, not by the log's size.
IMPORT_CHUNK = 5_000
# Fewer traces than this to replay: in this process (a worker's start, which imports TVM, costs seconds).
PARALLEL_REPLAYS_FROM = 2_000


class _Replayer:
    """Program hashes of traces: replayed in worker processes (one per core) when there are many."""

    def __init__(self) -> None:
        self.pool: Any = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "_Replayer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.__exit__(*exc)  # a stop or an error kills the workers (tlp.interrupt.process_pool)

    def start(self, items: list[tuple[list[Any], MeasuredProgram]]) -> "_Replays":
        """Start replaying each ``(workload, program)``: in the workers when there are many (the caller goes on),
        else here, at once."""
        workloads: dict[str, str] = {}  # key -> JSON text, once per workload (a workload is kilobytes of IR)
        jobs = []
        for workload, program in items:
            if str(workload[0]) not in workloads:
                workloads[str(workload[0])] = json.dumps(workload)
            jobs.append((str(workload[0]), program.trace_json))
        ids = [program.id for _, program in items]
        processes = os.cpu_count() or 1
        if len(jobs) < PARALLEL_REPLAYS_FROM or processes < 2:
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result(_replayed_hashes(workloads, jobs))
            return _Replays(ids, [done])
        if self.pool is None:  # forked after the intrinsics are registered
            self.pool = self._stack.enter_context(process_pool(processes))
        size = -(-len(jobs) // (4 * processes))  # a few parts per worker: an uneven part does not hold up the rest
        parts = [jobs[i : i + size] for i in range(0, len(jobs), size)]
        return _Replays(ids, [self.pool.submit(_replayed_hashes, {key: workloads[key] for key, _ in part}, part)
                              for part in parts])


class _Replays:
    """Program id -> its program hash (None: the trace does not replay), once the replays are done."""

    def __init__(self, ids: list[str], parts: list[concurrent.futures.Future]) -> None:
        self.ids, self.parts = ids, parts

    def result(self) -> dict[str, str | None]:
        hashes = [phash for part in self.parts for phash in part.result()]
        return dict(zip(self.ids, hashes))


def _unhashed(chunk: list[Any], present: set[str]) -> list[tuple[list[Any], MeasuredProgram]]:
    """The chunk's programs to replay: new ids (once each) whose metadata carries no program hash."""
    todo: dict[str, tuple[list[Any], MeasuredProgram]] = {}
    for workload, program, _ in chunk:
        if program.id not in present and not program.meta.get("program_hash"):
            todo.setdefault(program.id, (workload, program))
    return list(todo.values())


def _replayed_hashes(workloads: dict[str, str], jobs: list[tuple[str, Any]]) -> list[str | None]:
    """``(workload key, trace)`` -> its program hash, or None where the trace does not replay (``workloads``: key ->
    JSON text)."""
    hashes: list[str | None] = []
    for key, trace_json in jobs:
        try:
            hashes.append(replayed_hash(key, workloads[key], trace_json))
        except Exception:  # pylint: disable=broad-except  # TVM raises many error types for a bad trace
            hashes.append(None)
    return hashes


def replayed_program_hash(workload_json: list[Any], program: MeasuredProgram) -> str:
    """The program hash (:func:`tlp.dataset.sampler.program_hash`) of a stored record: its trace replayed."""
    return replayed_hash(str(workload_json[0]), json.dumps(workload_json), program.trace_json)


def _normalize_target(target: Any) -> dict[str, Any]:
    from tlp.platform import parse_target  # pylint: disable=import-outside-toplevel

    return parse_target(target if isinstance(target, dict) else json.loads(json.dumps(target)))
