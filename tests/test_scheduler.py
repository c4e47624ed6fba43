"""The task scheduler of `tlp tune` records each measured batch at once (MetaSchedule's waits for the first round)."""

import pytest

from tvm.ir.utils import derived_object

from tlp._tvm import ms
from tlp.dataset.measure import Measurer
from tlp.search.task_scheduler.scheduler import HeadroomScheduler, RecordingGradientScheduler
from tlp.search.task_scheduler.task_profile import design_space_decisions
from tlp.workloads import load_tasks

TRIALS_PER_ITER = 4


@derived_object
class _BuildsBeforeEachRecord(ms.measure_callback.PyMeasureCallback):
    """At each recorded batch: how many batches the builder had built by then, and which task it was."""

    def __init__(self, builds: list[int]) -> None:
        super().__init__()
        self.builds = builds
        self.seen: list[tuple[int, int]] = []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.seen.append((task_id, self.builds[0]))


@derived_object
class _CountingBuilder(ms.builder.PyBuilder):
    """Our builder, counting the batches it builds."""

    def __init__(self, inner, builds: list[int]) -> None:
        super().__init__()
        self.inner = inner
        self.builds = builds

    def build(self, build_inputs):
        self.builds[0] += 1
        return self.inner.build(build_inputs)


@derived_object
class _RecordingUpdates(ms.cost_model.PyCostModel):
    """Random scores; remembers how many measured programs of which task each ``update`` brought."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = ms.cost_model.RandomModel(seed=0)
        self.updates: list[tuple[str, int]] = []

    def load(self, path):
        pass

    def save(self, path):
        pass

    def update(self, context, candidates, results):
        self.updates.append((str(context.task_name), len(results)))

    def predict(self, context, candidates):
        return self.inner.predict(context, candidates)


def _tune(tiny_tasks, host_platform, fast_measure, work_dir, scheduler, trials, cost_model=None):
    work_dir.mkdir(exist_ok=True)
    measurer = Measurer(host_platform.target, fast_measure)
    builds = [0]
    watcher = _BuildsBeforeEachRecord(builds)
    contexts = [ms.TuneContext(mod=task.mod, target=host_platform.target, space_generator="post-order-apply",
                               search_strategy=ms.search_strategy.EvolutionarySearch(population_size=32),
                               task_name=task.name, rand_state=i, num_threads=1)
                for i, task in enumerate(tiny_tasks)]
    database = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural")
    callbacks = list(ms.measure_callback.MeasureCallback.create("default")) + [watcher]
    ms.tune.tune_tasks(tasks=contexts, task_weights=[1.0] * len(contexts), work_dir=str(work_dir),
                       max_trials_global=trials, num_trials_per_iter=TRIALS_PER_ITER, builder=_CountingBuilder(measurer.builder, builds),
                       runner=measurer.runner, database=database,
                       cost_model=cost_model or ms.cost_model.RandomModel(),
                       measure_callbacks=callbacks, task_scheduler=scheduler)
    return watcher.seen, database


@pytest.mark.slow  # keeps CI's run within 15 minutes; `pytest -m slow` runs it
def test_each_batch_is_recorded_before_the_next_is_built(tmp_path, tiny_tasks, host_platform, fast_measure):
    trials = 4 * TRIALS_PER_ITER
    seen, database = _tune(tiny_tasks, host_platform, fast_measure, tmp_path / "ours",
                           RecordingGradientScheduler(seed=0), trials)
    # Batch k is in the database (its callbacks ran) when k batches were built: none waits behind another.
    assert [builds for _, builds in seen] == list(range(1, len(seen) + 1))
    assert [task for task, _ in seen][:2] == [0, 1]  # the first round: one batch of each task, in order
    assert len(seen) == trials // TRIALS_PER_ITER and len(database.get_all_tuning_records()) == trials
    assert {task for task, _ in seen} == {0, 1}


@pytest.mark.slow
def test_metaschedule_gradient_scheduler_records_the_first_round_only_at_its_end(tmp_path, tiny_tasks,
                                                                                   host_platform, fast_measure):
    # Why RecordingGradientScheduler exists: with MetaSchedule's own, the first batch is recorded only after
    # every task's first batch was built and run (a Ctrl-C or kill inside that round loses all of them).
    seen, _ = _tune(tiny_tasks, host_platform, fast_measure, tmp_path / "theirs", "gradient", 3 * TRIALS_PER_ITER)
    assert seen[0][1] == len(tiny_tasks)


def test_headroom_sends_the_next_batch_to_the_task_furthest_from_the_best_throughput():
    """Equal weights and latencies: the gradient rule cannot tell the tasks apart; the headroom rule prefers the one
    running at a quarter of the throughput another task reached, over the one at it, and counts a task without
    flops (a reshape) with its whole latency."""
    scheduler = HeadroomScheduler(flops=[4e9, 1e9, 0.0], seed=0)._inst  # pylint: disable=protected-access
    scheduler.best_ms = [[10.0], [10.0], [3.0]]  # task 0 at 400 GFLOPS (the peak), task 1 at 100
    priorities = [scheduler._gradient(i, 1.0) for i in range(3)]  # pylint: disable=protected-access
    assert priorities[0] == pytest.approx(0.0) and priorities[1] == pytest.approx(10.0 - 2.5)
    assert priorities[2] == pytest.approx(3.0)
    # per batch had: the same gap after four batches counts a quarter
    scheduler.best_ms[1] = [12.0, 11.0, 10.5, 10.0]
    assert scheduler._gradient(1, 1.0) == pytest.approx(7.5 / 4)  # pylint: disable=protected-access
    assert scheduler._gradient(1, 2.0) == pytest.approx(2 * 7.5 / 4)  # pylint: disable=protected-access
    scheduler.best_ms[0] = []  # no valid program yet: skipped, as the gradient rule does
    assert scheduler._gradient(0, 1.0) == -1e9  # pylint: disable=protected-access


def test_headroom_peak_ignores_one_program_tasks():
    """A one-program task's throughput does not set the peak: BERT-tiny's GELU (a polynomial erf counted as flops)
    "ran" at twice the matmuls' throughput and made every matmul at its best look half done."""
    scheduler = HeadroomScheduler(flops=[4e9, 1e9, 16e9], seed=0)._inst  # pylint: disable=protected-access
    scheduler.best_ms = [[10.0], [10.0], [20.0]]  # the third: 800 GFLOPS, twice task 0
    assert scheduler._gradient(0, 1.0) == pytest.approx(10.0 - 5.0)  # pylint: disable=protected-access
    scheduler.one_program[2] = True  # measured once, nothing to search: out of the roofline
    assert scheduler._gradient(0, 1.0) == pytest.approx(0.0)  # pylint: disable=protected-access
    assert scheduler._gradient(1, 1.0) == pytest.approx(10.0 - 2.5)  # pylint: disable=protected-access


