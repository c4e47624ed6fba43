"""``tlp collect``: measure candidate programs of tasks on a platform, resumably, for hours.

Kill-safety and resume come from the store: every batch is appended durably before the next one starts, and on
start the collector reads what is stored (per task: how many programs, which traces and which programs) and
measures only what is missing. Tasks are visited round-robin, one batch at a time, so an interrupted collection
still covers every task evenly.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from tqdm import tqdm

from tlp import interrupt
from tlp._tvm import ms, tvm
from tlp.dataset.measure import BatchStats, MeasureConfig, MeasureError, Measurer
from tlp.dataset.sampler import (
    CandidateSampler,
    EmptyDesignSpaceError,
    args_info_json,
    program_hash,
    trace_json,
)
from tlp.dataset.store import Dataset, MeasuredProgram, PlatformStore
from tlp.platform import Platform
from tlp.workloads.task import Task

log = logging.getLogger("tlp.collect")

# A re-measured record is worth keeping apart from the original only if the machine was busy the first time.
DEFAULT_LOAD_THRESHOLD = 0.10


@dataclass
class CollectPlan:
    """How many programs to measure per task and how to draw them."""

    trials_per_task: int = 128
    random_fraction: float = 0.5
    batch_size: int = 32
    seed: int = 0
    seal_every_s: float = 600.0
    max_batches: int | None = None  # stop after this many batches (tests, benchmarks)

    def __post_init__(self) -> None:
        from tlp.settings import check_ranges  # pylint: disable=import-outside-toplevel

        check_ranges(self, "collect settings", {"trials_per_task": (1, None), "random_fraction": (0, 1),
                                                "batch_size": (1, None), "seal_every_s": (0, None),
                                                "max_batches": (1, None)})


@dataclass
class CollectSummary:
    measured: int = 0
    valid: int = 0
    failed: int = 0
    skipped_tasks: dict[str, str] = field(default_factory=dict)
    exhausted_tasks: list[str] = field(default_factory=list)
    seconds: float = 0.0
    repairs: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _measurement_meta(source: str, phash: str, stamp: str, stats: BatchStats, batch_size: int) -> dict[str, Any]:
    """What we keep about one measurement beyond MetaSchedule's record (see store.py)."""
    return {
        "source": source,
        "program_hash": phash,
        "time": stamp,
        "foreign_load": None if stats.foreign_load is None else round(stats.foreign_load, 4),
        "batch_build_s": round(stats.build_s, 3),
        "batch_run_s": round(stats.run_s, 3),
        "batch_size": batch_size,
    }


# What a program's metadata says about how it was produced (collect's random/evolved draws, a search's round and
# guiding model); a transfer to another platform keeps it under "origin", so search programs stay search programs.
ORIGIN_KEYS = ("source", "round", "cost_model", "tuning_run", "time")
# Sources that name how a program was produced; the others ("transfer:<platform>", "remeasure") say only how it was
# measured again.
PRIMARY_SOURCES = frozenset({"random", "evolved", "search", "import", "ansor"})


def origin_from_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """How the program with this metadata was first produced (its first platform's view, through transfers)."""
    return dict(meta["origin"]) if "origin" in meta else {k: meta[k] for k in ORIGIN_KEYS if k in meta}


def _clip_error(error: str | None) -> str | None:
    """Build/run errors can be whole tracebacks; the end says what went wrong."""
    return None if error is None else error[-2000:]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def unique_tasks(tasks: Iterable[Task]) -> list[Task]:
    """One task per workload key (the same conv appears in several networks), first occurrence first."""
    unique: dict[str, Task] = {}
    for task in tasks:
        unique.setdefault(task.key, task)
    return list(unique.values())


