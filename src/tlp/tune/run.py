"""``tlp tune``: MetaSchedule's search guided by a chosen cost model, with resumable databases and a report.

The search itself is MetaSchedule's (``tune_tasks``: gradient task scheduler, evolutionary search); TLP changes
the cost model, when a measured batch is recorded (at once, :mod:`tlp.search.task_scheduler.scheduler`) and the measurement
set-up (our builder, which does not import every backend's intrinsics in each worker, and index-safe argument
filling; see :mod:`tlp._tvm`). The work directory holds MetaSchedule's own
``JSONDatabase`` files, so the result is reusable by any MetaSchedule tool, and ``history.jsonl``, one line per
measured batch, from which the best-latency-vs-trials curve is drawn. Re-running the same command continues: trials
already in the database count against the budget.

After the search, every task without a valid measured program (tasks ``--top-tasks`` set aside, tasks a small
budget never reached) gets the TLP model's zero-measurement schedule (:mod:`tlp.search.database.predicted`, stored apart in
``WORK/predicted``), and the network is compiled with measured records first, predicted ones for the rest.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm
import tvm_ffi

from tlp import TLPError, interrupt
from tlp.interrupt import TuneInterrupted
from tlp._tvm import ms, register_tensor_intrinsics, tvm, unnamed_log_handlers_set_aside
from tvm.ir.utils import derived_object
from tlp.dataset.measure import MeasureConfig, Measurer
from tlp.dataset.store import Dataset, mean_latency
from tlp.dataset.tuning import OriginLog, add_tuning_run
from tlp.platform import Platform, check_runs_here, parse_target
from tlp.tune.compile_check import check_compiles
from tlp.search.search_strategy.diverse import StructureDiverseSearch
from tlp.search.search_strategy.first_round import FirstRoundSearch
from tlp.search.task_scheduler.scheduler import HeadroomScheduler, RecordingGradientScheduler, batch_histories, records_by_task
from tlp.search.database.predicted import (NOT_MEASURED, PREDICTED_DIR, PredictedDatabase, PredictionConfig,
                                  measured_then_predicted, predict_missing)
from tlp.search.database.json_database import open_json_database
from tlp.search.presets import COST_MODELS, FROM_PRESET
from tlp.search.presets import resolve as resolve_settings
from tlp.tune.sources import Tunable
from tlp.tune.stages import Stages
from tlp.tune.sources import resolve as resolve_source
from tlp.workloads import held_out_networks
from tlp.workloads.task import Task

log = logging.getLogger("tlp.tune")


# Raised inside a measure callback (C++ calling Python): registered, the FFI hands it back as itself, not as a
# RuntimeError the search would have to tell apart from real failures.
tvm_ffi.error.register_error("TuneInterrupted", TuneInterrupted)


@dataclass
class TuneConfig:
    """A tuning run's settings. Those left at ``FROM_PRESET`` come from the preset (:mod:`tlp.search.presets`),
    which :func:`tune` resolves the way ``tlp tune`` does; ``tlp tune --set KEY=VALUE`` sets any field by name."""

    trials: int = 200  # measured candidates in all, over all tasks (MetaSchedule's max_trials_global)
    cost_model: str = "tlp"  # tlp, xgb, mlp or random
    model_path: str | None = None  # TLP checkpoint (default: the shipped model)
    preset: str | None = None  # tlp or metaschedule (None: tlp with the TLP cost model, metaschedule otherwise)
    top_tasks: int | None = None  # search only the N heaviest tasks; the rest get zero-measurement schedules
    seed: int = 1
    dataset: str | None = None  # append every measured candidate to this dataset (tlp.dataset.tuning)
    trials_per_task: int | None = None
    trials_per_iter: int = FROM_PRESET  # candidates measured per batch
    first_round_trials: int | None = FROM_PRESET  # candidates per task in its first batch (None: a full batch)
    # Of those, how many are schedule-library programs (transfer_from's stored programs of the nearest workloads).
    first_round_transferred: int = FROM_PRESET
    transfer_from: str | None = FROM_PRESET  # the schedule library's dataset (the tlp preset: the shipped one)
    transfer_exclude_networks: tuple[str, ...] = ()  # networks left out of the library (held-out benchmarks)
    task_scheduler: str = FROM_PRESET  # gradient (MetaSchedule's) or headroom (tlp.search.task_scheduler)
    max_per_structure: int = FROM_PRESET  # per batch, at most this many of one structure (0: no cap)
    population: int = FROM_PRESET  # evolutionary search population
    online_steps: int = FROM_PRESET  # TLP fine-tuning steps per measured batch (0 = off)
    online_lr: float = FROM_PRESET
    online_min_task_measurements: int = FROM_PRESET  # learn only from tasks measured at least this often
    compile: bool = True  # compile the result (and time networks end to end) for the report
    fast_math: bool = True  # fast erf/exp/tanh/softmax in networks, kept only when the outputs still match
    # Tasks left without a valid measured program get the TLP model's zero-measurement schedule (False: TVM's
    # default schedule).
    predicted_schedules: bool = True
    # Time the network under torch.compile (Inductor) beside PyTorch eager in the report (skipped, with a note,
    # where it cannot compile).
    torch_compile: bool = True
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    prediction: PredictionConfig = field(default_factory=PredictionConfig)


@dataclass
class TaskResult:
    name: str
    weight: int
    flops: float
    trials: int
    best_latency_s: float | None
    tuned: bool = True  # False: set aside by --top-tasks (never searched)
    schedule: str = "measured"  # what the compiled program uses: measured, predicted (not measured) or default
    variants: tuple[str, ...] = ()  # functions compiled with this task's schedule (tlp.search.database.shared_schedules)

    @property
    def gflops(self) -> float | None:
        return self.flops / self.best_latency_s / 1e9 if self.best_latency_s else None


# ---- cost models -------------------------------------------------------------------------------------------
def _tlp_cost_model(config: TuneConfig, target: dict[str, Any]) -> Any:
    from tlp.search.cost_model import OnlineTuning, TLPCostModel  # pylint: disable=import-outside-toplevel

    online = OnlineTuning(steps=config.online_steps, lr=config.online_lr,
                          min_task_measurements=config.online_min_task_measurements)
    return TLPCostModel(config.model_path, online, target=target)


def make_cost_model(config: TuneConfig, target: dict[str, Any]) -> Any:
    """The cost model named in ``config``; MetaSchedule's own ones are made as ``tune_tir`` makes them."""
    if config.cost_model == "tlp":
        return _tlp_cost_model(config, target)
    if config.cost_model == "xgb":
        return ms.cost_model.XGBModel(num_tuning_cores=int(target.get("num-cores", 1)), tree_method="auto")
    if config.cost_model == "mlp":
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import MLPModel  # pylint: disable=import-outside-toplevel

        return MLPModel()
    if config.cost_model == "random":
        return ms.cost_model.RandomModel(seed=config.seed)
    raise TLPError(f"unknown cost model {config.cost_model!r}; choose one of {', '.join(COST_MODELS)}")


