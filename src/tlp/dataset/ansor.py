"""``tlp dataset import --format ansor``: Ansor / TenSet measurement records become a TLP dataset platform.

An Ansor record is one JSON line (log versions v0.2–v0.6)::

    {"i": [[workload_key, target, hardware_params?, target_host?, layout_rewrite?, task_inputs?], [[], steps]],
     "r": [costs_in_seconds, error_no, all_cost, timestamp], "v": "v0.6"}

v0.2 records have no hardware parameters; later versions append fields. TVM 0.27 has no Ansor, but a record's
schedule steps are plain JSON and are all that TLP's original featurization reads
(:mod:`tlp.features.ansor_steps`), so no old TVM is needed. What is stored, per platform folder of the dataset:

- the platform: the record's target string parsed into a dict plus its hardware parameters, marked
  ``record_format: "ansor"`` (see :attr:`tlp.platform.Platform.record_format`); its id starts with ``ansor-``;
- the workload table: one line per workload key (``[workload_key, {"format": "ansor", "name": ...}]``), not a
  MetaSchedule workload: such a platform cannot be exported as a MetaSchedule database;
- the record table: ``[workload index, [steps, costs or null, target, null]]``; failed runs (``error_no`` != 0,
  or Ansor's 1e10 placeholder costs) have null costs and their error in ``measurements.jsonl``, never a latency.

Importing is resumable: a program (workload key + steps) the platform holds is skipped, so re-running an
interrupted import of TenSet's ``measure_records/<platform>/*.json`` continues where it stopped. Bad input —
truncated lines, malformed records or steps, unknown step kinds, records of workload keys the task mapping does not
list, files mixing targets, folders without records — is counted and named in the summary, never an exception.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tqdm import tqdm

from tlp.dataset.store import Dataset, DatasetError, MeasuredProgram, PlatformStore
from tlp.platform import ANSOR_FORMAT, Platform

# Every step kind TVM's auto-scheduler writes (``record_prefix_str`` of each step in src/auto_scheduler).
ANSOR_STEP_KINDS = ("AN", "FU", "PR", "RE", "SP", "FSP", "FFSP", "SA", "CA", "CI", "CR", "CHR", "CHW", "RF")

# Ansor's MeasureErrorNo, for the error text of failed records.
ANSOR_ERRORS = {1: "INSTANTIATION_ERROR", 2: "COMPILE_HOST", 3: "COMPILE_DEVICE", 4: "RUNTIME_DEVICE",
                5: "WRONG_ANSWER", 6: "BUILD_TIMEOUT", 7: "RUN_TIMEOUT", 8: "UNKNOWN_ERROR"}

# Names of the hardware parameters, in the order records list them (Ansor's HardwareParams).
HARDWARE_PARAMS = ("num_cores", "vector_unit_bytes", "cache_line_bytes", "max_shared_memory_per_block",
                   "max_local_memory_per_block", "max_threads_per_block", "max_vthread_extent", "warp_size")

# Ansor writes this cost for programs that failed; a latency that large is never a measurement.
PLACEHOLDER_COST = 1e9


@dataclass
class AnsorRecord:
    """One parsed Ansor measurement record."""

    workload_key: str
    target: str
    hardware_params: list[Any] | None
    steps: list[list[Any]]
    costs: list[float]
    error_no: int
    timestamp: float | None
    version: str

    @property
    def platform_key(self) -> tuple[str, str]:
        """What decides the platform: the target string and the hardware parameters."""
        return self.target, json.dumps(self.hardware_params)

    def failure(self) -> str | None:
        """Why this record has no latency, or ``None`` for a valid measurement."""
        if self.error_no != 0:
            return f"ansor error_no {self.error_no} ({ANSOR_ERRORS.get(self.error_no, 'unknown')})"
        if not self.costs or any(not c > 0 or c >= PLACEHOLDER_COST for c in self.costs):
            return f"ansor costs {self.costs[:3]} (placeholder or non-positive): no latency"
        return None


# The log versions whose layout this reader knows (TVM's AUTO_SCHEDULER_LOG_VERSION over its history).
LOG_VERSIONS = ("v0.2", "v0.3", "v0.4", "v0.5", "v0.6")


class BadAnsorLine(ValueError):
    """A line that is not a usable Ansor record; the message is the reason (a summary category)."""


def parse_ansor_line(line: str) -> AnsorRecord:
    """One JSON line -> :class:`AnsorRecord`; raises :class:`BadAnsorLine` naming what is wrong."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        raise BadAnsorLine("truncated or corrupt JSON line") from None
    try:
        inputs, state = record["i"]
        workload_key, target = inputs[0], inputs[1]
        hardware = inputs[2] if len(inputs) > 2 else None
        steps = state[1]
        costs, error_no = record["r"][0], record["r"][1]
        timestamp = record["r"][3] if len(record["r"]) > 3 else None
    except (KeyError, IndexError, TypeError, ValueError):
        raise BadAnsorLine("not an Ansor record (no i/r fields of the known layout)") from None
    version = record.get("v") if isinstance(record, dict) else None
    if version not in LOG_VERSIONS:
        # A layout we do not know could put other values where we read steps and costs: never guess.
        raise BadAnsorLine(f"log version {version if version is not None else '(none)'}: only "
                           f"{LOG_VERSIONS[0]}-{LOG_VERSIONS[-1]} are read")
    if not isinstance(workload_key, str) or not isinstance(target, str) or not isinstance(error_no, int):
        raise BadAnsorLine("not an Ansor record (workload key, target or error_no of the wrong type)")
    if not isinstance(costs, list) or not all(isinstance(c, (int, float)) and not isinstance(c, bool)
                                              for c in costs):
        raise BadAnsorLine("costs are not a list of numbers")
    if not isinstance(steps, list) or not all(isinstance(s, list) and s and isinstance(s[0], str) for s in steps):
        raise BadAnsorLine("malformed step (not a list starting with its kind)")
    if hardware is not None and not isinstance(hardware, list):
        hardware = None
    return AnsorRecord(workload_key, target, hardware, steps, [float(c) for c in costs], error_no, timestamp,
                       str(record.get("v", "")))


