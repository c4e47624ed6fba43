"""Zero-measurement schedules: the TLP model's top-ranked program of a short search that measures nothing.

Tasks that get no measured trials (``tlp tune --top-tasks``, tiny budgets) would otherwise compile with TVM's
unscheduled default (no parallelism, no vectorization, no tiling). Here MetaSchedule's ``EvolutionarySearch`` runs
on the task's ``post-order-apply`` design spaces with the TLP cost model for one or a few rounds, and nothing is
built or run: no results are fed back, so the search is guided by the model alone. The candidates of a round come
out ranked by the model (``eps_greedy=0``: no random picks mixed in); the best-scored one across rounds that
compiles is the task's *predicted* schedule. Where the model scores with another platform's head (a CPU no dataset
holds) its ranking is too loose to trust one unmeasured pick: there the few best-ranked candidates are timed once
each and the fastest is kept (``PredictionConfig.timed_candidates``). With this platform's schedule library
(:class:`tlp.search.search_strategy.library.ScheduleLibrary`) and a stored workload near the task, the candidates are
the library's programs replayed on it instead of a search's (as in a search's first round: a program measured fast on
a near shape beats the model's pick among random ones, and replaying a few takes a fraction of a second, not ten).

Where the picks live: a separate MetaSchedule ``JSONDatabase`` (``WORK/predicted/``) whose records carry **no**
``run_secs``. That is the honest form (nothing was measured) and a safety: MetaSchedule's own databases skip
records without run times, so even a stock ``JSONDatabase`` opened on that folder never serves them as tuned
results. :class:`PredictedDatabase` serves them (read-only), and :func:`measured_then_predicted` puts it behind
the measured database, so a task with a valid measured record always compiles with that.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tlp import TLPError, interrupt, one_line
from tlp._tvm import ms, register_tensor_intrinsics, structural_hash, tvm
from tlp.dataset.measure import MeasureConfig, Measurer
from tlp.dataset.store import mean_latency
import tvm_ffi
from tvm.ir.utils import derived_object
from tlp.search.database.shared_schedules import SharedScheduleDatabase
from tlp.search.search_strategy.first_round import DRAWS_PER_SPACE, FAR_LIBRARY_DISTANCE, nothing_to_sample
from tlp.search.search_strategy.transfer import replayed_candidates
from tlp.workloads.task import Task

PREDICTED_DIR = "predicted"  # under a tuning work dir
MANIFEST = "predicted.json"  # per task: how the pick was made (the JSONDatabase files hold the schedules)
NOT_MEASURED = "predicted by the cost model, not measured: these records carry no run time"


class PredictedDatabaseError(TLPError):
    """A predicted-schedule database that cannot be used as one."""


@dataclass
class PredictionConfig:
    """How long the zero-measurement search of one task may run.

    One round is one ``generate_measure_candidates`` of ``EvolutionarySearch`` (sample ``population`` programs,
    evolve them ``genetic_iters`` times under the model, keep the ``keep`` best). More rounds start only while the
    task's time (``seconds_per_task``) allows another round as long as the first one took; one round always runs.
    None starts after a round that found fewer than ``keep`` programs or no program an earlier round had not: the
    task's space is that small (a reshape, a layout change), and another draw finds the same programs again.
    """

    population: int = 128
    genetic_iters: int = 2
    keep: int = 16
    # Three: one round took a third of the time, but ConvNeXt and Swin ran 15-33 % slower end to end with its picks.
    max_rounds: int = 3
    seconds_per_task: float = 10.0
    build_tries: int = 4  # best-ranked candidates tried in turn until one compiles
    seed: int = 1
    # The best-ranked candidates built and timed once each, the fastest kept (0: the top one, unmeasured). None:
    # chosen by the run, 4 where the model scores with another platform's head: there one unmeasured pick is a
    # draw (two runs' picks of one task ran 124 and 23 us: benchmarks/leave_platform_out/).
    timed_candidates: int | None = None


@dataclass
class Prediction:
    """The outcome for one task."""

    task: str
    workload_hash: str  # MetaSchedule's structural hash of the task (its key in the databases)
    scheduled: bool  # False: no candidate compiled (the task keeps TVM's default)
    seconds: float
    rounds: int = 0
    candidates_ranked: int = 0
    score: float | None = None  # the model's score of the pick (calibrated, only comparable within the task)
    rank_tried: int | None = None  # 0: the top-ranked candidate compiled; k: the k best before it failed to build
    timed_s: list[float | None] | None = None  # each timed candidate's latency, best-ranked first (None: failed)
    error: str = ""
    reused: bool = False  # found in WORK/predicted from an earlier run: no search this time
    library: bool = False  # ranked among the schedule library's programs replayed on the task (no search)


# ---- the search --------------------------------------------------------------------------------------------
def _context(task: Task, target: Any, config: PredictionConfig, seed: int) -> Any:
    cores = int(target.attrs.get("num-cores", 1)) if hasattr(target, "attrs") else 1
    strategy = ms.search_strategy.EvolutionarySearch(
        population_size=config.population, init_min_unmeasured=config.population,
        genetic_num_iters=config.genetic_iters, eps_greedy=0.0)
    register_tensor_intrinsics(target)
    return ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply", search_strategy=strategy,
                          task_name=task.name, rand_state=seed, num_threads=cores)


def _ranked_candidates(task: Task, target: Any, cost_model: Any, config: PredictionConfig
                       ) -> tuple[list[tuple[float, Any]], int]:
    """(score, schedule) of the candidates of up to ``max_rounds`` rounds, best first; and the rounds run."""
    scored: list[tuple[float, Any]] = []
    seen: set[str] = set()
    started = time.monotonic()
    rounds = 0
    spaces = _context(task, target, config, config.seed).space_generator.generate_design_space(task.mod)
    if nothing_to_sample(spaces):  # each design space is one program: one small round draws them all
        config = replace(config, population=DRAWS_PER_SPACE * len(spaces), genetic_iters=0, keep=len(spaces),
                         max_rounds=1)
    while rounds < config.max_rounds:
        round_started = time.monotonic()
        context = _context(task, target, config, config.seed + rounds)
        spaces = context.space_generator.generate_design_space(context.mod)
        strategy = context.search_strategy
        # An empty in-memory database: the search sees no measured program, and nothing it does is stored.
        strategy.pre_tuning(max_trials=config.keep, num_trials_per_iter=config.keep, design_spaces=spaces,
                            database=ms.database.MemoryDatabase(), cost_model=cost_model)
        try:
            candidates = list(strategy.generate_measure_candidates() or [])
        finally:
            strategy.post_tuning()
        rounds += 1
        if candidates:
            # Scored again here because the strategy does not return its scores; the model's per-task calibration
            # is fixed on its first batch, so scores of different rounds are comparable.
            scores = cost_model.predict(context, candidates)
            scored.extend((float(s), c.sch) for s, c in zip(scores, candidates))
        found = {str(ms.utils.shash2hex(c.sch.mod)) for c in candidates}
        if len(candidates) < config.keep or found <= seen:
            break
        seen |= found
        spent = time.monotonic() - started
        if spent + (time.monotonic() - round_started) > config.seconds_per_task:
            break
    scored.sort(key=lambda item: -item[0])
    return scored, rounds


def _library_candidates(task: Task, target: Any, cost_model: Any, config: PredictionConfig, library: Any
                        ) -> list[tuple[float, Any]]:
    """(score, schedule) of ``library``'s programs of the task's nearest workloads replayed on it, best first; none
    when no stored workload lies within :data:`FAR_LIBRARY_DISTANCE`."""
    if library.nearest_distance(task.mod) > FAR_LIBRARY_DISTANCE:
        return []
    context = _context(task, target, config, config.seed)
    spaces = list(context.space_generator.generate_design_space(context.mod))
    candidates = replayed_candidates(library.records_for(task.mod), context, design_spaces=spaces)
    if not candidates:
        return []
    scores = cost_model.predict(context, candidates)
    return sorted(((float(s), c.sch) for s, c in zip(scores, candidates)), key=lambda item: -item[0])


def predict_schedule(task: Task, target_json: dict[str, Any], cost_model: Any,
                     config: PredictionConfig | None = None, measurer: Measurer | None = None,
                     library: Any = None) -> tuple[Prediction, Any]:
    """The cost model's zero-measurement schedule of ``task`` and how it was found.

    Returns ``(prediction, record)``; ``record`` is a MetaSchedule ``TuningRecord`` without ``run_secs`` (``None``
    when no candidate compiled). Candidates are compiled (the pick must build) but not run, unless
    ``config.timed_candidates`` > 1 and a ``measurer`` (:class:`tlp.dataset.measure.Measurer`) is given: then the
    best-ranked few are timed once and the fastest is the pick (still stored without a run time: one timing each).
    ``library``: this platform's schedule library, whose replayed programs are the candidates where it holds a near
    workload (else, or where none replays, the search's).
    """
    config = config or PredictionConfig()
    target = tvm.target.Target(target_json)
    started = time.monotonic()
    prediction = Prediction(task=task.name, workload_hash=str(ms.utils.shash2hex(task.mod)), scheduled=False,
                            seconds=0.0)
    record = None
    if library is not None:
        try:
            ranked = _library_candidates(task, target, cost_model, config, library)
        except Exception:  # pylint: disable=broad-except  # programs that do not replay here: the search's instead
            ranked = []
        if ranked:
            prediction.library = True
            record = _first_that_builds(task, target, ranked, config, measurer, prediction)
    if record is None:  # no near workload, none replayed, or no replayed program built: the search's candidates
        prediction.library = False
        try:
            ranked, prediction.rounds = _ranked_candidates(task, target, cost_model, config)
        except Exception as error:  # pylint: disable=broad-except  # a task MetaSchedule cannot search: the default
            prediction.error = f"search failed: {one_line(error)}"
        else:
            record = _first_that_builds(task, target, ranked, config, measurer, prediction)
    prediction.seconds = round(time.monotonic() - started, 2)
    return prediction, record


def _first_that_builds(task: Task, target: Any, ranked: list[tuple[float, Any]], config: PredictionConfig,
                       measurer: Measurer | None, prediction: Prediction) -> Any:
    """The record (no run time) of the best-ranked of ``ranked`` (score, schedule) that compiles, after timing the
    best few where ``config.timed_candidates`` asks; None when none of the first ``build_tries`` compiles."""
    prediction.candidates_ranked = len(ranked)
    if not ranked:
        prediction.error = "the search produced no candidate"
        return None
    if measurer is not None and (config.timed_candidates or 0) > 1 and len(ranked) > 1:
        ranked = _fastest_first(ranked[:config.timed_candidates], measurer, prediction) + \
            ranked[config.timed_candidates:]
    for rank, (score, schedule) in enumerate(ranked[:config.build_tries]):
        try:
            tvm.compile(schedule.mod, target=target)
        except Exception as error:  # pylint: disable=broad-except  # the next-ranked candidate is tried
            prediction.error = f"rank {rank} did not build: {one_line(error)}"
            continue
        prediction.scheduled, prediction.score, prediction.rank_tried, prediction.error = True, score, rank, ""
        return ms.database.TuningRecord(schedule.trace, ms.database.Workload(task.mod), run_secs=None, target=target,
                                        args_info=ms.arg_info.ArgInfo.from_prim_func(_prim_func(task.mod)))
    return None


def _fastest_first(ranked: list[tuple[float, Any]], measurer: Measurer, prediction: Prediction
                   ) -> list[tuple[float, Any]]:
    """``ranked`` (score, schedule) re-ordered by one timing each, fastest first; those that failed last, in the
    model's order. The timings go to ``prediction.timed_s``."""
    # the scheduled function's own arguments: a layout rewrite pre-packs a weight into another shape
    results, _ = measurer.measure([schedule.mod for _, schedule in ranked],
                                  [ms.arg_info.ArgInfo.from_entry_func(schedule.mod, remove_preproc=True)
                                   for _, schedule in ranked])
    latencies = [mean_latency(r.run_secs, r.error) for r in results]
    prediction.timed_s = latencies
    order = sorted(range(len(ranked)), key=lambda i: (latencies[i] is None, latencies[i] or 0.0, i))
    return [ranked[i] for i in order]


def _prim_func(mod: Any) -> Any:
    functions = [f for _, f in mod.functions.items()]
    return functions[0]


# ---- the database ------------------------------------------------------------------------------------------
@derived_object
class PredictedDatabase(ms.database.PyDatabase):
    """Read-only MetaSchedule database of predicted (never measured) schedules, loaded from ``WORK/predicted``.

    Records have no ``run_secs``, so MetaSchedule's own databases would never return them; this one returns a
    task's record whenever it has one. Put it *after* the measured database (:func:`measured_then_predicted`).
    """

    def __init__(self, folder: str | Path) -> None:
        super().__init__()
        self.folder = Path(folder)
        self._by_hash: dict[int, list[Any]] = {}
        if (self.folder / "database_workload.json").exists():
            try:
                stored = ms.database.JSONDatabase(work_dir=str(self.folder), module_equality="structural")
                records = list(stored.get_all_tuning_records())
            except Exception as error:  # pylint: disable=broad-except  # corrupt files: one line naming them
                raise PredictedDatabaseError(f"{self.folder}: not a readable predicted-schedule database "
                                             f"({one_line(error)}); delete the folder to predict again") from None
            for record in records:
                if record.run_secs is not None:
                    raise PredictedDatabaseError(f"{self.folder}: holds a record with run times; predicted "
                                                 "schedules carry none, so this is not a predicted database")
                self._by_hash.setdefault(structural_hash(record.workload.mod), []).append(record)

    def _find(self, mod: Any) -> Any:
        for record in self._by_hash.get(structural_hash(mod), []):
            if tvm_ffi.structural_equal(record.workload.mod, mod):
                return record
        return None

    def has_workload(self, mod: Any) -> bool:
        return self._find(mod) is not None

    def commit_workload(self, mod: Any) -> Any:
        record = self._find(mod)
        return record.workload if record is not None else ms.database.Workload(mod)

    def commit_tuning_record(self, record: Any) -> None:
        raise PredictedDatabaseError(f"{self.folder}: the predicted-schedule database is read-only; measured "
                                     "records belong in the tuning database")

    def get_top_k(self, workload: Any, top_k: int) -> list[Any]:
        record = self._find(workload.mod)
        return [record] if record is not None and top_k > 0 else []

    def get_all_tuning_records(self) -> list[Any]:
        return [record for records in self._by_hash.values() for record in records]

    def query_tuning_record(self, mod: Any, target: Any, workload_name: str | None = None) -> Any:
        return self._find(mod)

    def query_schedule(self, mod: Any, target: Any, workload_name: str | None = None) -> Any:
        record = self._find(mod)
        if record is None:
            return None
        schedule = tvm.s_tir.Schedule(mod, debug_mask=0)
        record.trace.apply_to_schedule(schedule, remove_postproc=False)
        return schedule

    def query_ir_module(self, mod: Any, target: Any, workload_name: str | None = None) -> Any:
        schedule = self.query_schedule(mod, target, workload_name)
        return schedule.mod if schedule is not None else None

    def __len__(self) -> int:
        return sum(len(records) for records in self._by_hash.values())


def measured_then_predicted(measured: Any, predicted: PredictedDatabase | None) -> SharedScheduleDatabase:
    """One database for compiling: a task's measured record when it has a valid one, else its predicted one (and
    a task's variants get the task's, :mod:`tlp.search.database.shared_schedules`)."""
    return SharedScheduleDatabase(measured, predicted if predicted is not None and len(predicted) else None)


# ---- a whole tuning run ------------------------------------------------------------------------------------
def predict_missing(tasks: list[Task], measured_best: list[float | None], target_json: dict[str, Any],
                    work_dir: str | Path, cost_model: Any, config: PredictionConfig | None = None,
                    measure: MeasureConfig | None = None, library: Any = None
                    ) -> tuple[PredictedDatabase, list[Prediction]]:
    """Predicted schedules for the tasks without a valid measured latency, stored in ``work_dir/predicted``.

    A task predicted by an earlier run (same folder) is reused, not searched again. ``measure``: how the timings
    ``config.timed_candidates`` asks for are made; ``library``: this platform's schedule library (see
    :func:`predict_schedule`). Returns the
    database of all predicted records and one :class:`Prediction` per task that needed one.
    """
    folder = Path(work_dir) / PREDICTED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    existing = PredictedDatabase(folder)
    predictions: list[Prediction] = []
    try:
        _predict_each(tasks, measured_best, target_json, folder, cost_model, config, manifest, existing, predictions,
                      measure, library)
    finally:  # also after a stop between tasks: the picks stored so far keep their manifest entries
        manifest["what"] = NOT_MEASURED
        manifest_path.write_text(json.dumps(manifest, indent=1))
    return PredictedDatabase(folder), predictions


def _predict_each(tasks: list[Task], measured_best: list[float | None], target_json: dict[str, Any], folder: Path,
                  cost_model: Any, config: PredictionConfig | None, manifest: dict[str, Any],
                  existing: PredictedDatabase, predictions: list[Prediction],
                  measure: MeasureConfig | None = None, library: Any = None) -> None:
    store = measurer = None
    try:
        for task, best in zip(tasks, measured_best):
            if best is None and not existing.has_workload(task.mod) and measurer is None and config is not None \
                    and (config.timed_candidates or 0) > 1:
                measurer = Measurer(target_json, measure)  # one builder and runner for every task's timings
            store = _predict_one(task, best, target_json, folder, cost_model, config, manifest, existing,
                                 predictions, store, measurer, library)
    finally:
        if measurer is not None:
            measurer.close()


def _predict_one(task: Task, best: float | None, target_json: dict[str, Any], folder: Path, cost_model: Any,
                 config: PredictionConfig | None, manifest: dict[str, Any], existing: PredictedDatabase,
                 predictions: list[Prediction], store: Any, measurer: Measurer | None, library: Any = None) -> Any:
    """One task's prediction (none when it has a measured latency, the stored one when an earlier run made it);
    returns the predicted database it was stored in (made on the first pick)."""
    interrupt.check()  # a Ctrl-C or SIGTERM requested during a task's search is taken here, between tasks
    if best is not None:
        return store
    if existing.has_workload(task.mod):
        earlier = manifest.get("tasks", {}).get(str(ms.utils.shash2hex(task.mod)), {})
        predictions.append(Prediction(**{**earlier, "task": task.name, "seconds": 0.0, "reused": True,
                                         "workload_hash": str(ms.utils.shash2hex(task.mod)), "scheduled": True}))
        return store
    prediction, record = predict_schedule(task, target_json, cost_model, config, measurer, library)
    predictions.append(prediction)
    if record is not None:
        store = store or ms.database.JSONDatabase(work_dir=str(folder), module_equality="structural")
        # Re-made on the workload the JSON files index (the record's own is an equal, separate object).
        store.commit_tuning_record(ms.database.TuningRecord(record.trace, store.commit_workload(task.mod),
                                                            None, record.target, record.args_info))
    manifest.setdefault("tasks", {})[prediction.workload_hash] = asdict(prediction)
    return store
