"""A platform's measured programs -> training tensors: features, per-task labels, task groups, network split.

Labels are per task: ``min latency of the task / latency`` in (0, 1]; the fastest program of a task is 1.0.
Failed programs have no latency, hence no label, and are left out (counted). A task with a single valid program
cannot be ranked and is left out of training (counted) but kept for evaluation bookkeeping.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tlp import TLPError
from tlp.dataset.store import Dataset, DatasetError, ReadReport, trace_id
from tlp.features.featurizer import TraceFeaturizer, block_extents
from tlp.platform import METASCHEDULE_FORMAT

# TVM is imported only where a workload is parsed (``load_programs``): training from featurized programs
# (:class:`FeaturizedPrograms`, e.g. read from the feature cache) must work where TVM is not installed.


class PackedTraces(Sequence):
    """Traces kept as compressed JSON and parsed when read: a parsed trace takes ~15x the memory of its text, so a
    platform's worth of them (an evaluation's test programs at TenSet's size) does not fit as objects."""

    def __init__(self, packed: list[bytes | None]) -> None:
        self.packed = packed

    @staticmethod
    def pack(trace: Any) -> bytes:
        return zlib.compress(json.dumps(trace, separators=(",", ":")).encode(), 1)

    def __len__(self) -> int:
        return len(self.packed)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return PackedTraces(self.packed[index])
        item = self.packed[index]
        return None if item is None else json.loads(zlib.decompress(item))


def pick(traces: Sequence[Any], index: Any) -> Sequence[Any]:
    """``[traces[i] for i in index]``; packed traces stay packed."""
    if isinstance(traces, PackedTraces):
        return PackedTraces([traces.packed[i] for i in index])
    return [traces[i] for i in index]


@dataclass
class LabeledPrograms:
    """Valid programs of one platform, grouped by task, before featurization."""

    traces: list[Any]
    latencies: np.ndarray  # seconds
    task_keys: list[str]
    extents: dict[str, dict[str, list[int]]]
    catalogue: dict[str, dict[str, Any]]
    skipped: Counter = field(default_factory=Counter)
    platform_id: str = ""
    program_hashes: list[str] = field(default_factory=list)  # IR identity per program ("" when not recorded)
    record_format: str = METASCHEDULE_FORMAT  # what ``traces`` hold: MetaSchedule traces or Ansor steps

    def labels(self) -> np.ndarray:
        """min latency of the program's task / its latency."""
        best: dict[str, float] = {}
        for key, latency in zip(self.task_keys, self.latencies):
            best[key] = min(best.get(key, np.inf), float(latency))
        return np.array([best[k] / lat for k, lat in zip(self.task_keys, self.latencies)], dtype=np.float32)

    def networks_of(self, key: str) -> set[str]:
        return set(self.catalogue.get(key, {}).get("networks", {}))

    def network_tasks(self, network: str) -> list[tuple[str, np.ndarray, float]]:
        """``(task key, program rows, weight in network)`` of each task of ``network`` (TenSet's per-network sums)."""
        rows: dict[str, list[int]] = {}
        for row, key in enumerate(self.task_keys):
            if network in self.networks_of(key):
                rows.setdefault(key, []).append(row)
        return [(key, np.array(index), float(self.catalogue[key]["networks"][network])) for key, index in rows.items()]

    def subset(self, keep: np.ndarray) -> "LabeledPrograms":
        index = np.nonzero(keep)[0]
        return LabeledPrograms(pick(self.traces, index), self.latencies[index],
                               [self.task_keys[i] for i in index], self.extents, self.catalogue, Counter(self.skipped),
                               self.platform_id, [self.program_hashes[i] for i in index] if self.program_hashes else [],
                               self.record_format)

    def split_by_network(self, test_networks: set[str]) -> tuple["LabeledPrograms", "LabeledPrograms"]:
        """(train, test): a task that appears in any test network is a test task, never a training one."""
        is_test = in_networks(self.task_keys, self.catalogue, test_networks)
        return self.subset(~is_test), self.subset(is_test)

    def featurize(self, featurizer: TraceFeaturizer) -> np.ndarray:
        return featurizer.transform(self.traces, [self.extents.get(k) for k in self.task_keys])

    def group_ids(self) -> np.ndarray:
        """Task index per program (for the ranking loss, which never pairs programs of different tasks)."""
        index: dict[str, int] = {}
        return np.array([index.setdefault(k, len(index)) for k in self.task_keys], dtype=np.int64)