# ---- progress, curve and Ctrl-C ----------------------------------------------------------------------------
@derived_object
class ProgressCallback(ms.measure_callback.PyMeasureCallback):
    """After each measured batch: progress bar, one ``history.jsonl`` line, and a clean stop after Ctrl-C."""

    def __init__(self, names: list[str], history_path: Path, total: int, done: int, best: list[float | None]
                 ) -> None:
        super().__init__()
        self.names = names
        self.history_path = history_path
        self.best = best
        self.trials = done
        self.started = time.monotonic()
        # Marks this run's lines: a resumed run restarts its clock at 0, and its first line can still read more
        # seconds than the last run's final line (model loading), so the clock alone cannot tell where runs meet.
        self.run_id = f"{time.time():.6f}"
        self.bar = tqdm(total=total, initial=done, unit="trial", desc="tune", dynamic_ncols=True)

    def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any, builder_results: Any,
              runner_results: Any) -> None:
        for result in runner_results:
            latency = mean_latency(result.run_secs, result.error_msg)
            if latency is not None and (self.best[task_id] is None or latency < self.best[task_id]):
                self.best[task_id] = latency
        self.trials += len(runner_results)
        line = {"trials": self.trials, "wall_s": round(time.monotonic() - self.started, 3), "task": task_id,
                "best_s": list(self.best), "run": self.run_id}
        with open(self.history_path, "a", encoding="utf-8") as history:
            history.write(json.dumps(line) + "\n")
        self.bar.update(len(runner_results))
        best = self.best[task_id]
        self.bar.set_postfix_str(f"{self.names[task_id][:28]} best {best * 1e3:.4f} ms" if best else
                                 self.names[task_id][:28])
        if interrupt.requested():
            # Raising here (after AddToDatabase, which runs first) ends the search with the batch stored.
            raise TuneInterrupted("interrupted")


