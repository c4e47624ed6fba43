"""A measured dataset on disk: one MetaSchedule database per platform, plus what MetaSchedule does not keep.

Layout of a dataset folder::

    DATASET/
      tasks.json                         task catalogue: workload key -> name, networks and weights, FLOPs
      <platform id>/
        platform.json                    target + hardware fingerprint
        database_workload.json[.NNNN.xz]       MetaSchedule JSONDatabase workload table
        database_tuning_record.json[.NNNN.xz]  MetaSchedule JSONDatabase record table (failures: run_secs null)
        measurements.jsonl[.NNNN.xz]           per record: error text, load during the run, source, program hash
        best_programs.json.xz                  each workload's fastest programs in the sealed segments (an index)

The two database tables are exactly MetaSchedule's ``JSONDatabase`` files, split into sealed xz segments and a
plain tail (see :mod:`tlp.dataset.table`); :meth:`PlatformStore.export_database` writes them as plain files that
``ms.database.JSONDatabase(work_dir=...)`` opens.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterator

from tlp import interrupt
from tlp.dataset.best_programs import preferred, update_index
from tlp.dataset.table import Damage, DatasetError, Table, write_error
from tlp.platform import METASCHEDULE_FORMAT, Platform, nearest_platform

# MetaSchedule marks some failed runs with a huge latency instead of null; treat those as failures too.
FAILED_LATENCY_S = 1e9


def mean_latency(run_secs: Any, error: Any = None) -> float | None:
    """Mean of a run's repeats in seconds, as MetaSchedule ranks records; ``None`` for a failed run (an error, no
    repeats, or a NaN/inf/non-positive/failure-marker latency). The one place that decides what a valid latency is."""
    if error is not None or not run_secs:
        return None
    seconds = [float(s) for s in run_secs]
    mean = sum(seconds) / len(seconds)
    if not mean > 0 or mean >= FAILED_LATENCY_S or mean != mean or min(seconds) <= 0:
        return None
    return mean


def trace_id(workload_key: str, trace_json: Any) -> str:
    """Identity of a measured program: its workload and its trace (instructions + decisions)."""
    text = json.dumps([workload_key, trace_json], separators=(",", ":"), sort_keys=False)
    return hashlib.sha1(text.encode()).hexdigest()[:20]


class BadRecord(ValueError):
    """One unusable line of a MetaSchedule tuning-record table; the message is the reason."""


def parse_record_line(line: str) -> tuple[int, Any, list[float] | None, Any, Any]:
    """A MetaSchedule tuning-record line -> ``(workload index, trace, run_secs, target, args_info)``."""
    try:
        workload_index, (trace_json, run_secs, target, args_info) = json.loads(line)
    except (json.JSONDecodeError, ValueError, TypeError):
        raise BadRecord("corrupt tuning record line") from None
    if not isinstance(workload_index, int) or workload_index < 0:
        raise BadRecord("corrupt tuning record line")
    if run_secs is not None and not (
        isinstance(run_secs, list) and run_secs and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in run_secs)
    ):
        raise BadRecord("run_secs is not a list of numbers")
    return workload_index, trace_json, run_secs, target, args_info


@dataclass
class MeasuredProgram:
    """One candidate that went through build and run: a latency list (repeats, seconds) or an error."""

    workload_key: str
    trace_json: Any
    args_info: Any
    run_secs: list[float] | None
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # Where iter_programs read it: the number of its line in the platform's record table (a second read of the
    # lines finds it again without parsing the others).
    line: int | None = field(default=None, compare=False, repr=False)

    @cached_property
    def id(self) -> str:  # cached: a read asks each program's id several times, and each costs a JSON dump
        return trace_id(self.workload_key, self.trace_json)

    @property
    def latency(self) -> float | None:
        """Mean of the repeats, as MetaSchedule ranks records; None for failures."""
        return mean_latency(self.run_secs)

    @property
    def noise_cv(self) -> float | None:
        """Coefficient of variation of the repeats (std / mean)."""
        if self.latency is None or len(self.run_secs or []) < 2:
            return None
        mean = self.latency
        var = sum((x - mean) ** 2 for x in self.run_secs) / (len(self.run_secs) - 1)  # type: ignore[union-attr]
        return var**0.5 / mean


@dataclass
class ReadReport:
    """What reading a store skipped, with the first few locations, so bad input is counted, never silent."""

    skipped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    damaged: list[Damage] = field(default_factory=list)  # segments skipped whole (PlatformStore.skip_damaged)

    def skip(self, location: str, reason: str) -> None:
        self.skipped[reason] += 1
        if len(self.examples) < 10:
            self.examples.append(f"{location}: {reason}")

    def lose(self, damage: Damage) -> None:
        if all(d.path != damage.path for d in self.damaged):
            self.damaged.append(damage)

    def lost_lines(self, table: Table) -> int | None:
        """Lines lost with the damaged segments of ``table``; ``None`` when a lost segment's size is unknown."""
        counts = [d.lines for d in self.damaged
                  if d.path.parent == table.tail.parent and d.path.name.startswith(table.tail.name + ".")]
        return None if None in counts else sum(counts)  # type: ignore[arg-type]