def in_networks(task_keys: list[str], catalogue: dict[str, dict[str, Any]], networks: set[str]) -> np.ndarray:
    """Per program: does its task appear in any of ``networks``."""
    return np.array([bool(set(catalogue.get(k, {}).get("networks", {})) & networks) for k in task_keys], dtype=bool)


def load_programs(dataset: Dataset, platform_id: str, traces_of: set[str] | None = None) -> LabeledPrograms:
    """Valid, finite measurements of one platform (one per program), with what was left out counted.

    ``traces_of``: networks whose tasks' traces are kept, packed (:class:`PackedTraces`); the other programs are
    there with their latencies and ``None`` for a trace: what an evaluation that scores only test networks needs,
    in memory bounded by their compressed text, not by the whole platform's parsed traces. None: every trace,
    parsed."""
    store = dataset.store(platform_id)
    report = ReadReport()
    skipped: Counter = Counter()
    traces, latencies, keys, hashes = [], [], [], []
    catalogue = dataset.catalogue()

    def wanted(key: str) -> bool:
        return traces_of is None or bool(set(catalogue.get(key, {}).get("networks", {})) & traces_of)

    def keep(program: Any) -> tuple[Any, float | None, str, bool, str]:
        empty = not program.trace_json or not program.trace_json[0]
        trace = program.trace_json if traces_of is None else \
            PackedTraces.pack(program.trace_json) if wanted(program.workload_key) else None
        return trace, program.latency, program.workload_key, empty, str(program.meta.get("program_hash", ""))

    for trace, latency, key, empty, program_hash in store.latest_programs(report, keep=keep).values():
        if latency is None:
            skipped["failed (no latency)"] += 1
            continue
        if empty:
            skipped["empty trace"] += 1
            continue
        traces.append(trace)
        latencies.append(latency)
        keys.append(key)
        hashes.append(program_hash)
    skipped.update(report.skipped)
    per_task = Counter(keys)
    single = {k for k, n in per_task.items() if n < 2}
    if single:
        skipped["programs of tasks with a single valid program"] += sum(per_task[k] for k in single)
        kept = [i for i, k in enumerate(keys) if k not in single]
        traces, latencies, keys = [traces[i] for i in kept], [latencies[i] for i in kept], [keys[i] for i in kept]
        hashes = [hashes[i] for i in kept]

    record_format = store.platform.record_format
    extents = {}
    if record_format == METASCHEDULE_FORMAT and keys:
        from tlp._tvm import ms  # pylint: disable=import-outside-toplevel  # see the note at the imports
    for key in {k for k in keys if wanted(k)} if record_format == METASCHEDULE_FORMAT else ():  # Ansor steps carry
        extents[key] = block_extents(ms.database.Workload.from_json(store.workload_json(key)).mod)  # their sizes
    return LabeledPrograms(PackedTraces(traces) if traces_of is not None else traces,
                           np.array(latencies, dtype=np.float64), keys, extents, catalogue, skipped,
                           platform_id, hashes, record_format)


