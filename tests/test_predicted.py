"""Zero-measurement schedules: the TLP model's pick of an unmeasured search builds, runs, computes what TVM's
default computes, lives apart from the measured database, and fills in the tasks ``--top-tasks`` sets aside."""

import json
import textwrap
import warnings

import numpy as np
import pytest
import tvm_ffi

from tlp._tvm import ms, tvm
from tlp.search.database.predicted import (PREDICTED_DIR, PredictedDatabase, PredictedDatabaseError, PredictionConfig,
                                  measured_then_predicted, predict_missing, predict_schedule)

QUICK = PredictionConfig(population=32, genetic_iters=1, keep=8, max_rounds=1)


@pytest.fixture(scope="module")
def tlp_model(host_platform):
    from tlp.search.cost_model import TLPCostModel

    with warnings.catch_warnings():  # a platform-mismatch warning depends on the machine; not checked here
        warnings.simplefilter("ignore")
        return TLPCostModel(target=host_platform.target)


def _dense_task(host_platform):
    from tlp.workloads import load_tasks

    return load_tasks(["dense_64x64x64"], host_platform.target)[0]


def _run(mod, target, inputs):
    library = tvm.compile(mod, target=target)
    device = tvm.cpu()
    arrays = [tvm.runtime.tensor(a, device) for a in inputs]
    library["main"](*arrays)
    return arrays[-1].numpy()


def test_pick_builds_runs_and_matches_the_default(tmp_path, host_platform, tlp_model):
    task = _dense_task(host_platform)
    target = tvm.target.Target(host_platform.target)
    prediction, record = predict_schedule(task, host_platform.target, tlp_model, QUICK)
    assert prediction.scheduled and record is not None and record.run_secs is None  # nothing measured
    assert prediction.rank_tried == 0 and prediction.candidates_ranked >= 1 and prediction.score is not None

    database, predictions = predict_missing([task], [None], host_platform.target, tmp_path, tlp_model, QUICK)
    assert [p.task for p in predictions] == [task.name] and len(database) == 1
    schedule = ms.tir_integration.compile_tir(database, task.mod, target)
    assert schedule is not None and not tvm_ffi.structural_equal(schedule.mod, task.mod)  # scheduled, not default
    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in info.shape] for info in ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])]
    inputs = [rng.standard_normal(shape).astype("float32") for shape in shapes[:-1]] + [np.zeros(shapes[-1], "float32")]
    predicted_out = _run(schedule.mod, target, [a.copy() for a in inputs])
    default_out = _run(task.mod, target, [a.copy() for a in inputs])
    np.testing.assert_allclose(predicted_out, default_out, rtol=1e-5, atol=1e-4)

    # Apart from the measured database: a stock JSONDatabase (what the measured one is) never serves the
    # predicted records, and the measured database stays empty.
    stock = ms.database.JSONDatabase(work_dir=str(tmp_path / PREDICTED_DIR), module_equality="structural")
    assert stock.query_tuning_record(task.mod, target, task.name) is None
    measured_dir = tmp_path / "measured"
    measured_dir.mkdir()
    measured = ms.database.JSONDatabase(work_dir=str(measured_dir), module_equality="structural")
    combined = measured_then_predicted(measured, database)
    assert ms.tir_integration.compile_tir(combined, task.mod, target) is not None
    assert len(measured.get_all_tuning_records()) == 0
    with pytest.raises(Exception, match="read-only"):
        database.commit_tuning_record(record)  # nothing reaches the predicted files through MetaSchedule
    with pytest.raises(Exception):
        combined.commit_tuning_record(record)  # nor the measured ones through the combined database
    assert len(measured.get_all_tuning_records()) == 0 and len(PredictedDatabase(tmp_path / PREDICTED_DIR)) == 1

    # A second run reuses the stored pick; a task with a measured latency gets no prediction at all.
    _, again = predict_missing([task], [None], host_platform.target, tmp_path, tlp_model, QUICK)
    assert again[0].reused and again[0].seconds == 0.0
    _, none = predict_missing([task], [1e-5], host_platform.target, tmp_path / "other", tlp_model, QUICK)
    assert none == []
    manifest = json.loads((tmp_path / PREDICTED_DIR / "predicted.json").read_text())
    assert "not measured" in manifest["what"]


