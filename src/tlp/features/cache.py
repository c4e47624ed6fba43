"""Featurized programs cached on disk, so retraining does not re-read and re-featurize every trace.

Reading a dataset's traces and parsing every task's workload (which needs TVM) takes most of the time before
training starts; the features themselves are small. A cache entry is a folder holding, for one dataset, one set
of platforms and one feature config:

- the feature tensor of every program, once (the platforms share programs), exactly but compactly: the distinct
  float32 values (``values.npy``, a few hundred in practice) and a ``uint16`` code per element, in shards of
  :data:`SHARD_ROWS` programs (``codes-NNNN.npy``), read a batch of rows at a time: training decodes a batch at a time
  (:class:`tlp.features.tensors.CodedFeatures`), so its memory is bounded by the batch, not by the dataset;
- the latency matrix ``[programs x platforms]`` (NaN: not measured there), task keys, the task catalogue;
- the featurizer with its vocabularies, fitted on the training programs (the tasks outside the held-out
  networks), exactly as ``TLPModel.fit`` fits it; the held-out networks are therefore part of the key.

It is made in two streaming reads of the platforms' stores (:func:`write_featurized`): the first keeps a few numbers
per program (its preferred latency, task, and which distinct vocabulary tokens its trace has), the second
featurizes each chosen program's trace as it is read, in worker processes, into the shards. Memory is bounded by
a chunk of traces, not by the dataset.

The folder name is a hash of what the features depend on: the bytes of every file of the dataset's catalogue and
of the platforms' folders (a new record, a re-measurement, even a re-sealed segment gives a new key), the
platform ids, the held-out networks, the feature config and version, and the minimum programs per head. A stale
cache is therefore never read: a changed dataset simply has no cache entry yet. Reading one needs no TVM.

Where: ``$TLP_CACHE_DIR/features`` (default ``~/.cache/tlp/features``), or the ``cache_dir`` given.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from tlp import TLPError
from tlp.cache import cache_root
from tlp.dataset.store import BadRecord, Dataset, DatasetError, ReadReport, parse_record_line, trace_id
from tlp.features.formats import FeaturizerConfig, featurizer_for_config, featurizer_from_json
from tlp.features.tensors import (MIN_HEAD_PROGRAMS, CodedFeatures, FeaturizedPrograms, ShardFile,
                                  check_head_programs, check_shared_programs, in_networks)
from tlp.interrupt import process_pool
from tlp.platform import METASCHEDULE_FORMAT

CACHE_FORMAT = "tlp-feature-cache-2"
# Files in a platform folder that are not its content (locks, half-written files).
_NOT_CONTENT = (".lock", ".tmp")
SHARD_ROWS = 1 << 16  # programs per codes shard
CHUNK = 512  # traces featurized per worker call
PARALLEL_FROM = 8192  # fewer programs than this: featurized in this process (a worker's start costs a second)


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


def read_cache(path: Path) -> tuple[FeaturizedPrograms, dict[str, Any]]:
    """A cache entry (folder) -> (programs, its meta); the codes stay on disk, read a batch at a time. No TVM, no pickle."""
    try:
        meta = json.loads((path / "meta.json").read_text())
        if meta.get("format") != CACHE_FORMAT:
            raise FeatureCacheError(f"{path}: cache format {meta.get('format')!r}, expected {CACHE_FORMAT}")
        shards = [ShardFile(path / name) for name in meta["shards"]]
        features = CodedFeatures(np.load(path / "values.npy", allow_pickle=False), shards, tuple(meta["shape"][1:]))
        latencies = np.load(path / "latencies.npy", allow_pickle=False)
        featurizer = featurizer_from_json(meta["featurizer"])
        if features.shape[0] != len(meta["task_keys"]) or latencies.shape[0] != len(meta["task_keys"]):
            raise ValueError(f"{features.shape[0]} feature rows, {latencies.shape[0]} latency rows for "
                             f"{len(meta['task_keys'])} programs")
    except FeatureCacheError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise FeatureCacheError(f"{path}: not a readable feature cache ({type(error).__name__}: {error}); "
                                "delete it to featurize again") from None
    programs = FeaturizedPrograms(features, list(meta["task_keys"]), latencies, list(meta["platform_ids"]),
                                  meta["catalogue"], featurizer, meta["record_format"], Counter(meta["skipped"]))
    return programs, meta


@dataclass
class _Chosen:
    """The first read's result: which programs the cache holds (rows), their latencies and skip counts."""

    rows: dict[str, int]  # program id -> row (in row order)
    owner: list[int]  # row -> the platform whose read featurizes it (the first where it is valid)
    lines: list[int]  # row -> the number of its record line in that platform's record table
    task_keys: list[str]
    latencies: np.ndarray  # [rows, platforms]
    kind_counts: Counter
    string_counts: Counter
    skipped: Counter