@dataclass
class MultiPlatformPrograms:
    """The same programs measured on several platforms (TenSet's layout, MTL-TLP's training data).

    One row per distinct program (workload + trace); ``latencies[i, p]`` is its latency on ``platform_ids[p]`` or
    NaN where it was not measured there (or failed). Labels are normalized per task *and platform*: latencies of
    different machines are never compared.
    """

    traces: list[Any]
    task_keys: list[str]
    latencies: np.ndarray  # [N, P] seconds, NaN = no measurement on that platform
    platform_ids: list[str]
    extents: dict[str, dict[str, list[int]]]
    catalogue: dict[str, dict[str, Any]]
    skipped: Counter = field(default_factory=Counter)
    record_format: str = METASCHEDULE_FORMAT

    @staticmethod
    def join(per_platform: list[LabeledPrograms]) -> "MultiPlatformPrograms":
        """Rows of the same program (same workload and trace) on different platforms become one row."""
        formats = {p.record_format for p in per_platform}
        if len(formats) > 1:
            raise DatasetError(f"platforms {', '.join(p.platform_id for p in per_platform)} hold records of different "
                               f"formats ({', '.join(sorted(formats))}); one model reads one format: train them apart")
        rows: dict[str, int] = {}
        traces: list[Any] = []
        keys: list[str] = []
        columns: list[list[tuple[int, float]]] = []
        extents: dict[str, dict[str, list[int]]] = {}
        skipped: Counter = Counter()
        for programs in per_platform:
            column = []
            for trace, key, latency in zip(programs.traces, programs.task_keys, programs.latencies):
                program_id = trace_id(key, trace)
                if program_id not in rows:
                    rows[program_id] = len(traces)
                    traces.append(trace)
                    keys.append(key)
                column.append((rows[program_id], float(latency)))
            columns.append(column)
            extents.update(programs.extents)
            skipped.update({f"{programs.platform_id}: {k}": v for k, v in programs.skipped.items()})
        latencies = np.full((len(traces), len(per_platform)), np.nan)
        for p, column in enumerate(columns):
            for row, latency in column:
                latencies[row, p] = latency
        catalogue = per_platform[0].catalogue if per_platform else {}
        return MultiPlatformPrograms(traces, keys, latencies, [p.platform_id for p in per_platform], extents,
                                     catalogue, skipped, formats.pop() if formats else METASCHEDULE_FORMAT)

    def labels(self) -> np.ndarray:
        """``[N, P]``: min latency of the program's task on that platform / its latency there; NaN where unmeasured."""
        return per_task_platform_labels(self.latencies, self.group_ids())

    def group_ids(self) -> np.ndarray:
        return task_group_ids(self.task_keys)

    def featurize(self, featurizer: TraceFeaturizer) -> np.ndarray:
        return featurizer.transform(self.traces, [self.extents.get(k) for k in self.task_keys])

    def subset(self, keep: np.ndarray) -> "MultiPlatformPrograms":
        index = np.nonzero(keep)[0]
        return MultiPlatformPrograms([self.traces[i] for i in index], [self.task_keys[i] for i in index],
                                     self.latencies[index], list(self.platform_ids), self.extents, self.catalogue,
                                     Counter(self.skipped), self.record_format)

    def split_by_network(self, test_networks: set[str]) -> tuple["MultiPlatformPrograms", "MultiPlatformPrograms"]:
        is_test = in_networks(self.task_keys, self.catalogue, test_networks)
        return self.subset(~is_test), self.subset(is_test)

    def with_unmeasured(self, traces: list[Any], task_keys: list[str], extents: dict[str, dict[str, list[int]]],
                        names: dict[str, str]) -> "MultiPlatformPrograms":
        """These programs followed by unmeasured traces of new tasks (what
        :meth:`FeaturizedPrograms.with_unmeasured` does for featurized programs)."""
        return dataclasses.replace(self, traces=list(self.traces) + list(traces),
                                   task_keys=list(self.task_keys) + list(task_keys),
                                   latencies=np.concatenate([self.latencies, _unmeasured(len(task_keys),
                                                                                         len(self.platform_ids))]),
                                   extents={**self.extents, **extents},
                                   catalogue={**self.catalogue, **_unmeasured_tasks(names)})

    def platform(self, platform_id: str) -> LabeledPrograms:
        """The programs measured on one platform, as single-platform data."""
        p = self.platform_ids.index(platform_id)
        index = np.nonzero(~np.isnan(self.latencies[:, p]))[0]
        return LabeledPrograms([self.traces[i] for i in index], self.latencies[index, p],
                               [self.task_keys[i] for i in index], self.extents, self.catalogue, Counter(),
                               platform_id, record_format=self.record_format)


def _unmeasured(programs: int, platforms: int) -> np.ndarray:
    """Latencies of programs measured nowhere."""
    return np.full((programs, platforms), np.nan)


