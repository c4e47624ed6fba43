"""TLP inside MetaSchedule's search: the fast trace path, TLPCostModel in tune_tir, online fine-tuning, warnings."""

import logging
import warnings

import numpy as np
import pytest
import torch

from tlp._tvm import ms, to_plain, trace_json, tvm
from tlp.dataset.measure import MeasureConfig, Measurer
from tlp.dataset.sampler import CandidateSampler
from tlp.model.estimator import CheckpointError, TLPModel
from tlp.search import OnlineTuning, PlatformMismatchWarning, TLPCostModel
from tlp.search.cost_model import learning_sample
from tlp.workloads.extract import relax_module_from_torch

from conftest import tlp_cli, tune_context


@pytest.fixture(scope="module")
def candidates(tiny_tasks, host_platform):
    """Real post-processed candidates of both tiny tasks, as a search hands them to its cost model."""
    return {task.name: (task, CandidateSampler(task, host_platform.target).random(32, seed=5)) for task in tiny_tasks}


def test_fast_trace_json_is_exactly_the_database_form(candidates):
    for _, batch in candidates.values():
        for candidate in batch:
            assert trace_json(candidate.sch.trace) == to_plain(candidate.sch.trace.as_json())


def test_cost_model_scores_candidates_positive_and_in_model_order(candidates, tiny_checkpoint, host_platform):
    model = TLPCostModel(tiny_checkpoint, target=host_platform.target)
    for task, batch in candidates.values():
        context = tune_context(task, host_platform.target, "replay-trace")
        model.predict(context, batch[:4])  # a few picks (a first round's library programs) fix no calibration
        assert model._task(context).offset is None
        scores = model.predict(context, batch)
        assert scores.shape == (len(batch),) and (scores > 0).all() and np.isfinite(scores).all()
        raw = TLPModel.load(tiny_checkpoint).predict([to_plain(c.sch.trace.as_json()) for c in batch],
                                                      [model._task(context).extents] * len(batch))
        assert (np.argsort(-scores, kind="stable") == np.argsort(-raw, kind="stable")).all()
        # Calibration is fixed per task on a population: a later call maps the same candidate to the same score.
        assert np.allclose(model.predict(context, batch[:3]), scores[:3])


def _drop_unnamed_log_handlers():
    # pytest attaches unnamed capture handlers to MetaSchedule's logger after an earlier in-process tune_tir
    # (test_import); MetaSchedule's logging config lists its logger's handlers by name and fails on those.
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in ms_logger.handlers if h.get_name() is None]:
        ms_logger.removeHandler(handler)


def test_tlp_cost_model_drives_tune_tir(tiny_tasks, tiny_checkpoint, host_platform, tmp_path):
    task = tiny_tasks[0]
    _drop_unnamed_log_handlers()
    cost_model = TLPCostModel(tiny_checkpoint, target=host_platform.target)
    measurer = Measurer(host_platform.target, MeasureConfig(repeat=2, min_repeat_ms=2))
    database = ms.tune_tir(mod=task.mod, target=tvm.target.Target(host_platform.target), work_dir=str(tmp_path),
                           max_trials_global=8, num_trials_per_iter=8, builder=measurer.builder,
                           runner=measurer.runner, cost_model=cost_model, num_tuning_cores=1)
    records = database.get_all_tuning_records()
    assert len(records) == 8
    assert cost_model.candidates_scored > 8  # the evolutionary search asked TLP to rank its population


@pytest.mark.slow
def test_tlp_cost_model_drives_tune_relax(tiny_checkpoint, host_platform, tmp_path):
    from tvm import relax

    _drop_unnamed_log_handlers()
    network = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU())
    mod = relax.get_pipeline("zero")(relax_module_from_torch(network, (torch.randn(4, 32),)))
    cost_model = TLPCostModel(tiny_checkpoint, target=host_platform.target)
    measurer = Measurer(host_platform.target, MeasureConfig(repeat=2, min_repeat_ms=2))
    database = ms.relax_integration.tune_relax(
        mod=mod, params={}, target=tvm.target.Target(host_platform.target), work_dir=str(tmp_path),
        max_trials_global=8, num_trials_per_iter=8, builder=measurer.builder, runner=measurer.runner,
        cost_model=cost_model, seed=1)
    assert len(database.get_all_tuning_records()) == 8
    assert cost_model.candidates_scored > 8
    assert all(cost_model.seconds[part] > 0 for part in ("trace", "featurize", "network"))  # where predict's went
    assert cost_model.seconds["fine_tune"] == 0.0  # no online fine-tuning asked for


