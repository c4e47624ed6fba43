"""The feature cache on real measured programs: exact tensors, invalidation by content, training without TVM."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tlp.dataset.store import Dataset, MeasuredProgram
from tlp.features.cache import CACHE_FORMAT, FeatureCacheError, load_or_featurize, read_cache
from tlp.features.featurizer import FeatureConfig, TraceFeaturizer
from tlp.features.tensors import FeaturizerMismatchError, ShardFile, load_platforms
from tlp.model.estimator import TLPModel, TrainConfig
from tlp.model.network import ModelConfig

SMALL = dict(model_config=ModelConfig(hidden=32, heads=4), train_config=TrainConfig(epochs=2, val_fraction=0.5, seed=5))


@pytest.fixture
def own_dataset(collected, host_platform, tmp_path):
    """A private copy of the tiny collection (this machine's platform only): tests here change it."""
    source, _ = collected
    dataset = Dataset(tmp_path / "d")
    shutil.copytree(source.path, dataset.path, ignore=lambda folder, names: [
        n for n in names if Path(folder) == source.path and n.startswith("llvm-") and n != host_platform.id])
    return dataset


def test_cached_features_are_exactly_the_featurized_traces(own_dataset, host_platform, tmp_path):
    platforms = [host_platform.id]
    first = load_or_featurize(own_dataset, platforms, [], FeatureConfig(), cache_dir=tmp_path / "cache")
    again = load_or_featurize(own_dataset, platforms, [], FeatureConfig(), cache_dir=tmp_path / "cache")
    assert not first.hit and again.hit and again.path == first.path and first.path.is_dir()

    direct = load_platforms(own_dataset, platforms)
    featurizer = TraceFeaturizer(FeatureConfig()).fit(direct.traces)
    expected = direct.featurize(featurizer)
    cached = again.programs
    assert cached.features.dtype == np.float32
    assert np.array_equal(np.asarray(cached.features).view(np.uint32), expected.view(np.uint32))  # bit for bit
    assert np.array_equal(cached.latencies, direct.latencies, equal_nan=True)
    assert cached.task_keys == direct.task_keys and cached.platform_ids == platforms
    assert cached.featurizer.to_json() == featurizer.to_json()
    assert np.array_equal(cached.labels(), direct.labels(), equal_nan=True)

    # Training from the cache is training from the traces: same vocabularies, same seed, same network.
    from_traces, from_cache = TLPModel(**SMALL), TLPModel(**SMALL)
    from_traces.fit(direct, progress=False)
    from_cache.fit(cached, progress=False)
    assert np.allclose(from_cache.predict_features(expected), from_traces.predict_features(expected), atol=1e-6)


def test_a_changed_dataset_is_never_read_from_the_cache(own_dataset, host_platform, tmp_path):
    platforms = [host_platform.id]
    before = load_or_featurize(own_dataset, platforms, [], FeatureConfig(), cache_dir=tmp_path / "cache")
    store = own_dataset.store(host_platform.id)
    program = next(iter(store.latest_programs().values()))
    slower = [10 * t for t in program.run_secs]  # a re-measurement of one program, 10x slower
    store.append([MeasuredProgram(program.workload_key, program.trace_json, program.args_info, slower,
                                  meta=program.meta)])
    after = load_or_featurize(own_dataset, platforms, [], FeatureConfig(), cache_dir=tmp_path / "cache")
    assert not after.hit and after.path != before.path
    # The same programs (rows follow the lines their measurements were taken from), that one now 10x slower.
    expected = sorted(before.programs.latencies.ravel().tolist())
    expected[int(np.argmin(np.abs(np.asarray(expected) - program.latency)))] = program.latency * 10
    assert np.allclose(sorted(after.programs.latencies.ravel().tolist()), sorted(expected))
    # Another feature config or held-out set is another cache entry, not the same one.
    other = load_or_featurize(own_dataset, platforms, [], FeatureConfig(seq_len=25), cache_dir=tmp_path / "cache")
    assert not other.hit and other.path != after.path and other.programs.features.shape[1] == 25


def test_a_model_refuses_features_made_with_other_vocabularies(own_dataset, host_platform, tmp_path):
    cached = load_or_featurize(own_dataset, [host_platform.id], [], FeatureConfig(), cache_dir=tmp_path).programs
    model = TLPModel(**SMALL)
    model.fit(cached, progress=False)
    model.featurizer.strings.tokens.append("something else")  # as if fitted on other traces
    with pytest.raises(FeaturizerMismatchError):
        model.fit_head(cached.platform(host_platform.id), progress=False)
    with pytest.raises(FeaturizerMismatchError, match="featurized with"):
        TLPModel(FeatureConfig(seq_len=25), **SMALL).fit(cached, progress=False)


def test_features_of_a_grown_dataset_serve_a_model_fitted_before_it_grew(own_dataset, host_platform, tmp_path):
    # A teacher or a shipped model was fitted on fewer programs (smaller vocabularies, other ids); the cached
    # features of the grown dataset are translated for it, exactly as it would featurize the traces itself.
    cached = load_or_featurize(own_dataset, [host_platform.id], [], FeatureConfig(), cache_dir=tmp_path).programs
    labeled = load_platforms(own_dataset, [host_platform.id])
    extents = [labeled.extents.get(k) for k in labeled.task_keys]
    older = TraceFeaturizer(FeatureConfig()).fit(labeled.traces[: len(labeled.traces) // 8])
    assert older.strings.tokens != cached.featurizer.strings.tokens
    grown = cached.featurizer.transform(labeled.traces, extents)
    assert np.array_equal(older.translate(grown, cached.featurizer), older.transform(labeled.traces, extents))
    assert np.array_equal(cached.featurize(older), older.translate(cached.features, cached.featurizer))
    # A token the data's featurizer never knew cannot be recovered (its programs hold OOV): refused.
    older.strings = type(older.strings)(older.strings.tokens + ["never seen"])
    assert older.translate(grown, cached.featurizer) is None


def test_a_damaged_cache_entry_is_one_clear_error(own_dataset, host_platform, tmp_path):
    path = load_or_featurize(own_dataset, [host_platform.id], [], FeatureConfig(), cache_dir=tmp_path).path
    shard = path / "codes-0000.npy"
    shard.write_bytes(shard.read_bytes()[:200])  # cut short
    with pytest.raises(FeatureCacheError, match=f"{path.name}: not a readable feature cache"):
        read_cache(path)
    (path / "meta.json").write_text("{not json")
    with pytest.raises(FeatureCacheError, match="delete it to featurize again"):
        read_cache(path)


def test_a_shard_file_reads_the_rows_a_memory_map_would(tmp_path):
    codes = np.random.default_rng(0).integers(0, 500, size=(50, 6, 3)).astype(np.uint16)
    np.save(tmp_path / "codes.npy", codes)
    shard = ShardFile(tmp_path / "codes.npy")
    rows = np.array([7, 3, 4, 5, 49, 3, 0])  # unordered, repeated, runs of consecutive rows
    assert len(shard) == 50 and np.array_equal(shard[rows], codes[rows])
    with pytest.raises(IndexError, match="out of range"):
        shard[np.array([50])]
    (tmp_path / "codes.npy").write_bytes((tmp_path / "codes.npy").read_bytes()[:-10])
    with pytest.raises(ValueError, match="shorter than its 50 rows"):
        ShardFile(tmp_path / "codes.npy")


def test_shards_and_worker_processes_store_what_one_pass_does(own_dataset, host_platform, tmp_path, monkeypatch):
    from tlp.features import cache

    whole = load_or_featurize(own_dataset, [host_platform.id], [], FeatureConfig(), cache_dir=tmp_path / "a").programs
    monkeypatch.setattr(cache, "CHUNK", 2)
    monkeypatch.setattr(cache, "SHARD_ROWS", 4)  # several shards, each of several chunks
    monkeypatch.setattr(cache, "PARALLEL_FROM", 1)  # featurized in worker processes
    monkeypatch.setattr(cache.os, "cpu_count", lambda: 2)
    result = load_or_featurize(own_dataset, [host_platform.id], [], FeatureConfig(), cache_dir=tmp_path / "b")
    sharded = result.programs
    assert len(list(result.path.glob("codes-*.npy"))) == -(-len(whole.task_keys) // 4) > 1
    assert np.array_equal(np.asarray(sharded.features), np.asarray(whole.features))
    assert sharded.task_keys == whole.task_keys and sharded.featurizer.to_json() == whole.featurizer.to_json()
    # Rows read across shards, cropped, or taken lazily decode to the same numbers.
    rows = np.array([13, 2, 9, 8, 7])
    dense = np.asarray(whole.features)
    assert np.array_equal(sharded.features[rows, :5], dense[rows, :5])
    assert np.array_equal(sharded.features[3], dense[3])
    taken = sharded.subset(np.isin(np.arange(len(dense)), rows))
    assert np.array_equal(np.asarray(taken.features), dense[np.sort(rows)])
    assert np.array_equal(taken.features.lengths(), (dense[np.sort(rows), :, 0] != 0).sum(axis=1))


def test_training_from_the_cache_needs_no_tvm(own_dataset, host_platform, tmp_path):
    cached = load_or_featurize(own_dataset, [host_platform.id], [], FeatureConfig(), cache_dir=tmp_path / "cache")
    blocker = tmp_path / "no_tvm" / "tvm"
    blocker.mkdir(parents=True)
    # What Python raises for a package that is not installed.
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError('tvm is blocked in this test', name='tvm')\n")
    script = textwrap.dedent(f"""
        import json, sys
        try:
            import tvm
            sys.exit("tvm imported although blocked")
        except ImportError:
            pass
        from pathlib import Path
        from tlp.features.cache import read_cache
        from tlp.model.estimator import TLPModel, TrainConfig
        from tlp.model.network import ModelConfig
        programs, meta = read_cache(Path({str(cached.path)!r}))
        model = TLPModel(model_config=ModelConfig(hidden=32, heads=4),
                         train_config=TrainConfig(epochs=2, val_fraction=0.5, seed=1))
        model.fit(programs, progress=False)
        model.fit_head(programs.platform({host_platform.id!r}), freeze_backbone=True, progress=False)
        model.save(Path({str(tmp_path / "m.pt")!r}))
        print(json.dumps({{"format": meta["format"], "tvm_loaded": "tvm" in sys.modules,
                          "tlp_tvm_loaded": "tlp._tvm" in sys.modules}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(blocker.parent)}  # the blocking ``tvm`` comes first on sys.path
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == {"format": CACHE_FORMAT, "tvm_loaded": False,
                                                       "tlp_tvm_loaded": False}
    assert TLPModel.load(tmp_path / "m.pt").platforms == [host_platform.id]


def test_tlp_train_uses_the_cache_and_can_bypass_it(own_dataset, tmp_path, capsys):
    from tlp.cli import main

    def train(*extra):
        code = main(["train", str(own_dataset.path), "--out", str(tmp_path / "m.pt"), "--epochs", "1", "--set", "hidden=32",
                     "--set", f"feature_cache_dir={tmp_path / 'cache'}", "-q", *extra])
        assert code == 0
        return json.loads(capsys.readouterr().out)["feature_cache"]

    first, second = train(), train()
    assert first["hit"] is False and second["hit"] is True and first["path"] == second["path"]
    assert Path(first["path"]).parent == tmp_path / "cache"
    assert train("--set", "feature_cache=false") == {"used": False}
    compact = train("--set", "compact=true")  # another featurizer config: another cache entry, kept in the checkpoint
    assert compact["hit"] is False and compact["path"] != first["path"]
    assert TLPModel.load(tmp_path / "m.pt").featurizer.config.compact


@pytest.mark.slow
def test_torchrun_trains_one_model_on_two_processes_from_the_shared_cache(own_dataset, tmp_path):
    # Data parallelism on CPUs (gloo): the first process featurizes, both read the cache's shards, average their
    # gradients each step and end with the same model, which the first one saves.
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "tlp.cli", "train", str(own_dataset.path),
               "--out", str(tmp_path / "m.pt"), "--epochs", "2", "--set", "hidden=32", "-q",
               "--set", f"feature_cache_dir={tmp_path / 'cache'}"]
    run = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    printed = json.loads(run.stdout[run.stdout.index("{"):])
    assert printed["feature_cache"]["hit"] is False and len(list((tmp_path / "cache").iterdir())) == 1
    model = TLPModel.load(tmp_path / "m.pt")
    assert model.meta["processes"] == 2 and model.meta["best_epoch"] >= 0