def _unmeasured_tasks(names: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Catalogue entries of new tasks (key -> name) that belong to no network."""
    return {key: {"name": name, "networks": {}} for key, name in names.items()}


def task_group_ids(task_keys: list[str]) -> np.ndarray:
    """Task index per program, numbered in order of first appearance."""
    index: dict[str, int] = {}
    return np.array([index.setdefault(k, len(index)) for k in task_keys], dtype=np.int64)


def group_rows(groups: np.ndarray) -> list[tuple[Any, np.ndarray]]:
    """``(group, its rows in ascending order)`` for each distinct group, groups sorted: one sort, where a
    ``groups == group`` per group costs groups x rows (TenSet: thousands of tasks over millions of programs)."""
    groups = np.asarray(groups)
    order = np.argsort(groups, kind="stable")
    values, starts = np.unique(groups[order], return_index=True)
    return list(zip(values.tolist(), np.split(order, starts[1:])))


def per_task_platform_labels(latencies: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """``[N, P]`` latencies (NaN = unmeasured) -> min latency of the task on that platform / latency; NaN stays."""
    labels = np.full(latencies.shape, np.nan, dtype=np.float32)
    for p in range(latencies.shape[1]):
        column = latencies[:, p]
        measured = ~np.isnan(column)
        best = np.full(groups.max() + 1 if len(groups) else 0, np.inf)
        np.minimum.at(best, groups[measured], column[measured])
        labels[measured, p] = best[groups[measured]] / column[measured]
    return labels


class ShardFile:
    """The rows of a ``.npy`` file read on demand with plain reads, a run of consecutive rows at a time.

    Why not a memory map: the pages a map has read count as the process's resident memory until it ends, so one
    epoch over a million programs' features held 5 GB more; read this way, they stay in the kernel's page cache.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as file:
            version = np.lib.format.read_magic(file)
            shape, fortran, dtype = (np.lib.format.read_array_header_1_0(file) if version == (1, 0)
                                     else np.lib.format.read_array_header_2_0(file))
            self.offset = file.tell()
        if fortran or dtype.hasobject or not shape:
            raise ValueError(f"{self.path}: not a C-ordered array of numbers")
        self.shape, self.dtype = tuple(shape), dtype
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        if self.path.stat().st_size < self.offset + self.row_bytes * shape[0]:
            raise ValueError(f"{self.path}: shorter than its {shape[0]} rows")

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64)
        if index.ndim != 1:
            raise IndexError("ShardFile reads a 1-d array of row numbers")
        if len(index) and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"row out of range for {self.path} ({len(self)} rows)")
        wanted, inverse = np.unique(index, return_inverse=True)
        out = np.empty((len(wanted), *self.shape[1:]), dtype=self.dtype)
        starts = np.concatenate([[0], np.nonzero(np.diff(wanted) != 1)[0] + 1, [len(wanted)]]).astype(np.int64)
        with open(self.path, "rb", buffering=0) as file:
            for begin, end in zip(starts[:-1], starts[1:]):
                file.seek(self.offset + int(wanted[begin]) * self.row_bytes)
                view, done = memoryview(out[begin:end]).cast("B"), 0
                while done < len(view):
                    read = file.readinto(view[done:])
                    if not read:
                        raise ValueError(f"{self.path}: ended early")
                    done += read
        return out[inverse]


class CodedFeatures:
    """``float32 [N, seq_len, width]`` features held as small-integer codes into a table of their distinct values
    (a few hundred in practice: logs of small integers and vocabulary ids), in shards that may be files read on
    demand (:class:`ShardFile`): what the feature cache stores, read a batch at a time (:meth:`take` is lazy, indexing decodes).

    Indexing (``features[rows]``, ``features[rows, :crop]``) decodes only the rows asked for; ``np.asarray``
    decodes all of them (small data and code that wants a plain array).
    """

    dtype = np.dtype(np.float32)

    def __init__(self, values: np.ndarray, shards: list[np.ndarray], row_shape: tuple[int, int],
                 rows: np.ndarray | None = None) -> None:
        self.values = np.asarray(values, dtype=np.float32)
        self.shards = shards
        self._starts = np.cumsum([0] + [len(s) for s in shards])
        self.rows = rows  # which stored rows, in order (None: all of them)
        self.shape = (int(self._starts[-1]) if rows is None else len(rows), *row_shape)
        self.ndim = 3

    def __len__(self) -> int:
        return self.shape[0]

    def take(self, index: np.ndarray) -> "CodedFeatures":
        """These rows, still coded (nothing is read)."""
        index = np.asarray(index, dtype=np.int64)
        return CodedFeatures(self.values, self.shards, self.shape[1:], index if self.rows is None else self.rows[index])

    def _stored(self, index: np.ndarray) -> np.ndarray:
        """Codes of the given rows ``[len(index), seq_len, width]``, read shard by shard."""
        stored = index if self.rows is None else self.rows[index]
        out = np.empty((len(stored), *self.shape[1:]), dtype=np.uint16)
        shard_of = np.searchsorted(self._starts, stored, side="right") - 1
        for shard in np.unique(shard_of):
            at = np.nonzero(shard_of == shard)[0]
            out[at] = self.shards[shard][stored[at] - self._starts[shard]]
        return out

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        if key and key[0] is Ellipsis:
            return np.asarray(self)[key]
        rows = np.arange(len(self))[key[0]]
        picked = self.values[self._stored(np.atleast_1d(rows))[(slice(None), *key[1:])]]
        return picked[0] if np.ndim(rows) == 0 else picked

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        decoded = self[np.arange(len(self))] if len(self) else np.zeros(self.shape, dtype=np.float32)
        return decoded if dtype is None else decoded.astype(dtype)

    def lengths(self) -> np.ndarray:
        """Rows of each program that are not padding (kind id 0), read a block at a time."""
        zero = np.nonzero(self.values == 0.0)[0]
        out = np.empty(len(self), dtype=np.int64)
        for start in range(0, len(self), 1 << 14):
            index = np.arange(start, min(len(self), start + (1 << 14)))
            kinds = self._stored(index)[..., 0]
            out[index] = (~np.isin(kinds, zero)).sum(axis=1)
        return out


