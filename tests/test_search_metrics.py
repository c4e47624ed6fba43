"""Search-like evaluation on real tuning work directories (tests/fixtures/search_runs.tar.xz, see its .md)."""

import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from tlp.evaluation import search_metrics as sm

from conftest import tlp_cli

FIXTURE = Path(__file__).parent / "fixtures" / "search_runs.tar.xz"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(root, filter="data")
    return root / "search_runs"


@pytest.fixture
def copy_of(runs, tmp_path):
    def copy(name: str) -> Path:
        return Path(shutil.copytree(runs / name, tmp_path / name.replace("/", "-")))
    return copy


def test_rounds_from_history(runs):
    run = sm.read_search_run(runs / "dense_512x512x512" / "tlp-seed1")
    assert (run.source, run.cost_model) == ("dense_512x512x512", "tlp")
    assert len(run.records) == 128 and not run.skipped
    # 8 batches of 16, one task: rounds 0-7 in order, the last 4 late.
    assert [r.round for r in run.records] == [i // 16 for i in range(128)]
    assert sum(r.late for r in run.records) == 64 and all(r.late for r in run.records[64:])
    assert run.task_names == {run.records[0].workload_key: "dense_512x512x512"}
    assert list(run.task_weights.values()) == [1.0]


def test_origins_give_the_same_rounds_as_history(runs, copy_of):
    with_history = sm.read_search_run(runs / "dense64-random")
    work_dir = copy_of("dense64-random")
    (work_dir / "history.jsonl").unlink()
    from_origins = sm.read_search_run(work_dir)
    assert [r.round for r in from_origins.records] == [r.round for r in with_history.records] == [0] * 8 + [1] * 8 + [2] * 8
    assert [r.late for r in from_origins.records] == [False] * 8 + [True] * 16
    assert from_origins.cost_model == "random" and from_origins.task_weights == with_history.task_weights


def test_pooling_dedupes_and_keeps_the_mean(runs):
    run = sm.read_search_run(runs / "dense_512x512x512" / "xgb-seed1")
    twice = sm.pool_runs([run, run])
    once = sm.pool_runs([run])
    assert len(twice.traces) == len(once.traces) and np.allclose(twice.latencies, once.latencies)
    assert twice.skipped["measured again (mean latency kept)"] == len(once.traces) + once.skipped[
        "measured again (mean latency kept)"]
    # One source, one task; each run's late programs are its own.
    assert once.sources == ["dense_512x512x512"] and set(twice.late_by_run) == {(0, 0), (1, 0)}


def test_metrics_of_perfect_reversed_and_random_rankings(runs):
    search = sm.read_search_runs([runs / "dense_512x512x512"])
    populations = sm.pick_populations(search, population=16, draws=20, seed=0)
    assert all(len(p) == 16 for group in populations.values() for p in group)
    assert sm.pick_populations(search, 16, 20, 0)[0][5].tolist() == populations[0][5].tolist()  # same for all models
    perfect = sm.search_scores(search, -search.latencies, populations)
    assert perfect["pick_regret"] == 0 and perfect["late_top1"] == perfect["all_top1"] == 1
    reversed_ = sm.search_scores(search, search.latencies, populations)
    random = sm.search_scores(search, np.random.default_rng(0).random(len(search.traces)), populations)
    assert reversed_["pick_regret"] > random["pick_regret"] > 0
    assert reversed_["late_top1"] < random["late_top1"] < 1
    row = random["per_source"]["dense_512x512x512"]
    assert row["tasks"] == 1 and row["programs"] == len(search.traces) and row["late_programs"] < row["programs"]
    assert row["populations"] == 3 * 20


def test_training_records_are_excluded_and_training_tasks_flagged(runs):
    run = sm.read_search_run(runs / "dense64-random")
    first = run.records[0]
    from tlp.dataset.store import trace_id
    search = sm.pool_runs([run], exclude={trace_id(first.workload_key, first.trace_json)},
                          training_tasks={first.workload_key})
    assert search.skipped["in the models' training records"] == 1
    assert search.summary()["training_tasks"] == ["dense_64x64x64"]
    assert sm.search_scores(search, -search.latencies)["per_source"]["dense_64x64x64"]["tasks_in_training"] == 1


def test_the_shipped_model_and_xgboost_score_the_pooled_programs(runs):
    from tlp._tvm import ms, tvm
    from tlp.model.estimator import TLPModel
    from tlp.models import model_path

    search = sm.read_search_runs([runs])
    labeled = search.labeled()
    model = TLPModel.load(model_path("tlp-cpu"))
    tlp_scores = model.predict(labeled.traces, [labeled.extents[k] for k in labeled.task_keys])
    result = sm.search_scores(search, tlp_scores)
    assert set(result["per_source"]) == {"dense_512x512x512", "dense_64x64x64"}
    assert 0 < result["late_top1"] <= 1 and result["pick_regret"] >= 0
    # MetaSchedule's XGBoost, trained through its own update on the 64^3 run, scores its programs (real replay).
    search = sm.read_search_runs([runs / "dense64-random"])
    xgb = ms.cost_model.XGBModel(num_warmup_samples=0, adaptive_training=False)
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    key = next(k for k, name in search.task_names.items() if name == "dense_64x64x64")
    index = [i for i, k in enumerate(search.task_keys) if k == key]
    workload = ms.database.Workload.from_json(search.workloads[key])
    context = ms.TuneContext(workload.mod, target=target, space_generator="post-order-apply",
                             search_strategy="replay-trace", task_name=key, num_threads=1)
    candidates = [ms.database.TuningRecord.from_json([search.traces[i], None, target.export(), []], workload)
                  .as_measure_candidate() for i in index]
    xgb.update(context, candidates, [ms.runner.RunnerResult([float(search.latencies[i])], None) for i in index])
    scores = sm.metaschedule_scores(xgb, target, search)
    assert scores.shape == (len(search.traces),) and np.isfinite(scores).all()


def test_bad_input_is_counted_or_one_clear_error(runs, copy_of, tmp_path):
    with pytest.raises(sm.SearchRunError, match="not a MetaSchedule tuning work directory"):
        sm.find_work_dirs([tmp_path])
    with pytest.raises(sm.SearchRunError, match="no such directory"):
        sm.find_work_dirs([tmp_path / "missing"])
    # NaN latency and a record of a workload the run does not have: counted, the rest is read.
    work_dir = copy_of("dense64-random")
    records = (work_dir / "database_tuning_record.json").read_text().splitlines()
    nan = json.loads(records[0])
    nan[1][1] = [float("nan")]
    unknown = json.loads(records[1])
    unknown[0] = 7
    records[0], records[1] = json.dumps(nan), json.dumps(unknown)
    (work_dir / "database_tuning_record.json").write_text("\n".join(records) + "\n")
    search = sm.read_search_runs([work_dir])
    assert search.skipped["failed or invalid latency (failure marker, NaN, inf, non-positive)"] == 1
    assert search.skipped["record of an unknown workload"] == 1 and len(search.traces) == 22
    # A history that does not fit the records: that run is skipped and counted, the others are read.
    broken = copy_of("dense_512x512x512/tlp-seed1")
    (broken / "history.jsonl").write_text(json.dumps({"trials": 500, "task": 0}) + "\n")
    search = sm.read_search_runs([broken, runs / "dense_512x512x512" / "xgb-seed1"])
    assert len(search.runs) == 1
    assert any("500 trials logged but 128 records" in why for why in search.skipped)
    (broken / "history.jsonl").unlink()
    with pytest.raises(sm.SearchRunError, match="no readable tuning work directory.*no history.jsonl"):
        sm.read_search_runs([broken])


def test_eval_cli_leads_with_the_search_metric(collected, tiny_checkpoint, runs, tmp_path):
    dataset, _ = collected
    base = ["eval", "--model", str(tiny_checkpoint), "--dataset", str(dataset.path), "--networks",
            "op:softmax", "--baselines", "none"]
    result = tlp_cli(base + ["--search-runs", str(runs), "--population", "8", "--draws", "5"])
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("search-like ranking (4 tuning runs") and "headline: all top1" in first
    assert result.stdout.splitlines()[1].split()[:2] == ["model", "all1"]  # the headline's column first
    assert "trained on (scored, but not held out): tasks of dense_64x64x64" in result.stdout
    assert "TenSet top-k over all stored programs" in result.stdout
    result = tlp_cli(base + ["--json", "--search-runs", str(runs / "dense_512x512x512")])
    results = json.loads(result.stdout)
    assert set(results["tlp"]["search"]["per_source"]) == {"dense_512x512x512"}
    assert results["data"]["search"]["runs"] == 3 and "top1" in results["tlp"]
    result = tlp_cli(base + ["--search-runs", str(tmp_path)])
    assert result.returncode == 2 and "not a MetaSchedule tuning work directory" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
