"""How good a first round can a schedule library give? Per task of a network, the dataset's best programs of the
task's nearest stored workloads, replayed on it and timed (issue 11 part 5).

A whole-network search's latency after ~100 trials is its first round. :class:`tlp.search.library.ScheduleLibrary`
offers, per task, the fastest stored programs of the ``--nearest`` workloads of the same blocks nearest in loop
extents (leaving out every workload of the held-out networks: no program of the network tuned here is a source),
replayed with tile sizes refitted. This times every replayed candidate (``--passes`` fresh timings, the minimum
kept) and reports per task: how many replayed, the nearest source's distance, the best candidate (an oracle pick),
and the TLP model's first and best-of-two picks among them (what ``tlp tune --transfer-from`` measures). Run alone.

    .venv/bin/python benchmarks/library_picks.py --workload mobilenet_v2 --out benchmarks/results/library_picks_zen4_mobilenet_v2.json
    # then, measuring nothing: against tuning runs' first rounds (each task's best after --at trials)
    .venv/bin/python benchmarks/library_picks.py --compare benchmarks/results/library_picks_zen4_mobilenet_v2.json \
        --runs RUN_DIR... --at 66
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path

import numpy as np

from tlp._tvm import ms, tvm
from tlp.dataset import Dataset
from tlp.dataset.measure import time_once
from tlp.platform import Platform, host_fingerprint, host_target
from tlp.search.cost_model import TLPCostModel
from tlp.search.library import ScheduleLibrary
from tlp.search.sources import resolve
from tlp.search.transfer import replayed_candidates
from tlp.workloads import held_out_networks

from task_curves import read_run, task_table


def compare(result: dict, run_dirs: list[Path], trials: int) -> None:
    """Per run: Σ weight × latency of its first round (each task's best after ``trials``), and of per task the
    better of that and the library's pick (model's first, best of 2, oracle); and on how many tasks the library's
    oracle and the model's first pick beat the runs' median first-round pick. Timings of different moments:
    estimates."""
    runs = {d.name: read_run(d) for d in run_dirs}
    rows = {row["task"]: row for row in task_table(runs, [trials])}
    missing = [t["task"] for t in result["tasks"] if t["task"] not in rows]
    if missing:
        raise SystemExit(f"the runs have no task {', '.join(missing[:3])}...: not the network of the library result")
    picks = ("model_first_us", "model_best_of_2_us", "oracle_us")
    beats = {key: 0 for key in picks}
    for task in result["tasks"]:
        firsts = [r["weighted_us_at"][str(trials)] for r in rows[task["task"]]["runs"].values()]
        median = statistics.median(x for x in firsts if x is not None)
        for key in picks:
            beats[key] += task[key] is not None and task[key] < median
    print(f"tasks where the library's pick beats the runs' median first-round pick (of {len(result['tasks'])}): "
          + ", ".join(f"{k} {v}" for k, v in beats.items()))
    for name in runs:
        first, better = 0.0, {key: 0.0 for key in picks}
        for task in result["tasks"]:
            own = rows[task["task"]]["runs"][name]["weighted_us_at"][str(trials)]
            first += own
            for key in picks:
                better[key] += min(own, task[key]) if task[key] is not None else own
        print(f"{name}: first round {first / 1e3:.2f} ms; with the library's pick per task, the better of the two: "
              + ", ".join(f"{k} {v / 1e3:.2f}" for k, v in better.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="mobilenet_v2")
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--nearest", type=int, default=4, help="stored workloads per task")
    parser.add_argument("--per-workload", type=int, default=2, help="fastest programs per stored workload")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--model", type=Path, help="TLP checkpoint that ranks the replayed programs (default: shipped)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", type=Path, metavar="RESULT", help="an earlier --out: compare, measure nothing")
    parser.add_argument("--runs", type=Path, nargs="+", default=[], help="tuning work dirs (with --compare)")
    parser.add_argument("--at", type=int, default=66, help="trials that end the runs' first round (with --compare)")
    args = parser.parse_args()
    if args.compare:
        compare(json.loads(args.compare.read_text()), args.runs, args.at)
        return
    if args.out is None:
        parser.error("--out is required (or --compare)")
    target_json = host_target()
    target = tvm.target.Target(target_json)
    platform_id = Platform.host().id
    started = time.monotonic()
    library = ScheduleLibrary.from_dataset(Dataset(args.dataset), platform_id, args.per_workload,
                                           exclude_networks=held_out_networks())
    library_s = time.monotonic() - started
    print(f"library: {len(library)} workloads of {platform_id} in {library_s:.0f} s", flush=True)
    tunable = resolve(args.workload, target_json)
    model = TLPCostModel(args.model, target=target_json)
    rows, candidates, owners = [], [], []
    for task in tunable.tasks:
        context = ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                                 search_strategy="evolutionary", task_name=task.name)
        nearest = library.nearest(task.mod, args.nearest)
        replayed = replayed_candidates(library.records_of(nearest), context)
        scores = model.predict(context, replayed) if replayed else np.zeros(0)
        rows.append({"task": task.name, "weight": task.weight, "replayed": len(replayed),
                     "nearest": [{"name": w.key, "distance": round(d, 3)} for d, w in nearest],
                     "model_order": [int(i) for i in np.argsort(-scores)]})
        owners += [len(rows) - 1] * len(replayed)
        candidates += replayed
        print(f"{task.name}: {len(replayed)} replayed (nearest distance "
              f"{nearest[0][0] if nearest else float('nan'):.3f})", flush=True)
    timings: list[list[float | None]] = [[] for _ in candidates]
    for number in range(args.passes):
        order = list(range(len(candidates)))[:: -1 if number % 2 else 1]
        for i, latency in zip(order, time_once(target_json, [candidates[i] for i in order])):
            timings[i].append(latency)
        print(f"pass {number + 1}: {len(candidates)} programs", flush=True)
    latency = [min((t for t in ts if t is not None), default=None) for ts in timings]
    position = 0
    totals = {"oracle_us": 0.0, "model_first_us": 0.0, "model_best_of_2_us": 0.0}
    for row in rows:
        mine = latency[position:position + row["replayed"]]
        position += row["replayed"]
        row["latency_s"] = mine
        valid = [x for x in mine if x is not None]
        picks = [mine[i] for i in row["model_order"] if mine[i] is not None]
        row["oracle_us"] = min(valid) * row["weight"] * 1e6 if valid else None
        row["model_first_us"] = picks[0] * row["weight"] * 1e6 if picks else None
        row["model_best_of_2_us"] = min(picks[:2]) * row["weight"] * 1e6 if picks else None
        for key in totals:
            totals[key] += row[key] or 0.0
        print(f"{row['task'][:40]:40s} w{row['weight']}  n={row['replayed']:2d}  oracle "
              f"{row['oracle_us'] or float('nan'):8.1f}  model {row['model_first_us'] or float('nan'):8.1f}"
              f"  best of 2 {row['model_best_of_2_us'] or float('nan'):8.1f}  (µs × weight)")
    covered = sum(1 for row in rows if row["oracle_us"] is not None)
    print(f"tasks with a replayed program: {covered} of {len(rows)}; Σ over them: " +
          ", ".join(f"{k} {v:.1f}" for k, v in totals.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": datetime.datetime.now().isoformat(timespec="minutes"), "machine": host_fingerprint(),
        "target": target_json, "platform": platform_id, "workload": args.workload, "dataset": args.dataset,
        "excluded_networks": held_out_networks(), "nearest": args.nearest, "per_workload": args.per_workload,
        "passes": args.passes, "model": str(args.model or "shipped"), "library_workloads": len(library),
        "library_seconds": round(library_s, 1),
        "tasks_covered": covered, "totals": totals, "tasks": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