def take_rows(features: np.ndarray | CodedFeatures, index: np.ndarray) -> np.ndarray | CodedFeatures:
    """``features[index]``: coded features stay coded (and unread)."""
    return features.take(index) if isinstance(features, CodedFeatures) else features[index]


def feature_lengths(features: Any) -> np.ndarray:
    """Rows of each program that are not padding (kind id 0)."""
    if isinstance(features, CodedFeatures):
        return features.lengths()
    return (np.asarray(features)[..., 0] != 0).sum(axis=1)


class FeaturizerMismatchError(TLPError, ValueError):
    """Featurized programs asked for with a featurizer other than the one that made them."""


@dataclass
class FeaturizedPrograms:
    """Programs of one or more platforms already featurized: all that training and scoring need, with no traces.

    What :mod:`tlp.features.cache` stores on disk. ``features[i]`` is program ``i`` featurized by ``featurizer``
    (vocabularies fitted on the training programs); ``latencies[i, p]`` is its latency on ``platform_ids[p]``
    (NaN: not measured there), as in :class:`MultiPlatformPrograms`, whose interface this follows so the estimator
    trains from either. Nothing here imports TVM.
    """

    features: np.ndarray | CodedFeatures  # float32 [N, seq_len, width]; the cache's stay coded until read
    task_keys: list[str]
    latencies: np.ndarray  # [N, P] seconds, NaN = no measurement on that platform
    platform_ids: list[str]
    catalogue: dict[str, dict[str, Any]]
    featurizer: Any  # the fitted featurizer (TraceFeaturizer or AnsorStepFeaturizer) that made ``features``
    record_format: str = METASCHEDULE_FORMAT
    skipped: Counter = field(default_factory=Counter)

    @classmethod
    def of(cls, programs: MultiPlatformPrograms, featurizer: Any) -> "FeaturizedPrograms":
        """``programs``' traces featurized once by ``featurizer`` (fitted), keeping their latencies, catalogue and
        skip counts: what the feature cache stores, and what repeated trainings on the same traces share."""
        return cls(programs.featurize(featurizer), list(programs.task_keys), programs.latencies,
                   list(programs.platform_ids), programs.catalogue, featurizer, programs.record_format,
                   Counter(programs.skipped))

    @property
    def platform_id(self) -> str:
        """The platform of single-platform programs (what ``TLPModel.fit_head`` trains a head for)."""
        if len(self.platform_ids) != 1:
            raise ValueError(f"{len(self.platform_ids)} platforms here; take one with .platform(ID)")
        return self.platform_ids[0]

    def featurize(self, featurizer: Any) -> np.ndarray | CodedFeatures:
        """The stored features as ``featurizer`` makes them: as stored if it made them, translated when it has the
        same config and vocabularies this data's featurizer knows all of (a model fitted on an older state of a
        grown dataset; see ``TraceFeaturizer.translate``)."""
        if featurizer.to_json() == self.featurizer.to_json():
            return self.features
        translated = featurizer.translate(np.asarray(self.features), self.featurizer)
        if translated is None:
            raise FeaturizerMismatchError("these programs were featurized with another feature config than the "
                                          "model's, or with vocabularies that lack some of the model's tokens; "
                                          "featurize the traces again (tlp train --no-feature-cache) or train a "
                                          "model on these features")
        return translated

    def labels(self) -> np.ndarray:
        return per_task_platform_labels(self.latencies, self.group_ids())

    def with_unmeasured(self, features: np.ndarray, task_keys: list[str], names: dict[str, str]
                        ) -> "FeaturizedPrograms":
        """These programs followed by unmeasured ones (latency NaN on every platform) of new tasks named ``names``
        (task key -> name): a transfer set for distillation (``tlp.model.distil.with_transfer_set``)."""
        return dataclasses.replace(self, features=np.concatenate([np.asarray(self.features), features]),
                                   task_keys=list(self.task_keys) + list(task_keys),
                                   latencies=np.concatenate([self.latencies, _unmeasured(len(task_keys),
                                                                                         len(self.platform_ids))]),
                                   catalogue={**self.catalogue, **_unmeasured_tasks(names)})

    def group_ids(self) -> np.ndarray:
        return task_group_ids(self.task_keys)

    def networks_of(self, key: str) -> set[str]:
        return set(self.catalogue.get(key, {}).get("networks", {}))

    def subset(self, keep: np.ndarray, columns: list[int] | None = None) -> "FeaturizedPrograms":
        index = np.nonzero(keep)[0]
        columns = list(range(len(self.platform_ids))) if columns is None else columns
        return FeaturizedPrograms(take_rows(self.features, index), [self.task_keys[i] for i in index],
                                  self.latencies[np.ix_(index, columns)], [self.platform_ids[c] for c in columns],
                                  self.catalogue, self.featurizer, self.record_format, Counter(self.skipped))

    def split_by_network(self, test_networks: set[str]) -> tuple["FeaturizedPrograms", "FeaturizedPrograms"]:
        is_test = in_networks(self.task_keys, self.catalogue, test_networks)
        return self.subset(~is_test), self.subset(is_test)

    def platform(self, platform_id: str) -> "FeaturizedPrograms":
        """The programs measured on one platform, with that platform's latency column only."""
        p = self.platform_ids.index(platform_id)
        return self.subset(~np.isnan(self.latencies[:, p]), [p])


