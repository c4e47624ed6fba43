"""MTL-TLP on real measurements: the same programs on two platforms of this machine (native and x86-64-v2)."""

import json
from pathlib import Path
import warnings

import numpy as np
import pytest

from tlp.dataset.measure import MeasureConfig
from tlp.dataset.collect import remeasure, sample_order, sample_tasks, task_quantile
from tlp.dataset.store import Dataset, DatasetError
from tlp.features.tensors import load_platforms, load_programs
from tlp.model.estimator import CheckpointError, TLPModel, TrainConfig
from tlp.model.network import ModelConfig
from tlp.platform import Platform, TargetError, nearest_platform, parse_target

from conftest import tlp_cli

SSE_TARGET = {"kind": "llvm", "mcpu": "x86-64-v2", "num-cores": 2}


@pytest.fixture(scope="module")
def two_platforms(collected, host_platform, tmp_path_factory):
    """The tiny collection, copied, plus the same programs re-measured for an SSE4.2 target on this host."""
    import shutil

    source, _ = collected
    dataset = Dataset(tmp_path_factory.mktemp("mtl") / "d")
    # Only the native platform: other tests add platforms to the shared collection.
    shutil.copytree(source.path, dataset.path,
                    ignore=lambda folder, names: [n for n in names if Path(folder) == source.path and n.startswith(
                        "llvm-") and n != host_platform.id])
    sse = Platform.host(parse_target(SSE_TARGET))
    summary = remeasure(dataset, dataset.store(host_platform.id), sse, MeasureConfig(min_repeat_ms=2), progress=False)
    assert summary.measured == len(dataset.store(host_platform.id).latest_programs())
    return dataset, host_platform, sse


def small_model(epochs=3):
    return TLPModel(model_config=ModelConfig(hidden=32, heads=4), train_config=TrainConfig(epochs=epochs,
                                                                                            val_fraction=0.5))


def test_platform_id_says_the_target_runs_on_another_cpu(two_platforms):
    _, native, sse = two_platforms
    assert "-on-" not in native.id
    assert sse.id.startswith("llvm-x86-64-v2-2c-on-") and native.target["mcpu"] in sse.id


def test_join_puts_one_program_on_one_row(two_platforms):
    dataset, native, sse = two_platforms
    data = load_platforms(dataset, [native.id, sse.id], min_programs=4)
    assert data.latencies.shape == (len(load_programs(dataset, native.id).traces), 2)
    labels = data.labels()
    measured = ~np.isnan(data.latencies)
    assert measured.all(axis=0).any()
    groups = data.group_ids()
    for column in range(2):  # labels are normalized per task *and* platform: each task's best is 1 on each
        for group in np.unique(groups[measured[:, column]]):
            rows = (groups == group) & measured[:, column]
            assert labels[rows, column].max() == pytest.approx(1.0)
    assert len(data.platform(sse.id).traces) == measured[:, 1].sum()


def test_mtl_model_has_a_head_per_platform_and_round_trips(two_platforms, tmp_path):
    dataset, native, sse = two_platforms
    data = load_platforms(dataset, [native.id, sse.id], min_programs=4)
    model = small_model()
    model.fit(data, progress=False)
    assert model.platforms == [native.id, sse.id] and len(model.net.heads) == 2
    programs = data.platform(sse.id)
    extents = [programs.extents[k] for k in programs.task_keys]
    by_head = [model.predict(programs.traces, extents, head) for head in (0, 1)]
    assert not np.allclose(by_head[0], by_head[1])  # the heads are different functions
    model.save(tmp_path / "mtl.pt")
    loaded = TLPModel.load(tmp_path / "mtl.pt")
    assert loaded.platforms == model.platforms
    assert np.allclose(loaded.predict(programs.traces, extents, loaded.head_index(sse.id)), by_head[1], atol=1e-6)
    with pytest.raises(CheckpointError, match="no head for platform llvm-other"):
        loaded.head_index("llvm-other")


