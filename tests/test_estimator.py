"""TLPModel on real measured programs: fit, predict, checkpoints."""

import dataclasses
import json
import re

import numpy as np
import pytest
import torch

from tlp.features.tensors import load_programs
from tlp.model.estimator import CheckpointError, TLPModel, TrainConfig, top_k_score
from tlp.model.network import ModelConfig


@pytest.fixture(scope="module")
def trained(collected, host_platform):
    dataset, _ = collected
    programs = load_programs(dataset, host_platform.id)
    model = TLPModel(model_config=ModelConfig(hidden=32, heads=4),
                     train_config=TrainConfig(epochs=3, val_fraction=0.5, seed=3))
    history = model.fit(programs, progress=False)
    return model, programs, history


def test_fit_trains_and_keeps_the_best_epoch(trained):
    model, programs, history = trained
    assert len(history.epochs) == 3 and 0 <= history.best_epoch < 3
    assert model.meta["train_tasks"] + model.meta["val_tasks"] == len(set(programs.task_keys))
    scores = model.predict(programs.traces, [programs.extents[k] for k in programs.task_keys])
    assert scores.shape == (len(programs.traces),) and np.isfinite(scores).all()


def test_training_is_deterministic_with_a_seed(collected, host_platform, trained):
    model, programs, _ = trained
    again = TLPModel(model_config=ModelConfig(hidden=32, heads=4),
                     train_config=TrainConfig(epochs=3, val_fraction=0.5, seed=3))
    again.fit(programs, progress=False)
    features = programs.featurize(model.featurizer)
    assert np.allclose(again.predict_features(features), model.predict_features(features), atol=1e-5)


def test_average_weights_are_the_mean_from_the_best_epoch_to_the_last(trained, tmp_path):
    _, programs, _ = trained
    model = TLPModel(model_config=ModelConfig(hidden=32, heads=4),
                     train_config=TrainConfig(epochs=5, val_fraction=0.5, seed=3, weights="average"))
    snapshots = []
    history = model.fit(programs, progress=False, on_epoch=lambda _row: snapshots.append(
        {k: v.detach().clone() for k, v in model.net.state_dict().items()}))
    assert history.averaged_epochs == [history.best_epoch, len(history.epochs) - 1]
    kept = snapshots[history.best_epoch:]
    for key, value in model.net.state_dict().items():
        expected = sum(s[key].double() for s in kept) / len(kept)
        assert torch.allclose(value.double(), expected.to(value.dtype).double(), atol=1e-6), key
    model.save(tmp_path / "averaged.pt")
    loaded = TLPModel.load(tmp_path / "averaged.pt")
    assert loaded.train_config.weights == "average"
    assert loaded.meta["averaged_epochs"] == history.averaged_epochs
    with pytest.raises(ValueError, match="weights"):
        TLPModel(train_config=TrainConfig(epochs=1, weights="median")).fit(programs, progress=False)


def test_checkpoint_round_trip_without_pickle(trained, tmp_path):
    model, programs, _ = trained
    path = tmp_path / "model.pt"
    model.save(path)
    payload = torch.load(str(path), weights_only=True)  # plain tensors and a JSON string: no code runs
    assert json.loads(payload["meta"])["featurizer"]["kinds"]
    loaded = TLPModel.load(path)
    features = programs.featurize(model.featurizer)
    assert np.allclose(loaded.predict_features(features), model.predict_features(features), atol=1e-6)


