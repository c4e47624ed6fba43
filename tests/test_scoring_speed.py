"""The fast scoring path gives the straightforward path's scores (equality, not timing).

Straightforward: ``to_plain(trace.as_json())`` -> ``featurizer.transform`` -> ``TLPNet.forward`` on the whole
batch. Fast: ``trace_json`` with its caches -> cached featurization -> :mod:`tlp.model.inference`'s scorers
(length-sorted chunks; per-row work once per distinct row, attention and after once per distinct row of each
program). Real post-processed candidates of a small workload. In fp32 the scores are equal within rounding;
bfloat16 scoring (the default on CPUs with native bfloat16) must keep the ranking.
"""

import warnings

import numpy as np
import pytest
import torch

from tlp import _tvm
from tlp._tvm import OPAQUE_INDEX_MAP, clear_trace_caches, ms, native_trace_reader, to_plain, trace_json, tvm
from tlp.dataset.sampler import CandidateSampler
from tlp.features.featurizer import block_extents
from tlp.model.estimator import TLPModel
from tlp.model import inference
from tlp.model.inference import AttentionScorer, ChunkedScorer, LSTMScorer, resolve_precision, scorer_for
from tlp.model.network import ModelConfig, TLPNet
from tlp.search import PlatformMismatchWarning, TLPCostModel

TOLERANCE = 1e-4  # the scores of the shipped model are O(10-100); float rounding differs at ~1e-6


@pytest.fixture(scope="module")
def batches(tiny_tasks, host_platform):
    """Real candidates of both tiny tasks (traces of different lengths), as a search hands them over."""
    return [(task, CandidateSampler(task, host_platform.target).random(32, seed=11)) for task in tiny_tasks]


def _straightforward_scores(model: TLPModel, task, batch, head: int = 0) -> np.ndarray:
    """A model of several networks (the default cascade) combines them as it does, each network run plainly."""
    features = model.featurizer.transform([to_plain(c.sch.trace.as_json()) for c in batch],
                                          [block_extents(task.mod)] * len(batch))
    networks = getattr(model, "parts", [model])
    fast = [network.predict_features for network in networks]
    try:
        for network in networks:
            network.predict_features = lambda f, h=0, *_, n=network, **__: _plain(n, f, h)
        return model.predict_features(features, head)
    finally:
        for network, method in zip(networks, fast):
            network.predict_features = method


def _plain(network: TLPModel, features: np.ndarray, head: int) -> np.ndarray:
    with torch.no_grad():
        return network.net.eval()(torch.from_numpy(features), head).numpy()


@pytest.mark.parametrize("name", ["tlp-cpu", "tlp-cpu-small"])
def test_cost_model_predict_equals_the_straightforward_path(name, batches, host_platform, monkeypatch):
    monkeypatch.setenv("TLP_SCORING_PRECISION", "fp32")  # exact arithmetic; bfloat16 is tested below
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlatformMismatchWarning)  # CI may run on another CPU
        cost_model = TLPCostModel(name, target=host_platform.target)
    for task, batch in batches:
        expected = _straightforward_scores(cost_model.model, task, batch, cost_model.head)
        context = ms.TuneContext(task.mod, target=tvm.target.Target(host_platform.target),
                                 space_generator="post-order-apply", search_strategy="replay-trace",
                                 task_name=task.name, num_threads=1)
        cost_model.clear_caches()
        for _ in range(2):  # cold, then from every cache
            calibrated = cost_model.predict(context, batch)
            state = cost_model._task(context)
            raw = np.log(calibrated) * state.scale + state.offset  # undo predict's calibration
            assert np.allclose(raw, expected, atol=TOLERANCE, rtol=0)
            features = cost_model.model.featurizer.transform([trace_json(c.sch.trace) for c in batch],
                                                             [state.extents] * len(batch), cost_model._feature_cache)
            fast = cost_model.model.predict_features(features, cost_model.head)
            assert np.abs(fast - expected).max() < TOLERANCE


@pytest.mark.parametrize("arch", ["attention", "lstm"])
def test_scorers_equal_the_network_forward(arch, batches):
    """Any weights: the scorers compute the network's function, with padding, duplicates and an empty trace."""
    featurizer = TLPModel.load(_shipped()).featurizer
    task, batch = batches[0]
    other_task, other_batch = batches[1]
    features = np.concatenate([
        featurizer.transform([trace_json(c.sch.trace) for c in batch], [block_extents(task.mod)] * len(batch)),
        featurizer.transform([trace_json(c.sch.trace) for c in other_batch],
                             [block_extents(other_task.mod)] * len(other_batch)),
        np.zeros((1, featurizer.config.seq_len, featurizer.config.width), dtype=np.float32),  # an empty trace
    ])
    features = np.concatenate([features, features[:5]])  # duplicates: rows shared between programs
    torch.manual_seed(0)
    net = TLPNet(featurizer.config, ModelConfig(arch=arch, hidden=64, heads=4, kind_vocab=len(featurizer.kinds),
                                                string_vocab=len(featurizer.strings)), num_heads=2).eval()
    x = torch.from_numpy(features)
    with torch.no_grad():
        expected = torch.stack([net(x, 0), net(x, 1)], dim=1).numpy()
    fast = {"attention": AttentionScorer, "lstm": LSTMScorer}[arch]
    scorers = [cls(net, chunk=7, workers=workers) for cls in {ChunkedScorer, fast} for workers in (1, 2)]
    for scorer in scorers:
        scores = scorer.scores(x, (0, 1))
        assert np.abs(scores - expected).max() < TOLERANCE, type(scorer).__name__
        assert np.all(scores[-6] == 0.0)  # the empty trace: the empty sum
    assert type(scorer_for(net)) is fast
    assert scorer_for(net).scores(x[:0]).shape == (0, 1)
    assert scorer_for(net).scores(x[-6:-5]).tolist() == [[0.0]]  # only an empty trace
    assert resolve_precision("auto", net) == "fp32"
    for cls in {AttentionScorer, LSTMScorer} - {fast}:  # a scorer written out for another architecture refuses
        with pytest.raises(ValueError, match="networks, not"):
            cls(net)
    with pytest.raises(ValueError):  # the generic scorer has no bfloat16 path: an error, not a silent fp32
        ChunkedScorer(net, precision="bf16")


