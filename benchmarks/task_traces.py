"""One stored task's fastest programs against each model's first picks, trace by trace.

For the task of an operator family in a network (e.g. BERT-tiny's ``layer_norm``): the ``--fastest`` fastest stored
programs and each model's ``--picks`` best-scored ones, each with its latency, every model's score and its trace
(bookkeeping instructions left out, each sampling instruction with its decision), then the rank each model gives
the five fastest. It shows *what* a model gets wrong on a task (a compute location, a vectorized loop), which
``task_picks.py`` only measures.

    .venv/bin/python benchmarks/task_traces.py --platform llvm-znver4-2c-2d80d0a8 --network bert_tiny \\
        --family layer_norm --model shipped=src/tlp/models/tlp-cpu.pt --model crop56=crop56-seed0.pt
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from tlp.dataset import Dataset
from tlp.evaluation import head_scores
from tlp.features.report import operator_family
from tlp.features.tensors import load_programs
from tlp.model.estimator import TLPModel

BOOKKEEPING = {"GetBlock", "GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers"}


def trace_lines(trace: Any) -> list[str]:
    """A stored trace as text: one line per instruction that is not bookkeeping, decisions after ``->``."""
    insts, decisions = trace
    decided = {int(index): value for index, value in decisions}
    return [f"{i:3d} {kind} {json.dumps(attrs)[:70]}" + (f" -> {json.dumps(decided[i])[:50]}" if i in decided else "")
            for i, (kind, _inputs, attrs, _outputs) in enumerate(insts) if kind not in BOOKKEEPING]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform", required=True)
    parser.add_argument("--network", required=True)
    parser.add_argument("--family", required=True, help="operator family (tlp.features.report.operator_family)")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=CHECKPOINT")
    parser.add_argument("--fastest", type=int, default=3)
    parser.add_argument("--picks", type=int, default=2)
    args = parser.parse_args()

    programs = load_programs(Dataset(args.dataset), args.platform)
    keys = np.array(programs.task_keys)
    tasks = sorted(k for k in set(programs.task_keys) if args.network in programs.networks_of(k)
                   and operator_family(programs.catalogue[k].get("name", k)) == args.family)
    if not tasks:
        raise SystemExit(f"no stored {args.family} task of {args.network} on {args.platform}")
    models = dict(spec.split("=", 1) for spec in args.model)
    for key in tasks:
        task = programs.subset(keys == key)
        scores = {name: head_scores(TLPModel.load(path), task, args.platform) for name, path in models.items()}
        latency_us = task.latencies * 1e6
        order = np.argsort(latency_us)
        print(f"== {programs.catalogue[key].get('name')} ({key}): {len(latency_us)} programs, best "
              f"{latency_us.min():.2f} us, median {np.median(latency_us):.2f} us")
        shown = [(f"fastest #{r}", order[r]) for r in range(min(args.fastest, len(order)))]
        shown += [(f"{name} pick #{r}", i) for name, s in scores.items() for r, i in enumerate(np.argsort(-s)[:args.picks])]
        for label, i in shown:
            print(f"-- {label}: {latency_us[i]:.2f} us ({latency_us[i] / latency_us.min():.2f}x), scores "
                  + ", ".join(f"{name} {s[i]:.2f}" for name, s in scores.items()))
            print("\n".join("   " + line for line in trace_lines(task.traces[i])))
        for name, s in scores.items():
            ranks = np.argsort(np.argsort(-s))
            print(f"{name}: ranks of the five fastest {[int(ranks[i]) for i in order[:5]]} of {len(s)}")


if __name__ == "__main__":
    main()