def test_bad_checkpoints_are_clear_errors(trained, tmp_path):
    model, _, _ = trained
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a TLP checkpoint"):
        TLPModel.load(tmp_path / "junk.pt")
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        TLPModel.load(tmp_path / "missing.pt")

    class RunsCode:  # a pickle that would call print on load
        def __reduce__(self):
            return (print, ("this ran",))

    torch.save({"meta": RunsCode()}, str(tmp_path / "code.pt"))
    with pytest.raises(CheckpointError, match="loading them could run code, so it was not loaded") as refused:
        TLPModel.load(tmp_path / "code.pt")
    assert "weights_only=False" not in str(refused.value) and "\n" not in str(refused.value)
    model.save(tmp_path / "ok.pt")
    payload = torch.load(str(tmp_path / "ok.pt"), weights_only=True)
    meta = json.loads(payload["meta"])
    meta["feature_version"] = 0
    torch.save({"meta": json.dumps(meta), "state": payload["state"]}, str(tmp_path / "old.pt"))
    with pytest.raises(CheckpointError, match="feature version 0"):
        TLPModel.load(tmp_path / "old.pt")
    meta["feature_version"] = json.loads(payload["meta"])["feature_version"]
    meta["featurizer"]["kinds"] = meta["featurizer"]["kinds"][:-1]
    torch.save({"meta": json.dumps(meta), "state": payload["state"]}, str(tmp_path / "vocab.pt"))
    with pytest.raises(CheckpointError, match="vocabulary does not match"):
        TLPModel.load(tmp_path / "vocab.pt")
    meta = json.loads(payload["meta"])
    meta["train_config"]["loss"] = "hinge"
    torch.save({"meta": json.dumps(meta), "state": payload["state"]}, str(tmp_path / "loss.pt"))
    with pytest.raises(CheckpointError, match="loss 'hinge'"):
        TLPModel.load(tmp_path / "loss.pt")
    meta = json.loads(payload["meta"])
    meta["format"] = "tlp-checkpoint-9"
    torch.save({"meta": json.dumps(meta), "state": payload["state"]}, str(tmp_path / "format.pt"))
    with pytest.raises(CheckpointError, match="checkpoint format 'tlp-checkpoint-9', expected tlp-checkpoint-2"):
        TLPModel.load(tmp_path / "format.pt")


def test_checkpoints_of_removed_options_load_when_off_and_name_them_when_on(trained, tmp_path):
    """Options that went (a transformer network, losses other than lambdarank and soft-listwise+slowdown, task
    weighting by network share, canonical block names): a checkpoint stored with them off loads as before; one that
    needs one is a one-line CheckpointError naming it."""
    model, programs, _ = trained
    model.save(tmp_path / "ok.pt")
    payload = torch.load(str(tmp_path / "ok.pt"), weights_only=True)
    features = programs.featurize(model.featurizer)

    def stored(name, change):
        meta = json.loads(payload["meta"])
        change(meta)
        torch.save({"meta": json.dumps(meta), "state": payload["state"]}, str(tmp_path / name))
        return tmp_path / name

    old = stored("old.pt", lambda m: (m["train_config"].update(task_weighting="uniform"),
                                      m["featurizer"]["config"].update(canonical_names=False)))
    assert np.array_equal(TLPModel.load(old).predict_features(features), model.predict_features(features))
    for change, message in [
            (lambda m: m["train_config"].update(task_weighting="network-share"),
             re.escape("made with task weighting by network share (task_weighting='network-share'), which")),
            (lambda m: m["featurizer"]["config"].update(canonical_names=True), "canonical block names"),
            (lambda m: m["model_config"].update(arch="transformer"), "architecture 'transformer'"),
            (lambda m: m["train_config"].update(loss="listwise+pairwise"), "loss 'listwise\\+pairwise'"),
            (lambda m: m["train_config"].update(colour="red"), "TrainConfig field 'colour'")]:
        with pytest.raises(CheckpointError, match=message) as error:
            TLPModel.load(stored("removed.pt", change))
        assert "\n" not in str(error.value) and str(tmp_path / "removed.pt") in str(error.value)


def test_top_k_score_matches_its_definition():
    latencies = np.array([1.0, 2.0, 4.0, 10.0, 5.0])
    groups = np.array([0, 0, 0, 1, 1])
    perfect = np.array([3.0, 2.0, 1.0, 0.0, 1.0])
    assert top_k_score(perfect, latencies, groups, 1) == 1.0
    worst = -perfect
    assert top_k_score(worst, latencies, groups, 1) == pytest.approx((1 + 5) / (4 + 10))
    assert top_k_score(worst, latencies, groups, 2) == pytest.approx((1 + 5) / (2 + 5))
    assert top_k_score(worst, latencies, groups, 1, weights={0: 3.0, 1: 1.0}) == pytest.approx((3 + 5) / (12 + 10))


