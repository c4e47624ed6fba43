"""Per task of one network, each tuning run's weight x best recorded latency at a few trial counts.

A whole-network search curve is a sum over tasks; when one model reaches another's final latency late, this shows
on which tasks the trials went and where the time is lost. It reads what ``tlp tune`` leaves in a work directory
(``report.json``: tasks, weights, trials per task; ``history.jsonl``: every task's best recorded latency after each
batch), measures nothing, and can run beside anything.

    .venv/bin/python benchmarks/task_curves.py runs/s43/headroom-zen4-mobilenet_v2/mobilenet_v2/{xgb,tlp-*}-seed1 \\
        --at 130,300,1100 --out task_curves.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def best_at(history: list[dict[str, Any]], trials: int, tasks: int) -> list[float | None]:
    """Each of ``tasks`` tasks' best recorded latency (s) after the last batch that ended at or before ``trials``
    (None: not measured by then)."""
    best: list[float | None] = [None] * tasks
    for entry in history:
        if entry["trials"] > trials:
            break
        best = entry["best_s"]
    return best


def read_run(work_dir: Path) -> dict[str, Any]:
    """A work dir's tasks (name, weight, trials), its per-batch history, and the workload and target it tuned."""
    try:
        report = json.loads((work_dir / "report.json").read_text())
        history = [json.loads(line) for line in (work_dir / "history.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as error:
        raise SystemExit(f"{work_dir}: not a finished tlp tune work directory ({error})") from error
    return {"tasks": report["tasks"], "history": history, "source": report.get("source"), "target": report.get("target")}


def task_table(runs: dict[str, dict[str, Any]], counts: list[int]) -> list[dict[str, Any]]:
    """One row per task: its weight and, per run, trials spent and weight x best latency (µs) at each count."""
    names = [task["name"] for task in next(iter(runs.values()))["tasks"]]
    for label, run in runs.items():
        if [task["name"] for task in run["tasks"]] != names:
            raise SystemExit(f"{label}: its tasks differ from the first run's (not the same network and task set)")
    rows = []
    for i, name in enumerate(names):
        row: dict[str, Any] = {"task": name, "weight": next(iter(runs.values()))["tasks"][i]["weight"], "runs": {}}
        for label, run in runs.items():
            at = {}
            for count in counts:
                latency = best_at(run["history"], count, len(names))[i]
                at[str(count)] = None if latency is None else latency * row["weight"] * 1e6
            row["runs"][label] = {"trials": run["tasks"][i]["trials"], "weighted_us_at": at}
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work_dirs", nargs="+", type=Path)
    parser.add_argument("--at", default="130,300,1100", help="comma-separated trial counts")
    parser.add_argument("--out", type=Path, help="write the table as JSON too")
    args = parser.parse_args()
    counts = [int(c) for c in args.at.split(",")]
    runs = {work_dir.name: read_run(work_dir) for work_dir in args.work_dirs}
    rows = task_table(runs, counts)
    labels = list(runs)
    print("columns: " + ", ".join(f"[{j}] {label}" for j, label in enumerate(labels)))
    print(f"{'task':40s} {'w':>2s} " + " ".join(f"{f'[{j}]@{c}':>9s}" for j in range(len(labels)) for c in counts)
          + "  trials per run")
    totals = [0.0] * (len(labels) * len(counts))
    for row in rows:
        cells = [row["runs"][label]["weighted_us_at"][str(c)] for label in labels for c in counts]
        totals = [t + (v or 0.0) for t, v in zip(totals, cells)]
        print(f"{row['task'][:40]:40s} {row['weight']:2d} "
              + " ".join("        —" if v is None else f"{v:9.1f}" for v in cells)
              + "  " + " ".join(str(row["runs"][label]["trials"]) for label in labels))
    print(f"{'Σ (tasks with a latency)':40s}    " + " ".join(f"{t:9.1f}" for t in totals))
    if args.out:
        args.out.write_text(json.dumps({"counts": counts, "runs": [str(d) for d in args.work_dirs], "tasks": rows},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
