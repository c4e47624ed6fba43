"""Ansor / TenSet records: import, TLP's original step featurization, training and top-k, on real logs.

The records are real Ansor logs from public repositories (tests/fixtures/ansor/README.md names each source).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from tlp.cli import main
from tlp.dataset import Dataset
from tlp.dataset.ansor import PLACEHOLDER_COST, import_ansor, parse_target_string
from tlp.features.ansor_steps import AnsorStepConfig, AnsorStepFeaturizer
from tlp.features.tensors import load_programs
from tlp.model.estimator import CheckpointError, TLPModel, TrainConfig
from tlp.model.network import ModelConfig
from tlp.platform import ANSOR_FORMAT

FIXTURES = Path(__file__).parent / "fixtures" / "ansor"
MMPERF = FIXTURES / "mmperf-matmul-sm80-excerpt.json"
RESNET50_CPU = FIXTURES / "resnet-50-NHWC-B1-llvm.json"
RESNET18_GPU = FIXTURES / "resnet-18-NHWC-B1-cuda.json"


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _keys(path: Path) -> list[str]:
    keys: list[str] = []
    for line in _lines(path):
        key = json.loads(line)["i"][0][0]
        if key not in keys:
            keys.append(key)
    return keys


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != ".lock"}


# ---- reader -------------------------------------------------------------------------------------------------
def test_every_log_version_imports_under_its_own_platform(tmp_path):
    dataset = Dataset(tmp_path / "ds")
    summary = import_ansor(dataset, [FIXTURES], progress=False)
    assert summary.skipped == {} and summary.files == 6
    assert summary.records == summary.imported == sum(len(_lines(p)) for p in FIXTURES.glob("*.json")) == 293
    versions = {json.loads(line)["v"] for p in FIXTURES.glob("*.json") for line in _lines(p)}
    assert versions == {"v0.2", "v0.3", "v0.5", "v0.6"}
    assert all(pid.startswith("ansor-") for pid in summary.platforms) and len(summary.platforms) == 6
    cpu = [pid for pid in summary.platforms if pid.startswith("ansor-llvm-core-avx2-8c-")]
    assert len(cpu) == 1 and summary.platforms[cpu[0]] == 26  # target string + hardware params decide the id
    store = dataset.store(cpu[0])
    assert store.platform.record_format == ANSOR_FORMAT
    assert store.platform.target == {"kind": "llvm", "keys": ["cpu"], "mcpu": "core-avx2", "num-cores": 8}
    assert store.platform.hardware["hardware_params"]["vector_unit_bytes"] == 64
    gpu = dataset.store(next(p for p in summary.platforms if "sm_86" in p)).platform
    assert gpu.target["arch"] == "sm_86" and gpu.hardware["hardware_params"]["warp_size"] == 32
    # Tasks are keyed by workload key; ResNet-50's keys name the DAG hash and the shapes.
    catalogue = dataset.catalogue()
    assert set(_keys(RESNET50_CPU)) <= set(catalogue)
    assert catalogue[_keys(RESNET50_CPU)[0]]["name"] == "ansor_d7b65649_1_1000_1_1000"
    assert catalogue['["matmul_add", 1024, 1024, 1024, "float32"]']["name"] == "matmul_add_1024_1024_1024_float32"


def test_failures_are_stored_as_failures_never_latencies(tmp_path):
    dataset = Dataset(tmp_path / "ds")
    summary = import_ansor(dataset, [MMPERF], progress=False)
    failed_in_log = sum(json.loads(line)["r"][1] != 0 for line in _lines(MMPERF))
    assert summary.imported == 240 and summary.failures == failed_in_log == 31
    programs = list(dataset.store(next(iter(summary.platforms))).iter_programs())
    failed = [p for p in programs if p.latency is None]
    assert len(failed) == 31 and all(p.run_secs is None for p in failed)
    assert {p.error for p in failed} >= {"ansor error_no 2 (COMPILE_HOST)", "ansor error_no 4 (RUNTIME_DEVICE)"}
    assert all(p.latency < 1.0 for p in programs if p.latency is not None)
    # error_no 0 with Ansor's 1e10 placeholder cost is a failure too.
    record = json.loads(_lines(MMPERF)[0])
    record["r"][0] = [1e10]
    record["i"][1][1][1][4] = [16, 1, 1, 1]  # another program, so it is not a duplicate
    (tmp_path / "placeholder.json").write_text(json.dumps(record) + "\n")
    again = import_ansor(dataset, [tmp_path / "placeholder.json"], progress=False)
    assert again.imported == 1 and again.failures == 1 and PLACEHOLDER_COST < 1e10


def test_tenset_layout_imports_in_one_call_and_resumes(tmp_path):
    # TenSet's layout: measure_records/<platform>/<one file per task>.json
    folder = tmp_path / "measure_records" / "a100"
    folder.mkdir(parents=True)
    by_key: dict[str, list[str]] = {}
    for line in _lines(MMPERF):
        by_key.setdefault(json.loads(line)["i"][0][0], []).append(line)
    for i, lines in enumerate(by_key.values()):
        (folder / f"task{i}.json").write_text("\n".join(lines) + "\n")
    dataset = Dataset(tmp_path / "ds")
    first = import_ansor(dataset, [folder / "task0.json"], progress=False)  # an import cut short after one file
    assert first.imported == 40
    rest = import_ansor(dataset, [tmp_path / "measure_records"], progress=False)
    assert rest.files == 6 and rest.imported == 200 and rest.already_present == 40 and rest.tasks == 6
    # The same records given twice in one call are stored once.
    twice = import_ansor(Dataset(tmp_path / "ds2"), [MMPERF, MMPERF], progress=False)
    assert twice.imported == 240 and twice.already_present == 240
    assert len(list(Dataset(tmp_path / "ds2").store(next(iter(twice.platforms))).iter_programs())) == 240


def test_bad_input_is_counted_and_named_and_touches_nothing_else(tmp_path):
    dataset = Dataset(tmp_path / "ds")
    import_ansor(dataset, [RESNET50_CPU], progress=False)
    before = _snapshot(dataset.path)
    good = _lines(MMPERF)
    bad = tmp_path / "bad"
    bad.mkdir()
    unknown = json.loads(good[1])
    unknown["i"][1][1].append(["PPT", 4, 0, 1])  # a step kind TVM's Ansor does not write
    malformed = json.loads(good[2])
    malformed["i"][1][1][0] = 7
    (bad / "mixed.json").write_text("\n".join([good[0], _lines(RESNET50_CPU)[0]]) + "\n")
    (bad / "broken.json").write_text("\n".join([good[0][:200], json.dumps(unknown), json.dumps(malformed),
                                                '{"i": 1, "r": 2}', good[3]]) + "\n")
    (bad / "empty_folder").mkdir()
    weights = {"matmul": {json.loads(good[0])["i"][0][0]: 1}}
    other_key = good[:43]  # the first task's 40 records, then 3 of a task the mapping does not list
    (bad / "sub").mkdir()
    (bad / "sub" / "other_keys.json").write_text("\n".join(other_key) + "\n")
    summary = import_ansor(Dataset(tmp_path / "scratch"), [bad / "broken.json", bad / "empty_folder"],
                           progress=False)
    assert summary.skipped == {"truncated or corrupt JSON line": 1,
                               "malformed step (not a list starting with its kind)": 1,
                               "not an Ansor record (no i/r fields of the known layout)": 1,
                               "folder without record files (*.json, *.jsonl, *.log)": 1}
    assert summary.imported == 2 and summary.unknown_step_kinds == {"PPT": 1}
    assert any("broken.json:1" in e for e in summary.examples) and any("empty_folder" in e for e in summary.examples)
    # Into the real dataset: a mixed-target file is skipped whole; unmapped keys are skipped; nothing else changes.
    summary = import_ansor(dataset, [bad / "mixed.json"], task_weights=weights, progress=False)
    assert summary.imported == 0 and summary.skipped == {
        "file mixing 2 targets/hardware (cuda -keys=cuda,gpu -arch=sm_80 -max_num_threads=1024 "
        "-thread_warp_size=32 [-1, 16, 64, 49152, 2147483647, 1024, 8, 32] (1); llvm -keys=cpu -mcpu=core-avx2 "
        "[8, 64, 64, 0, 0, 0, 0, 0] (1)): split it per target": 2}
    assert _snapshot(dataset.path) == before
    summary = import_ansor(dataset, [bad / "sub"], task_weights=weights, progress=False)
    assert summary.skipped == {"workload key has no task in the task mapping": 3}
    assert summary.imported == 40 and summary.tasks == 1
    after = _snapshot(dataset.path)
    assert {k: v for k, v in after.items() if k in before and k != "tasks.json"} == \
        {k: v for k, v in before.items() if k != "tasks.json"}
    catalogue = dataset.catalogue()
    assert all(catalogue[k] == json.loads(before["tasks.json"])[k] for k in _keys(RESNET50_CPU))
    assert catalogue[json.loads(good[0])["i"][0][0]]["networks"] == {"matmul": 1}


def test_cli_import_refuses_measured_here_and_export(tmp_path, capsys):
    assert main(["dataset", "import", "--format", "ansor", str(MMPERF), "--dataset", str(tmp_path), "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["imported"] == 240
    assert main(["dataset", "import", "--format", "ansor", str(MMPERF), "--dataset", str(tmp_path),
                 "--measured-here"]) == 2
    platform = next(iter(summary["platforms"]))
    assert main(["dataset", "export", str(tmp_path), "--platform", platform, "--out", str(tmp_path / "x")]) == 2
    assert "no MetaSchedule database to export" in capsys.readouterr().err


def test_target_strings():
    assert parse_target_string("cuda -keys=cuda,gpu -arch=sm_80 -max_num_threads=1024") == {
        "kind": "cuda", "keys": ["cuda", "gpu"], "arch": "sm_80", "max_num_threads": 1024}


# ---- featurization ------------------------------------------------------------------------------------------
def test_steps_become_the_papers_rows(tmp_path):
    steps = json.loads(_lines(FIXTURES / "matmul.json")[0])["i"][1][1]
    featurizer = AnsorStepFeaturizer(AnsorStepConfig.paper("llvm")).fit([steps])
    rows = featurizer.transform([steps])
    assert rows.shape == (1, 25, 22)  # the paper's CPU crop
    assert featurizer.config.num_numbers == 19
    split = rows[0, 0]  # ["SP", 2, 0, 1024, [2, 1, 4], 1]
    assert split[0] == featurizer.kinds.id("SP") and split[1] == split[2] == 0  # no string parameter
    expected = [math.log2(1 + x) for x in (2, 0, 1024, 2, 1, 4, 1)]
    assert np.allclose(split[3:10], expected) and not split[10:].any()
    pragma = rows[0, 10]  # ["PR", 2, 0, "auto_unroll_max_step$8"]
    assert pragma[0] == featurizer.kinds.id("PR") and pragma[1] == featurizer.strings.id("auto_unroll_max_step")
    assert np.allclose(pragma[3:6], [math.log2(3), 0, math.log2(9)])
    assert not rows[0, len(steps):].any()  # padding rows are all zero (kind id 0)
    # Unknown kinds and strings read as out-of-vocabulary, never fail.
    assert featurizer.transform([[["PPT", 1, "nowhere"]]])[0, 0, :2].tolist() == [1.0, 1.0]


def test_long_gpu_programs_are_cropped_to_40_steps():
    programs = [json.loads(line)["i"][1][1] for line in _lines(RESNET18_GPU)]
    longest = max(programs, key=len)
    assert len(longest) == 70
    featurizer = AnsorStepFeaturizer(AnsorStepConfig.paper("cuda")).fit(programs)
    rows = featurizer.transform([longest])
    assert rows.shape == (1, 40, 20)
    assert np.array_equal(rows[0, 39], featurizer.transform([longest[39:40]])[0, 0])  # the first 40 steps kept
    assert (rows[0, :, 0] > 1).all()  # every kind is in the vocabulary fitted on these records


# ---- training, evaluation, heads ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mmperf_dataset(tmp_path_factory):
    """The mmperf excerpt with a task mapping: 4 training tasks, 2 held-out ones (network "test_mm")."""
    root = tmp_path_factory.mktemp("ansor")
    keys = _keys(MMPERF)
    mapping = {"train_mm": {k: 1 for k in keys[:2] + keys[3:5]}, "test_mm": {keys[2]: 1, keys[5]: 2}}
    (root / "weights.json").write_text(json.dumps(mapping))
    assert main(["dataset", "import", "--format", "ansor", str(MMPERF), "--dataset", str(root / "ds"),
                 "--task-weights", str(root / "weights.json"), "-q"]) == 0
    assert main(["train", str(root / "ds"), "--out", str(root / "m.pt"), "--held-out", "test_mm", "--epochs", "3",
                 "--set", "hidden=32", "-q"]) == 0
    return root


def test_train_and_eval_on_ansor_records(mmperf_dataset, capsys):
    model = TLPModel.load(mmperf_dataset / "m.pt")
    assert isinstance(model.featurizer, AnsorStepFeaturizer)
    assert (model.featurizer.config.seq_len, model.featurizer.config.width) == (40, 20)  # CUDA records
    assert model.meta["held_out_networks"] == ["test_mm"] and model.meta["train_tasks"] >= 3
    capsys.readouterr()
    assert main(["eval", "--model", str(mmperf_dataset / "m.pt"), "--dataset", str(mmperf_dataset / "ds"),
                 "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert set(results) == {"tlp", "random", "data", "bootstrap"}
    assert set(results["bootstrap"]["differences"]) == {"random"}  # TLP's lead over random, with its interval
    assert results["data"]["test_tasks"] == 2 and results["data"]["train_tasks"] == 4
    for name in ("tlp", "random"):
        assert 0 < results[name]["per_network"]["test_mm"]["top1"] <= results[name]["top5"] <= 1
    # MetaSchedule's baselines cannot read Ansor records: a clear message, exit code 2.
    assert main(["eval", "--model", str(mmperf_dataset / "m.pt"), "--dataset", str(mmperf_dataset / "ds"),
                 "--baselines", "xgb"]) == 2
    assert "MetaSchedule program features" in capsys.readouterr().err


def test_checkpoint_round_trip_and_format_mismatches(mmperf_dataset, capsys):
    dataset = Dataset(mmperf_dataset / "ds")
    programs = load_programs(dataset, dataset.platform_ids()[0])
    model = TLPModel.load(mmperf_dataset / "m.pt")
    scores = model.predict(programs.traces[:16])
    again = TLPModel.load(mmperf_dataset / "m.pt")
    assert np.array_equal(scores, again.predict(programs.traces[:16]))
    # The shipped MetaSchedule model on Ansor records, and an Ansor model in MetaSchedule's search: clear errors.
    assert main(["eval", "--model", "tlp-cpu", "--dataset", str(mmperf_dataset / "ds"), "--baselines", "",
                 "--platform", dataset.platform_ids()[0]]) == 2
    assert "this model reads metaschedule records" in capsys.readouterr().err
    from tlp.search.cost_model import TLPCostModel  # pylint: disable=import-outside-toplevel

    with pytest.raises(CheckpointError, match="Ansor steps"):
        TLPCostModel(model)


def test_mtl_heads_on_two_ansor_platforms(tmp_path):
    """The same programs on two GPUs (the second's latencies made up from the first's): one head each."""
    second = []
    for line in _lines(MMPERF):
        record = json.loads(line)
        record["i"][0][1] = record["i"][0][1].replace("sm_80", "sm_86")
        record["r"][0] = [c * (1.5 if record["i"][1][1][1][4][0] > 1 else 0.7) for c in record["r"][0]]
        second.append(json.dumps(record))
    (tmp_path / "sm86.json").write_text("\n".join(second) + "\n")
    dataset = Dataset(tmp_path / "ds")
    import_ansor(dataset, [MMPERF, tmp_path / "sm86.json"], progress=False)
    assert len(dataset.platform_ids()) == 2
    from tlp.features.tensors import load_platforms  # pylint: disable=import-outside-toplevel

    data = load_platforms(dataset, dataset.platform_ids())
    assert data.record_format == ANSOR_FORMAT and data.latencies.shape == (240 - 31, 2)
    model = TLPModel(AnsorStepConfig.paper("cuda"), ModelConfig(hidden=32), TrainConfig(epochs=2))
    model.fit(data, progress=False)
    assert model.platforms == dataset.platform_ids() and len(model.net.heads) == 2
    scores = [model.predict(data.traces[:8], head=h) for h in (0, 1)]
    assert not np.allclose(scores[0], scores[1])
    model.save(tmp_path / "mtl.pt")
    assert TLPModel.load(tmp_path / "mtl.pt").platforms == model.platforms
    shutil.rmtree(tmp_path / "ds")


def test_an_unknown_log_version_is_skipped_and_an_import_of_nothing_usable_fails(tmp_path, capsys):
    # A record claiming log version v9.9 was imported, though only v0.2-v0.6 are read; and an import where nothing
    # was usable exited 0.
    good = _lines(MMPERF)
    future = json.loads(good[0])
    future["v"] = "v9.9"
    (tmp_path / "future.json").write_text(json.dumps(future) + "\n" + good[1] + "\n")
    summary = import_ansor(Dataset(tmp_path / "ds"), [tmp_path / "future.json"], progress=False)
    assert summary.imported == 1 and summary.skipped == {"log version v9.9: only v0.2-v0.6 are read": 1}
    (tmp_path / "only_future.json").write_text(json.dumps(future) + "\n")
    assert main(["dataset", "import", "--format", "ansor", str(tmp_path / "only_future.json"), "--dataset",
                 str(tmp_path / "empty"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nothing imported" in err and "log version v9.9" in err
    assert not Dataset(tmp_path / "empty").platform_ids()  # no empty platform folder left behind