def parse_target_string(target: str) -> dict[str, Any]:
    """An old-style TVM target string (``"llvm -keys=cpu -mcpu=core-avx2"``) -> a plain dict.

    TVM 0.27 only accepts JSON targets, and Ansor's strings name options TVM 0.27 no longer knows, so this is a
    plain parse (never validated by TVM): the kind, then ``-name=value`` options (``keys`` split on commas,
    integers as integers).
    """
    words = shlex.split(target)
    if not words:
        raise ValueError("empty target string")
    parsed: dict[str, Any] = {"kind": words[0]}
    for word in words[1:]:
        name, _, value = word.lstrip("-").partition("=")
        if name == "keys":
            parsed[name] = [k for k in value.split(",") if k]
        elif value.lstrip("-").isdigit():
            parsed[name] = int(value)
        else:
            parsed[name] = value
    return parsed


def ansor_platform(target: str, hardware_params: list[Any] | None, description: str | None = None) -> Platform:
    """The platform of records with this target string and these hardware parameters.

    The id is derived from both (and from ``description``, the user's words for the machine, when given), so
    records of another target or machine never mix with these, nor with MetaSchedule platforms.
    """
    parsed = parse_target_string(target)
    hardware: dict[str, Any] = {"record_format": ANSOR_FORMAT, "ansor_target": target}
    if hardware_params is not None:
        hardware["hardware_params"] = dict(zip(HARDWARE_PARAMS, hardware_params))
        if parsed["kind"] == "llvm" and hardware_params and isinstance(hardware_params[0], int) \
                and hardware_params[0] > 0:
            parsed["num-cores"] = hardware_params[0]  # the id shows it, as for our own CPU platforms
    hardware["description"] = description or "unknown"
    return Platform(target=parsed, hardware=hardware)


def task_name(workload_key: str) -> str:
    """A readable task name from a workload key: ``matmul_16_512_64_float16`` or ``ansor_d7b65649``."""
    try:
        parts = json.loads(workload_key)
        head = str(parts[0])
    except (json.JSONDecodeError, IndexError, TypeError, KeyError):
        return "ansor_task"
    if len(head) == 32 and all(c in "0123456789abcdef" for c in head):
        # The hash of a compute DAG extracted from a network (one per operator kind): its shapes tell tasks apart.
        numbers: list[str] = []
        _flatten_numbers(parts[1:], numbers)
        return "_".join([f"ansor_{head[:8]}"] + numbers[:8])
    return "_".join(str(p) for p in parts)