# Fewer valid programs than this on a platform cannot train a head: 4 tasks of 16 programs is the least that ranks.
MIN_HEAD_PROGRAMS = 64


def load_platforms(dataset: Dataset, platform_ids: list[str], min_programs: int = MIN_HEAD_PROGRAMS
                   ) -> MultiPlatformPrograms:
    """The programs of several platforms of one dataset, joined by program (see :class:`MultiPlatformPrograms`).

    With several platforms, refuses (naming the platform and what is missing) one with fewer than
    :data:`MIN_HEAD_PROGRAMS` valid programs, and one that shares no program with the others: MTL-TLP learns how platforms differ from the
    same programs measured on each (``tlp collect --remeasure-from`` makes such data).
    """
    per_platform = [load_programs(dataset, platform_id) for platform_id in platform_ids]
    for programs in per_platform if len(per_platform) > 1 else []:  # one platform: the whole model is its head
        check_head_programs(dataset, programs.platform_id, len(programs.traces), min_programs)
    data = MultiPlatformPrograms.join(per_platform)
    if len(platform_ids) > 1:
        check_shared_programs(dataset, platform_ids, data.latencies)
    return data


def check_head_programs(dataset: Dataset, platform_id: str, programs: int, min_programs: int) -> None:
    """Refuse a platform with too few valid programs (of tasks with two or more) to train its head."""
    if programs < min_programs:
        raise DatasetError(f"{dataset.path}/{platform_id}: {programs} valid programs of tasks with two or more; a "
                           f"head needs at least {min_programs} (measure more with tlp collect --remeasure-from "
                           "PLATFORM --set fraction=F)")


def check_shared_programs(dataset: Dataset, platform_ids: list[str], latencies: np.ndarray) -> None:
    """Refuse a platform that shares no program with the others (``latencies``: ``[programs, platforms]``)."""
    measured = ~np.isnan(latencies)
    shared = measured[measured.sum(axis=1) > 1]
    for column, platform_id in enumerate(platform_ids):
        if not shared[:, column].any():
            raise DatasetError(f"{dataset.path}: platform {platform_id} shares no program with "
                               f"{', '.join(p for p in platform_ids if p != platform_id)}; MTL-TLP needs the same "
                               f"programs measured on each (tlp collect --remeasure-from {platform_ids[0]})")
