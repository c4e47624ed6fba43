"""A seed ensemble as one model: saved and loaded as one checkpoint, scoring the mean of its members, inside the
search, with heads added and trained like a single model's."""

import json

import numpy as np
import pytest
import torch

from tlp._tvm import ms, structural_hash, trace_json, tvm
from tlp.dataset.sampler import CandidateSampler
from tlp.features.tensors import load_programs
from tlp.model.ensemble import TLPEnsemble
from tlp.model.estimator import CheckpointError, TLPModel, TrainConfig
from tlp.model.network import ModelConfig
from tlp.search import OnlineTuning, TLPCostModel

from conftest import tlp_cli, tune_context


def _train(dataset, platform_id, seed, seq_len=None):
    from tlp.features.featurizer import FeatureConfig

    model = TLPModel(FeatureConfig(**({"seq_len": seq_len} if seq_len else {})),
                     ModelConfig(hidden=32, heads=4), TrainConfig(epochs=2, val_fraction=0.5, seed=seed))
    model.fit(load_programs(dataset, platform_id), progress=False)
    return model


@pytest.fixture(scope="module")
def members(collected, host_platform, tmp_path_factory):
    """Two seeds of one tiny recipe, saved as checkpoints, and the CLI's ensemble of them."""
    dataset, _ = collected
    folder = tmp_path_factory.mktemp("ensemble")
    paths = []
    for seed in (3, 4):
        model = _train(dataset, host_platform.id, seed)
        model.meta["platform_info"] = {host_platform.id: host_platform.to_json()}
        model.platforms = [host_platform.id]
        paths.append(folder / f"seed{seed}.pt")
        model.save(paths[-1])
    out = folder / "ensemble.pt"
    run = tlp_cli(["train", "--ensemble-of", *map(str, paths), "--out", str(out)])
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"out": str(out), "members": 2, "heads": [host_platform.id]}
    return paths, out


def test_an_ensemble_checkpoint_loads_as_one_model_scoring_the_mean_of_its_members(collected, host_platform,
                                                                                      members, tmp_path):
    dataset, _ = collected
    paths, out = members
    ensemble = TLPModel.load(out)
    assert isinstance(ensemble, TLPEnsemble) and len(ensemble.members) == 2
    assert ensemble.meta["member_checkpoints"] == [str(p) for p in paths]
    programs = load_programs(dataset, host_platform.id)
    extents = [programs.extents[k] for k in programs.task_keys]
    singles = [TLPModel.load(p).predict(programs.traces, extents) for p in paths]
    assert not np.allclose(singles[0], singles[1])  # two seeds: two rankings
    assert np.allclose(ensemble.predict(programs.traces, extents), np.mean(singles, axis=0), atol=1e-6)
    ensemble.save(tmp_path / "again.pt")
    again = TLPModel.load(tmp_path / "again.pt")
    assert np.array_equal(again.predict(programs.traces, extents), ensemble.predict(programs.traces, extents))


def test_the_search_scores_with_the_ensemble_and_fine_tunes_every_member(collected, members, tiny_tasks,
                                                                          host_platform):
    dataset, _ = collected
    _, out = members
    task = next(t for t in tiny_tasks if t.name == "dense_64x64x64")
    context = tune_context(task, host_platform.target, "replay-trace")
    batch = CandidateSampler(task, host_platform.target).random(16, seed=5)
    cost_model = TLPCostModel(str(out), OnlineTuning(steps=2, lr=1e-3), target=host_platform.target)
    scores = cost_model.predict(context, batch)
    assert scores.shape == (16,) and (scores > 0).all() and np.isfinite(scores).all()
    raw = TLPModel.load(out).predict_features(
        cost_model.model.featurizer.transform([trace_json(c.sch.trace) for c in batch],
                                              [cost_model._task(context).extents] * len(batch)))
    assert (np.argsort(-scores, kind="stable") == np.argsort(-raw, kind="stable")).all()

    workload = ms.database.Workload(task.mod)
    target_json = tvm.target.Target(host_platform.target).export()
    measured = [p for p in dataset.store(host_platform.id).latest_programs().values()
                if p.workload_key == task.key and p.latency]
    candidates = [ms.database.TuningRecord.from_json([p.trace_json, p.run_secs, target_json, p.args_info],
                                                     workload).as_measure_candidate() for p in measured]
    before = [{k: v.clone() for k, v in m.net.state_dict().items()} for m in cost_model.model.members]
    cost_model.update(context, candidates, [ms.runner.RunnerResult(p.run_secs, None) for p in measured])
    assert cost_model.fine_tune_steps == 4  # 2 steps in each of 2 members
    for member, state in zip(cost_model.model.members, before):
        assert any(not torch.equal(state[k], v) for k, v in member.net.state_dict().items())