def _choose(dataset: Dataset, platform_ids: list[str], held_out_networks: list[str], featurizer: Any,
            min_programs: int) -> _Chosen:
    """One streaming read of each platform: the preferred measurement of each program (as ``load_programs``
    chooses it), the valid ones of tasks with two or more, joined by program across platforms (as
    ``MultiPlatformPrograms.join``), and the vocabulary token counts of the training programs among them."""
    catalogue = dataset.catalogue()
    signatures: dict[Any, int] = {}  # a trace's distinct tokens -> their index: traces share a few token lists
    per_platform = []
    for platform_id in platform_ids:
        store = dataset.store(platform_id)
        report = ReadReport()

        def keep(program: Any) -> tuple[float | None, str, int, int]:
            if program.latency is None or not program.trace_json or not program.trace_json[0]:
                return program.latency, program.workload_key, -1, program.line  # left out: failed, or an empty trace
            tokens = signatures.setdefault(featurizer.tokens(program.trace_json), len(signatures))
            return program.latency, program.workload_key, tokens, program.line

        chosen = store.latest_programs(report, keep=keep)
        skipped: Counter = Counter()
        valid = {}
        # In the order of their lines, which the second read walks.
        for program_id, (latency, key, tokens, line) in sorted(chosen.items(), key=lambda item: item[1][3]):
            if latency is None:
                skipped["failed (no latency)"] += 1
            elif tokens < 0:
                skipped["empty trace"] += 1
            else:
                valid[program_id] = (latency, key, tokens, line)
        del chosen
        skipped.update(report.skipped)
        per_task = Counter(key for _, key, _, _ in valid.values())
        single = {k for k, n in per_task.items() if n < 2}
        if single:
            skipped["programs of tasks with a single valid program"] += sum(per_task[k] for k in single)
            valid = {i: v for i, v in valid.items() if v[1] not in single}
        if len(platform_ids) > 1:
            check_head_programs(dataset, platform_id, len(valid), min_programs)
        per_platform.append((platform_id, valid, skipped))
    rows: dict[str, int] = {}
    owner: list[int] = []
    lines: list[int] = []
    task_keys: list[str] = []
    tokens_of: list[int] = []
    for column, (_, valid, _) in enumerate(per_platform):
        for program_id, (_, key, tokens, line) in valid.items():
            if program_id not in rows:
                rows[program_id] = len(task_keys)
                owner.append(column)
                lines.append(line)
                task_keys.append(key)
                tokens_of.append(tokens)
    latencies = np.full((len(rows), len(platform_ids)), np.nan)
    skipped_all: Counter = Counter()
    for column, (platform_id, valid, skipped) in enumerate(per_platform):
        for program_id, (latency, _, _, _) in valid.items():
            latencies[rows[program_id], column] = latency
        skipped_all.update({f"{platform_id}: {k}": v for k, v in skipped.items()})
    if len(platform_ids) > 1:
        check_shared_programs(dataset, platform_ids, latencies)
    # The vocabularies are fitted on the training programs' tokens: each distinct token list times its programs.
    training = ~in_networks(task_keys, catalogue, set(held_out_networks))
    uses = Counter(np.asarray(tokens_of, dtype=np.int64)[training].tolist())
    kind_counts: Counter = Counter()
    string_counts: Counter = Counter()
    for (kinds, strings), index in signatures.items():
        if uses[index]:
            for token, count in Counter(kinds).items():
                kind_counts[token] += count * uses[index]
            for token, count in Counter(strings).items():
                string_counts[token] += count * uses[index]
    return _Chosen(rows, owner, lines, task_keys, latencies, kind_counts, string_counts, skipped_all)