# ---- tuning ------------------------------------------------------------------------------------------------
def _contexts(tunable: Tunable, target: Any, work_dir: Path, config: TuneConfig, library: Any = None) -> list[Any]:
    cores = int(target.attrs.get("num-cores", 1)) if hasattr(target, "attrs") else 1
    register_tensor_intrinsics(target)
    with unnamed_log_handlers_set_aside():
        loggers = ms.logging.get_loggers_from_work_dir(str(work_dir), [t.name for t in tunable.tasks])
    return [ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                           search_strategy=_search_strategy(config, library),
                           task_name=task.name, logger=logger, rand_state=config.seed + i, num_threads=cores)
            for i, (task, logger) in enumerate(zip(tunable.tasks, loggers))]


def _schedule_library(config: TuneConfig, target_json: dict[str, Any]) -> Any:
    """The dataset's schedule library for ``transfer_from`` (None without one)."""
    if not config.transfer_from:
        return None
    from tlp.search.search_strategy.library import LibraryError, ScheduleLibrary  # pylint: disable=C0415

    platform = Platform.host(target_json)
    # "held-out" stands for the standard test networks (a benchmark on them leaves their own programs out)
    exclude = tuple(name for given in config.transfer_exclude_networks
                    for name in (held_out_networks() if given == "held-out" else [given]))
    dataset = Dataset(config.transfer_from)
    # A platform the dataset does not hold draws on the nearest one it does (the fastest programs of another CPU).
    nearest = dataset.nearest_platform_id(platform)
    if nearest is None:
        raise LibraryError(f"{dataset.path}: no platform of target kind {platform.target.get('kind')!r} to draw a "
                           "schedule library from (transfer_from=none runs without one)")
    return ScheduleLibrary.from_dataset(dataset, nearest[0], exclude_networks=exclude)


def _search_strategy(config: TuneConfig, library: Any = None) -> Any:
    if config.max_per_structure:
        evolution = StructureDiverseSearch(config.population, config.max_per_structure)
    else:
        evolution = ms.search_strategy.EvolutionarySearch(population_size=config.population)
    first = config.first_round_trials
    if first is not None and first < config.trials_per_iter:
        return FirstRoundSearch(config.population, first, config.first_round_transferred, evolution, library)
    return evolution


def _task_scheduler(config: TuneConfig, tunable: Tunable, done_per_task: list[int], best_s: list[float | None],
                    work_dir: Path) -> Any:
    settings = dict(seed=config.seed, trials_per_task=config.trials_per_task, measured_before=done_per_task,
                    best_ms_before=[b * 1e3 if b is not None else None for b in best_s],
                    history_ms_before=batch_histories(work_dir / "history.jsonl", len(tunable.tasks)))
    if config.task_scheduler == "gradient":
        return RecordingGradientScheduler(**settings)
    return HeadroomScheduler(flops=[task.flops for task in tunable.tasks], **settings)