LOST_WORKLOAD = "workload lost with a damaged segment"
UNFINISHED_TAIL = ("unfinished last line, not read (a write cut short by a kill; the next writer moves it aside, e.g. "
                   "`tlp dataset seal`)")

# Stores whose writer lock this process holds: released if a repeated Ctrl-C ends the process at once.
_LOCKED: set["PlatformStore"] = set()


def _release_all_locks() -> None:
    for store in list(_LOCKED):
        store.unlock()


interrupt.at_hard_exit(_release_all_locks)


class PlatformStore:
    """The measurements of one platform. Writers take an exclusive lock; readers never block.

    Reading a damaged segment raises :class:`DamagedSegment` unless ``skip_damaged`` is set; then its lines are
    skipped and counted in the :class:`ReadReport` (writers never skip: they would build on a shifted table).
    """

    WORKLOADS = "database_workload.json"
    RECORDS = "database_tuning_record.json"
    MEASUREMENTS = "measurements.jsonl"

    def __init__(self, path: Path, platform: Platform) -> None:
        self.path = Path(path)
        self.platform = platform
        self.workloads = Table(self.path / self.WORKLOADS)
        self.records = Table(self.path / self.RECORDS)
        self.measurements = Table(self.path / self.MEASUREMENTS)
        self.skip_damaged = False
        self._lock_handle: Any = None
        self._workload_index: dict[str, int] | None = None
        self._workload_count = 0
        self._workloads_json: dict[str, list[Any]] | None = None

    # ---- opening -------------------------------------------------------------------------------------------
    @staticmethod
    def open(path: Path) -> "PlatformStore":
        meta = Path(path) / "platform.json"
        try:
            platform = Platform.from_json(json.loads(meta.read_text()))
            if platform.derived_id != Path(path).name:  # named by an older rule (or renamed): the folder says
                platform = Platform(platform.target, platform.hardware, stored_id=Path(path).name)
        except FileNotFoundError:
            raise DatasetError(f"{meta}: missing; {path} is not a TLP platform folder") from None
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise DatasetError(f"{meta}: unreadable platform description ({error})") from None
        return PlatformStore(Path(path), platform)

    @staticmethod
    def create(path: Path, platform: Platform) -> "PlatformStore":
        path = Path(path)
        made = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        meta = path / "platform.json"
        if not meta.exists():
            try:
                _write_json_atomic(meta, platform.to_json())
            except BaseException:
                if made:
                    shutil.rmtree(path, ignore_errors=True)
                raise
        return PlatformStore(path, platform)

    def lock(self) -> list[str]:
        """Take the writer lock (one collector per platform at a time) and repair what a crash left behind."""
        self.path.mkdir(parents=True, exist_ok=True)
        handle = open(self.path / ".lock", "a+")  # pylint: disable=consider-using-with
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise DatasetError(f"{self.path} is being written by {owner}; wait for it or stop it first") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._lock_handle = handle
        _LOCKED.add(self)
        actions: list[str] = []
        for table in self.tables():
            actions.extend(table.repair())
        return actions

    def unlock(self) -> None:
        """Release the writer lock. The ``.lock`` file stays (deleting a lock file races with the next writer
        opening it) but is emptied, so that "pid N" in it always means a writer holding it now."""
        if self._lock_handle is not None:
            handle, self._lock_handle = self._lock_handle, None
            _LOCKED.discard(self)
            try:
                handle.seek(0)
                handle.truncate()
                handle.flush()
            except OSError:
                pass  # a full disk cannot stop us from releasing the lock
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()

    def __enter__(self) -> "PlatformStore":
        self.lock()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unlock()

    def tables(self) -> tuple[Table, Table, Table]:
        return self.workloads, self.records, self.measurements

    def table_lines(self, table: Table, report: ReadReport | None,
                    skip_segments: dict[str, Any] | None = None) -> Iterator[tuple[str, str]]:
        """``table``'s lines; damaged segments raise, or are skipped into ``report`` when ``skip_damaged``.
        ``skip_segments``: per table file name, segments left out (those an index covers)."""
        skipped = (skip_segments or {}).get(table.tail.name, ())
        if not self.skip_damaged:
            return table.lines(skip_segments=skipped)
        return table.lines(on_damage=(report if report is not None else ReadReport()).lose, skip_segments=skipped)

    # ---- workloads -----------------------------------------------------------------------------------------
    def workload_keys(self, report: ReadReport | None = None) -> list[str | None]:
        """Workload keys in table order: a record's workload index points into this list.

        With ``skip_damaged``, the lines of a damaged workload segment become ``None`` placeholders so that later
        indices stay right; a damaged segment of unknown length is an error, as every later index would be wrong.
        """
        keys: list[str | None] = []

        def lost(damage: Damage) -> None:
            if damage.lines is None:
                raise DatasetError(f"{damage.path}: damaged segment ({damage.problem}) of unknown length (no checksum "
                                   "was recorded), so no record's workload can be trusted after it; restore it "
                                   f"from git (`git checkout -- {damage.path}`)")
            keys.extend([None] * damage.lines)
            if report is not None:
                report.lose(damage)

        for location, line in self.workloads.lines(on_damage=lost if self.skip_damaged else None):
            try:
                keys.append(str(json.loads(line)[0]))
            except (json.JSONDecodeError, IndexError, TypeError):
                # Record indices count lines, so an unreadable workload line must stop us, not shift every index.
                raise DatasetError(f"{location}: corrupt workload line; record indices after it would be wrong")
        return keys

    def workload_index(self) -> dict[str, int]:
        if self._workload_index is None:
            keys = self.workload_keys()
            self._workload_count = len(keys)  # the next line's index (placeholders and duplicates count too)
            self._workload_index = {key: i for i, key in enumerate(keys) if key is not None}
        return self._workload_index

    def workload_json(self, key: str) -> list[Any]:
        """MetaSchedule's JSON of one workload (the table is read once, then served from memory)."""
        if self._workloads_json is None or key not in self._workloads_json:
            lines = self.table_lines(self.workloads, None)
            self._workloads_json = {str(entry[0]): entry for entry in (json.loads(l) for _, l in lines)}
        if key not in self._workloads_json:
            raise DatasetError(f"{self.workloads.tail}: no workload {key}")
        return self._workloads_json[key]

    def add_workload(self, workload_json: list[Any]) -> int:
        """Add a task's workload (MetaSchedule JSON) if new; return its index."""
        index = self.workload_index()
        key = str(workload_json[0])
        if key not in index:
            self.workloads.append([json.dumps(workload_json, separators=(",", ":"))])
            index[key] = self._workload_count
            self._workload_count += 1
        return index[key]

    # ---- records -------------------------------------------------------------------------------------------
    def append(self, programs: list[MeasuredProgram]) -> None:
        """Store measured programs: the database lines first, then their metadata (both durably)."""
        index = self.workload_index()
        target = self.platform.target
        db_lines, meta_lines = [], []
        for program in programs:
            if program.workload_key not in index:
                raise DatasetError(f"{self.path}: workload {program.workload_key} was not added before its records")
            run_secs = program.run_secs if program.latency is not None else None
            record = [index[program.workload_key], [program.trace_json, run_secs, target, program.args_info]]
            db_lines.append(json.dumps(record, separators=(",", ":")))
            error = program.error
            if program.run_secs is not None and run_secs is None and error is None:
                error = f"invalid run_secs {program.run_secs} (NaN, infinite or non-positive): stored as a failure"
            meta = {"id": program.id, "workload": program.workload_key, "error": error, **program.meta}
            meta_lines.append(json.dumps(meta, separators=(",", ":")))
        with self.all_or_nothing():  # never records without their metadata
            self.records.append(db_lines)
            self.measurements.append(meta_lines)

    @contextlib.contextmanager
    def all_or_nothing(self) -> Iterator[None]:
        """Appends within either all stay or, on any error (a full disk, a stop), are all cut back: a batch or an
        import is never half-stored."""
        sizes = [(table, table.size()) for table in self.tables()]
        try:
            yield
        except BaseException:
            for table, size in sizes:
                table.cut_back(size)
            self._workload_index = None  # re-read: workloads added within were cut back too
            self._workloads_json = None
            raise

    def read_meta(self, report: ReadReport | None = None,
                  skip_segments: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
        """Metadata per program id (several entries when a program was re-measured), in measurement order."""
        metas: dict[str, list[dict[str, Any]]] = {}
        for location, line in self.table_lines(self.measurements, report, skip_segments):
            try:
                meta = json.loads(line)
                metas.setdefault(meta["id"], []).append(meta)
            except (json.JSONDecodeError, KeyError, TypeError):
                if report is not None:
                    report.skip(location, "corrupt measurement metadata line")
        return metas

    def iter_programs(self, report: ReadReport | None = None,
                      skip_segments: dict[str, Any] | None = None) -> Iterator[MeasuredProgram]:
        """Every stored measurement in order (re-measurements included), with its metadata joined in.

        ``skip_segments``: per table file name, sealed segments left out (an index's). Records and their metadata
        are sealed together, so the k-th measurement of a program after them pairs with its k-th metadata line
        after them."""
        report = report or ReadReport()
        keys = self.workload_keys(report)
        metas = self.read_meta(report, skip_segments)
        seen: Counter = Counter()
        for number, (location, line) in enumerate(self.table_lines(self.records, report, skip_segments)):
            try:
                workload_index, trace_json, run_secs, _target, args_info = parse_record_line(line)
            except BadRecord as error:
                report.skip(location, str(error))
                continue
            if workload_index >= len(keys):
                report.skip(location, "corrupt tuning record line")
                continue
            key = keys[workload_index]
            if key is None:
                report.skip(location, LOST_WORKLOAD)
                continue
            program = MeasuredProgram(key, trace_json, args_info, run_secs, line=number)
            entries = metas.get(program.id, [])
            occurrence = seen[program.id]
            seen[program.id] += 1
            if occurrence < len(entries):
                meta = dict(entries[occurrence])
                program.error = meta.pop("error", None)
                meta.pop("id", None)
                meta.pop("workload", None)
                program.meta = meta
            if run_secs is not None and program.latency is None:
                report.skip(location, "latency is NaN, infinite, non-positive or a failure marker")
                program.run_secs = None
                program.error = program.error or f"invalid run_secs {run_secs}"
            yield program
        for table in self.tables():
            cut = table.unfinished_tail()
            if cut:
                report.skip(f"{table.tail} ({cut} bytes)", UNFINISHED_TAIL)

    def latest_programs(self, report: ReadReport | None = None,
                        each: Callable[[MeasuredProgram], None] | None = None,
                        keep: Callable[[MeasuredProgram], Any] | None = None) -> dict[str, Any]:
        """One measurement per program: the last one, unless an earlier one was taken on a quieter machine.

        ``each``, if given, sees every measurement on the way (re-measurements included), in the same single read.
        ``keep``, if given, is what is kept of the chosen measurement (a small summary instead of the program and
        its parsed trace: bounded memory over a whole store).
        """
        best: dict[str, tuple[float | None, float, Any]] = {}  # id -> (latency, foreign load, what is kept)
        for program in self.iter_programs(report):
            if each is not None:
                each(program)
            load = program.meta.get("foreign_load") or 0.0
            current = best.get(program.id)
            if current is None or preferred(program.latency, load, current[0], current[1]):
                best[program.id] = (program.latency, load, program if keep is None else keep(program))
        return {program_id: kept for program_id, (_, _, kept) in best.items()}

    # ---- export / seal -------------------------------------------------------------------------------------
    def seal(self) -> list[Path]:
        """Compress the plain tails into new segments (what gets committed) and bring the index of each workload's
        fastest programs up to them (:mod:`tlp.dataset.best_programs`)."""
        sealed = [segment for table in self.tables() for segment in table.seal()]
        index = None
        if self.platform.record_format == "metaschedule":
            try:
                index = update_index(self, ReadReport())
            except DatasetError:  # a damaged segment or a full disk: the old index stays, readers read past it
                pass
        return sealed + ([index] if index else [])

    def export_database(self, work_dir: Path) -> tuple[Path, Path]:
        """Write plain MetaSchedule JSONDatabase files (openable by ``ms.database.JSONDatabase``)."""
        work_dir = Path(work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        workloads, records = work_dir / self.WORKLOADS, work_dir / self.RECORDS
        self.workloads.write_plain(workloads)
        self.records.write_plain(records)
        return workloads, records


# The dataset a checkout ships (its schedule library, `tlp train`/`eval`/`adapt`'s default), relative to the checkout.
DEFAULT_DATASET = "datasets/tlp-cpu"

class Dataset:
    """A dataset folder: a task catalogue and one :class:`PlatformStore` per platform."""

    CATALOGUE = "tasks.json"

    def __init__(self, path: Path | str, skip_damaged: bool = False) -> None:
        self.path = Path(path)
        self.skip_damaged = skip_damaged  # readers from store() skip damaged segments (see PlatformStore)
        if self.path.exists() and not self.path.is_dir():
            raise DatasetError(f"{self.path}: a file, not a dataset folder; give a folder (a new one is made)")

    def platform_ids(self) -> list[str]:
        if not self.path.exists():
            return []
        return sorted(p.name for p in self.path.iterdir() if (p / "platform.json").exists())

    def nearest_platform_id(self, platform: Platform) -> tuple[str, bool] | None:
        """``(id, exact)`` of the stored platform that stands in best for ``platform`` (its own when stored), among
        those of its target kind with MetaSchedule traces (:func:`tlp.platform.nearest_platform`); None if none."""
        held = self.platform_ids()
        if platform.id in held:
            return platform.id, True
        known = {}
        for platform_id in held:
            stored = Platform.from_json(json.loads((self.path / platform_id / "platform.json").read_text()))
            if (stored.target.get("kind") == platform.target.get("kind")
                    and stored.record_format == METASCHEDULE_FORMAT):
                known[platform_id] = stored.to_json()
        return nearest_platform(platform, known) if known else None

    def store(self, platform_id: str) -> PlatformStore:
        if not self.path.is_dir():
            raise DatasetError(f"{self.path}: no such dataset folder")
        if platform_id not in self.platform_ids():
            known = ", ".join(self.platform_ids()) or "none"
            raise DatasetError(f"{self.path}: no platform {platform_id!r} (platforms here: {known})")
        store = PlatformStore.open(self.path / platform_id)
        store.skip_damaged = self.skip_damaged
        return store

    def store_for(self, platform: Platform) -> PlatformStore:
        """The store of ``platform``, created if new. A folder named by an older rule that holds the same target and
        hardware is that store (its records continue there). Refuses a folder whose platform.json says otherwise."""
        path = self.path / platform.id
        if (path / "platform.json").exists():
            existing = PlatformStore.open(path)
            if existing.platform.derived_id != platform.derived_id:
                raise DatasetError(f"{path}/platform.json describes another target or machine "
                                   f"({existing.platform.derived_id}), not {platform.id}")
            return existing
        for platform_id in self.platform_ids():
            try:
                existing = PlatformStore.open(self.path / platform_id)
            except DatasetError:
                continue
            if existing.platform.derived_id == platform.derived_id:  # same target and hardware, under its old name
                return existing
        return PlatformStore.create(path, platform)

    def remove_if_empty(self, platform_id: str) -> bool:
        """Remove a platform folder that holds no line of any table (a store created by a write that failed), so
        that no half-made platform is left behind; a folder with anything stored is never touched."""
        path = self.path / platform_id
        if not (path / "platform.json").exists():
            return False
        store = PlatformStore.open(path)
        if any(table.segments() or (table.size() or 0) > 0 for table in store.tables()):
            return False
        shutil.rmtree(path, ignore_errors=True)
        return True

    # ---- task catalogue ------------------------------------------------------------------------------------
    def catalogue(self) -> dict[str, dict[str, Any]]:
        """workload key -> {"name", "networks": {network: weight}, "flops"}."""
        path = self.path / self.CATALOGUE
        if not path.exists():
            return {}
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise DatasetError(f"{path}: corrupt task catalogue ({error}); restore it from git") from None

    def register_tasks(self, entries: list[tuple[str, str, str, int, float]]) -> None:
        """Add ``(key, name, network, weight, flops)`` occurrences to the catalogue (atomic rewrite).

        Collectors of different platforms share the catalogue, so the read-modify-write holds a file lock.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / ".catalogue.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._register_locked(entries)

    def _register_locked(self, entries: list[tuple[str, str, str, int, float]]) -> None:
        catalogue = self.catalogue()
        changed = False
        for key, name, network, weight, flops in entries:
            entry = catalogue.setdefault(key, {"name": name, "networks": {}, "flops": flops})
            if entry["networks"].get(network) != weight:
                entry["networks"][network] = weight
                changed = True
            if not entry.get("flops") and flops:
                entry["flops"] = flops
                changed = True
        if changed or not (self.path / self.CATALOGUE).exists():
            self.path.mkdir(parents=True, exist_ok=True)
            _write_json_atomic(self.path / self.CATALOGUE, catalogue, indent=1)


def _write_json_atomic(path: Path, data: Any, indent: int | None = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        try:
            json.dump(data, tmp, indent=indent, sort_keys=True)
            tmp.flush()
            os.fsync(tmp.fileno())
        except BaseException as error:  # the old file stays as it was; no temporary file is left behind
            tmp.close()
            os.unlink(tmp.name)
            if isinstance(error, OSError):
                raise write_error(path, error) from None
            raise
    os.replace(tmp.name, path)
