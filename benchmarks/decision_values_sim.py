"""A search simulated on stored programs: do places for unmeasured decision values find a task's fast structure?

For each task of the given networks with enough stored programs of one platform, the stored programs are the
candidates and their stored latencies the measurements. Round 0 "measures" the model's two best-scored programs
(TLP's first round); every later round a batch of ``--batch``: up to K places (``tlp tune --new-decisions K``,
``tlp.search.diverse``) for the best-scored program carrying a decision value the task has not measured (an unroll
depth, one block's compute location: ``decision_values``), the rest by score. After each round with at least 3
measurements the model fine-tunes as the search's online setting does (``--online-steps`` steps at
``--online-lr`` on the task's measurements, ranking labels best / latency). Reported per task and K: the best
measured latency over the task's best stored one after each round, and the geometric mean over tasks.

What it leaves out: a real search offers candidates the evolution and random draws produce, not the stored
programs (which came from random draws and earlier searches guided by several models); and it fine-tunes on all
tasks' measurements at once. It measures nothing, so it may run beside other work.

    .venv/bin/python benchmarks/decision_values_sim.py --platform llvm-znver4-2c-2d80d0a8 --networks bert_tiny \\
        --places 0,2,4 --out benchmarks/results/decision_values_sim_zen4_bert_tiny.json
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tlp.dataset import Dataset
from tlp.features.tensors import load_programs
from tlp.model.estimator import TLPModel
from tlp.search.diverse import STRUCTURAL_SAMPLES, decision_values


def stored_decision_values(trace: Any) -> set[tuple[int, str, str]]:
    """``decision_values(structure_of(trace))`` of a stored (JSON) trace."""
    insts, decisions = trace
    decided = {int(index): value for index, value in decisions}
    structure = tuple((inst[0], str(decided[i])) for i, inst in enumerate(insts)
                      if inst[0] in STRUCTURAL_SAMPLES and i in decided)
    return decision_values(structure)


def simulate(model_path: str, head: int, features: np.ndarray, latencies: np.ndarray, values: list[set],
             places: int, rounds: int, batch: int, steps: int, lr: float) -> list[float]:
    """Best measured / best stored after each round (see the module docstring)."""
    model = TLPModel.load(model_path)
    torch.manual_seed(0)
    measured: list[int] = []
    seen: set = set()
    curve = []
    for round_ in range(rounds):
        scores = model.predict_features(features, head, precision="fp32")
        scores[measured] = -np.inf
        order = [int(i) for i in np.argsort(-scores) if np.isfinite(scores[i])]
        size = 2 if round_ == 0 else batch
        take: list[int] = []
        if round_ > 0:  # the first round is the model's picks: every value is new before it
            for i in order:
                if len(take) == min(places, size):
                    break
                if not values[i] <= seen:
                    take.append(i)
                    seen |= values[i]
        take += [i for i in order if i not in take][: size - len(take)]
        measured += take
        for i in take:
            seen |= values[i]
        curve.append(float(latencies[measured].min() / latencies.min()))
        if steps and len(measured) >= 3:
            labels = (latencies[measured].min() / latencies[measured]).astype(np.float32)
            model.fine_tune(features[measured], labels, np.zeros(len(measured), dtype=np.int64), steps, lr, None, head)
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform", required=True)
    parser.add_argument("--networks", required=True, help="comma-separated networks whose tasks are simulated")
    parser.add_argument("--model", default="src/tlp/models/tlp-cpu.pt")
    parser.add_argument("--places", default="0,2,4", help="comma-separated K (0: the model's picks alone)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--online-steps", type=int, default=5)
    parser.add_argument("--online-lr", type=float, default=1e-3)
    parser.add_argument("--min-programs", type=int, default=40, help="tasks with fewer stored programs are skipped")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    programs = load_programs(Dataset(args.dataset), args.platform)
    keys = np.array(programs.task_keys)
    networks = args.networks.split(",")
    places = [int(k) for k in args.places.split(",")]
    probe = TLPModel.load(args.model)
    head = probe.platforms.index(args.platform) if args.platform in probe.platforms else 0
    tasks = []
    for key in sorted({k for k in programs.task_keys if programs.networks_of(k) & set(networks)}):
        task = programs.subset(keys == key)
        if len(task.latencies) < args.min_programs:
            continue
        features = probe.featurizer.transform(task.traces, [task.extents[key]] * len(task.traces))
        values = [stored_decision_values(trace) for trace in task.traces]
        curves = {str(k): simulate(args.model, head, features, task.latencies, values, k, args.rounds, args.batch,
                                   args.online_steps, args.online_lr) for k in places}
        name = programs.catalogue[key].get("name", key)
        tasks.append({"task": name, "key": key, "programs": len(task.latencies),
                      "best_us": float(task.latencies.min() * 1e6), "curves": curves})
        print(name, len(task.latencies), " | ".join(f"K={k}: " + " ".join(f"{c:.2f}" for c in curve)
                                                   for k, curve in curves.items()), flush=True)
    geomean = {str(k): np.exp(np.log([t["curves"][str(k)] for t in tasks]).mean(axis=0)).round(4).tolist()
               for k in places}
    for k, curve in geomean.items():
        print(f"K={k}: geomean over {len(tasks)} tasks by round:", " ".join(f"{c:.3f}" for c in curve))
    args.out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "platform": args.platform,
                                    "model": args.model, "networks": networks, "rounds": args.rounds,
                                    "batch": args.batch, "first_round": 2, "online_steps": args.online_steps,
                                    "online_lr": args.online_lr, "geomean": geomean, "tasks": tasks}, indent=1))


if __name__ == "__main__":
    main()