def test_a_platform_without_training_programs_gets_the_nearest_trained_head(two_platforms):
    """Its programs all held out, a platform's head gets no gradient: it must not ship random (it scored 0.459 so)."""
    import copy

    dataset, native, sse = two_platforms
    data = copy.deepcopy(load_platforms(dataset, [native.id, sse.id], min_programs=4))
    data.latencies[:, 1] = np.nan  # nothing measured on SSE4.2 among the training programs
    data.latencies[:1, 1] = 1e-3  # one program: still no pair to rank
    info = {p.id: p.to_json() for p in (native, sse)}
    model = small_model(epochs=2)
    model.fit(data, progress=False, platform_info=info)
    assert model.meta["head_sources"] == {sse.id: native.id}
    programs = data.platform(native.id)
    extents = [programs.extents[k] for k in programs.task_keys]
    assert np.allclose(model.predict(programs.traces, extents, 0), model.predict(programs.traces, extents, 1))
    trained = small_model(epochs=2)
    trained.fit(load_platforms(dataset, [native.id, sse.id], min_programs=4), progress=False, platform_info=info)
    assert "head_sources" not in trained.meta  # both heads trained: none copied


def test_fit_head_adds_a_platform_and_leaves_the_others(two_platforms, tiny_checkpoint):
    dataset, native, sse = two_platforms
    model = TLPModel.load(tiny_checkpoint)
    programs = load_programs(dataset, native.id)
    extents = [programs.extents[k] for k in programs.task_keys]
    before = model.predict(programs.traces, extents, 0)
    model.fit_head(load_programs(dataset, sse.id), copy_of=native.id, freeze_backbone=True, progress=False)
    assert model.platforms == [native.id, sse.id]
    assert np.allclose(model.predict(programs.traces, extents, 0), before, atol=1e-6)  # frozen backbone
    assert model.meta["adapted"][sse.id]["copy_of"] == native.id


def test_head_soup_is_the_mean_of_its_seeds_heads(two_platforms, tiny_checkpoint):
    """``fit_head(soup=K)``: K heads from the same start (seeds s..s+K-1), their weights averaged, the backbone and the
    other heads untouched; the same heads as K separate trainings. A soup over a moving backbone is refused."""
    import dataclasses

    import torch

    from tlp import TLPError
    from tlp.model.adapt import adapt

    dataset, native, sse = two_platforms
    programs = load_programs(dataset, sse.id)
    singles = []
    for seed in (0, 1):
        model = TLPModel.load(tiny_checkpoint)
        model.train_config = dataclasses.replace(model.train_config, seed=seed, epochs=2)
        model.fit_head(programs, copy_of=native.id, freeze_backbone=True, progress=False)
        singles.append(model.net.heads[1].state_dict())
    assert any(not torch.equal(singles[0][k], singles[1][k]) for k in singles[0])  # the seeds differ
    soup = TLPModel.load(tiny_checkpoint)
    soup.train_config = dataclasses.replace(soup.train_config, seed=0, epochs=2)
    backbone = [p.detach().clone() for p in soup.net.backbone_parameters()]
    native_head = {k: v.clone() for k, v in soup.net.heads[0].state_dict().items()}
    soup.fit_head(programs, copy_of=native.id, freeze_backbone=True, progress=False, soup=2)
    for key, value in soup.net.heads[1].state_dict().items():
        assert torch.allclose(value, (singles[0][key] + singles[1][key]) / 2, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(backbone, soup.net.backbone_parameters()))
    assert all(torch.equal(v, soup.net.heads[0].state_dict()[k]) for k, v in native_head.items())
    assert soup.train_config.seed == 0 and soup.meta["adapted"][sse.id]["soup"] == 2
    with pytest.raises(ValueError, match="freeze_backbone"):
        TLPModel.load(tiny_checkpoint).fit_head(programs, copy_of=native.id, freeze_backbone=False, soup=2)
    with pytest.raises(TLPError, match="--freeze-backbone"):
        adapt(dataset, TLPModel.load(tiny_checkpoint), dataset.store(sse.id).platform, Path("never.pt"),
              train_fraction=0.0, held_out_fraction=0.0, head_soup=3, progress=False, min_programs=4)
    result = tlp_cli(["adapt", "--dataset", str(dataset.path), "--model", str(tiny_checkpoint), "--platform", sse.id,
                      "--freeze-backbone", "--set", "head_soup=0"])
    assert result.returncode == 2 and "head_soup must be at least 1" in result.stderr