@pytest.mark.slow  # keeps CI's run within 15 minutes; `pytest -m slow` runs it
def test_headroom_scheduler_tunes_real_tasks_recording_every_batch(tmp_path, tiny_tasks, host_platform, fast_measure):
    trials = 4 * TRIALS_PER_ITER
    flops = [task.flops for task in tiny_tasks]
    assert flops[0] > 0
    seen, database = _tune(tiny_tasks, host_platform, fast_measure, tmp_path / "headroom",
                           HeadroomScheduler(flops=flops, seed=0), trials)
    assert [builds for _, builds in seen] == list(range(1, len(seen) + 1))
    assert [task for task, _ in seen][:2] == [0, 1]
    assert len(database.get_all_tuning_records()) == trials


def test_a_one_program_task_ends_once_its_program_is_measured(tmp_path, host_platform, fast_measure):
    """A one-program design space (an elementwise op) is measured once and then left alone: MetaSchedule would
    pick it again and search five more times in vain (no new program exists) before giving up on it."""
    tasks = load_tasks(["dense_64x64x64", "residual_add_relu_c64_56x56"], host_platform.target)
    assert [design_space_decisions(t, host_platform.target)[1] == 0 for t in tasks] == [False, True]
    scheduler = RecordingGradientScheduler(seed=0)
    seen, database = _tune(tasks, host_platform, fast_measure, tmp_path / "ours", scheduler, 4 * TRIALS_PER_ITER)
    assert [task for task, _ in seen].count(1) == 1  # the relu: its one program, then never picked again
    assert scheduler.one_program.get(1) is True and scheduler.one_program.get(0) is not True
    # The rest of the budget goes to the dense (MetaSchedule checks the budget before each batch: 13 < 16, one more).
    assert len(database.get_all_tuning_records()) == 1 + 4 * TRIALS_PER_ITER