def interleave_by_network(tasks: list[Task]) -> list[Task]:
    """Order tasks so that every network gets its turn early: its heaviest task first, then the next of each…

    A collection stopped after N batches then covers all networks (and their most expensive kernels) rather than
    the first few networks completely.
    """
    by_network: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        # All operator families form one group: they take one turn per round, like one network.
        by_network["op:" if task.network.startswith("op:") else task.network].append(task)
    for group in by_network.values():
        group.sort(key=lambda t: -t.weight * max(t.flops, 1.0))
    ordered: list[Task] = []
    for rank in range(max((len(g) for g in by_network.values()), default=0)):
        ordered.extend(group[rank] for group in by_network.values() if rank < len(group))
    return ordered


def register(dataset: Dataset, tasks: list[Task]) -> None:
    """Record every (task, network, weight) occurrence in the dataset's catalogue."""
    dataset.register_tasks([(task.key, task.name, task.network, task.own_weight, task.flops) for task in tasks])


class _StoreState:
    """What is already measured, per task: the resume point."""

    def __init__(self, store: PlatformStore) -> None:
        self.ids: set[str] = set()
        self.program_hashes: dict[str, set[str]] = defaultdict(set)
        self.programs: dict[str, list[MeasuredProgram]] = defaultdict(list)
        for program in store.latest_programs().values():
            self.add(program)

    def add(self, program: MeasuredProgram) -> None:
        self.ids.add(program.id)
        self.programs[program.workload_key].append(program)
        if program.meta.get("program_hash"):
            self.program_hashes[program.workload_key].add(program.meta["program_hash"])

    def count(self, key: str) -> int:
        return len(self.programs[key])


def collect(
    dataset: Dataset,
    tasks: list[Task],
    platform: Platform,
    plan: CollectPlan | None = None,
    measure_config: MeasureConfig | None = None,
    progress: bool = True,
    on_batch: Callable[[CollectSummary], None] | None = None,
) -> CollectSummary:
    """Measure up to ``plan.trials_per_task`` programs of every task on ``platform``; resumes where it stopped.

    Ctrl-C or SIGTERM stops it between batches (:mod:`tlp.interrupt`): the batch in flight is dropped, every stored
    one kept, the tails sealed and the lock released; then KeyboardInterrupt."""
    with interrupt.deferred():
        return _collect(dataset, tasks, platform, plan, measure_config, progress, on_batch)