def test_train_add_heads_to_gives_a_model_the_dataset_platforms_it_lacks(two_platforms, tiny_checkpoint, tmp_path):
    """New data of a new platform: the shipped model gets that platform's head as a copy of the nearest trained one
    (a project command, so the model and its dataset cannot drift apart), and copies are never copied from."""
    dataset, native, sse = two_platforms
    out = tmp_path / "more-heads.pt"
    run = tlp_cli(["train", str(dataset.path), "--add-heads-to", str(tiny_checkpoint), "--out", str(out)])
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["added"] == {sse.id: native.id}
    model = TLPModel.load(out)
    assert model.platforms == [native.id, sse.id] and model.meta["head_sources"] == {sse.id: native.id}
    assert set(model.meta["platform_info"]) == {native.id, sse.id}
    programs = load_programs(dataset, native.id)
    extents = [programs.extents[k] for k in programs.task_keys]
    assert np.allclose(model.predict(programs.traces, extents, 0), model.predict(programs.traces, extents, 1))
    assert model.add_platforms({sse.id: sse.to_json()}) == {}  # already there: nothing added
    third = Platform.host(parse_target({**SSE_TARGET, "num-cores": 1}))  # nearest would be sse, a copy
    assert model.add_platforms({third.id: third.to_json()}) == {third.id: native.id}  # not the copy (sse)
    # A checkpoint that does not describe its own platform (trained from featurized programs outside tlp train):
    # the dataset does, so the nearest head can still be chosen.
    bare = TLPModel.load(tiny_checkpoint)
    bare.meta.pop("platform_info", None)
    bare.save(tmp_path / "bare.pt")
    run = tlp_cli(["train", str(dataset.path), "--add-heads-to", str(tmp_path / "bare.pt"), "--out", str(out)])
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["added"] == {sse.id: native.id}
    assert TLPModel.load(out).meta["platform_info"][native.id] == native.to_json()


def test_packaged_single_decoder_checkpoint_loads_as_one_head():
    from tlp.models import model_path

    model = TLPModel.load(model_path("tlp-cpu-small"))  # still in the single-decoder format 1
    assert len(model.net.heads) == 1 and len(model.platforms) == 1


def test_packaged_default_has_a_head_per_dataset_platform():
    from tlp.models import model_path
    from tlp.workloads import held_out_networks

    model = TLPModel.load(model_path())
    platforms = sorted(p.name for p in (Path(__file__).resolve().parent.parent / "datasets" / "tlp-cpu").iterdir()
                       if p.is_dir())
    assert sorted(model.platforms) == platforms
    assert all(len(network.net.heads) == len(platforms) for network in getattr(model, "parts", [model]))
    assert sorted(model.meta["held_out_networks"]) == sorted(held_out_networks())  # never trained on the test networks
    assert set(model.meta["platform_info"]) == set(platforms)


def test_tlp_train_platforms_writes_every_head(two_platforms, tmp_path):
    dataset, native, sse = two_platforms
    out = tmp_path / "mtl.pt"
    run = tlp_cli(["train", str(dataset.path), "--platforms", "all", "--out", str(out), "--epochs", "2",
                   "--set", "hidden=32", "--set", "min_head_programs=4", "-q"])
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["heads"] == sorted([native.id, sse.id])
    meta = TLPModel.load(out).meta
    assert set(meta["platform_info"]) == {native.id, sse.id}
    bad = tlp_cli(["train", str(dataset.path), "--platforms", f"{native.id},llvm-nope", "--out",
                   str(out)])
    assert bad.returncode == 2 and "no platform llvm-nope" in bad.stderr and "Traceback" not in bad.stderr


def test_mtl_refuses_platforms_that_share_no_program(two_platforms, tmp_path):
    import shutil

    dataset, native, sse = two_platforms
    copy = Dataset(tmp_path / "d")
    shutil.copytree(dataset.path, copy.path)
    # Keep only one task's records on the SSE platform and the other task's on the native one.
    keys = sorted(set(load_programs(dataset, native.id).task_keys))
    for platform_id, keep in ((native.id, keys[0]), (sse.id, keys[1])):
        store = copy.store(platform_id)
        programs = [p for p in store.latest_programs().values() if p.workload_key == keep]
        shutil.rmtree(store.path)
        new = copy.store_for(store.platform)
        with new:
            new.add_workload(dataset.store(platform_id).workload_json(keep))
            new.append(programs)
    with pytest.raises(DatasetError, match="shares no program"):
        load_platforms(copy, [native.id, sse.id], min_programs=1)
    with pytest.raises(DatasetError, match="a head needs at least 64"):
        load_platforms(copy, [native.id, sse.id])