def _lines_in_row_order(dataset: Dataset, platform_ids: list[str], chosen: _Chosen
                        ) -> Iterator[tuple[str, str, str]]:
    """``(record line, task key, program id)`` of every chosen program, rows in order, in a second read of the
    stores' lines: this process only finds the lines (the workers parse them, see :class:`_RecordTraces`)."""
    ids = iter(chosen.rows)  # program ids in row order
    row, rows = 0, len(chosen.task_keys)
    for column, platform_id in enumerate(platform_ids):
        store = dataset.store(platform_id)
        for number, (_, line) in enumerate(store.table_lines(store.records, ReadReport())):
            if row == rows or chosen.owner[row] != column:
                break  # the rows this platform owns (a block, in the order of their lines) are all found
            if number == chosen.lines[row]:
                yield line, chosen.task_keys[row], next(ids)
                row += 1
        if row < rows and chosen.owner[row] == column:
            raise DatasetError(f"{dataset.path}/{platform_id}: {rows - row} programs vanished while it was read; "
                               "featurize again")


class _RecordTraces(Sequence):
    """A chunk's traces as their record lines, parsed when read (in the worker that featurizes them), each checked
    against the program the first read chose there."""

    def __init__(self, lines: list[str], keys: list[str], ids: list[str]) -> None:
        self.lines, self.keys, self.ids = lines, keys, ids

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, index: Any) -> Any:
        try:
            trace = parse_record_line(self.lines[index])[1]
        except BadRecord:
            trace = None
        if trace is None or trace_id(self.keys[index], trace) != self.ids[index]:
            raise DatasetError("a platform's records changed while they were read; featurize again")
        return trace


def _task_extents(dataset: Dataset, platform_ids: list[str], record_format: str, keys: set[str]
                  ) -> dict[str, dict[str, list[int]]]:
    """Each task's block extents (the trace featurizer reads loop sizes from the workload, which needs TVM)."""
    if record_format != METASCHEDULE_FORMAT or not keys:
        return {}
    # pylint: disable=import-outside-toplevel  # TVM only where a workload is parsed
    from tlp._tvm import ms
    from tlp.features.featurizer import block_extents

    extents = {}
    for platform_id in platform_ids:
        store = dataset.store(platform_id)
        for key in sorted(keys - set(extents)):
            if key in store.workload_index():
                extents[key] = block_extents(ms.database.Workload.from_json(store.workload_json(key)).mod)
    return extents


# What the featurizing processes read: set before the workers are forked, which inherit it.
_worker: dict[str, Any] = {}


def _featurize_chunk(chunk: tuple[Sequence[Any], list[str]]) -> np.ndarray:
    """Worker side: ``(traces, their task keys)`` -> float32 features."""
    traces, keys = chunk
    extents = _worker["extents"]
    return _worker["featurizer"].transform(traces, [extents.get(key) for key in keys])


def _chunks(items: Iterator[tuple[str, str, str]], size: int) -> Iterator[tuple[_RecordTraces, list[str]]]:
    while True:
        part = list(itertools.islice(items, size))
        if not part:
            return
        lines, keys, ids = (list(column) for column in zip(*part))
        yield _RecordTraces(lines, keys, ids), keys


def featurized_chunks(chunks: Iterable[tuple[Sequence[Any], list[str]]], featurizer: Any,
                      extents: dict[str, Any], programs: int) -> Iterator[np.ndarray]:
    """Each chunk's features (a chunk: traces, parsed or :class:`~tlp.features.tensors.PackedTraces`, and their
    task keys), in order: in worker processes (one per core, a bounded number of chunks in flight) when there are
    ``programs`` >= :data:`PARALLEL_FROM` in all, else here."""
    workers = os.cpu_count() or 1
    _worker.update(featurizer=featurizer, extents=extents)
    if programs < PARALLEL_FROM or workers < 2:
        for chunk in chunks:
            yield _featurize_chunk(chunk)
        return
    with process_pool(workers) as pool:
        pending: list[Any] = []
        for chunk in chunks:
            pending.append(pool.submit(_featurize_chunk, chunk))
            if len(pending) >= 2 * workers:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