def test_online_fine_tuning_learns_from_measurements(collected, candidates, tiny_checkpoint, host_platform):
    dataset, _ = collected
    store = dataset.store(host_platform.id)
    task, _ = candidates["dense_64x64x64"]
    workload = ms.database.Workload(task.mod)
    target_json = tvm.target.Target(host_platform.target).export()
    measured = [p for p in store.latest_programs().values() if p.workload_key == task.key and p.latency]
    batch = [ms.database.TuningRecord.from_json([p.trace_json, p.run_secs, target_json, p.args_info],
                                                workload).as_measure_candidate() for p in measured]
    results = [ms.runner.RunnerResult(p.run_secs, None) for p in measured]
    off = TLPCostModel(tiny_checkpoint, target=host_platform.target)
    before = {k: v.clone() for k, v in off.model.net.state_dict().items()}
    off.update(tune_context(task, host_platform.target, "replay-trace"), batch, results)
    assert all((before[k] == v).all() for k, v in off.model.net.state_dict().items())  # off by default

    on = TLPCostModel(tiny_checkpoint, OnlineTuning(steps=3, lr=1e-3), target=host_platform.target)
    failed = ms.runner.RunnerResult(None, "build failed")  # failures carry no latency and are skipped
    on.update(tune_context(task, host_platform.target, "replay-trace"), batch + batch[:1], results + [failed])
    assert on.fine_tune_steps == 3 and on.seconds["fine_tune"] > 0
    assert any((before[k] != v).any() for k, v in on.model.net.state_dict().items())

    assert not on.model.net.training  # left ready to score


def test_online_fine_tuning_waits_for_a_task_to_pass_its_first_round(collected, candidates, tiny_checkpoint,
                                                                    host_platform):
    dataset, _ = collected
    task, _ = candidates["dense_64x64x64"]
    workload = ms.database.Workload(task.mod)
    target_json = tvm.target.Target(host_platform.target).export()
    measured = [p for p in dataset.store(host_platform.id).latest_programs().values()
                if p.workload_key == task.key and p.latency][:4]
    batch = [ms.database.TuningRecord.from_json([p.trace_json, p.run_secs, target_json, p.args_info],
                                                workload).as_measure_candidate() for p in measured]
    results = [ms.runner.RunnerResult(p.run_secs, None) for p in measured]
    model = TLPCostModel(tiny_checkpoint, OnlineTuning(steps=2, lr=1e-3, min_task_measurements=3),
                         target=host_platform.target)
    before = {k: v.clone() for k, v in model.model.net.state_dict().items()}
    context = tune_context(task, host_platform.target, "replay-trace")
    model.update(context, batch[:2], results[:2])  # a first round of 2: kept, not learnt from
    assert model.fine_tune_steps == 0
    assert all((before[k] == v).all() for k, v in model.model.net.state_dict().items())
    model.update(context, batch[2:], results[2:])  # the task's next batch: learns from all 4
    assert model.fine_tune_steps == 2


def test_tune_config_passes_the_online_settings_to_every_tlp_cost_model(tiny_checkpoint, host_platform):
    from tlp.tune.run import TuneConfig, make_cost_model

    config = TuneConfig(cost_model="tlp", model_path=str(tiny_checkpoint), online_steps=3, online_lr=1e-3,
                        online_min_task_measurements=3)
    expected = OnlineTuning(steps=3, lr=1e-3, min_task_measurements=3)
    assert make_cost_model(config, host_platform.target).online == expected


@pytest.mark.parametrize("lr", [0.0, -1e-3, float("nan")])
def test_an_online_learning_rate_that_cannot_work_is_refused(lr):
    with pytest.raises(ValueError, match="learning rate must be a positive number"):
        OnlineTuning(steps=5, lr=lr)


def test_a_negative_minimum_of_task_measurements_is_refused():
    with pytest.raises(ValueError, match="minimum measurements per task must be 0 or more, got -1"):
        OnlineTuning(steps=5, min_task_measurements=-1)


def test_a_limit_below_two_measurements_per_update_is_refused():
    with pytest.raises(ValueError, match="at least 2 measurements per update, got a limit of 1"):
        OnlineTuning(steps=5, max_examples=1)