def test_sample_order_puts_held_out_first_and_nests_fractions(two_platforms):
    dataset, native, _ = two_platforms
    programs = list(dataset.store(native.id).latest_programs().values())
    catalogue = dataset.catalogue()
    first_network = next(iter(catalogue[programs[0].workload_key]["networks"]))
    order = sample_order(programs, catalogue, fraction=1.0, first_networks=[first_network])
    assert order[0].workload_key == programs[0].workload_key
    assert len(order) == len(programs)
    training_only = sample_order(programs, catalogue, first_networks=[first_network], first_fraction=0.0)
    assert training_only and all(first_network not in catalogue[p.workload_key]["networks"] for p in training_only)
    sizes = {str(i): 10 for i in range(200)}
    small, large = sample_tasks(sizes, 0.03), sample_tasks(sizes, 0.15)
    assert set(small) < set(large) and len(small) == 6 and len(large) == 30
    assert large == sorted(large, key=task_quantile)
    # search-sized tasks: a small positive share is still one task (nested), a zero share none
    few_large = {str(i): 1000 + i for i in range(5)}
    assert len(sample_tasks(few_large, 0.03)) == 1 and set(sample_tasks(few_large, 0.03)) <= set(
        sample_tasks(few_large, 0.5))
    assert sample_tasks(few_large, 0.0) == []


def test_nearest_platform_prefers_the_same_isa_family():
    known = {
        "avx2": {"target": {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}},
        "avx512": {"target": {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}},
        "sse": {"target": {"kind": "llvm", "mcpu": "x86-64-v2", "num-cores": 2}},
    }
    wanted = Platform({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    assert nearest_platform(wanted, known) == ("avx512", False)
    assert nearest_platform(Platform({"kind": "llvm", "mcpu": "haswell", "num-cores": 2}), known) == ("avx2", False)
    assert nearest_platform(Platform(known["sse"]["target"]), {**known, Platform(known["sse"]["target"]).id: {}})[1]
    # No head of its own family: the neighbouring ISA (AVX2 for SSE4.2), whichever head comes first.
    without_sse = {"avx512": known["avx512"], "avx2": known["avx2"]}
    assert nearest_platform(Platform(known["sse"]["target"]), without_sse) == ("avx2", False)


def test_a_target_this_cpu_cannot_run_is_refused_up_front(tmp_path):
    from tlp.platform import host_cpu_name

    if host_cpu_name() in ("sapphirerapids", "graniterapids", "emeraldrapids"):
        pytest.skip("this CPU has AMX")
    before = set(tmp_path.iterdir())
    with pytest.raises(TargetError, match="amx-tile.*cannot run here"):
        Platform.host(parse_target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}))
    run = tlp_cli(["collect", "--dataset", str(tmp_path / "d"), "--workloads", "dense_64x64x64",
                   "--target", '{"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}'])
    assert run.returncode == 2 and "cannot run here" in run.stderr and "Traceback" not in run.stderr
    assert set(tmp_path.iterdir()) == before  # nothing stored


def test_cost_model_picks_the_head_of_the_tuned_platform(two_platforms, tmp_path, monkeypatch):
    from tlp.search import PlatformMismatchWarning, TLPCostModel

    dataset, native, sse = two_platforms
    model = small_model(epochs=1)
    model.fit(load_platforms(dataset, [native.id, sse.id], min_programs=4), progress=False)
    model.meta["platform_info"] = {native.id: native.to_json(), sse.id: sse.to_json()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlatformMismatchWarning)
        assert TLPCostModel(model, target=sse.target).head_platform == sse.id
        assert TLPCostModel(model, target=native.target).head_platform == native.id
    with pytest.warns(PlatformMismatchWarning, match="nearest"):
        chosen = TLPCostModel(model, target=parse_target({"kind": "llvm", "mcpu": "x86-64-v3", "num-cores": 2}))
    assert chosen.head_platform in (native.id, sse.id)