class _Coder:
    """float32 features -> ``uint16`` codes into a growing table of distinct values (by bit pattern: exact)."""

    def __init__(self) -> None:
        self.known = np.zeros(0, dtype=np.uint32)  # distinct bit patterns, sorted
        self.code_of_known = np.zeros(0, dtype=np.uint16)
        self.count = 0

    def encode(self, features: np.ndarray) -> np.ndarray:
        bits = np.ascontiguousarray(features, dtype=np.float32).view(np.uint32).ravel()
        at = np.searchsorted(self.known, bits).clip(max=max(len(self.known) - 1, 0))
        new = bits if not len(self.known) else bits[self.known[at] != bits]
        if len(new):  # values not seen before: give them the next codes, then look everything up again
            fresh = np.unique(new)
            if self.count + len(fresh) > 1 << 16:
                raise FeatureCacheError(f"over {1 << 16} distinct feature values: more than a uint16 code holds")
            codes = np.concatenate([self.code_of_known, np.arange(self.count, self.count + len(fresh))])
            order = np.argsort(np.concatenate([self.known, fresh]), kind="stable")
            self.known = np.concatenate([self.known, fresh])[order]
            self.code_of_known = codes[order].astype(np.uint16)
            self.count += len(fresh)
            at = np.searchsorted(self.known, bits)
        return self.code_of_known[at].reshape(features.shape)

    def values(self) -> np.ndarray:
        """Code -> value."""
        values = np.zeros(self.count, dtype=np.uint32)
        values[self.code_of_known] = self.known
        return values.view(np.float32)


def write_featurized(dataset: Dataset, platform_ids: list[str], held_out_networks: list[str],
                     config: FeaturizerConfig, path: Path, min_programs: int = MIN_HEAD_PROGRAMS,
                     key: CacheKey | None = None) -> None:
    """Featurize the platforms' programs into a cache entry at ``path`` (a folder, written whole or not at all), in
    two streaming reads (see the module docstring)."""
    featurizer = featurizer_for_config(config)
    chosen = _choose(dataset, platform_ids, held_out_networks, featurizer, min_programs)
    featurizer.fit_counts(chosen.kind_counts, chosen.string_counts)
    record_format = dataset.store(platform_ids[0]).platform.record_format
    extents = _task_extents(dataset, platform_ids, record_format, set(chosen.task_keys))
    programs = len(chosen.task_keys)
    shape = (featurizer.config.seq_len, featurizer.config.width)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=path.parent, prefix=path.name, suffix=".tmp"))
    try:
        coder, shards = _Coder(), []
        chunks = featurized_chunks(_chunks(_lines_in_row_order(dataset, platform_ids, chosen), CHUNK), featurizer,
                                    extents, programs)
        for number, start in enumerate(range(0, programs, SHARD_ROWS)):
            rows = min(SHARD_ROWS, programs - start)
            name = f"codes-{number:04d}.npy"
            shard = np.lib.format.open_memmap(temporary / name, mode="w+", dtype=np.uint16, shape=(rows, *shape))
            filled = 0
            while filled < rows:
                block = coder.encode(next(chunks))
                shard[filled : filled + len(block)] = block  # chunks never straddle shards: SHARD_ROWS % CHUNK == 0
                filled += len(block)
            shard.flush()
            del shard
            shards.append(name)
        np.save(temporary / "values.npy", coder.values())
        np.save(temporary / "latencies.npy", chosen.latencies)
        meta = {"format": CACHE_FORMAT, "key": asdict(key) if key else None, "digest": key.digest if key else None,
                "task_keys": chosen.task_keys, "platform_ids": list(platform_ids), "catalogue": dataset.catalogue(),
                "featurizer": featurizer.to_json(), "record_format": record_format, "skipped": dict(chosen.skipped),
                "shape": [programs, *shape], "shards": shards}
        (temporary / "meta.json").write_text(json.dumps(meta))
        if path.exists():  # a damaged or stale entry of the same name
            shutil.rmtree(path)
        os.replace(temporary, path)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def cache_path(dataset: Dataset, key: CacheKey, cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / f"{dataset.path.resolve().name}-{key.digest[:24]}"


def load_or_featurize(dataset: Dataset, platform_ids: list[str], held_out_networks: list[str],
                      config: FeaturizerConfig, min_programs: int = MIN_HEAD_PROGRAMS,
                      cache_dir: Path | None = None) -> CacheResult:
    """The platforms' featurized programs: from the cache when its key matches the dataset now, else featurized
    (reading traces with TVM) and cached for next time."""
    key = CacheKey.of(dataset, platform_ids, held_out_networks, config, min_programs)
    path = cache_path(dataset, key, cache_dir)
    if path.is_dir():
        programs, meta = read_cache(path)
        if meta.get("digest") == key.digest:  # the name is a prefix of the digest: check the whole of it
            return CacheResult(programs, path, hit=True)
    write_featurized(dataset, platform_ids, held_out_networks, config, path, min_programs, key)
    programs, _ = read_cache(path)
    return CacheResult(programs, path, hit=False)