def test_programs_per_task_caps_what_each_step_ranks(collected, host_platform, monkeypatch):
    from tlp.model import losses

    dataset, _ = collected
    programs = load_programs(dataset, host_platform.id)
    largest = max(np.unique(programs.task_keys, return_counts=True)[1])
    assert largest > 3, "the fixture needs a task with more programs than the cap"
    seen: list[int] = []

    def recording(scores, labels, group_ids):
        seen.extend(torch.unique(group_ids, return_counts=True)[1].tolist())
        return losses.lambdarank_loss(scores, labels, group_ids)

    monkeypatch.setitem(losses.LOSSES, "lambdarank", recording)
    model = TLPModel(model_config=ModelConfig(hidden=16, heads=2),
                     train_config=TrainConfig(epochs=2, val_fraction=0.3, loss="lambdarank", programs_per_task=3))
    model.fit(programs, progress=False)
    assert seen and max(seen) == 3


def test_training_refuses_a_loss_it_does_not_have(trained):
    _, programs, _ = trained
    for removed in ("listwise", "soft-listwise", "listwise+pairwise", "mse"):
        expected = re.escape(f"loss must be one of lambdarank, soft-listwise+slowdown, got '{removed}'")
        with pytest.raises(ValueError, match=expected):
            TLPModel(train_config=TrainConfig(epochs=1, loss=removed)).fit(programs, progress=False)


def test_distillation_targets_are_the_teachers_ranking_and_train_a_student(collected, host_platform, trained,
                                                                         monkeypatch):
    from tlp.features.tensors import MultiPlatformPrograms
    from tlp.model import losses
    from tlp.model.distil import DistillationError, distillation_targets, ensemble_scores

    teacher, programs, _ = trained
    data = MultiPlatformPrograms.join([programs])
    scores = ensemble_scores([teacher, teacher], data)
    features = programs.featurize(teacher.featurizer)
    assert np.allclose(scores[:, 0], teacher.predict_features(features, precision="fp32"), atol=1e-5)
    groups = data.group_ids()
    # alpha 0: within each task, softmax(targets / T) is softmax(teacher scores); alpha 1: the measured target.
    for alpha, expected_logits in ((0.0, scores[:, 0]), (1.0, data.labels()[:, 0] / 0.3)):
        targets = distillation_targets(data, scores, "soft-listwise+slowdown", alpha)[:, 0]
        for group in np.unique(groups):
            rows = groups == group
            got, want = np.exp(targets[rows] / 0.3), np.exp(expected_logits[rows] - expected_logits[rows].max())
            assert np.allclose(got / got.sum(), want / want.sum(), atol=1e-4)
    with pytest.raises(DistillationError, match="listwise"):
        distillation_targets(data, scores, "lambdarank")
    # The student trains on the targets (a loss that records what it is given) and validates on latencies.
    targets = distillation_targets(data, scores, "soft-listwise+slowdown")
    given: list[float] = []

    def recording(scores, labels, group_ids):
        given.extend(labels.tolist())
        return losses.soft_listwise_loss(scores, labels, group_ids)

    monkeypatch.setitem(losses.MEASURED_TERMS, "soft-listwise+slowdown", (recording, losses.expected_slowdown_loss))
    student = TLPModel(model_config=ModelConfig(hidden=16, heads=2),
                       train_config=TrainConfig(epochs=2, val_fraction=0.3, loss="soft-listwise+slowdown", seed=1))
    history = student.fit(data, progress=False, targets=targets)
    assert len(history.epochs) == 2 and np.isfinite(history.best_val_top1)
    distance = lambda values, pool: np.abs(np.array(values)[:, None] - pool[None, :]).min(axis=1)  # noqa: E731
    assert given and distance(given, targets[:, 0]).max() < 1e-6
    assert distance(given, data.labels()[:, 0]).max() > 1e-3
    with pytest.raises(ValueError, match="targets of shape"):
        student.fit(data, progress=False, targets=targets[:-1])


