"""Transferred first-round picks of a tuning run (``tlp tune --first-round-transferred``): which ones, how they measured.

For every task of a work directory, its first-round programs (the first batch of the task in
``database_tuning_record.json``, which is written in measurement order) are told apart: a program is *transferred*
when its sampled decisions are those of a record of another workload measured before it, with the tile sizes
refitted to this task's loops as :func:`tlp.search.transfer.fit_tiles` refits them; the others are the model's own
picks. Prints, per task, the model's and the transferred pick's latency (weight x µs) and the source task, and the
Σ weight × latency of the first round with both, with the model's picks alone and with the transferred ones alone
(model pick where a task had none) — the question being whether the transferred place beat the model pick it took.

    .venv/bin/python benchmarks/transfer_picks.py runs/s37/transfer/resnet50/* \\
        runs/s36/realistic-zen3-resnet50/resnet50/tlp-online-lr3-warm-f2-b8-seed{1,2} \\
        --report runs/s36/realistic-zen3-resnet50/resnet50/xgb-seed1/report.json \\
        --out benchmarks/results/transfer_picks_zen3_resnet50.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tlp.evaluation.search_metrics import records_in_file_order
from tlp.search.transfer import fit_tiles


def _decisions(trace_json: Any) -> list[tuple[str, Any, Any]]:
    """(instruction kind, attributes, decision) of each sampling instruction of a stored trace, in order."""
    instructions, decisions = trace_json
    return [(instructions[i][0], instructions[i][2], decision) for i, decision in decisions]


def _is_refit_of(program: list[tuple[str, Any, Any]], source: list[tuple[str, Any, Any]]) -> bool:
    """Whether ``program``'s decisions are ``source``'s with its tile sizes refitted to ``program``'s loops."""
    if len(program) != len(source):
        return False
    for (kind, attrs, decision), (source_kind, _, source_decision) in zip(program, source):
        if kind != source_kind:
            return False
        if kind == "SamplePerfectTile":
            extent = 1
            for factor in decision:
                extent *= factor
            if fit_tiles(list(source_decision), extent, int(attrs[1])) != list(decision):
                return False
        elif decision != source_decision:
            return False
    return True


def first_round_picks(work_dir: Path, first_round: int, report: Path | None = None) -> list[dict[str, Any]]:
    """Per task (in the order first measured): its first-round programs, each marked model or transferred."""
    # A run stopped early has no report: its workload's other runs (side by side, or --report) list the same tasks.
    reports = [work_dir / "report.json"] + sorted(work_dir.parent.glob("*/report.json")) + ([report] if report else [])
    found = [r for r in reports if r.exists()]
    if not found:
        raise SystemExit(f"{work_dir}: no report.json here or beside it; give --report of a run of the same workload")
    names = json.loads(found[0].read_text())["tasks"]
    records = [(workload, _decisions(trace), latency) for workload, trace, latency, _ in records_in_file_order(work_dir)]
    # Workload index -> task: the report lists tasks in the tune order; the database numbers workloads as first
    # committed, which the first round does in the same order.
    order: list[int] = []
    for workload, _, _ in records:
        if workload not in order:
            order.append(workload)
    task_of = {workload: names[i] for i, workload in enumerate(order) if i < len(names)}
    tasks = []
    for workload in order:
        positions = [i for i, record in enumerate(records) if record[0] == workload][:first_round]
        earlier = [records[i] for i in range(positions[0]) if records[i][0] != workload]
        picks = []
        for position in positions:
            _, decisions, latency = records[position]
            source = next((task_of[w]["name"] for w, d, lat in earlier if lat is not None and _is_refit_of(decisions, d)),
                          None)
            picks.append({"latency_s": latency, "transferred_from": source})
        task = task_of[workload]
        tasks.append({"task": task["name"], "weight": task["weight"], "picks": picks})
    return tasks


def _sum(tasks: list[dict[str, Any]], choose: str) -> float | None:
    total = 0.0
    for task in tasks:
        model = [p["latency_s"] for p in task["picks"] if p["transferred_from"] is None and p["latency_s"]]
        moved = [p["latency_s"] for p in task["picks"] if p["transferred_from"] is not None and p["latency_s"]]
        pool = {"both": model + moved, "model": model, "transferred": moved or model}[choose]
        if not pool:
            return None
        total += task["weight"] * min(pool)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work_dirs", nargs="+", type=Path)
    parser.add_argument("--first-round", type=int, default=2, help="programs per task in the first round")
    parser.add_argument("--report", type=Path,
                        help="report.json of a finished run of the same workload (tasks and weights) for runs "
                             "stopped before writing theirs")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = {}
    for work_dir in args.work_dirs:
        tasks = first_round_picks(work_dir, args.first_round, args.report)
        print(f"\n{work_dir}")
        print("| task (weight) | model pick (weight × µs) | transferred pick (weight × µs) | from |")
        print("|---|---|---|---|")
        for task in tasks:
            cells = {"model": "—", "moved": "—", "from": ""}
            for pick in task["picks"]:
                value = f"{task['weight'] * pick['latency_s'] * 1e6:.0f}" if pick["latency_s"] else "failed"
                if pick["transferred_from"] is None:
                    cells["model"] = value if cells["model"] == "—" else f"{cells['model']}, {value}"
                else:
                    cells["moved"], cells["from"] = value, f"`{pick['transferred_from']}`"
            print(f"| `{task['task']}` ({task['weight']}) | {cells['model']} | {cells['moved']} | {cells['from']} |")
        sums = {choose: _sum(tasks, choose) for choose in ("both", "model", "transferred")}
        wins = sum(1 for t in tasks if any(p["transferred_from"] for p in t["picks"]) and
                   min((p["latency_s"] for p in t["picks"] if p["transferred_from"] and p["latency_s"]), default=9e9)
                   < min((p["latency_s"] for p in t["picks"] if not p["transferred_from"] and p["latency_s"]),
                         default=9e9))
        with_transfer = sum(1 for t in tasks if any(p["transferred_from"] for p in t["picks"]))
        print(f"Σ weight × first-round best (ms): both {sums['both'] * 1e3:.2f}, model picks only "
              f"{sums['model'] * 1e3:.2f}, transferred only {sums['transferred'] * 1e3:.2f}; the transferred pick "
              f"beat the model's in {wins} of {with_transfer} tasks that had one")
        results[str(work_dir)] = {"tasks": tasks, "sum_s": sums, "transferred_wins": wins,
                                  "tasks_with_transfer": with_transfer}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