def _tasks_of(sizes: list[int]) -> list[tuple[list[np.ndarray], list[float]]]:
    """Tasks whose feature rows say which task and which measurement they are."""
    return [([np.array([task, i]) for i in range(size)], [float(i + 1) for i in range(size)])
            for task, size in enumerate(sizes)]


def test_an_update_learns_from_the_measured_task_and_a_bounded_draw_of_the_others():
    tasks = _tasks_of([30, 1, 50, 4, 6])
    chosen = learning_sample(tasks, 3, 20, np.random.default_rng(0))
    assert [int(row[0]) for row in chosen[0][0]] == [3] * 4  # the updated task first, whole
    assert sum(len(latencies) for _, latencies in chosen) == 20  # filled up to the limit
    assert all(len(latencies) >= 2 for _, latencies in chosen)  # every group can be ranked
    assert 1 not in {int(rows[0][0]) for rows, _ in chosen}  # a task measured once ranks nothing
    for rows, latencies in chosen:  # rows stay with their latencies
        assert [float(row[1] + 1) for row in rows] == list(latencies)
    recent = learning_sample(tasks, 2, 8, np.random.default_rng(0))  # the updated task alone overflows the limit
    assert len(recent) == 1 and [int(row[1]) for row in recent[0][0]] == list(range(42, 50))  # its most recent
    everything = learning_sample(tasks, 0, None, np.random.default_rng(0))
    assert [len(latencies) for _, latencies in everything] == [30, 1, 50, 4, 6]
    # Over the updates every task is drawn: no task's measurements are forgotten for good.
    rng = np.random.default_rng(1)
    drawn = {int(rows[0][0]) for _ in range(20) for rows, _ in learning_sample(tasks, 3, 12, rng)}
    assert drawn == {0, 2, 3, 4}


def test_model_from_another_platform_warns(tiny_checkpoint, host_platform):
    model = TLPModel.load(tiny_checkpoint)
    model.meta["platforms"] = ["llvm-cortex-a72-4c-00000000"]
    with pytest.warns(PlatformMismatchWarning, match="cortex-a72"):
        TLPCostModel(model, target=host_platform.target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TLPCostModel(tiny_checkpoint, target=host_platform.target)  # trained here: no warning


def test_checkpoint_errors_surface_through_the_cost_model(tmp_path):
    (tmp_path / "bad.pt").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="bad.pt"):
        TLPCostModel(tmp_path / "bad.pt")


def test_cached_featurization_is_exact(candidates, tiny_checkpoint):
    """The search path (shared instruction lists, cached rows) gives the same tensors as the dataset path."""
    from tlp._tvm import clear_trace_caches

    featurizer = TLPModel.load(tiny_checkpoint).featurizer
    for task, batch in candidates.values():
        from tlp.features.featurizer import block_extents

        extents = block_extents(task.mod)
        slow = featurizer.transform([to_plain(c.sch.trace.as_json()) for c in batch], [extents] * len(batch))
        clear_trace_caches()
        cache: dict = {}
        for _ in range(2):  # cold, then every list and row from the caches
            fast = featurizer.transform([trace_json(c.sch.trace) for c in batch], [extents] * len(batch), cache)
            assert np.array_equal(fast, slow)


def test_packaged_models_load_by_name_and_score_real_candidates(candidates, host_platform):
    from tlp.models import PACKAGED, model_path

    task, batch = candidates["dense_64x64x64"]
    shapes = {}
    for name in PACKAGED:
        assert model_path(name).is_file(), name  # shipped as package data
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PlatformMismatchWarning)  # CI may run on another CPU
            cost_model = TLPCostModel(name, target=host_platform.target)
        scores = cost_model.predict(tune_context(task, host_platform.target, "replay-trace"), batch)
        assert scores.shape == (len(batch),) and np.all(scores > 0) and np.ptp(scores) > 0
        shapes[name] = (cost_model.model.featurizer.config.seq_len, cost_model.model.model_config.hidden)
    # The default is a cascade: its features are the second stage's 56-row crop; its first stage is hidden 128.
    assert shapes == {"tlp-cpu": (56, 128), "tlp-cpu-small": (25, 128)}
    assert model_path(None) == model_path("tlp-cpu") and str(model_path("x/y.pt")) == "x/y.pt"
