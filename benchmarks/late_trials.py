"""Where a finished search spent trials that could no longer pay: per task, when it came within a few percent of
its final best and how many trials it drew after that, beside its throughput in flops and in bytes moved.

Why: the headroom task rule (``tlp.search.scheduler.HeadroomScheduler``) bounds a task's latency by its flops at
the best throughput of the run, so a memory-bound task keeps nearly its whole latency as priority and, once the
compute-bound tasks sit at that peak, draws most late batches. Whether a bound from memory traffic would change a
search's trials-to-target depends on *when* those batches come; this reads it from the work directory
(``report.json``, ``history.jsonl``) and counts each task's argument bytes (``Task.io_bytes``, a lower bound on
its traffic) to show which task such a bound would be set by. Measures nothing; it loads the network's tasks.

    .venv/bin/python benchmarks/late_trials.py runs/s49/peakfix-zen4-bert_tiny/bert_tiny/*-seed1 --within 0.02
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# pylint: disable=wrong-import-position
from task_curves import read_run  # noqa: E402

from tlp.workloads import load_tasks  # noqa: E402


def late_trials(history: list[dict[str, Any]], task: int, within: float) -> dict[str, Any] | None:
    """The first trial count at which ``task``'s best came within ``within`` of its final best, its trials in all
    and after that (None: never measured)."""
    finals = [entry["best_s"][task] for entry in history if entry["best_s"][task]]
    if not finals:
        return None
    final = min(finals)
    previous, drawn, reached, after = 0, 0, None, 0
    for entry in history:
        batch = entry["trials"] - previous
        previous = entry["trials"]
        if entry["task"] != task:
            continue
        drawn += batch
        if reached is not None:
            after += batch
        elif entry["best_s"][task] and entry["best_s"][task] <= final * (1 + within):
            reached = entry["trials"]
    return {"final_s": final, "reached_at": reached, "trials": drawn, "trials_after": after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work_dirs", nargs="+", type=Path)
    parser.add_argument("--within", type=float, default=0.02, help="how close to its final best a task counts as done")
    parser.add_argument("--out", type=Path, help="write the rows as JSON too")
    args = parser.parse_args()
    results = []
    for work_dir in args.work_dirs:
        run = read_run(work_dir)
        tasks = {task.name: task for task in load_tasks([run["source"]], run["target"])}
        total = run["history"][-1]["trials"]
        print(f"{work_dir.name}: {total} trials")
        print(f"{'task':40s} {'w':>2s} {'best µs':>8s} {'GFLOPS':>7s} {'KiB':>8s} {'GB/s':>6s} "
              f"{'done at':>7s} {'trials':>6s} {'after':>5s}")
        rows = []
        for i, entry in enumerate(run["tasks"]):
            late = late_trials(run["history"], i, args.within)
            if late is None or entry["name"] not in tasks:
                continue
            io_bytes = tasks[entry["name"]].io_bytes
            row = {"task": entry["name"], "weight": entry["weight"], "gflops": entry["gflops"], "io_bytes": io_bytes,
                   "gbytes_per_s": io_bytes / late["final_s"] / 1e9, **late}
            rows.append(row)
            print(f"{entry['name'][:40]:40s} {entry['weight']:2d} {late['final_s'] * 1e6:8.2f} "
                  f"{entry['gflops'] or 0:7.1f} {io_bytes / 1024:8.1f} {row['gbytes_per_s']:6.1f} "
                  f"{late['reached_at'] or '—':>7} {late['trials']:6d} {late['trials_after']:5d}")
        results.append({"work_dir": str(work_dir), "trials": total, "within": args.within, "tasks": rows})
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