@pytest.mark.parametrize("name, arch", [("tlp-cpu-small", "attention"), ("tlp-cpu", "lstm")])
def test_bfloat16_scoring_keeps_the_ranking(name, arch, batches, monkeypatch):
    """A trained network in bfloat16 (what ``TLP_SCORING_PRECISION=auto`` picks on CPUs with native bfloat16; the
    packaged attention network and the default LSTM) ranks real candidates as in fp32: the same best candidate
    per task, Kendall tau >= 0.98, scores within 0.2 (they are O(10-100))."""
    from tlp.models import model_path

    model = TLPModel.load(model_path(name))
    assert model.model_config.arch == arch
    for task, batch in batches:
        features = model.featurizer.transform([trace_json(c.sch.trace) for c in batch],
                                              [block_extents(task.mod)] * len(batch))
        for head in range(len(model.platforms)):
            exact = model.predict_features(features, head, precision="fp32")
            low = model.predict_features(features, head, precision="bf16")
            assert np.argmax(low) == np.argmax(exact)
            assert _kendall_tau(low, exact) >= 0.98
            assert np.abs(low - exact).max() < 0.2
    # auto: fp32 unless TLP_SCORING_PRECISION opts in; then bfloat16 only where the CPU has it natively
    monkeypatch.delenv("TLP_SCORING_PRECISION", raising=False)
    model = getattr(model, "parts", [model])[0]  # a network (the default cascade's first stage)
    monkeypatch.setattr(inference, "_NATIVE_BF16", True)
    assert resolve_precision("auto", model.net) == "fp32"
    monkeypatch.setenv("TLP_SCORING_PRECISION", "auto")
    assert resolve_precision("auto", model.net) == "bf16"
    monkeypatch.setattr(inference, "_NATIVE_BF16", False)
    assert resolve_precision("auto", model.net) == "fp32"
    monkeypatch.setenv("TLP_SCORING_PRECISION", "bf16")
    assert resolve_precision("auto", model.net) == "bf16"
    with pytest.raises(ValueError):
        resolve_precision("fp16", model.net)


def test_fast_trace_reading_is_exact_cold_and_warm(batches):
    for _, batch in batches:
        clear_trace_caches()
        for _ in range(2):
            assert all(trace_json(c.sch.trace) == to_plain(c.sch.trace.as_json()) for c in batch)


def _without_index_maps(value):
    """``to_plain(trace.as_json())`` with every IndexMap's JSON graph (and nothing else) as the placeholder."""
    if isinstance(value, list):
        return [_without_index_maps(item) for item in value]
    if _tvm.is_index_map_text(value):
        return OPAQUE_INDEX_MAP
    return value


@pytest.mark.parametrize("native", [True, False], ids=["compiled-reader", "python-reader"])
def test_opaque_index_maps_change_only_the_index_maps(batches, native, monkeypatch):
    """``trace_json(t, False)`` (what the cost model reads when its vocabulary holds no index map) is the exact
    trace with each index map replaced, from the compiled reader and from Python; dense's RewriteLayout gives
    its candidates TransformLayout instructions, so the replacement is exercised."""
    reader = native_trace_reader()
    if native and reader is None:
        pytest.skip("no C++ compiler here: the compiled reader is not built")
    monkeypatch.setattr(_tvm, "_NATIVE_TRACE_TEXT", reader if native else False)
    seen_index_map = False
    for _, batch in batches:
        clear_trace_caches()
        for _ in range(2):
            for candidate in batch:
                exact = to_plain(candidate.sch.trace.as_json())
                assert trace_json(candidate.sch.trace, False) == _without_index_maps(exact)
                seen_index_map |= any(inst[0] == "TransformLayout" for inst in exact[0])
    assert seen_index_map


def test_compiled_reader_gives_the_same_scores(batches, host_platform, monkeypatch):
    """The shipped model's vocabulary holds no index map: the cost model reads traces with placeholders (through
    the compiled reader where built) and scores exactly as from ``trace.as_json()``."""
    monkeypatch.setenv("TLP_SCORING_PRECISION", "fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlatformMismatchWarning)
        cost_model = TLPCostModel("tlp-cpu", target=host_platform.target)
    assert not cost_model._index_maps_as_text
    for task, batch in batches:
        context = ms.TuneContext(task.mod, target=tvm.target.Target(host_platform.target),
                                 space_generator="post-order-apply", search_strategy="replay-trace",
                                 task_name=task.name, num_threads=1)
        scores = {}
        for reader in (native_trace_reader(), False):
            monkeypatch.setattr(_tvm, "_NATIVE_TRACE_TEXT", reader)
            cost_model.clear_caches()
            cost_model._index_maps_as_text = reader is False  # the slow exact path as the reference
            scores[reader is False] = cost_model.predict(context, batch)
        assert np.array_equal(scores[True], scores[False])


def _kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a: (concordant - discordant pairs) / all pairs."""
    da, db = np.sign(a[:, None] - a[None, :]), np.sign(b[:, None] - b[None, :])
    return float((da * db).sum() / (len(a) * (len(a) - 1)))


def _shipped():
    from tlp.models import model_path

    return model_path("tlp-cpu")