def test_distilling_with_the_slowdown_term_feeds_it_measured_labels_only(trained, monkeypatch):
    from tlp.model import losses
    from tlp.model.distil import distillation_targets, ensemble_scores

    teacher, programs, _ = trained
    measured, both = _with_unmeasured_copy(_featurized(teacher, programs))
    targets = distillation_targets(both, ensemble_scores([teacher], both), "soft-listwise+slowdown", alpha=0.5)
    listwise_given: list[float] = []
    slowdown_given: list[tuple[float, int]] = []

    def listwise(scores, labels, group_ids):
        listwise_given.extend(labels.tolist())
        return losses.soft_listwise_loss(scores, labels, group_ids)

    def slowdown(scores, labels, group_ids):
        slowdown_given.extend(zip(labels.tolist(), group_ids.tolist()))
        return losses.expected_slowdown_loss(scores, labels, group_ids)

    monkeypatch.setitem(losses.MEASURED_TERMS, "soft-listwise+slowdown", (listwise, slowdown))
    student = TLPModel(teacher.featurizer.config, ModelConfig(hidden=16, heads=2),
                       TrainConfig(epochs=1, val_fraction=0.5, loss="soft-listwise+slowdown", seed=2))
    student.fit(both, progress=False, targets=targets)
    distance = lambda values, pool: np.abs(np.array(values)[:, None] - pool[None, :]).min(axis=1)  # noqa: E731
    half = len(measured.task_keys)
    assert listwise_given and distance(listwise_given, targets[:, 0]).max() < 1e-6  # unmeasured ones included
    assert set(g for _, g in slowdown_given) <= set(both.group_ids()[:half].tolist())  # measured tasks only
    labels = [value for value, _ in slowdown_given]
    assert labels and distance(labels, both.labels()[:half, 0]).max() < 1e-6 and 0 < min(labels) <= max(labels) <= 1


def test_distillation_refuses_a_teacher_without_a_head_for_a_platform(trained):
    from tlp.features.tensors import MultiPlatformPrograms
    from tlp.model.distil import DistillationError, ensemble_scores

    teacher, programs, _ = trained
    other = MultiPlatformPrograms.join([programs])
    other.platform_ids = ["llvm-elsewhere-2c-00000000"]
    with pytest.raises(DistillationError, match=r"teacher 1 has no trained head for platform\(s\) llvm-elsewhere"):
        ensemble_scores([teacher], other)


def test_unmeasured_programs_train_on_the_teachers_ranking_and_never_validate(trained, monkeypatch):
    from tlp.model import losses
    from tlp.model.distil import distillation_targets, ensemble_scores

    teacher, programs, _ = trained
    measured, both = _with_unmeasured_copy(_featurized(teacher, programs))
    loss = "soft-listwise+slowdown"
    targets = distillation_targets(both, ensemble_scores([teacher], both), loss, alpha=0.5)
    assert np.isfinite(targets).all()  # unmeasured tasks: the teacher's ranking alone
    half = len(measured.task_keys)
    assert np.allclose(targets[half:], distillation_targets(both, ensemble_scores([teacher], both), loss,
                                                            alpha=0.0)[half:], atol=1e-5)
    assert np.isnan(distillation_targets(both, ensemble_scores([teacher], both), loss, alpha=1.0)[half:]).all()
    trained_on: set[int] = set()

    def recording(scores, labels, group_ids):
        trained_on.update(group_ids.tolist())
        return losses.soft_listwise_loss(scores, labels, group_ids)

    monkeypatch.setitem(losses.MEASURED_TERMS, loss, (recording, losses.expected_slowdown_loss))
    student = TLPModel(teacher.featurizer.config, ModelConfig(hidden=16, heads=2),
                       TrainConfig(epochs=1, val_fraction=0.5, loss=loss, seed=2))
    student.fit(both, progress=False, targets=targets)
    groups = both.group_ids()
    unmeasured_groups = set(groups[half:].tolist())
    assert unmeasured_groups <= trained_on  # every unmeasured task trained (none was drawn for validation)
    assert student.meta["val_tasks"] == round(0.5 * len(set(measured.task_keys)))