def _measured_per_task(database: Any, tasks: list[Task]) -> tuple[list[int], list[float | None]]:
    """Trials already stored per task and the best latency among them (a re-run continues from these)."""
    counts: list[int] = []
    best: list[float | None] = []
    for records in records_by_task(database, [task.mod for task in tasks]):
        counts.append(len(records))
        valid = [latency for latency in (mean_latency(r.run_secs) for r in records) if latency is not None]
        best.append(min(valid) if valid else None)
    return counts, best


def tune(source: Tunable | str, target_json: dict[str, Any], work_dir: str | Path | None = None,
         config: TuneConfig | None = None) -> dict[str, Any]:
    """Tune ``source`` (a :class:`Tunable`, or what ``tlp tune`` takes: a zoo name, FILE.py, FILE.onnx) into
    ``work_dir`` (default ``runs/tune/SOURCE-COSTMODEL``) and return the report (also written as ``report.json``).
    Settings resolve as ``tlp tune``'s do: the preset, then ``config``'s own (:func:`tlp.search.presets.resolve`)."""
    started = time.monotonic()
    stages = Stages()
    # TVM's exported form (keys, tag, defaults): the platform id of a raw dict and of `tlp tune`'s target must agree
    target_json = parse_target(target_json)
    config = resolve_settings(config or TuneConfig(), target_json)  # before anything is imported, built or measured
    check_runs_here(target_json)  # a CUDA target without a GPU or nvcc, an ISA this CPU lacks: one line, now
    # Outside the search too, TVM's C++ calls Python (graph rewrites, passes, the cost model in the zero-measurement
    # search): a stop is only requested there, and taken between stages (tlp.interrupt).
    with interrupt.deferred(), stages.timed("import"):
        tunable = source if isinstance(source, Tunable) else resolve_source(source, target_json,
                                                                            fast_math=config.fast_math)
    stages.update(tunable.stage_s)
    if config.top_tasks:
        tunable = tunable.top_tasks(config.top_tasks)
    work_dir = Path(work_dir or Path("runs") / "tune" / f"{Path(tunable.name).name}-{config.cost_model}")
    if work_dir.exists() and not work_dir.is_dir():
        raise TLPError(f"{work_dir}: not a folder; give another work dir")
    if not tunable.tasks:
        raise TLPError(f"{tunable.name}: no tunable tasks (nothing to schedule)")
    if config.dataset:
        Dataset(config.dataset)  # a file where the dataset folder should be: one line now, not after the search
    target = tvm.target.Target(target_json)
    n_tasks = len(tunable.tasks)
    database, set_aside = None, None
    if work_dir.is_dir():  # a re-run continues: trials already in the database count against the budget
        _check_database_target(work_dir, target_json)
        database, set_aside = open_json_database(work_dir)
        done_per_task, best = _measured_per_task(database, tunable.tasks)
    else:
        done_per_task, best = [0] * n_tasks, [None] * n_tasks
    done = sum(done_per_task)
    remaining = max(0, config.trials - done)
    names = [t.name for t in tunable.tasks]
    interrupted = False
    cost_model = library = measurer = None  # a re-run with the budget already spent builds none of them
    if remaining > 0:
        # Its build and run workers start now (each imports TVM: seconds), while the model and library load.
        measurer = Measurer(target_json, config.measure)
    try:
        if remaining > 0:
            # A bad checkpoint, a program that does not compile, a bad library dataset: one line now, before the
            # work directory is made or anything is measured.
            with interrupt.deferred():
                with stages.timed("cost_model"):
                    cost_model = make_cost_model(config, target_json)
                if config.compile:
                    with stages.timed("compile_check"):
                        check_compiles(tunable, target_json)  # seconds now, not a failure after the whole budget
                library_started = time.monotonic()
                with stages.timed("schedule_library"):
                    library = _schedule_library(config, target_json)
                library_s = time.monotonic() - library_started
        work_dir.mkdir(parents=True, exist_ok=True)
        _check_database_target(work_dir, target_json, stamp=True)
        if database is None:
            database, set_aside = open_json_database(work_dir)
    except BaseException:
        if measurer is not None:
            measurer.close()
        raise
    if set_aside.lines:
        log.warning("%s: %s", work_dir, set_aside.message())
    if remaining > 0:
        weights = [float(t.weight) for t in tunable.tasks]
        # MetaSchedule's per-task budget is per run and the same for all tasks: the most any task has left (the
        # scheduler ends each task at its own total).
        per_task = None if config.trials_per_task is None else max(
            1, config.trials_per_task - min(done_per_task))
        progress = None
        search_started = time.perf_counter()
        try:
            # Ctrl-C and SIGTERM only request a stop, taken where raising through MetaSchedule's C++ is safe (our
            # builder, runner and progress callback; tlp.interrupt): the first Ctrl-C stores the batch in flight.
            with interrupt.deferred(finish_batch=True):
                progress = ProgressCallback(names, work_dir / "history.jsonl", config.trials, done, best)
                # OriginLog after AddToDatabase: which programs each batch measured, in which round, guided by
                # which model.
                origin_log = OriginLog(work_dir, tunable.tasks, config.cost_model)
                callbacks = list(ms.measure_callback.MeasureCallback.create("default")) + [origin_log, progress]
                ms.tune.tune_tasks(tasks=_contexts(tunable, target, work_dir, config, library),
                                   task_weights=weights,
                                   work_dir=str(work_dir), max_trials_global=remaining, max_trials_per_task=per_task,
                                   num_trials_per_iter=config.trials_per_iter, builder=measurer.builder,
                                   runner=measurer.runner, database=database, cost_model=cost_model,
                                   measure_callbacks=callbacks,
                                   task_scheduler=_task_scheduler(config, tunable, done_per_task, best, work_dir))
        except (TuneInterrupted, KeyboardInterrupt):
            interrupted = True
        finally:
            if measurer is not None and progress is not None:
                stages.add("search", time.perf_counter() - search_started)
                _search_parts(stages, measurer.seconds, getattr(cost_model, "seconds", None))
            if progress is not None:
                progress.bar.close()
            if measurer is not None:
                measurer.close()
    added = None
    if config.dataset:  # also after an interruption, and before compiling (minutes): what was measured is kept
        platform = Platform.host(target_json)
        try:
            with interrupt.deferred(), stages.timed("dataset"):  # a stop while writing lets it finish and seal
                added = add_tuning_run(Dataset(config.dataset), work_dir, platform, tunable.tasks,
                                       Path(tunable.name).name)
        except KeyboardInterrupt:
            interrupted = True
    predicted, predictions = None, []
    # One pass over the database (hashing every record's workload) serves the predictions and the report.
    measured = _measured_per_task(database, tunable.all_tasks)
    # Predicted schedules only serve the compiled result: a run that does not compile (benchmarks) skips them.
    predict = config.predicted_schedules and config.compile and not interrupted
    if predict:
        try:
            with interrupt.deferred(), stages.timed("zero_measurement"):
                predicted, predictions = _predict_missing(tunable, target_json, work_dir, measured[1], config, library)
        except KeyboardInterrupt:
            interrupted = True
    try:
        with interrupt.deferred():  # compiling, checking and timing the network: a stop is taken when it is done
            report = build_report(tunable, target_json, work_dir, database, config, 0.0, predicted,
                                  measured, compile_result=not interrupted)
    except KeyboardInterrupt:
        raise TuneInterrupted(f"interrupted; {work_dir} keeps every measured trial (re-run to continue)") from None
    stages.update(report.pop("stage_s", {}))
    report["wall_s"] = round(time.monotonic() - started, 1)
    report["stages_s"] = stages.summary(report["wall_s"])
    if predict:
        report["predicted"] = _predicted_summary(predictions, work_dir)
    report["interrupted"] = interrupted
    if set_aside.lines:
        report["database_lines_set_aside"] = {"lines": set_aside.lines, "moved_to": set_aside.path,
                                              "examples": set_aside.examples}
    if hasattr(cost_model, "head_platform"):
        # Which platform's head ranked the candidates (MTL-TLP), and whether it is this platform's own.
        report["cost_model_head"] = {"platform": cost_model.head_platform, "tuning_platform": cost_model.platform.id,
                                     "exact": cost_model.head_platform in (None, cost_model.platform.id)}
    if remaining > 0 and hasattr(cost_model, "seconds"):
        # How much of this run's wall time the TLP model took (reading traces, featurizing, its network).
        report["cost_model_time_s"] = {k: round(v, 2) for k, v in cost_model.seconds.items()}
        report["candidates_scored"] = cost_model.candidates_scored
    if remaining > 0 and library is not None:
        # reading the dataset's library happens before any batch, outside the history's clock
        report["transfer_library"] = {"dataset": config.transfer_from, "platform": library.platform_id,
                                      "exact": library.platform_id == Platform.host(target_json).id,
                                      "workloads": len(library),
                                      "seconds": round(library_s, 1), "skipped": library.skipped}
    if added is not None:
        report["dataset"] = {"path": config.dataset, **asdict(added)}
    (work_dir / "report.json").write_text(json.dumps(report, indent=1))
    if interrupted:
        raise TuneInterrupted(f"interrupted; {work_dir} keeps every measured trial (re-run to continue)")
    return report