def _flatten_numbers(value: Any, out: list[str]) -> None:
    if isinstance(value, list):
        for item in value:
            _flatten_numbers(item, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.append(str(value))


def load_task_weights(path: Path) -> dict[str, dict[str, int]]:
    """A task mapping file: ``{network: {workload_key: weight}}`` (JSON), checked for shape."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise DatasetError(f"{path}: unreadable task mapping ({error})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise DatasetError(f'{path}: a task mapping is {{"network": {{"workload key": weight, ...}}, ...}}')
    return {str(network): {str(k): int(w) for k, w in tasks.items()} for network, tasks in data.items()}


@dataclass
class AnsorImportSummary:
    """What an import did, and everything it skipped, by reason, with the first few places."""

    platforms: dict[str, int] = field(default_factory=dict)  # platform id -> records imported
    files: int = 0
    records: int = 0
    imported: int = 0
    failures: int = 0  # of the imported records: stored as failures (no latency)
    already_present: int = 0
    tasks: int = 0
    skipped: Counter = field(default_factory=Counter)
    unknown_step_kinds: Counter = field(default_factory=Counter)  # stored; the featurizer reads them as OOV kinds
    examples: list[str] = field(default_factory=list)

    def skip(self, location: str, reason: str, count: int = 1) -> None:
        self.skipped[reason] += count
        if len(self.examples) < 10:
            self.examples.append(f"{location}: {reason}")

    def to_json(self) -> dict[str, Any]:
        return {"platforms": self.platforms, "files": self.files, "records": self.records,
                "imported": self.imported, "failures": self.failures, "already_present": self.already_present,
                "tasks": self.tasks, "skipped": dict(self.skipped),
                "unknown_step_kinds": dict(self.unknown_step_kinds), "examples": self.examples}


def record_files(paths: Iterable[Path], summary: AnsorImportSummary) -> list[Path]:
    """The record files named or found (recursively: TenSet's ``measure_records/<platform>/*.json``)."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".log"))
            if not found:
                summary.skip(str(path), "folder without record files (*.json, *.jsonl, *.log)")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            summary.skip(str(path), "no such file or folder")
    return files


def _read_file(path: Path, summary: AnsorImportSummary) -> list[AnsorRecord]:
    """The usable records of one file; bad lines counted with their place."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            text = line.strip()
            if not text or text.startswith("#"):  # TVM's tutorial logs start with comment lines
                continue
            try:
                records.append(parse_ansor_line(text))
            except BadAnsorLine as error:
                summary.skip(f"{path}:{number}", str(error))
    return records


class _Stores:
    """The platform stores an import writes to: opened and locked once, with the ids they already hold."""

    def __init__(self, dataset: Dataset, hardware: str | None) -> None:
        self.dataset = dataset
        self.hardware = hardware  # the user's description of the measuring machine (part of the platform id)
        self.open: dict[str, tuple[PlatformStore, set[str]]] = {}
        self.created: set[str] = set()  # platforms this import made

    def get(self, platform: Platform) -> tuple[PlatformStore, set[str]]:
        if platform.id not in self.open:
            if platform.id not in self.dataset.platform_ids():
                self.created.add(platform.id)
            store = self.dataset.store_for(platform)
            store.lock()
            self.open[platform.id] = (store, set(store.read_meta()))
        return self.open[platform.id]

    def close(self, failed: bool = False) -> None:
        """Seal and unlock every store (after a failure: unlock only); remove the platforms this import made and left
        empty."""
        try:
            for store, _ in self.open.values():
                try:
                    if not failed:
                        store.seal()
                finally:
                    store.unlock()
        finally:
            for platform_id in self.created:  # made by this import, but nothing stored (a failure, no usable record)
                self.dataset.remove_if_empty(platform_id)


def import_ansor(dataset: Dataset, paths: Iterable[str | Path], task_weights: dict[str, dict[str, int]] | None = None,
                 network: str | None = None, hardware: str | None = None, progress: bool = True
                 ) -> AnsorImportSummary:
    """Import Ansor/TenSet record files (or folders of them) into ``dataset``; see the module docstring.

    ``task_weights`` (``{network: {workload_key: weight}}``, e.g. from :func:`load_task_weights`) catalogues each
    task under the networks that use it; records of workload keys it does not list are skipped (counted). Without
    it, every task belongs to ``network`` (default: the folder or file name given) with weight 1. ``hardware``
    describes the machine that measured the records (part of the platform id).
    """
    summary = AnsorImportSummary()
    paths = [Path(p) for p in paths]
    files = record_files(paths, summary)
    summary.files = len(files)
    default_network = network or (paths[0].stem if paths else "ansor")
    networks_of: dict[str, dict[str, int]] = {}
    for net, tasks in (task_weights or {}).items():
        for key, weight in tasks.items():
            networks_of.setdefault(key, {})[net] = weight
    stores = _Stores(dataset, hardware)
    catalogue: dict[str, str] = {}
    bar = tqdm(total=sum(f.stat().st_size for f in files), unit="B", unit_scale=True, desc="import",
               disable=not progress)
    failed = True
    try:
        for path in files:
            _import_file(path, _read_file(path, summary), stores, summary, networks_of if task_weights else None,
                         catalogue)
            bar.update(path.stat().st_size)
        failed = False
    finally:
        bar.close()
        # After a failure (a full disk, a stop) the files appended before stay, unsealed (the next writer seals
        # them); the file being appended was undone whole.
        stores.close(failed)
    entries = []
    for key, name in catalogue.items():
        for net, weight in (networks_of.get(key) or {default_network: 1}).items():
            entries.append((key, name, net, weight, 0.0))  # FLOPs: records do not say, and no TVM here computes it
    if entries:
        dataset.register_tasks(entries)
    summary.tasks = len(catalogue)
    return summary


def _import_file(path: Path, records: list[AnsorRecord], stores: _Stores, summary: AnsorImportSummary,
                 networks_of: dict[str, dict[str, int]] | None, catalogue: dict[str, str]) -> None:
    """Append one file's new records to its platform (a file with records of several targets is skipped whole)."""
    summary.records += len(records)
    if not records:
        summary.skip(str(path), "file without a usable Ansor record")
        return
    platform_keys = Counter(r.platform_key for r in records)
    if len(platform_keys) > 1:
        targets = "; ".join(f"{t} {h} ({n})" for (t, h), n in platform_keys.most_common())
        summary.skip(str(path), f"file mixing {len(platform_keys)} targets/hardware ({targets}): split it per target",
                     len(records))
        return
    try:
        platform = ansor_platform(records[0].target, records[0].hardware_params, stores.hardware)
    except ValueError as error:
        summary.skip(str(path), f"unreadable target string ({error})", len(records))
        return
    store, present = stores.get(platform)
    new_programs: list[MeasuredProgram] = []
    for record in records:
        if networks_of is not None and record.workload_key not in networks_of:
            summary.skip(f"{path}: {record.workload_key[:60]}", "workload key has no task in the task mapping")
            continue
        unknown = {s[0] for s in record.steps} - set(ANSOR_STEP_KINDS)
        summary.unknown_step_kinds.update(unknown)
        program = MeasuredProgram(record.workload_key, record.steps, None, record.costs,
                                  meta={"source": "ansor", "log_version": record.version,
                                        "timestamp": record.timestamp})
        catalogue.setdefault(record.workload_key, task_name(record.workload_key))
        if program.id in present:
            summary.already_present += 1
            continue
        program.error = record.failure()
        if program.error is not None:
            program.run_secs = None
            summary.failures += 1
        present.add(program.id)
        new_programs.append(program)
    if new_programs:
        # one durable append per file, workloads with it: a kill or a full disk loses at most this file's records
        with store.all_or_nothing():
            for program in new_programs:
                store.add_workload([program.workload_key, {"format": ANSOR_FORMAT,
                                                           "name": task_name(program.workload_key)}])
            store.append(new_programs)
    summary.imported += len(new_programs)
    summary.platforms[platform.id] = summary.platforms.get(platform.id, 0) + len(new_programs)