def test_a_transfer_set_adds_random_draws_of_new_operator_shapes_unmeasured(trained, host_platform):
    from tlp.features.featurizer import block_extents
    from tlp.features.tensors import MultiPlatformPrograms
    from tlp.model.distil import with_transfer_set
    from tlp.workloads.operators import random_operator_shapes

    teacher, programs, _ = trained
    measured = _featurized(teacher, programs)
    shapes = random_operator_shapes(6, seed=3)
    assert len({s.name for s in shapes}) == 6 and {s.family for s in shapes} >= {"random_dense",
                                                                                   "random_group_conv2d_nchw"}
    grown = with_transfer_set(measured, host_platform.target, 2, per_shape=4, seed=3)
    n = len(measured.task_keys)
    new_keys = grown.task_keys[n:]
    assert grown.task_keys[:n] == measured.task_keys and np.array_equal(grown.features[:n], measured.features)
    assert len(set(new_keys)) == 2 and not set(new_keys) & set(measured.task_keys)
    assert np.isnan(grown.latencies[n:]).all() and grown.features.shape[0] == len(grown.task_keys)
    assert {grown.catalogue[k]["name"] for k in new_keys} == {s.name for s in shapes[:2]}
    # the draws are featurized as the programs' own featurizer featurizes their traces
    traced = with_transfer_set(MultiPlatformPrograms.join([programs]), host_platform.target, 2, per_shape=4, seed=3)
    assert traced.task_keys[len(programs.task_keys):] == new_keys
    tail = traced.traces[len(programs.task_keys):]
    assert np.array_equal(grown.features[n:], teacher.featurizer.transform(
        tail, [block_extents(shapes[0 if k == new_keys[0] else 1].task().mod) for k in new_keys]))


def test_a_guided_transfer_set_adds_the_programs_a_search_under_the_guide_would_measure(trained, host_platform):
    from tlp.model.distil import with_transfer_set
    from tlp.search.cost_model import TLPCostModel

    teacher, programs, _ = trained
    measured = _featurized(teacher, programs)
    plain = with_transfer_set(measured, host_platform.target, 1, per_shape=8, seed=3)
    guided = with_transfer_set(measured, host_platform.target, 1, per_shape=8, seed=3,
                               guide=TLPCostModel(teacher), guided_per_shape=8)
    n, m = len(measured.task_keys), len(plain.task_keys)
    # the random draws first, as without a guide; then the guided ones, of the same shape
    assert guided.task_keys[:m] == plain.task_keys and np.array_equal(guided.features[:m], plain.features)
    extra = guided.features[m:]
    assert len(extra) >= 4 and set(guided.task_keys[m:]) == set(plain.task_keys[n:])
    assert np.isnan(guided.latencies[n:]).all()
    # the search climbs the guide's score: its picks rank above the random draws of the same shape
    scores = teacher.predict_features(guided.features[n:], 0, precision="fp32")
    assert np.median(scores[m - n:]) > np.median(scores[: m - n])


def _featurized(teacher, programs):
    """The measured programs as the teacher featurizes them (one platform column)."""
    from tlp.features.tensors import FeaturizedPrograms

    return FeaturizedPrograms(programs.featurize(teacher.featurizer), list(programs.task_keys),
                              programs.latencies[:, None].copy(), [programs.platform_id], programs.catalogue,
                              teacher.featurizer)