def _search_parts(stages: Stages, measured_s: dict[str, float], cost_model_s: dict[str, float] | None) -> None:
    """Split the search's seconds: the cost model (TLP's own clock), building, running, and the rest (MetaSchedule's
    search strategy and task scheduler, and a cost model that keeps no clock)."""
    model = sum(cost_model_s.values()) if cost_model_s else 0.0
    if model:
        stages.add("search_cost_model", model)
    stages.add("search_build", measured_s["build"])
    stages.add("search_run", measured_s["run"])
    stages.add("search_strategy", max(0.0, stages.seconds["search"] - model - measured_s["build"] - measured_s["run"]))


def _predict_missing(tunable: Tunable, target_json: dict[str, Any], work_dir: Path, best: list[float | None],
                     config: TuneConfig, library: Any = None) -> tuple[PredictedDatabase, list[Any]]:
    """Zero-measurement schedules for every task of the program without a valid measured record; ``library`` (the
    search's schedule library) supplies candidates only when it is this platform's own (programs measured here).

    Always ranked by the TLP model (also when the search used another cost model): a fresh one, so the search's
    cost-model timings in the report stay the search's own.
    """
    from tlp.search.cost_model import TLPCostModel  # pylint: disable=import-outside-toplevel

    tasks = tunable.all_tasks  # ``best``: the best measured latency of each (None: no valid record)
    if all(latency is not None for latency in best):
        return PredictedDatabase(work_dir / PREDICTED_DIR), []
    model_path = config.model_path if config.cost_model == "tlp" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a platform-mismatch warning was already shown for the search
        cost_model = TLPCostModel(model_path, target=target_json)
    prediction = config.prediction
    if prediction.timed_candidates is None:  # a head of another platform: time its few best picks
        exact = cost_model.head_platform in (None, cost_model.platform.id)
        prediction = replace(prediction, timed_candidates=0 if exact else 4)
    own_library = library if library is not None and library.platform_id == Platform.host(target_json).id else None
    return predict_missing(tasks, best, target_json, work_dir, cost_model, prediction, config.measure, own_library)