def _collect(dataset: Dataset, tasks: list[Task], platform: Platform, plan: CollectPlan | None,
             measure_config: MeasureConfig | None, progress: bool,
             on_batch: Callable[[CollectSummary], None] | None) -> CollectSummary:
    plan = plan or CollectPlan()
    summary = CollectSummary()
    started = time.monotonic()
    register(dataset, tasks)
    store = dataset.store_for(platform)
    summary.repairs = store.lock()  # also repairs what a kill left behind
    try:
        state = _StoreState(store)
        todo = [t for t in unique_tasks(interleave_by_network(tasks)) if state.count(t.key) < plan.trials_per_task]
        remaining = sum(plan.trials_per_task - state.count(t.key) for t in todo)
        for task in todo:
            store.add_workload(task.workload_json)
        measurer = Measurer(platform.target, measure_config)
        samplers: dict[str, CandidateSampler] = {}
        exhausted: set[str] = set()
        last_seal = time.monotonic()
        batches = 0
        bar = tqdm(total=remaining, disable=not progress, unit="prog", desc=f"collect {platform.id}", smoothing=0.05)
        try:
            while todo:
                # Fewest measured first: after a restart, tasks that have nothing yet come before those that
                # already had their first batch (the interleaved order is kept among equals: the sort is stable).
                todo.sort(key=lambda t: state.count(t.key))
                for task in list(todo):
                    interrupt.check()
                    missing = plan.trials_per_task - state.count(task.key)
                    if missing <= 0 or task.key in exhausted:
                        todo.remove(task)
                        continue
                    try:
                        sampler = samplers.get(task.key) or samplers.setdefault(
                            task.key, CandidateSampler(task, platform.target, num_threads=1)
                        )
                    except Exception as error:  # pylint: disable=broad-except  # one bad task must not stop hours of collection
                        summary.skipped_tasks[task.name] = str(error).splitlines()[-1]
                        log.warning("skipping task %s: %s", task.name, summary.skipped_tasks[task.name])
                        todo.remove(task)
                        bar.total -= missing
                        continue
                    try:
                        programs = _measure_batch(task, sampler, state, measurer, plan, min(missing, plan.batch_size))
                    except MeasureError:
                        raise  # the measuring itself is gone (a dead RPC tracker): no task can be measured
                    except Exception as error:  # pylint: disable=broad-except  # same reason as above
                        summary.skipped_tasks[task.name] = f"{type(error).__name__}: {(str(error).splitlines() or [''])[-1]}"
                        log.warning("skipping task %s for this run: %s", task.name, summary.skipped_tasks[task.name])
                        todo.remove(task)
                        bar.total -= missing
                        continue
                    if not programs:
                        exhausted.add(task.key)  # the design space has no new program left to draw
                        summary.exhausted_tasks.append(task.name)
                        bar.total -= missing
                        continue
                    interrupt.check()  # a stop while the batch was measured: it is dropped, not stored
                    store.append(programs)
                    for program in programs:
                        state.add(program)
                    summary.measured += len(programs)
                    summary.valid += sum(p.latency is not None for p in programs)
                    summary.failed += sum(p.latency is None for p in programs)
                    bar.update(len(programs))
                    bar.set_postfix(valid=summary.valid, failed=summary.failed, load=programs[0].meta["foreign_load"])
                    batches += 1
                    if on_batch:
                        on_batch(summary)
                    if time.monotonic() - last_seal > plan.seal_every_s:
                        store.seal()
                        last_seal = time.monotonic()
                    if plan.max_batches is not None and batches >= plan.max_batches:
                        todo = []
                        break
        finally:
            bar.close()
            measurer.close()
    finally:
        try:
            store.seal()  # also after a stop or an error: what was stored is sealed
        finally:
            store.unlock()
    summary.seconds = time.monotonic() - started
    return summary


def _measure_batch(
    task: Task,
    sampler: CandidateSampler,
    state: _StoreState,
    measurer: Measurer,
    plan: CollectPlan,
    count: int,
) -> list[MeasuredProgram]:
    """Draw ``count`` new candidates for ``task`` (random first, then evolved) and measure them."""
    done = state.count(task.key)
    random_quota = int(round(plan.trials_per_task * plan.random_fraction))
    source = "random" if done < random_quota or not any(p.latency for p in state.programs[task.key]) else "evolved"
    seed = (plan.seed * 1_000_003 + done * 7919 + int(task.key) % 1_000_000_007) % (2**31 - 1)
    fresh: list[tuple[Any, Any, str]] = []
    seen_hashes = state.program_hashes[task.key]
    for attempt in range(3):  # small spaces repeat themselves: retry a few times, then call the space exhausted
        if source == "random":
            candidates = sampler.random(count * 2 if attempt else count, seed + attempt)
        else:
            candidates = sampler.evolved(count, state.programs[task.key], seed + attempt)
        for candidate in candidates:
            trace = trace_json(candidate)
            phash = program_hash(candidate)
            program_id = MeasuredProgram(task.key, trace, None, None).id
            if phash in seen_hashes or program_id in state.ids or any(phash == f[2] for f in fresh):
                continue
            fresh.append((candidate, trace, phash))
            if len(fresh) >= count:
                break
        if len(fresh) >= count:
            break
    if not fresh:
        return []
    results, stats = measurer.measure([c.sch.mod for c, _, _ in fresh], [c.args_info for c, _, _ in fresh])
    stamp = _now()
    programs = []
    for (candidate, trace, phash), result in zip(fresh, results):
        meta = _measurement_meta(source, phash, stamp, stats, len(fresh))
        programs.append(MeasuredProgram(task.key, trace, args_info_json(candidate), result.run_secs,
                                        _clip_error(result.error), meta))
    return programs