def _with_unmeasured_copy(measured):
    """``measured``, and it followed by the same programs again as unmeasured ones of other tasks (a transfer set:
    no latency, only a teacher's ranking)."""
    unmeasured = dataclasses.replace(measured, task_keys=[f"unmeasured-{k}" for k in measured.task_keys],
                                     latencies=np.full_like(measured.latencies, np.nan))
    return measured, dataclasses.replace(measured, features=np.concatenate([measured.features, unmeasured.features]),
                                         task_keys=measured.task_keys + unmeasured.task_keys,
                                         latencies=np.concatenate([measured.latencies, unmeasured.latencies]))


def test_a_step_holds_at_most_max_batch_programs_and_a_big_task_trains_in_parts(trained, monkeypatch):
    # A step's memory (and a ranking loss's pairs) grow with its biggest group: a task of a TenSet-sized dataset
    # holds thousands of programs. Its parts each rank on their own.
    from collections import Counter

    from tlp.model import losses

    _, programs, _ = trained
    assert max(Counter(programs.task_keys).values()) > 3
    groups_seen: list[int] = []
    steps: list[int] = []

    def recording(scores, labels, group_ids):
        groups_seen.extend(torch.unique(group_ids, return_counts=True)[1].tolist())
        steps.append(len(group_ids))
        return losses.lambdarank_loss(scores, labels, group_ids)

    monkeypatch.setitem(losses.LOSSES, "lambdarank", recording)
    model = TLPModel(model_config=ModelConfig(hidden=16, heads=2),
                     train_config=TrainConfig(epochs=1, val_fraction=0.5, seed=3, max_batch_programs=3))
    model.fit(programs, progress=False)
    assert groups_seen and max(groups_seen) <= 3 and max(steps) <= 3


def test_a_step_of_more_primitives_than_its_bound_trains_in_spans_to_the_same_gradient(trained, monkeypatch):
    # A step's memory grows with its programs times their longest trace; past max_batch_primitives the network's
    # graph is built a span of programs at a time, and the step's gradient is the same. The first step is compared:
    # later ones start from weights that differ by float rounding, which Adam's normalisation amplifies.
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from tlp.model.network import TLPNet

    _, programs, _ = trained
    passes: list[tuple[bool, torch.Tensor]] = []
    backbone = TLPNet.backbone

    def recording_passes(self, x):
        out = backbone(self, x)
        if self.training:
            passes.append((torch.is_grad_enabled(), out[0].detach().clone()))
        return out

    monkeypatch.setattr(TLPNet, "backbone", recording_passes)
    first_gradients = []

    def recording_gradients(optimizer, args, kwargs):
        if len(first_gradients) < len(runs):
            first_gradients.append([p.grad.clone() for group in optimizer.param_groups for p in group["params"]
                                    if p.grad is not None])

    runs = []
    hook = register_optimizer_step_pre_hook(recording_gradients)
    try:
        for bound, dropout in ((0, 0.0), (1, 0.0), (1, 0.1)):
            passes.clear()
            runs.append(bound)
            model = TLPModel(model_config=ModelConfig(hidden=16, heads=2, dropout=dropout),
                             train_config=TrainConfig(epochs=1, val_fraction=0.5, seed=3, max_batch_primitives=bound))
            model.fit(programs, progress=False)
            # a bound below any program's trace: every span is one program
            largest = max(len(out) for _, out in passes)
            assert largest == 1 if bound else largest > 1
    finally:
        hook.remove()
    unbounded, spanned, _ = first_gradients
    assert len(unbounded) == len(spanned) > 0
    for whole, in_spans in zip(unbounded, spanned):
        # float32 kernels round a batch of one program differently from a batch of many (AVX-512 hosts by ~1e-4 of
        # an element): the same gradient up to rounding, measured against the tensor's size; a wrong one is off by O(1)
        assert (whole - in_spans).norm() <= 1e-4 * whole.norm() + 1e-8, (whole - in_spans).norm() / whole.norm()
    # Under dropout a span's graph is built again with the masks its scoring pass drew: the same outputs.
    scoring = [out for with_graph, out in passes if not with_graph]
    graphed = [out for with_graph, out in passes if with_graph]
    assert len(scoring) == len(graphed) > 1
    assert all(torch.equal(a, b) for a, b in zip(scoring, graphed))
