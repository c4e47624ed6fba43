"""Tuning runs feed the dataset: every candidate a search measured becomes a record of the platform it ran on.

A search measures exactly the programs a cost model must rank well (evolved, near the good end of the space), so
its measurements are the most useful data there is. ``tlp tune`` logs, per measured batch, which programs it
measured for which task, in which search round and guided by which cost model (``origins.jsonl`` in its work
directory, written by :class:`OriginLog`); :func:`add_tuning_run` then imports the work directory through the same
path as ``tlp dataset import --measured-here`` and labels each program with its origin. Programs the dataset
already holds (same trace, or the same scheduled IR by program hash) are skipped, so re-adding a run, or re-running
the same tune, appends nothing.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tvm.ir.utils import derived_object

from tlp._tvm import ms
from tlp.dataset.importer import ImportSummary, import_work_dir
from tlp.dataset.sampler import program_hash
from tlp.dataset.store import BadRecord, Dataset, parse_record_line, trace_id
from tlp.platform import Platform, machine_fingerprint
from tlp.workloads.task import Task

ORIGINS = "origins.jsonl"
SEARCH_SOURCE = "search"


@derived_object
class OriginLog(ms.measure_callback.PyMeasureCallback):
    """After each measured batch, one ``origins.jsonl`` line: task, workload key, round, cost model, programs.

    Runs after MetaSchedule's ``AddToDatabase``, which has just appended one line per candidate, in order, to the
    work directory's ``database_tuning_record.json``. Each program is logged as ``[trace id, program hash]``: the
    id of the trace *as the database wrote it* (which is how an import finds it; the file writes some attributes
    differently from the candidate's own trace) and the hash of the candidate's IR (as ``tlp collect`` hashes).
    Rounds count per task from the work directory's earlier runs on, so a resumed search continues the numbering.
    """

    def __init__(self, work_dir: Path, tasks: list[Task], cost_model: str) -> None:
        super().__init__()
        self.path = Path(work_dir) / ORIGINS
        self.records = Path(work_dir) / "database_tuning_record.json"
        self.offset = self.records.stat().st_size if self.records.exists() else 0
        self.tasks = tasks
        self.cost_model = cost_model
        self.rounds: dict[str, int] = {}
        for batch in read_origins(self.path):
            self.rounds[batch["workload"]] = max(self.rounds.get(batch["workload"], 0), batch["round"] + 1)

    def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any, builder_results: Any,
              runner_results: Any) -> None:
        task = self.tasks[task_id]
        search_round = self.rounds.get(task.key, 0)
        self.rounds[task.key] = search_round + 1
        with open(self.records, "rb") as records:
            records.seek(self.offset)
            appended = records.read()
        appended = appended[: appended.rfind(b"\n") + 1]  # whole lines only
        self.offset += len(appended)
        ids = []
        for line in appended.decode(errors="replace").splitlines()[-len(measure_candidates):]:
            try:
                ids.append(trace_id(task.key, parse_record_line(line)[1]))
            except BadRecord:
                ids.append(None)
        hashes = [program_hash(candidate) for candidate in measure_candidates]
        line = {"task": task.name, "workload": task.key, "round": search_round, "cost_model": self.cost_model,
                "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "programs": [[i, h] for i, h in zip(ids, hashes) if i is not None] if len(ids) == len(hashes) else []}
        with open(self.path, "a", encoding="utf-8") as origins:
            origins.write(json.dumps(line) + "\n")


def read_origins(path: Path) -> list[dict[str, Any]]:
    """The batches of ``origins.jsonl``; a line cut by a kill (or otherwise unreadable) is left out."""
    batches = []
    if Path(path).exists():
        for line in Path(path).read_text(errors="replace").splitlines():
            try:
                batch = json.loads(line)
                if isinstance(batch, dict) and {"workload", "round", "programs"} <= batch.keys():
                    batches.append(batch)
            except json.JSONDecodeError:
                continue
    return batches


def add_tuning_run(
    dataset: Dataset,
    work_dir: str | Path,
    platform: Platform | None = None,
    tasks: list[Task] | None = None,
    network: str | None = None,
    hardware: dict[str, Any] | None = None,
) -> ImportSummary:
    """Append every measured candidate of the tuning run in ``work_dir`` to ``dataset``, under ``platform``.

    ``platform`` is the one that measured the run (default: the records' target on ``hardware``, by default this
    machine's fingerprint, as ``tlp dataset import --measured-here``). ``tasks`` (the tuned tasks) catalogue each workload with its name,
    network and weight, as ``tlp collect`` does; without them the importer names tasks after their functions and
    ``network`` (default: the work directory's name). Each program's metadata says ``source: "search"`` and, when
    the run wrote ``origins.jsonl`` (``tlp tune`` does), its search ``round`` for its task, the guiding
    ``cost_model`` and the ``tuning_run`` folder; records the log does not list (post-optimization, runs of other
    tools) carry ``source: "search"`` alone.
    """
    work_dir = Path(work_dir)
    origins: dict[str, dict[str, Any]] = {}
    for batch in read_origins(work_dir / ORIGINS):
        for program_id, phash in (e for e in batch["programs"] if isinstance(e, list) and len(e) == 2):
            origins.setdefault(program_id, {"source": SEARCH_SOURCE, "round": batch["round"],
                                            "cost_model": batch.get("cost_model"), "time": batch.get("time"),
                                            "tuning_run": work_dir.resolve().name, "program_hash": phash})

    def origin_of(program_id: str) -> dict[str, Any]:
        return origins.get(program_id, {"source": SEARCH_SOURCE})

    if platform is None:
        return import_work_dir(dataset, work_dir, network, hardware or machine_fingerprint, origin_of=origin_of,
                               tasks=tasks)
    return import_work_dir(dataset, work_dir, network, platform=platform, origin_of=origin_of, tasks=tasks)