def task_quantile(workload_key: str) -> float:
    """A fixed pseudo-random number in [0, 1) per task: the order in which tasks enter a sample.

    Samples of platforms' data are drawn by task (a ranking needs several programs of one task) and are nested:
    the tasks of a 3 % sample are those of the 1 % sample plus more, on every machine and in every session.
    """
    return int(hashlib.sha1(f"tlp-sample:{workload_key}".encode()).hexdigest()[:12], 16) / float(16**12)


def sample_tasks(programs_per_task: dict[str, int], fraction: float) -> list[str]:
    """Whole tasks in :func:`task_quantile` order, holding about ``fraction`` of the programs (nested in fraction).

    A positive fraction takes at least the first task, even when it alone holds more than twice the share asked
    for: search runs store 1,000 and more programs per task, and a small share of a few such tasks would
    otherwise be no task at all (an empty held-out sample leaves ``tlp adapt`` nothing to score on).
    """
    keys = sorted(programs_per_task, key=task_quantile)
    budget = fraction * sum(programs_per_task.values())
    chosen, taken = [], 0
    for key in keys:
        # the closest whole-task cut to the requested share
        if taken + programs_per_task[key] / 2 > budget and (chosen or fraction <= 0):
            break
        chosen.append(key)
        taken += programs_per_task[key]
    return chosen


def sample_order(programs: Iterable[MeasuredProgram], catalogue: dict[str, dict[str, Any]],
                 fraction: float = 1.0, first_networks: Iterable[str] = (), first_fraction: float = 1.0
                 ) -> list[MeasuredProgram]:
    """The programs of whole tasks to measure, in the order to measure them.

    Tasks of ``first_networks`` (the held-out networks, so that the sample can be evaluated) come first, the
    other tasks after them; within each group tasks follow :func:`task_quantile` and are included while the
    included share of the group's programs stays within ``first_fraction`` / ``fraction``. Any prefix of the
    result is thus "(a sample of) the first networks + a uniform sample of whole tasks", which is what an
    interrupted re-measurement leaves behind.
    """
    first = set(first_networks)
    by_task: dict[str, list[MeasuredProgram]] = defaultdict(list)
    for program in programs:
        by_task[program.workload_key].append(program)

    is_first = {key: bool(set(catalogue.get(key, {}).get("networks", {})) & first) for key in by_task}
    sizes = {key: len(group) for key, group in by_task.items()}
    order = sample_tasks({k: n for k, n in sizes.items() if is_first[k]}, first_fraction) + sample_tasks(
        {k: n for k, n in sizes.items() if not is_first[k]}, fraction)
    return [program for key in order for program in by_task[key]]


def remeasure(
    dataset: Dataset,
    source: PlatformStore,
    platform: Platform,
    measure_config: MeasureConfig | None = None,
    only_loaded_above: float | None = None,
    retry_failed: bool = False,
    batch_size: int = 32,
    progress: bool = True,
    max_batches: int | None = None,
    fraction: float = 1.0,
    first_networks: Iterable[str] = (),
    first_fraction: float = 1.0,
    on_batch: Callable[[CollectSummary], None] | None = None,
    seal_every_s: float = 600.0,
) -> CollectSummary:
    """Measure the stored programs of ``source`` again on ``platform`` (same traces).

    Two uses: ``platform`` is another machine/target (TenSet-style cross-hardware data, the basis of MTL-TLP), or
    the same platform with ``only_loaded_above`` set, to replace timings taken while the machine was busy, and/or
    ``retry_failed``, to retry programs whose build or run failed (after a fix of the measurement set-up).
    For another platform, ``fraction``, ``first_networks`` and ``first_fraction`` choose a sample of whole tasks
    (see :func:`sample_order`); the held-out networks come first so that an interrupted run can be evaluated.
    Resumable like :func:`collect`: a program already measured on ``platform`` after the load cut-off is skipped.
    """
    with interrupt.deferred():
        return _remeasure(dataset, source, platform, measure_config, only_loaded_above, retry_failed, batch_size,
                          progress, max_batches, fraction, first_networks, first_fraction, on_batch, seal_every_s)