def test_members_that_cannot_be_read_together_are_refused(collected, host_platform, members, tmp_path):
    dataset, _ = collected
    paths, out = members
    other_crop = _train(dataset, host_platform.id, 5, seq_len=12)
    other_crop.platforms = [host_platform.id]
    with pytest.raises(CheckpointError, match="member 2 featurizes differently"):
        TLPEnsemble([TLPModel.load(paths[0]), other_crop])
    two_heads = TLPModel.load(paths[1])
    two_heads.add_platforms({"llvm-elsewhere": {**host_platform.to_json(), "id": "llvm-elsewhere"}})
    with pytest.raises(CheckpointError, match="member 2 has heads"):
        TLPEnsemble([TLPModel.load(paths[0]), two_heads])
    result = tlp_cli(["train", "--ensemble-of", str(out), str(paths[0]), "--out", str(tmp_path / "x.pt")])
    assert result.returncode != 0 and "already an ensemble" in result.stderr and not (tmp_path / "x.pt").exists()
    payload = torch.load(str(out), weights_only=True)
    payload["members"] = payload["members"][:1]  # a damaged file: one member lost
    torch.save(payload, str(tmp_path / "damaged.pt"))
    with pytest.raises(CheckpointError, match="damaged.pt: an ensemble checkpoint whose members are missing"):
        TLPModel.load(tmp_path / "damaged.pt")


def test_adapt_and_add_heads_give_every_member_the_new_head(collected, host_platform, members, tmp_path,
                                                            fast_measure):
    """``tlp adapt`` / ``tlp train --add-heads-to`` on an ensemble: each member gains the platform's head, trained
    on the same (once featurized) programs or copied from the same nearest head."""
    from tlp.dataset.collect import remeasure
    from tlp.dataset.store import Dataset
    from tlp.model.adapt import adapt
    from tlp.platform import Platform, parse_target
    import shutil

    dataset, _ = collected
    _, out = members
    copy = Dataset(tmp_path / "d")
    shutil.copytree(dataset.path, copy.path, ignore=lambda folder, names: [
        n for n in names if folder == str(dataset.path) and n.startswith("llvm-") and n != host_platform.id])
    sse = Platform.host(parse_target({"kind": "llvm", "mcpu": "x86-64-v2", "num-cores": 2}))
    remeasure(copy, copy.store(host_platform.id), sse, fast_measure, progress=False)
    ensemble = TLPModel.load(out)
    backbones = [[p.detach().clone() for p in m.net.backbone_parameters()] for m in ensemble.members]
    report = adapt(copy, ensemble, sse, tmp_path / "adapted.pt", train_fraction=0.0, held_out_fraction=0.0,
                   freeze_backbone=True, progress=False, min_programs=4, head_soup=1)
    assert report.nearest_head == host_platform.id and report.measured_now == 0
    adapted = TLPModel.load(tmp_path / "adapted.pt")
    assert isinstance(adapted, TLPEnsemble) and adapted.platforms == [host_platform.id, sse.id]
    assert all(m.platforms == adapted.platforms for m in adapted.members)
    assert set(adapted.meta["platform_info"]) == {host_platform.id, sse.id}
    assert len(adapted.meta["adapted"][sse.id]) == 2  # one record per member
    for member, backbone in zip(adapted.members, backbones):
        assert all(torch.equal(a, b) for a, b in zip(backbone, member.net.backbone_parameters()))

    run = tlp_cli(["train", str(copy.path), "--add-heads-to", str(out), "--out", str(tmp_path / "copies.pt")])
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["added"] == {sse.id: host_platform.id}
    copied = TLPModel.load(tmp_path / "copies.pt")
    assert copied.meta["head_sources"] == {sse.id: host_platform.id}
    programs = load_programs(dataset, host_platform.id)
    extents = [programs.extents[k] for k in programs.task_keys]
    assert np.allclose(copied.predict(programs.traces, extents, 0), copied.predict(programs.traces, extents, 1))