def test_timed_candidates_keep_the_fastest_of_the_best_ranked(host_platform, tlp_model):
    from dataclasses import replace

    from tlp.dataset.measure import Measurer

    task = _dense_task(host_platform)
    measurer = Measurer(host_platform.target)
    try:
        prediction, record = predict_schedule(task, host_platform.target, tlp_model,
                                              replace(QUICK, timed_candidates=3), measurer)
    finally:
        measurer.close()
    timed = prediction.timed_s
    assert prediction.scheduled and record is not None and record.run_secs is None  # stored as a prediction
    assert len(timed) == 3 and all(t is not None and t > 0 for t in timed)
    # the pick is the fastest timed one (rank 0 of the re-ordered list), not necessarily the model's first
    assert prediction.rank_tried == 0 and prediction.score is not None


def test_a_task_with_nothing_to_sample_is_one_program_found_in_one_small_round(host_platform, tlp_model):
    """A layout change or an elementwise chain may leave MetaSchedule nothing to sample: each design space is one
    program. Its pick is that program, found in one round of a population of two per space, never three rounds
    of 128 that find it again (seconds per task, for a third of a transformer's tasks)."""
    from tlp.search.database.predicted import _context
    from tlp.workloads import load_tasks

    task = load_tasks(["take_1000x128_n128"], host_platform.target)[0]
    config = PredictionConfig(max_rounds=3)
    spaces = _context(task, tvm.target.Target(host_platform.target), config, 1).space_generator \
        .generate_design_space(task.mod)
    assert all(len(space.trace.decisions) == 0 for space in spaces)
    prediction, record = predict_schedule(task, host_platform.target, tlp_model, config)
    assert prediction.scheduled and record is not None
    assert prediction.rounds == 1 and prediction.candidates_ranked == len(spaces)
    # A round that finds fewer programs than it keeps has seen the task's whole space: no second draw.
    dense = _dense_task(host_platform)
    small_space = PredictionConfig(population=16, genetic_iters=1, keep=10_000, max_rounds=3, seconds_per_task=1e9)
    prediction, _ = predict_schedule(dense, host_platform.target, tlp_model, small_space)
    assert prediction.rounds == 1 and prediction.candidates_ranked < 10_000


def test_with_a_near_stored_workload_the_candidates_are_the_librarys_replayed_programs(collected, host_platform,
                                                                                        tlp_model, monkeypatch):
    """A 256³ dense with a library holding a 64³ dense's programs: its pick is one of those programs replayed on it,
    found without a search (no round run); counted far, the search runs as without a library."""
    from conftest import trace_decisions, tune_context
    from tlp.search.database import predicted
    from tlp.search.search_strategy.library import ScheduleLibrary
    from tlp.search.search_strategy.transfer import replayed_candidates
    from tlp.workloads import load_tasks

    dataset, _ = collected
    library = ScheduleLibrary.from_dataset(dataset, host_platform.id)
    task = load_tasks(["dense_256x256x256"], host_platform.target)[0]
    replayed = replayed_candidates(library.records_for(task.mod), tune_context(task, host_platform.target))
    prediction, record = predict_schedule(task, host_platform.target, tlp_model, QUICK, library=library)
    assert prediction.library and prediction.scheduled and prediction.rounds == 0
    assert prediction.candidates_ranked == len(replayed) and record.run_secs is None
    assert trace_decisions(record.trace) in [trace_decisions(c.sch.trace) for c in replayed]
    monkeypatch.setattr(predicted, "FAR_LIBRARY_DISTANCE", library.nearest(task.mod, 1)[0][0] / 2)
    prediction, record = predict_schedule(task, host_platform.target, tlp_model, QUICK, library=library)
    assert not prediction.library and prediction.scheduled and prediction.rounds == 1


