"""A platform's measured programs -> training tensors: features, per-task labels, task groups, network split.

Labels are per task: ``min latency of the task / latency`` in (0, 1]; the fastest program of a task is 1.0.
Failed programs have no latency, hence no label, and are left out (counted). A task with a single valid program
cannot be ranked and is left out of training (counted) but kept for evaluation bookkeeping.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tlp._tvm import ms
from tlp.dataset.store import Dataset, ReadReport
from tlp.features.featurizer import TraceFeaturizer, block_extents


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

    def labels(self) -> np.ndarray:
        """min latency of the program's task / its latency."""
        best: dict[str, float] = {}
        for key, latency in zip(self.task_keys, self.latencies):
            best[key] = min(best.get(key, np.inf), float(latency))
        return np.array([best[k] / lat for k, lat in zip(self.task_keys, self.latencies)], dtype=np.float32)

    def networks_of(self, key: str) -> set[str]:
        return set(self.catalogue.get(key, {}).get("networks", {}))

    def subset(self, keep: np.ndarray) -> "LabeledPrograms":
        index = np.nonzero(keep)[0]
        return LabeledPrograms([self.traces[i] for i in index], self.latencies[index],
                               [self.task_keys[i] for i in index], self.extents, self.catalogue, Counter(self.skipped),
                               self.platform_id, [self.program_hashes[i] for i in index] if self.program_hashes else [])

    def split_by_network(self, test_networks: set[str]) -> tuple["LabeledPrograms", "LabeledPrograms"]:
        """(train, test): a task that appears in any test network is a test task, never a training one."""
        is_test = np.array([bool(self.networks_of(k) & test_networks) for k in self.task_keys], dtype=bool)
        return self.subset(~is_test), self.subset(is_test)

    def featurize(self, featurizer: TraceFeaturizer) -> np.ndarray:
        return featurizer.transform(self.traces, [self.extents.get(k) for k in self.task_keys])

    def group_ids(self) -> np.ndarray:
        """Task index per program (for the ranking loss, which never pairs programs of different tasks)."""
        index: dict[str, int] = {}
        return np.array([index.setdefault(k, len(index)) for k in self.task_keys], dtype=np.int64)


def load_programs(dataset: Dataset, platform_id: str) -> LabeledPrograms:
    """Valid, finite measurements of one platform (one per program), with what was left out counted."""
    store = dataset.store(platform_id)
    report = ReadReport()
    skipped: Counter = Counter()
    traces, latencies, keys, hashes = [], [], [], []
    for program in store.latest_programs(report).values():
        if program.latency is None:
            skipped["failed (no latency)"] += 1
            continue
        if not program.trace_json or not program.trace_json[0]:
            skipped["empty trace"] += 1
            continue
        traces.append(program.trace_json)
        latencies.append(program.latency)
        keys.append(program.workload_key)
        hashes.append(str(program.meta.get("program_hash", "")))
    skipped.update(report.skipped)
    per_task = Counter(keys)
    single = {k for k, n in per_task.items() if n < 2}
    if single:
        skipped["programs of tasks with a single valid program"] += sum(per_task[k] for k in single)
        keep = [i for i, k in enumerate(keys) if k not in single]
        traces, latencies, keys = [traces[i] for i in keep], [latencies[i] for i in keep], [keys[i] for i in keep]
        hashes = [hashes[i] for i in keep]
    extents = {}
    for key in set(keys):
        extents[key] = block_extents(ms.database.Workload.from_json(store.workload_json(key)).mod)
    return LabeledPrograms(traces, np.array(latencies, dtype=np.float64), keys, extents, dataset.catalogue(), skipped,
                           platform_id, hashes)