def test_a_cascade_reorders_only_the_first_stages_top_by_the_ensemble(collected, host_platform, members, tmp_path):
    """``--first-stage``: a shorter-crop model ranks every candidate, the ensemble re-ranks its top few; the rest
    keep the first stage's scores, and the first stage reads the ensemble's features exactly as its own."""
    from tlp.model.cascade import TLPCascade

    dataset, _ = collected
    paths, _ = members
    first = _train(dataset, host_platform.id, 6, seq_len=12)
    first.platforms = [host_platform.id]
    first.save(tmp_path / "first.pt")
    out = tmp_path / "cascade.pt"
    run = tlp_cli(["train", "--ensemble-of", *map(str, paths), "--first-stage", str(tmp_path / "first.pt"),
                   "--set", "rescore_least=4", "--out", str(out)])
    assert run.returncode == 0, run.stderr
    cascade = TLPModel.load(out)
    assert isinstance(cascade, TLPCascade) and cascade.least == 4 and len(cascade.second.members) == 2
    programs = load_programs(dataset, host_platform.id)
    extents = [programs.extents[k] for k in programs.task_keys]
    features = cascade.featurizer.transform(programs.traces, extents)  # the ensemble's crop (80 rows)
    assert features.shape[1] == 80 and first.featurizer.config.seq_len == 12
    alone = first.predict(programs.traces, extents)
    scores = cascade.predict_features(features)
    assert np.allclose(cascade.predict(programs.traces, extents), scores)
    top = np.argsort(-alone, kind="stable")[:4]
    rest = np.setdiff1d(np.arange(len(alone)), top)
    assert np.allclose(scores[rest], alone[rest], atol=1e-5)  # read through the translation: the same scores
    assert np.allclose(np.sort(scores[top]), np.sort(alone[top]), atol=1e-5)  # the top keeps its values...
    ensemble = cascade.second.predict_features(features[top])
    assert (np.argsort(-scores[top], kind="stable") == np.argsort(-ensemble, kind="stable")).all()  # ...reordered
    # tlp eval scores a task's programs in one call, as a search does: a cascade re-ranks each task's top.
    from tlp.evaluation import head_scores

    evaluated = head_scores(cascade, programs, host_platform.id)
    keys = np.asarray(programs.task_keys)
    assert len(set(programs.task_keys)) > 1
    for key in set(programs.task_keys):
        index = np.nonzero(keys == key)[0]
        assert np.allclose(evaluated[index], cascade.predict([programs.traces[i] for i in index],
                                                             [programs.extents[key]] * len(index)))
    cascade.save(tmp_path / "again.pt")
    assert np.array_equal(TLPModel.load(tmp_path / "again.pt").predict_features(features), scores)

    result = tlp_cli(["train", "--first-stage", str(tmp_path / "first.pt"), "--out", str(tmp_path / "x.pt")])
    assert result.returncode == 2 and "--ensemble-of" in result.stderr and not (tmp_path / "x.pt").exists()
    result = tlp_cli(["train", "--ensemble-of", *map(str, paths), "--first-stage", str(tmp_path / "first.pt"),
                      "--set", "rescore_least=0", "--out", str(tmp_path / "x.pt")])
    assert result.returncode == 2 and "at least 1" in result.stderr and not (tmp_path / "x.pt").exists()
    with pytest.raises(CheckpointError, match="cannot read the second stage's features"):
        TLPCascade(TLPModel.load(paths[0]), TLPModel.load(tmp_path / "first.pt"))  # a longer crop first