def _remeasure(dataset: Dataset, source: PlatformStore, platform: Platform, measure_config: MeasureConfig | None,
               only_loaded_above: float | None, retry_failed: bool, batch_size: int, progress: bool,
               max_batches: int | None, fraction: float, first_networks: Iterable[str], first_fraction: float,
               on_batch: Callable[[CollectSummary], None] | None, seal_every_s: float) -> CollectSummary:
    summary = CollectSummary()
    started = time.monotonic()
    same_platform = source.platform.id == platform.id
    target_store = source if same_platform else dataset.store_for(platform)
    with target_store:
        done = target_store.latest_programs()
        todo = []
        candidates = done.values() if same_platform else sample_order(
            source.latest_programs().values(), dataset.catalogue(), fraction, first_networks, first_fraction)
        for program in candidates:
            existing = done.get(program.id)
            if same_platform:
                load = (existing.meta.get("foreign_load") if existing else None) or 0.0
                loaded = only_loaded_above is not None and existing.latency is not None and load > only_loaded_above
                if not (loaded or (retry_failed and existing.latency is None)):
                    continue
            elif existing is not None:
                continue
            todo.append(program)
        workloads = {key: None for key in {p.workload_key for p in todo}}
        for key in workloads:
            workload_json = source.workload_json(key)
            target_store.add_workload(workload_json)
            workloads[key] = ms.database.Workload.from_json(workload_json)
        target_json = tvm.target.Target(platform.target).export()
        measurer, bar = None, None
        last_seal = time.monotonic()
        try:
            measurer = Measurer(platform.target, measure_config)
            bar = tqdm(total=len(todo), disable=not progress, unit="prog", desc=f"remeasure -> {platform.id}")
            for batch_number, start in enumerate(range(0, len(todo), batch_size)):
                if max_batches is not None and batch_number >= max_batches:
                    break
                interrupt.check()
                batch = todo[start : start + batch_size]
                candidates = []
                for program in batch:
                    record = ms.database.TuningRecord.from_json(
                        [program.trace_json, None, target_json, program.args_info], workloads[program.workload_key]
                    )
                    candidates.append(record.as_measure_candidate())
                results, stats = measurer.measure([c.sch.mod for c in candidates], [c.args_info for c in candidates])
                stamp = _now()
                programs = []
                for program, candidate, result in zip(batch, candidates, results):
                    meta = _measurement_meta(
                        "remeasure" if same_platform else f"transfer:{source.platform.id}",
                        program.meta.get("program_hash") or program_hash(candidate), stamp, stats, len(batch))
                    origin = origin_from_meta(program.meta)
                    if origin.get("source") in PRIMARY_SOURCES:  # what the new measurement does not say
                        meta["origin"] = origin
                    programs.append(MeasuredProgram(program.workload_key, program.trace_json, program.args_info,
                                                    result.run_secs, _clip_error(result.error), meta))
                interrupt.check()  # a stop while the batch was measured: it is dropped, not stored
                target_store.append(programs)
                summary.measured += len(programs)
                summary.valid += sum(p.latency is not None for p in programs)
                summary.failed += sum(p.latency is None for p in programs)
                bar.update(len(programs))
                if on_batch:
                    on_batch(summary)
                if time.monotonic() - last_seal > seal_every_s:  # committed segments, not just a plain tail
                    target_store.seal()
                    last_seal = time.monotonic()
        finally:
            if bar is not None:
                bar.close()
            if measurer is not None:
                measurer.close()
            target_store.seal()  # also after a stop or an error: what was stored is sealed
    summary.seconds = time.monotonic() - started
    return summary