def test_when_no_library_program_builds_the_search_gives_the_pick(collected, host_platform, tlp_model, monkeypatch):
    """Library programs that all fail to build leave the task to the search's candidates, not to TVM's default."""
    from tlp._tvm import structural_hash
    from tlp.search.database import predicted
    from tlp.search.search_strategy.library import ScheduleLibrary
    from tlp.workloads import load_tasks

    dataset, _ = collected
    library = ScheduleLibrary.from_dataset(dataset, host_platform.id)
    task = load_tasks(["dense_256x256x256"], host_platform.target)[0]
    replayed: set[int] = set()
    library_candidates, compile_module = predicted._library_candidates, tvm.compile

    def library_candidates_noted(*args):
        ranked = library_candidates(*args)
        replayed.update(structural_hash(schedule.mod) for _, schedule in ranked)
        return ranked

    def compile_refusing_replays(mod, *args, **kwargs):
        if structural_hash(mod) in replayed:
            raise RuntimeError("refused")
        return compile_module(mod, *args, **kwargs)

    monkeypatch.setattr(predicted, "_library_candidates", library_candidates_noted)
    monkeypatch.setattr(tvm, "compile", compile_refusing_replays)
    prediction, record = predict_schedule(task, host_platform.target, tlp_model, QUICK, library=library)
    assert replayed and prediction.scheduled and record is not None
    assert not prediction.library and prediction.rounds == 1
    schedule = tvm.s_tir.Schedule(task.mod)
    record.trace.apply_to_schedule(schedule, remove_postproc=False)
    assert structural_hash(schedule.mod) not in replayed


def test_a_measured_database_is_refused_as_predicted(tmp_path, host_platform):
    task = _dense_task(host_platform)
    target = tvm.target.Target(host_platform.target)
    database = ms.database.JSONDatabase(work_dir=str(tmp_path), module_equality="structural")
    space = ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                           num_threads=1).space_generator.generate_design_space(task.mod)[0]
    database.commit_tuning_record(ms.database.TuningRecord(
        space.trace, database.commit_workload(task.mod), [1e-5], target,
        ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])))
    with pytest.raises(PredictedDatabaseError, match="run times"):
        PredictedDatabase(tmp_path)


TORCH_MLP = '''
import torch

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.out = torch.nn.Linear(64, 32)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)))

torch.manual_seed(0)
model = MLP()
example_inputs = (torch.randn(8, 64),)
'''


# A real (tiny) tuning run, an unmeasured search and two compilations: 22 s of CPU, 24-80 s of wall time on the
# shared 2 cores.
@pytest.mark.slow
def test_top_tasks_network_compiles_with_predicted_schedules(tmp_path, host_platform):
    from tlp.dataset.measure import MeasureConfig
    from tlp.tune.report import format_report
    from tlp.tune.sources import resolve
    from tlp.tune.run import TuneConfig, tune

    source = tmp_path / "mlp.py"
    source.write_text(textwrap.dedent(TORCH_MLP))
    network = resolve(str(source), host_platform.target, fast_math=False).top_tasks(1)
    assert len(network.tasks) == 1 and len(network.untuned) == len(network.all_tasks) - 1 >= 1
    config = TuneConfig(trials=2, trials_per_iter=2, population=32, prediction=QUICK,
                        measure=MeasureConfig(repeat=3, min_repeat_ms=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = tune(network, host_platform.target, tmp_path / "work", config)
    kinds = {task["name"]: (task["tuned"], task["schedule"]) for task in report["tasks"]}
    assert kinds == {**{t.name: (True, "measured") for t in network.tasks},
                     **{t.name: (False, "predicted") for t in network.untuned}}
    assert report["numerics"]["ok"] and report["end_to_end_s"] > 0
    assert report["predicted"]["seconds"] > 0 and "not measured" in report["predicted"]["what"]
    assert "predicted (0 measurements)" in format_report(report)
    # The measured database holds only measured records, of the tuned task only.
    measured = ms.database.JSONDatabase(work_dir=str(tmp_path / "work"), module_equality="structural")
    assert all(record.run_secs is not None for record in measured.get_all_tuning_records())
    assert not any(measured.has_workload(t.mod) for t in network.untuned)
