"""Re-time the first-round programs of tuning runs on a quiet machine: were they slow, or measured under load?

A search's first round measures each task's first picks once; a process beside it (a test run, even ``nice``d)
can make a two-thread program wait on a descheduled thread and run many times slower, and that latency becomes the
task's best until something faster is found. This script builds and times again each task's first ``--first-round``
programs of every work directory (the first records of each workload in ``database_tuning_record.json``, which is
written in measurement order) with the benchmark's measurement settings, and prints, per run, the recorded / re-timed
latency ratios and Σ weight × best first-round latency both ways. Run it alone on the machine.

    .venv/bin/python benchmarks/retime_first_round.py runs/s37/realistic-zen3-mobilenet_v2/loaded-seed1/tlp-* \\
        runs/s37/realistic-zen3-mobilenet_v2/mobilenet_v2/tlp-*-seed2 \\
        --out benchmarks/results/retime_first_round_zen3_mobilenet_v2.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path
from typing import Any

from tlp.dataset.measure import time_once
from tlp.evaluation.search_metrics import read_search_run, records_in_file_order, tuning_record, workload_rows
from tlp.platform import host_fingerprint


def first_round_records(work_dir: Path, first_round: int) -> list[tuple[str, Any, float | None]]:
    """(workload key, TuningRecord, recorded latency) of each task's first ``first_round`` records."""
    workloads = workload_rows(work_dir)
    seen: dict[int, int] = {}
    picks = []
    for index, _, latency, line in records_in_file_order(work_dir):
        seen[index] = seen.get(index, 0) + 1
        if seen[index] <= first_round:
            picks.append((str(workloads[index][0]), tuning_record(line, workloads[index]), latency))
    return picks


def retime(work_dir: Path, first_round: int) -> dict[str, Any]:
    weights = read_search_run(work_dir).task_weights
    picks = first_round_records(work_dir, first_round)
    latencies = time_once(json.loads((work_dir / "target.json").read_text()),
                          [r.as_measure_candidate() for _, r, _ in picks])
    rows = [{"workload": key, "recorded_s": recorded, "retimed_s": latency}
            for (key, _, recorded), latency in zip(picks, latencies)]
    ratios = [r["recorded_s"] / r["retimed_s"] for r in rows if r["recorded_s"] and r["retimed_s"]]

    def weighted_best(field: str) -> float:
        best: dict[str, float] = {}
        for row in rows:
            if row[field]:
                best[row["workload"]] = min(best.get(row["workload"], float("inf")), row[field])
        return sum(weights.get(key, 1.0) * latency for key, latency in best.items())

    return {"programs": len(rows), "ratio_median": statistics.median(ratios), "ratio_max": max(ratios),
            "over_2x": sum(r > 2 for r in ratios), "recorded_sum_s": weighted_best("recorded_s"),
            "retimed_sum_s": weighted_best("retimed_s"), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work_dirs", nargs="+", type=Path)
    parser.add_argument("--first-round", type=int, default=2, help="programs per task in the first round")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = {}
    for work_dir in args.work_dirs:
        result = results[str(work_dir)] = retime(work_dir, args.first_round)
        print(f"{work_dir}: {result['programs']} programs, recorded / re-timed latency median "
              f"{result['ratio_median']:.2f} (max {result['ratio_max']:.1f}, {result['over_2x']} over 2x); "
              f"Σ weight × best first-round latency {result['recorded_sum_s'] * 1e3:.2f} ms recorded, "
              f"{result['retimed_sum_s'] * 1e3:.2f} ms re-timed", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"date": datetime.datetime.now().isoformat(timespec="minutes"),
                                        "machine": host_fingerprint(), "first_round": args.first_round,
                                        "runs": results}, indent=1))


if __name__ == "__main__":
    main()
