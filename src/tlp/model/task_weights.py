"""How much each training task counts in the ranking loss (``TrainConfig.task_weighting``).

TenSet's top-1 of a network is Σ weight x best latency / Σ weight x picked latency over its tasks, so a wrong pick
costs in proportion to the task's share of the network's time: a handful of heavy convolutions and matmuls decide
it, while the loss of a plain mean over tasks is mostly layer norms and element-wise tasks. ``network-share``
weights each task by the square root of its largest share of a network's time (weight x best latency / the
network's Σ over its tasks, per platform): heavy tasks count several times more, light ones still count.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

TASK_WEIGHTINGS = ("uniform", "network-share")


def network_share_weights(task_keys: list[str], catalogue: dict[str, dict[str, Any]],
                          latencies: np.ndarray) -> np.ndarray:
    """``[N, P]`` per-program weights (one value per task and platform column), mean 1 over each column's measured
    tasks. A task with no measurement in a column (unmeasured programs a teacher ranks) or in no network gets 1."""
    weights = np.ones(latencies.shape, dtype=np.float32)
    rows_of: dict[str, list[int]] = defaultdict(list)
    for row, key in enumerate(task_keys):
        rows_of[key].append(row)
    for column in range(latencies.shape[1]):
        best = {}
        for key, rows in rows_of.items():
            measured = latencies[rows, column][~np.isnan(latencies[rows, column])]
            if len(measured):
                best[key] = float(measured.min())
        network_time: dict[str, float] = defaultdict(float)
        for key, latency in best.items():
            for network, count in catalogue.get(key, {}).get("networks", {}).items():
                network_time[network] += count * latency
        share = {key: max((count * latency / network_time[network]
                           for network, count in catalogue.get(key, {}).get("networks", {}).items()), default=None)
                 for key, latency in best.items()}
        root = {key: float(np.sqrt(value)) for key, value in share.items() if value is not None}
        if not root:
            continue
        mean = float(np.mean(list(root.values())))
        for key, value in root.items():
            weights[rows_of[key], column] = value / mean
    return weights


def task_weights(data: Any, weighting: str) -> np.ndarray | None:
    """The ``[N, P]`` weights of ``weighting`` for ``data`` (programs with ``task_keys``, ``catalogue`` and
    ``latencies``), or None for ``uniform``."""
    if weighting not in TASK_WEIGHTINGS:
        raise ValueError(f"TrainConfig.task_weighting must be one of {', '.join(TASK_WEIGHTINGS)}, got {weighting!r}")
    if weighting == "uniform":
        return None
    return network_share_weights(data.task_keys, data.catalogue, data.latencies)
