"""Featurized programs cached on disk, so retraining does not re-read and re-featurize every trace.

Reading a dataset's traces and parsing every task's workload (which needs TVM) takes most of the time before
training starts (34 s of 40 s for the 10,421 programs of ``datasets/tlp-cpu`` on 2 cores); the features
themselves are small. A cache file holds, for one dataset, one set of platforms and one feature config:

- the feature tensor of every program, once (the platforms share programs), stored exactly but compactly: the
  distinct float32 values (by bit pattern) and a small-integer code per element (a few hundred distinct values in
  practice, so 1-2 bytes instead of 4, then zlib; ``datasets/tlp-cpu``: 73 MB of float32 -> 0.5 MB);
- the latency matrix ``[programs x platforms]`` (NaN: not measured there), task keys, the task catalogue;
- the featurizer with its vocabularies, fitted on the training programs (the tasks outside the held-out
  networks), exactly as ``TLPModel.fit`` fits it; the held-out networks are therefore part of the key.

The file name is a hash of what the features depend on: the bytes of every file of the dataset's catalogue and
of the platforms' folders (a new record, a re-measurement, even a re-sealed segment gives a new key), the
platform ids, the held-out networks, the feature config and version, and the minimum programs per head. A stale
cache is therefore never read: a changed dataset simply has no cache file yet. Reading one needs no TVM.

Where: ``$TLP_CACHE_DIR/features`` (default ``~/.cache/tlp/features``), or the ``cache_dir`` given.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tlp import TLPError
from tlp.cache import cache_root
from tlp.dataset.store import Dataset
from tlp.features.formats import FeaturizerConfig, featurizer_for_config, featurizer_from_json
from tlp.features.tensors import MIN_HEAD_PROGRAMS, FeaturizedPrograms, load_platforms

CACHE_FORMAT = "tlp-feature-cache-1"
# Files in a platform folder that are not its content (locks, half-written files).
_NOT_CONTENT = (".lock", ".tmp")


class FeatureCacheError(TLPError):
    """A cache file that cannot be read (damaged, or written by another cache format)."""


def default_cache_dir() -> Path:
    """``$TLP_CACHE_DIR/features``, default ``~/.cache/tlp/features`` (beside the extracted-task cache)."""
    return cache_root() / "features"


def dataset_fingerprint(dataset: Dataset, platform_ids: list[str]) -> str:
    """sha256 over the catalogue and every content file of the platforms' folders (names and bytes)."""
    digest = hashlib.sha256()
    files = [dataset.path / "tasks.json"]
    for platform_id in platform_ids:
        folder = dataset.path / platform_id
        files += sorted(p for p in folder.iterdir() if p.is_file() and not p.name.endswith(_NOT_CONTENT)
                        and ".partial-" not in p.name)
    for path in files:
        if not path.is_file():
            continue
        digest.update(f"{path.relative_to(dataset.path)}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheKey:
    """What cached features depend on; ``digest`` names the file."""

    dataset: str  # the dataset's content fingerprint
    platform_ids: tuple[str, ...]
    held_out_networks: tuple[str, ...]
    feature_config: dict[str, Any]
    featurizer_kind: str
    min_programs: int

    @property
    def digest(self) -> str:
        text = json.dumps({"format": CACHE_FORMAT, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    @staticmethod
    def of(dataset: Dataset, platform_ids: list[str], held_out_networks: list[str], config: FeaturizerConfig,
           min_programs: int = MIN_HEAD_PROGRAMS) -> "CacheKey":
        return CacheKey(dataset_fingerprint(dataset, platform_ids), tuple(platform_ids),
                        tuple(sorted(held_out_networks)), config.to_json(), type(config).__name__, min_programs)


@dataclass
class CacheResult:
    programs: FeaturizedPrograms
    path: Path
    hit: bool  # read from the cache (True) or featurized now and written (False)


def featurize_platforms(dataset: Dataset, platform_ids: list[str], held_out_networks: list[str],
                        config: FeaturizerConfig, min_programs: int = MIN_HEAD_PROGRAMS) -> FeaturizedPrograms:
    """Read the platforms' traces (needs TVM), fit the featurizer on the training programs, featurize them all."""
    data = load_platforms(dataset, platform_ids, min_programs)
    train, _ = data.split_by_network(set(held_out_networks))
    featurizer = featurizer_for_config(config).fit(train.traces)
    return FeaturizedPrograms.of(data, featurizer)


def _encode(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 tensor -> (distinct values, codes): exact (compared by bit pattern, so -0.0 and NaN survive)."""
    bits = np.ascontiguousarray(features, dtype=np.float32).view(np.uint32)
    values = np.unique(bits)
    if len(values) > 1 << 16:  # not expected: numbers are logs of small integers; keep the raw floats then
        return np.zeros(0, dtype=np.uint32), bits
    codes = np.searchsorted(values, bits).astype(np.uint8 if len(values) <= 1 << 8 else np.uint16)
    return values, codes


def _decode(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    bits = codes if not len(values) else values[codes]
    return np.ascontiguousarray(bits, dtype=np.uint32).view(np.float32)


def write_cache(programs: FeaturizedPrograms, path: Path, key: CacheKey | None = None) -> None:
    """Write ``programs`` to ``path`` (atomically: a reader never sees half a file)."""
    values, codes = _encode(programs.features)
    meta = {"format": CACHE_FORMAT, "key": asdict(key) if key else None, "digest": key.digest if key else None,
            "task_keys": programs.task_keys, "platform_ids": programs.platform_ids, "catalogue": programs.catalogue,
            "featurizer": programs.featurizer.to_json(), "record_format": programs.record_format,
            "skipped": dict(programs.skipped), "shape": list(programs.features.shape)}
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            np.savez_compressed(stream, values=values, codes=codes, latencies=programs.latencies,
                                meta=np.array(json.dumps(meta)))
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def read_cache(path: Path) -> tuple[FeaturizedPrograms, dict[str, Any]]:
    """A cache file -> (programs, its meta). No TVM, no pickle."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(str(npz["meta"]))
            if meta.get("format") != CACHE_FORMAT:
                raise FeatureCacheError(f"{path}: cache format {meta.get('format')!r}, expected {CACHE_FORMAT}")
            features = _decode(npz["values"], npz["codes"]).reshape(meta["shape"])
            latencies = np.array(npz["latencies"], dtype=np.float64)
            featurizer = featurizer_from_json(meta["featurizer"])
    except FeatureCacheError:
        raise
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise FeatureCacheError(f"{path}: not a readable feature cache ({type(error).__name__}: {error}); "
                                "delete it to featurize again") from None
    programs = FeaturizedPrograms(features, list(meta["task_keys"]), latencies, list(meta["platform_ids"]),
                                  meta["catalogue"], featurizer, meta["record_format"], Counter(meta["skipped"]))
    return programs, meta


def cache_path(dataset: Dataset, key: CacheKey, cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / f"{dataset.path.resolve().name}-{key.digest[:24]}.npz"


def load_or_featurize(dataset: Dataset, platform_ids: list[str], held_out_networks: list[str],
                      config: FeaturizerConfig, min_programs: int = MIN_HEAD_PROGRAMS,
                      cache_dir: Path | None = None) -> CacheResult:
    """The platforms' featurized programs: from the cache when its key matches the dataset now, else featurized
    (reading traces with TVM) and cached for next time."""
    key = CacheKey.of(dataset, platform_ids, held_out_networks, config, min_programs)
    path = cache_path(dataset, key, cache_dir)
    if path.is_file():
        programs, meta = read_cache(path)
        if meta.get("digest") == key.digest:  # the name is a prefix of the digest: check the whole of it
            return CacheResult(programs, path, hit=True)
    programs = featurize_platforms(dataset, platform_ids, held_out_networks, config, min_programs)
    write_cache(programs, path, key)
    return CacheResult(programs, path, hit=False)