@pytest.mark.slow
def test_each_task_ends_at_its_own_total_when_a_run_resumes(tmp_path, tiny_tasks, host_platform, fast_measure):
    """`--trials-per-task` counts earlier runs: a task that has its trials already is not measured again, while
    one that has none gets its full share (MetaSchedule's cap is one number for all tasks of a run)."""
    scheduler = RecordingGradientScheduler(seed=0, trials_per_task=2 * TRIALS_PER_ITER,
                                           measured_before=[2 * TRIALS_PER_ITER, 0])
    seen, database = _tune(tiny_tasks, host_platform, fast_measure, tmp_path / "resumed", scheduler,
                           8 * TRIALS_PER_ITER)
    assert {task for task, _ in seen} == {1}  # the dense had its 8 before this run
    assert len(database.get_all_tuning_records()) == 2 * TRIALS_PER_ITER


@pytest.mark.slow  # keeps CI's run within 15 minutes; `pytest -m slow` runs it
def test_a_resumed_run_continues_instead_of_starting_over(tmp_path, tiny_tasks, host_platform, fast_measure):
    """A re-run over a database that holds measurements of a task sends that task no first-round batch, and the
    cost model has learned from them before the first new batch (MetaSchedule would re-run the first round over
    every task with an untrained model)."""
    from tlp.tune.run import _measured_per_task

    work_dir = tmp_path / "run"
    _tune(tiny_tasks[:1], host_platform, fast_measure, work_dir, RecordingGradientScheduler(seed=0),
          2 * TRIALS_PER_ITER)
    database = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural")
    counts, best = _measured_per_task(database, tiny_tasks)
    assert counts == [2 * TRIALS_PER_ITER, 0] and best[0] is not None and best[1] is None

    model = _RecordingUpdates()
    scheduler = RecordingGradientScheduler(seed=0, measured_before=counts,
                                           best_ms_before=[b * 1e3 if b else None for b in best])
    seen, database = _tune(tiny_tasks, host_platform, fast_measure, work_dir, scheduler,
                           2 * TRIALS_PER_ITER, cost_model=model)
    assert seen[0][0] == 1  # the first new batch: the unmeasured softmax, not the dense again
    dense = str(tiny_tasks[0].name)
    assert model.updates[0] == (dense, 2 * TRIALS_PER_ITER)  # learned from the stored batches first
    assert len(database.get_all_tuning_records()) == 4 * TRIALS_PER_ITER