def _predicted_summary(predictions: list[Any], work_dir: Path) -> dict[str, Any]:
    return {"what": NOT_MEASURED, "database": str(work_dir / PREDICTED_DIR),
            "seconds": round(sum(p.seconds for p in predictions), 1),
            "tasks": [asdict(p) for p in predictions]}


def _check_database_target(work_dir: Path, target_json: dict[str, Any], stamp: bool = False) -> None:
    """A database tuned for another target must not be continued or compiled for this one; ``stamp``: write the
    target of a new one."""
    path = work_dir / "target.json"
    if path.exists():
        try:
            stored = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise TLPError(f"{path}: unreadable (it says which target the tuning database is for); restore it, or "
                           "give another --work-dir") from None
        if stored != target_json:
            raise TLPError(f"{work_dir}: this tuning database is for target {json.dumps(stored)}, not "
                           f"{json.dumps(target_json)}; use another --work-dir")
    elif stamp:
        path.write_text(json.dumps(target_json))


# ---- report ------------------------------------------------------------------------------------------------
def build_report(tunable: Tunable, target_json: dict[str, Any], work_dir: Path, database: Any, config: TuneConfig,
                 wall_s: float, predicted: PredictedDatabase | None = None,
                 measured: tuple[list[int], list[float | None]] | None = None,
                 compile_result: bool = True) -> dict[str, Any]:
    """The report of a tuning run; the program is compiled with ``database``'s measured records first, then
    ``predicted``'s (tasks with neither keep TVM's default schedule). ``measured``: ``_measured_per_task`` of
    ``database`` for ``tunable.all_tasks`` when the caller already has it. ``compile_result=False`` (an
    interrupted run, which the re-run completes) skips compiling: minutes on a large network, for a result
    nobody asked for yet."""
    from tlp.tune.report import (  # pylint: disable=import-outside-toplevel
        compile_and_time, history_entries, plot_curve)

    all_counts, all_best = measured or _measured_per_task(database, tunable.all_tasks)
    counts, best = all_counts[:len(tunable.tasks)], all_best[:len(tunable.tasks)]
    every = [TaskResult(t.name, int(t.weight), float(t.flops), n, b, tuned=i < len(tunable.tasks),
                        schedule=_schedule_kind(t, b, predicted), variants=tuple(name for name, _ in t.variants))
             for i, (t, n, b) in enumerate(zip(tunable.all_tasks, all_counts, all_best))]
    tasks = every[:len(tunable.tasks)]  # tuned first: their indices stay the search's task ids (history.jsonl)
    report: dict[str, Any] = {
        "source": tunable.name, "target": target_json, "work_dir": str(work_dir),
        "preset": config.preset, "config": {k: v for k, v in asdict(config).items() if k != "measure"},
        "trials": sum(all_counts), "wall_s": round(wall_s, 1),
        "tasks": [{**asdict(t), "gflops": t.gflops} for t in every],
    }
    entries = history_entries(work_dir / "history.jsonl")
    if entries:  # a resumed run's own wall time can be a fraction of a second; the search's is in its history
        report["search_wall_s"] = round(entries[-1][1], 1)
    if tunable.notes:
        report["import_notes"] = list(tunable.notes)  # e.g. a KV cache dropped for export, bool ops rewritten
    if all(t.best_latency_s for t in tasks):
        report["tasks_latency_s"] = sum(t.weight * t.best_latency_s for t in tasks)
    if tunable.is_network:
        from tlp.search.task_scheduler.task_profile import dominant_tasks  # pylint: disable=import-outside-toplevel

        report["dominant_tasks"] = dominant_tasks(tunable.tasks, best, target_json)
    if config.compile and compile_result:
        report.update(compile_and_time(tunable, target_json, work_dir, measured_then_predicted(database, predicted),
                                       torch_compile=config.torch_compile))
    curve = plot_curve(work_dir / "history.jsonl", [t.weight for t in tasks], work_dir / "curve.png", tunable.name)
    if curve:
        report["curve_png"] = str(curve)
    return report


def _schedule_kind(task: Task, best: float | None, predicted: PredictedDatabase | None) -> str:
    if best is not None:
        return "measured"
    if predicted is not None and predicted.has_workload(task.mod):
        return "predicted"
    return "default"
