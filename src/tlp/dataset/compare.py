"""``tlp dataset compare``: how differently platforms rank the same programs, and so which ones need a head.

For every pair of platforms (A, B), over the programs measured validly on both and per task with at least
``min_programs`` of them:

- ``spearman``: mean over tasks of the rank correlation of the two platforms' latencies (1 = same order);
- ``transfer_top1``: mean over tasks of ``best latency on B / latency on B of the program fastest on A`` — the
  top-1 score a perfect model of A would reach on B (1 = A's choice is B's best; a head for B can only add what
  is missing from 1);
- ``shared_programs`` / ``shared_tasks``: how much the comparison rests on.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Any

import numpy as np

from tlp.dataset.store import Dataset


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    return ranks


def platform_latencies(dataset: Dataset, platform_id: str) -> dict[str, tuple[str, float]]:
    """program id -> (task key, latency) of the valid programs of one platform."""
    return {pid: (p.workload_key, p.latency) for pid, p in dataset.store(platform_id).latest_programs().items()
            if p.latency is not None}


def compare_pair(a: dict[str, tuple[str, float]], b: dict[str, tuple[str, float]],
                 min_programs: int = 8) -> dict[str, Any]:
    by_task: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for program_id in a.keys() & b.keys():
        by_task[a[program_id][0]].append((a[program_id][1], b[program_id][1]))
    spearman, transfer = [], []
    for pairs in by_task.values():
        if len(pairs) < min_programs:
            continue
        lat = np.array(pairs)
        ra, rb = _ranks(lat[:, 0]), _ranks(lat[:, 1])
        spearman.append(float(np.corrcoef(ra, rb)[0, 1]))
        transfer.append(float(lat[:, 1].min() / lat[np.argmin(lat[:, 0]), 1]))
    return {"shared_programs": sum(len(p) for p in by_task.values()),
            "shared_tasks": len(spearman),
            "spearman": float(np.nanmean(spearman)) if spearman else None,
            "transfer_top1": float(np.mean(transfer)) if transfer else None}


def compare_platforms(dataset: Dataset, platform_ids: list[str] | None = None,
                      min_programs: int = 8) -> dict[str, Any]:
    """Pairwise agreement of every two platforms (both directions of ``transfer_top1``)."""
    platform_ids = platform_ids or dataset.platform_ids()
    latencies = {pid: platform_latencies(dataset, pid) for pid in platform_ids}
    pairs = []
    for first, second in combinations(platform_ids, 2):
        row = compare_pair(latencies[first], latencies[second], min_programs)
        row["transfer_top1_reverse"] = compare_pair(latencies[second], latencies[first], min_programs)["transfer_top1"]
        pairs.append({"a": first, "b": second, **row})
    return {"platforms": {pid: {"valid_programs": len(latencies[pid]),
                                "target": dataset.store(pid).platform.target} for pid in platform_ids},
            "min_programs_per_task": min_programs, "pairs": pairs}


def format_comparison(result: dict[str, Any]) -> str:
    lines = ["platform                                    valid programs"]
    lines += [f"  {pid:<42} {info['valid_programs']:>6}" for pid, info in result["platforms"].items()]
    lines.append(f"\npairs (tasks with >= {result['min_programs_per_task']} shared programs):")
    lines.append(f"  {'A':<38} {'B':<38} {'tasks':>5} {'programs':>8} {'spearman':>8} {'A->B top1':>9} {'B->A top1':>9}")

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for row in result["pairs"]:
        lines.append(f"  {row['a']:<38} {row['b']:<38} {row['shared_tasks']:>5} {row['shared_programs']:>8} "
                     f"{cell(row['spearman']):>8} {cell(row['transfer_top1']):>9} {cell(row['transfer_top1_reverse']):>9}")
    return "\n".join(lines)