def test_a_small_first_round_then_full_batches_without_measuring_twice(tmp_path, tiny_tasks, host_platform,
                                                                         fast_measure):
    """`--first-round-trials 1`: the first round measures one program per task (the cost model's top pick), the
    rounds after it full batches, and no program is measured twice although the inner search restarts."""
    import json
    import logging

    from tlp.tune.sources import Tunable
    from tlp.tune.run import TuneConfig, tune

    # An unnamed handler on MetaSchedule's logger (pytest adds such after an in-process tune_tir) must not break
    # tune's logging set-up, and stays attached.
    unnamed = logging.NullHandler()
    logging.getLogger("tvm.s_tir.meta_schedule").addHandler(unnamed)
    work_dir = tmp_path / "first-round"
    config = TuneConfig(trials=1 + 1 + 2 * TRIALS_PER_ITER, trials_per_iter=TRIALS_PER_ITER, first_round_trials=1,
                        cost_model="random", population=32, compile=False, measure=fast_measure)
    tune(Tunable("tiny", list(tiny_tasks)), host_platform.target, work_dir, config)
    batches = [json.loads(line) for line in (work_dir / "history.jsonl").read_text().splitlines()]
    sizes = [b["trials"] - a["trials"] for a, b in zip([{"trials": 0}] + batches, batches)]
    assert sizes[:2] == [1, 1] and [b["task"] for b in batches[:2]] == [0, 1]
    assert max(sizes[2:]) == TRIALS_PER_ITER and sum(sizes) >= config.trials
    database = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural")
    records = database.get_all_tuning_records()
    assert len(records) == sum(sizes)
    from tlp._tvm import structural_hash

    programs = {structural_hash(r.as_measure_candidate().sch.mod) for r in records}
    assert len(programs) == len(records)  # the restarted search re-proposed no measured program

    # Resumed: both tasks had their first round, so every new batch is a full one.
    config.trials = sum(sizes) + 2 * TRIALS_PER_ITER
    tune(Tunable("tiny", list(tiny_tasks)), host_platform.target, work_dir, config)
    resumed = [json.loads(line) for line in (work_dir / "history.jsonl").read_text().splitlines()][len(batches):]
    assert resumed and all(b["trials"] - a["trials"] == TRIALS_PER_ITER
                           for a, b in zip([batches[-1]] + resumed, resumed))
    assert unnamed in logging.getLogger("tvm.s_tir.meta_schedule").handlers
    logging.getLogger("tvm.s_tir.meta_schedule").removeHandler(unnamed)


def test_a_resumed_run_continues_each_tasks_batch_history_from_its_log(tmp_path):
    """Resuming, the rule sees each task's best after each earlier batch (as an unbroken run would), read from
    tune's history.jsonl; a line cut by a kill is skipped, and a task whose log does not end at the database's best
    (records from elsewhere) starts from that best alone."""
    import json

    from tlp.search.task_scheduler.scheduler import _continued, batch_histories

    log = tmp_path / "history.jsonl"
    lines = [{"trials": 4, "wall_s": 1.0, "task": 0, "best_s": [0.002, None]},
             {"trials": 8, "wall_s": 2.0, "task": 1, "best_s": [0.002, 0.001]},
             {"trials": 12, "wall_s": 3.0, "task": 0, "best_s": [0.0015, 0.001]}]
    log.write_text("\n".join(json.dumps(line) for line in lines) + '\n{"trials": 16, "wall_s": 4.0, "ta')
    histories = batch_histories(log, 2)
    assert histories == [pytest.approx([2.0, 1.5]), pytest.approx([1.0])]
    assert batch_histories(tmp_path / "absent.jsonl", 2) == [[], []]
    assert _continued(histories[0], 1.5) == histories[0]
    assert _continued(histories[0], 1.2) == [1.2] and _continued([], 1.0) == [1.0] and _continued([3.0], None) == []


def test_an_unknown_task_scheduler_is_refused_before_anything_is_measured(tmp_path, tiny_tasks, host_platform):
    from tlp import TLPError
    from tlp.tune.sources import Tunable
    from tlp.tune.run import TuneConfig, tune

    with pytest.raises(TLPError, match="unknown task_scheduler 'roundrobin' \\(choose among gradient, headroom\\)"):
        tune(Tunable("tiny", list(tiny_tasks)), host_platform.target, tmp_path / "w",
             TuneConfig(task_scheduler="roundrobin", compile=False))
    assert not (tmp_path / "w" / "database_tuning_record.json").exists()