def test_adapt_measures_here_trains_a_head_and_is_found_by_default(two_platforms, tiny_checkpoint, tmp_path,
                                                                     monkeypatch, fast_measure):
    import shutil

    from tlp.model.adapt import adapt
    from tlp.models import adapted_model_path
    from tlp.search import TLPCostModel

    dataset, native, _ = two_platforms
    copy = Dataset(tmp_path / "d")
    shutil.copytree(dataset.path, copy.path, ignore=shutil.ignore_patterns("llvm-x86-64-v2*"))
    monkeypatch.setenv("TLP_MODELS_DIR", str(tmp_path / "models"))
    avx2 = Platform.host(parse_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2}))
    base = TLPModel.load(tiny_checkpoint)
    base.meta["platform_info"] = {native.id: native.to_json()}
    report = adapt(copy, base, avx2, adapted_model_path(avx2.id), train_fraction=1.0, held_out_fraction=1.0,
                   measure_config=fast_measure, progress=False, min_programs=4)
    assert report.measured_now == len(load_programs(copy, native.id).traces) and report.nearest_head == native.id
    assert report.train_programs == report.measured_now  # the tiny tasks are all training tasks
    found = TLPCostModel(target=avx2.target)
    assert found.head_platform == avx2.id and found.model.platforms == [native.id, avx2.id]
    # Re-running measures nothing again (resumable), and too few programs for a head is a clear error.
    again = adapt(copy, TLPModel.load(tiny_checkpoint), avx2, tmp_path / "again.pt", train_fraction=1.0,
                  held_out_fraction=1.0, progress=False, min_programs=4)
    assert again.measured_now == 0
    with pytest.raises(DatasetError, match="a head needs at least 64"):
        adapt(copy, TLPModel.load(tiny_checkpoint), avx2, tmp_path / "x.pt", progress=False)
    assert len(load_programs(copy, avx2.id).traces) == report.train_programs  # measurements kept


def test_adapt_trains_a_head_for_another_machines_stored_programs_measuring_nothing(two_platforms, tiny_checkpoint,
                                                                                    tmp_path):
    """``tlp adapt --platform ID``: a head for a platform this machine cannot measure (its programs are stored)."""
    import torch

    from tlp.model.adapt import adapt

    dataset, native, sse = two_platforms
    stored = {p: len(dataset.store(p).latest_programs()) for p in dataset.platform_ids()}
    base = TLPModel.load(tiny_checkpoint)
    backbone = [p.detach().clone() for p in base.net.backbone_parameters()]
    report = adapt(dataset, base, dataset.store(sse.id).platform, tmp_path / "frozen.pt", train_fraction=0.0,
                   held_out_fraction=0.0, freeze_backbone=True, progress=False, min_programs=4)
    assert report.measured_now == 0 and report.nearest_head == native.id
    assert report.train_programs == len(load_programs(dataset, sse.id).traces)
    assert {p: len(dataset.store(p).latest_programs()) for p in dataset.platform_ids()} == stored
    adapted = TLPModel.load(tmp_path / "frozen.pt")
    assert adapted.platforms == [native.id, sse.id]
    assert report.head_soup == 4 and adapted.meta["adapted"][sse.id]["soup"] == 4  # the default with a frozen backbone
    # Frozen: the backbone is unchanged, so the other heads score exactly as before.
    assert all(torch.equal(a, b) for a, b in zip(backbone, adapted.net.backbone_parameters()))

    result = tlp_cli(["adapt", "--dataset", str(dataset.path), "--model", str(tiny_checkpoint), "--platform", sse.id,
                      "--out", str(tmp_path / "cli.pt")])
    assert result.returncode == 2 and "a head needs at least 64" in result.stderr
    assert "tlp collect" in result.stderr and not (tmp_path / "cli.pt").exists()
    result = tlp_cli(["adapt", "--dataset", str(dataset.path), "--model", str(tiny_checkpoint), "--platform",
                      "llvm-nowhere", "--out", str(tmp_path / "cli.pt")])
    assert result.returncode == 2 and "holds no platform llvm-nowhere" in result.stderr and sse.id in result.stderr
    result = tlp_cli(["adapt", "--dataset", str(dataset.path), "--model", str(tiny_checkpoint), "--platform", sse.id,
                      "--set", "fraction=0.1"])
    assert result.returncode == 2 and "fraction and held_out_fraction do not apply" in result.stderr
    assert {p: len(dataset.store(p).latest_programs()) for p in dataset.platform_ids()} == stored


def test_adapt_report_without_a_held_out_sample_says_so_in_valid_json():
    """A held-out share that measured nothing leaves no score: the report says why, and its JSON has no NaN."""
    import json

    from tlp.model.adapt import AdaptReport, format_adapt_report

    report = AdaptReport(platform="llvm-new", nearest_head="llvm-old", measured_now=3712, train_programs=3703,
                         test_programs=0, freeze_backbone=True, top1_nearest_head=None, top1_own_head=None,
                         top5_nearest_head=None, top5_own_head=None, measure_seconds=1136.6, train_seconds=125.6,
                         out="m.pt", head_soup=4)
    assert "no score" in format_adapt_report(report) and "held_out_fraction" in format_adapt_report(report)
    assert json.loads(json.dumps(report.to_json(), allow_nan=False))["top1_own_head"] is None
