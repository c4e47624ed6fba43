"""Search-like evaluation: how well a model ranks the programs a search actually measures.

TenSet's top-k ranks *all* stored programs of a task, most of them random samples of the design space. A search
asks something else: among the evolved candidates of its late rounds (the good region), which is fastest? This
module reads MetaSchedule tuning work directories (``tlp tune``), pools the
measured programs of all runs per tuned workload (the *source*: what was tuned) and task, and scores a model's
ranking of them with:

- **late-round top-k**: TenSet's formula restricted to programs measured in the late rounds of a run (round ``r``
  of ``n`` rounds of that task in that run is late when ``r >= n // 2``: the second half, all of a single round);
- **pick regret**: populations of ``population`` late programs of one run (all of them when the run has no more;
  else ``draws`` random subsets, the same subsets for every model); the model picks its top-scored program;
  regret = its latency / the population's best - 1. Per task: mean over the runs' populations. Per source:
  ``Σ_t w_t·b_t·regret_t / Σ_t w_t·b_t`` with ``w_t`` the task's weight and ``b_t`` its best late latency, i.e.
  the relative slowdown of the whole tuned workload if every task kept the model's pick (equal-weight mean too);
- **all-round top-k**: TenSet's formula over every pooled program (for comparison).

The measured batch of each record comes from the work directory's ``history.jsonl`` (records are appended in
measurement order, one history line per batch), else from ``origins.jsonl``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from tlp import TLPError
from tlp._tvm import ms
from tlp.dataset.replay import with_bool_annotations
from tlp.dataset.store import BadRecord, mean_latency, parse_record_line, trace_id
from tlp.dataset.tuning import ORIGINS, read_origins
from tlp.evaluation.baselines import metaschedule_predict, replay_candidates, replay_context
from tlp.features.featurizer import block_extents
from tlp.features.tensors import LabeledPrograms
from tlp.model.estimator import top_k_score

RECORDS = "database_tuning_record.json"
WORKLOADS = "database_workload.json"
HISTORY = "history.jsonl"
REPORT = "report.json"
# 32: the late rounds of one run hold 16-64 programs per task in the measured studies (16 per batch); a population
# as large as the whole late set leaves one population per run and task, which is fine (it is then exact).
DEFAULT_POPULATION = 32
DEFAULT_DRAWS = 200
METRICS = ("all_top1", "late_top1", "late_top5", "pick_regret")
# The metric `tlp eval --search-runs` leads with: the one whose model order agreed best with the measured searches
# (with the Zen 4 searches added): all-round top-1 (Kendall tau +0.31 over 22 model pairs; late top-1 +0.27, TenSet +0.22, pick
# regret +0.18), which also led on the Zen 4 pairs alone.
HEADLINE = "all_top1"


class SearchRunError(TLPError, ValueError):
    """A path that is not a usable MetaSchedule tuning work directory (the message names it and says why)."""


@dataclass
class RunRecord:
    """One measured candidate of a run, in measurement order."""

    workload_key: str
    trace_json: Any
    latency: float | None  # None: failed, or an invalid latency (NaN, inf, non-positive)
    round: int  # its task's search round in this run (0 = the task's first measured batch)
    late: bool


@dataclass
class SearchRun:
    path: Path
    source: str  # what was tuned: report.json's "source", else the parent folder's name
    cost_model: str  # what guided the search (report.json: "tlp", "tlp-online@tlp-cpu-small", ...), else the folder's name
    records: list[RunRecord]
    workloads: dict[str, list[Any]]  # workload key -> MetaSchedule workload JSON
    task_names: dict[str, str]
    task_weights: dict[str, float]
    skipped: Counter = field(default_factory=Counter)


def is_work_dir(path: Path) -> bool:
    return (Path(path) / RECORDS).is_file()


def find_work_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Each path is a tuning work directory or a folder holding some below it (e.g. ``runs/bench/search``)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise SearchRunError(f"{path}: no such directory (expected a MetaSchedule tuning work directory)")
        below = [path] if is_work_dir(path) else sorted(p.parent for p in path.rglob(RECORDS))
        if not below:
            raise SearchRunError(f"{path}: not a MetaSchedule tuning work directory, and none below it (no {RECORDS})")
        found.extend(p for p in below if p not in found)
    return found


def _read_workloads(path: Path, skipped: Counter) -> list[list[Any] | None]:
    workloads: list[list[Any] | None] = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
            if not (isinstance(entry, list) and len(entry) == 2):
                raise ValueError
            workloads.append(entry)
        except ValueError:
            workloads.append(None)  # keeps the indices of later workloads aligned
            skipped["corrupt workload line"] += 1
    return workloads


def _batches_from_history(path: Path, keys: list[str | None]) -> list[tuple[int, int, int | None]]:
    """``(first record, end, task index)`` per measured batch; raises when the log does not fit the records."""
    batches, start = [], 0
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        try:
            entry = json.loads(line)
            trials, task = int(entry["trials"]), entry.get("task")
        except (ValueError, TypeError, KeyError):
            continue  # a line cut by a kill: the next line's cumulative count still places the records
        if trials == start:
            continue  # a batch with no candidate (the task's space is exhausted): no records, no round
        if trials < start:
            raise SearchRunError(f"{path}:{number}: trial count {trials} goes down; not this run's history")
        if trials > len(keys):
            raise SearchRunError(f"{path}:{number}: {trials} trials logged but {len(keys)} records in {RECORDS}")
        batch_keys = {k for k in keys[start:trials] if k is not None}
        if len(batch_keys) > 1:
            raise SearchRunError(f"{path}:{number}: records {start + 1}-{trials} belong to {len(batch_keys)} "
                                 "workloads; the history does not match the database")
        batches.append((start, trials, task if isinstance(task, int) else None))
        start = trials
    return batches


def _batches_from_origins(path: Path, ids: list[str | None]
                          ) -> list[tuple[int, int, int | None]]:
    """Batches from ``origins.jsonl``: consecutive records listed in the same logged batch."""
    batch_of: dict[str, int] = {}
    for number, batch in enumerate(read_origins(path)):
        for entry in batch["programs"]:
            if isinstance(entry, list) and entry:
                batch_of.setdefault(str(entry[0]), number)
    batches: list[tuple[int, int, int | None]] = []
    previous = None
    for index, program_id in enumerate(ids):
        number = batch_of.get(program_id or "")
        if number is None:
            continue  # measured outside the logged search (post-optimization, another tool): no round
        if number != previous or not batches or batches[-1][1] != index:
            batches.append((index, index + 1, None))
        else:
            batches[-1] = (batches[-1][0], index + 1, None)
        previous = number
    return batches


def records_in_file_order(work_dir: str | Path) -> list[tuple[int, Any, float | None, str]]:
    """``(workload index, trace JSON, mean latency or None, the line)`` of each well-formed record of a tuning work
    directory, in the order measured (damaged lines left out; ``read_search_run`` counts them)."""
    records = []
    for line in (Path(work_dir) / RECORDS).read_text(errors="replace").splitlines():
        try:
            index, trace_json, run_secs, _, _ = parse_record_line(line)
        except BadRecord:
            continue
        records.append((index, trace_json, mean_latency(run_secs), line))
    return records


def workload_rows(work_dir: str | Path) -> list[list[Any] | None]:
    """The rows ``[hash, module]`` of a work directory's workload file in file order (a record's workload index
    points here; a damaged row is ``None``)."""
    return _read_workloads(Path(work_dir) / WORKLOADS, Counter())


def tuning_record(line: str, workload_row: list[Any]) -> Any:
    """MetaSchedule's ``TuningRecord`` of one line of a work directory's records, on its workload's row: the
    program to replay or time again."""
    return ms.database.TuningRecord.from_json(json.loads(line)[1], ms.database.Workload.from_json(workload_row))


def read_search_run(work_dir: str | Path) -> SearchRun:
    """One tuning work directory's measured records with their task, search round and latency."""
    work_dir = Path(work_dir)
    for name in (RECORDS, WORKLOADS):
        if not (work_dir / name).is_file():
            raise SearchRunError(f"{work_dir}: not a MetaSchedule tuning work directory (no {name})")
    skipped: Counter = Counter()
    workloads = _read_workloads(work_dir / WORKLOADS, skipped)
    keys: list[str | None] = []
    parsed: list[tuple[Any, float | None]] = []
    for line in (work_dir / RECORDS).read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            index, trace_json, run_secs, _, _ = parse_record_line(line)
        except BadRecord:
            keys.append(None)
            parsed.append((None, None))
            skipped["corrupt tuning record line"] += 1
            continue
        workload = workloads[index] if index < len(workloads) else None
        if workload is None:
            skipped["record of an unknown workload"] += 1
        keys.append(None if workload is None else str(workload[0]))
        parsed.append((trace_json, mean_latency(run_secs)))
    if not parsed:
        raise SearchRunError(f"{work_dir / RECORDS}: no tuning record")
    report = _read_report(work_dir)
    if (work_dir / HISTORY).is_file():
        batches = _batches_from_history(work_dir / HISTORY, keys)
    elif (work_dir / ORIGINS).is_file():
        ids = [None if k is None or t is None else trace_id(k, t) for k, (t, _) in zip(keys, parsed)]
        batches = _batches_from_origins(work_dir / ORIGINS, ids)
    else:
        raise SearchRunError(f"{work_dir}: no {HISTORY} or {ORIGINS}; the search round of its records is unknown")
    logged = sum(end - start for start, end, _ in batches)
    if logged < len(parsed):
        skipped["records outside the logged batches"] += len(parsed) - logged
    # Rounds count per task, in measurement order; a task's late rounds are the second half of its own batches.
    rounds: list[tuple[int, int, str, int]] = []  # (start, end, key, round)
    per_task: Counter = Counter()
    task_names: dict[str, str] = {}
    task_weights: dict[str, float] = {}
    report_tasks = report.get("tasks") if isinstance(report.get("tasks"), list) else []
    for start, end, task_index in batches:
        batch_keys = [k for k in keys[start:end] if k is not None]
        if not batch_keys:
            continue
        key = batch_keys[0]
        rounds.append((start, end, key, per_task[key]))
        per_task[key] += 1
        if key not in task_weights and task_index is not None and task_index < len(report_tasks):
            task_names[key] = str(report_tasks[task_index].get("name", key))
            task_weights[key] = float(report_tasks[task_index].get("weight", 1))
    if isinstance(report_tasks, list) and any(k not in task_weights for k in per_task):
        # origins.jsonl names its tasks; report.json gives their weights by name.
        by_name = {str(t.get("name")): t for t in report_tasks if isinstance(t, dict)}
        for batch in read_origins(work_dir / ORIGINS):
            key, name = str(batch["workload"]), str(batch.get("task", ""))
            if key in per_task and key not in task_weights and name in by_name:
                task_names[key], task_weights[key] = name, float(by_name[name].get("weight", 1))
    for key in per_task:
        if key not in task_weights:
            skipped["tasks without a weight in report.json (weight 1)"] += 1
            task_names.setdefault(key, key)
            task_weights[key] = 1.0
    records = [RunRecord(key, parsed[i][0], parsed[i][1], number, number >= per_task[key] // 2)
               for start, end, key, number in rounds for i in range(start, end) if keys[i] == key]
    config = report.get("config") if isinstance(report.get("config"), dict) else {}
    cost_model = str(config.get("cost_model") or work_dir.name)
    if config.get("online_steps"):
        cost_model += "-online"  # fine-tuned during the search: named as the search benchmarks name it
    if config.get("model_path"):
        cost_model += f"@{Path(str(config['model_path'])).stem}"
    return SearchRun(work_dir, str(report.get("source") or work_dir.parent.name), cost_model, records,
                     {str(w[0]): w for w in workloads if w is not None}, task_names, task_weights, skipped)


def _read_report(work_dir: Path) -> dict[str, Any]:
    try:
        report = json.loads((work_dir / REPORT).read_text())
        return report if isinstance(report, dict) else {}
    except (OSError, ValueError):
        return {}


@dataclass
class SearchSet:
    """Distinct programs measured by the runs, pooled per source and task (duplicates keep their mean latency)."""

    traces: list[Any]  # as the search's cost model saw them (the database's integer booleans turned back)
    latencies: np.ndarray  # seconds
    task_keys: list[str]
    groups: np.ndarray  # index of the program's (source, task)
    group_source: list[str]
    group_key: list[str]
    weights: dict[int, float]  # per group: the task's weight in its source
    task_names: dict[str, str]
    late_by_run: dict[tuple[int, int], np.ndarray]  # (run, group) -> programs measured in the run's late rounds
    workloads: dict[str, list[Any]]
    runs: list[dict[str, Any]]
    training_tasks: set[str] = field(default_factory=set)
    skipped: Counter = field(default_factory=Counter)

    @property
    def sources(self) -> list[str]:
        return sorted(set(self.group_source))

    def late(self) -> np.ndarray:
        mask = np.zeros(len(self.traces), dtype=bool)
        for index in self.late_by_run.values():
            mask[index] = True
        return mask

    def summary(self) -> dict[str, Any]:
        return {"runs": len(self.runs), "programs": len(self.traces), "late_programs": int(self.late().sum()),
                "sources": self.sources, "tasks": len(self.group_key),
                "training_tasks": sorted(self.task_names.get(k, k) for k in self.training_tasks),
                "skipped": dict(self.skipped)}

    def labeled(self) -> LabeledPrograms:
        """The pooled programs as :class:`LabeledPrograms` (what TLP and the baselines score)."""
        extents = {k: block_extents(ms.database.Workload.from_json(self.workloads[k]).mod) for k in set(self.task_keys)}
        catalogue: dict[str, dict[str, Any]] = {}
        for source, key, group in zip(self.group_source, self.group_key, range(len(self.group_key))):
            entry = catalogue.setdefault(key, {"name": self.task_names.get(key, key), "networks": {}})
            entry["networks"][source] = self.weights[group]
        return LabeledPrograms(self.traces, self.latencies, self.task_keys, extents, catalogue, Counter(self.skipped))


def pool_runs(runs: list[SearchRun], exclude: set[str] | None = None, training_tasks: set[str] | None = None
              ) -> SearchSet:
    """Pool the runs' valid programs per (source, task). ``exclude``: trace ids (either form) never to score, e.g.
    the scoring model's training records; ``training_tasks``: task keys the models were trained on (flagged)."""
    exclude = exclude or set()
    skipped: Counter = Counter()
    program_of: dict[tuple[int, str], int] = {}
    traces: list[Any] = []
    keys: list[str] = []
    groups: list[int] = []
    sums: list[list[float]] = []
    group_of: dict[tuple[str, str], int] = {}
    group_source: list[str] = []
    group_key: list[str] = []
    weights: dict[int, float] = {}
    names: dict[str, str] = {}
    workloads: dict[str, list[Any]] = {}
    late_by_run: dict[tuple[int, int], list[int]] = {}
    failed: set[tuple[int, str]] = set()
    for run_index, run in enumerate(runs):
        skipped.update(run.skipped)
        for record in run.records:
            if record.workload_key not in run.workloads:
                skipped["record of an unknown workload"] += 1
                continue
            group = group_of.setdefault((run.source, record.workload_key), len(group_of))
            if group == len(group_source):
                group_source.append(run.source)
                group_key.append(record.workload_key)
                weights[group] = run.task_weights.get(record.workload_key, 1.0)
            names.setdefault(record.workload_key, run.task_names.get(record.workload_key, record.workload_key))
            workloads.setdefault(record.workload_key, run.workloads[record.workload_key])
            raw_id = trace_id(record.workload_key, record.trace_json)
            trace = with_bool_annotations(record.trace_json)
            if raw_id in exclude or trace_id(record.workload_key, trace) in exclude:
                skipped["in the models' training records"] += 1
                continue
            if record.latency is None:
                failed.add((group, raw_id))
                skipped["failed or invalid latency (failure marker, NaN, inf, non-positive)"] += 1
                continue
            program = program_of.get((group, raw_id))
            if program is None:
                program = program_of[(group, raw_id)] = len(traces)
                traces.append(trace)
                keys.append(record.workload_key)
                groups.append(group)
                sums.append([])
            else:
                skipped["measured again (mean latency kept)"] += 1
            sums[program].append(record.latency)
            if record.late:
                late_by_run.setdefault((run_index, group), []).append(program)
    run_info = [{"path": str(r.path), "source": r.source, "cost_model": r.cost_model, "records": len(r.records)}
                for r in runs]
    return SearchSet(traces, np.array([np.mean(s) for s in sums], dtype=np.float64), keys,
                     np.array(groups, dtype=np.int64), group_source, group_key, weights, names,
                     {k: np.unique(v) for k, v in late_by_run.items()}, workloads, run_info,
                     set(training_tasks or ()) & set(group_key), skipped)


def read_search_runs(paths: Iterable[str | Path], exclude: set[str] | None = None,
                     training_tasks: set[str] | None = None) -> SearchSet:
    """Every tuning work directory at or below ``paths``, pooled; a directory that cannot be read is skipped and
    counted (``skipped["unreadable work directory: ..."]``); none readable is an error."""
    runs, unreadable = [], Counter()
    for work_dir in find_work_dirs(paths):
        try:
            runs.append(read_search_run(work_dir))
        except SearchRunError as error:
            unreadable[f"unreadable work directory: {error}"] += 1
    if not runs:
        raise SearchRunError("no readable tuning work directory: " + "; ".join(unreadable) if unreadable
                             else "no tuning work directory")
    search = pool_runs(runs, exclude, training_tasks)
    search.skipped.update(unreadable)
    if not search.traces:
        raise SearchRunError(f"{', '.join(str(p) for p in paths)}: no measured program with a valid latency")
    return search


def read_held_out_runs(paths: Iterable[str | Path], train: LabeledPrograms) -> SearchSet:
    """:func:`read_search_runs` for scoring models trained on ``train``: never a program they were trained on; tasks of
    the training split are scored but flagged (``training_tasks``)."""
    trained = {trace_id(key, trace) for key, trace in zip(train.task_keys, train.traces)}
    return read_search_runs(paths, exclude=trained, training_tasks=set(train.task_keys))


def pick_populations(search: SearchSet, population: int = DEFAULT_POPULATION, draws: int = DEFAULT_DRAWS,
                     seed: int = 0) -> dict[int, list[np.ndarray]]:
    """Per group: the populations (program indices) a model picks from. Drawn once, so every model sees the same."""
    rng = np.random.default_rng(seed)
    populations: dict[int, list[np.ndarray]] = {}
    for (_, group), late in sorted(search.late_by_run.items()):
        if len(late) < 2:
            continue  # nothing to choose between
        if len(late) <= population:
            populations.setdefault(group, []).append(late)
        else:
            populations.setdefault(group, []).extend(rng.choice(late, population, replace=False) for _ in range(draws))
    return populations


def search_scores(search: SearchSet, scores: np.ndarray, populations: dict[int, list[np.ndarray]] | None = None
                  ) -> dict[str, Any]:
    """The search-like metrics of one model's ``scores`` (higher = predicted faster) per source, and their mean."""
    scores = np.asarray(scores, dtype=np.float64)
    if populations is None:
        populations = pick_populations(search)
    late = search.late()
    lat = search.latencies
    per_source: dict[str, Any] = {}
    for source in search.sources:
        groups = [g for g, s in enumerate(search.group_source) if s == source]
        in_source = np.isin(search.groups, groups)
        late_in = in_source & late
        regrets, shares = [], []
        for group in groups:
            if group not in populations:
                continue
            picks = [lat[p[np.argmax(scores[p])]] / lat[p].min() - 1.0 for p in populations[group]]
            regrets.append(float(np.mean(picks)))
            best = lat[late & (search.groups == group)].min()
            shares.append(search.weights[group] * best)  # the task's share of the tuned workload's latency
        per_source[source] = {
            "pick_regret": float(np.dot(regrets, shares) / np.sum(shares)) if regrets else float("nan"),
            "pick_regret_equal": float(np.mean(regrets)) if regrets else float("nan"),
            "late_top1": _top_k(scores, lat, search.groups, late_in, 1, search.weights),
            "late_top5": _top_k(scores, lat, search.groups, late_in, 5, search.weights),
            "all_top1": _top_k(scores, lat, search.groups, in_source, 1, search.weights),
            "tasks": len(groups),
            "tasks_in_training": int(sum(search.group_key[g] in search.training_tasks for g in groups)),
            "programs": int(in_source.sum()),
            "late_programs": int(late_in.sum()),
            "populations": int(sum(len(populations.get(g, [])) for g in groups)),
        }
    mean = {m: float(np.nanmean([r[m] for r in per_source.values()])) if per_source else float("nan")
            for m in METRICS}
    return {**mean, "per_source": per_source}


def _top_k(scores: np.ndarray, latencies: np.ndarray, groups: np.ndarray, mask: np.ndarray, k: int,
           weights: dict[int, float]) -> float:
    # A task with a single program here ranks nothing (as TenSet's evaluation, which leaves such tasks out).
    present, counts = np.unique(groups[mask], return_counts=True)
    mask = mask & np.isin(groups, present[counts >= 2])
    if not mask.any():
        return float("nan")
    return float(top_k_score(scores[mask], latencies[mask], groups[mask], k=k, weights=weights))


def metaschedule_scores(cost_model: Any, target: Any, search: SearchSet) -> np.ndarray:
    """A trained MetaSchedule cost model's scores for the pooled programs (traces replayed on their workloads)."""
    scores = np.zeros(len(search.traces), dtype=np.float64)
    keys = np.array(search.task_keys)
    for key in sorted(set(search.task_keys)):
        index = np.nonzero(keys == key)[0]
        workload = ms.database.Workload.from_json(search.workloads[key])
        traces = [search.traces[i] for i in index]
        scores[index] = metaschedule_predict(cost_model, replay_context(workload.mod, target, key),
                                             replay_candidates(workload, traces, target))
    return scores

