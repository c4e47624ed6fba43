"""Per held-out task, each checkpoint's first pick as a multiple of the best stored program (TenSet's top-1 per task).

TenSet top-1 of a network is decided by a few heavy tasks; this lists them, heaviest first (weight x best latency),
with every model's pick / best, so a model's network score can be traced to the picks that made it.

    .venv/bin/python benchmarks/task_picks.py --platform llvm-znver4-2c-2d80d0a8 --networks bert_base,bert_tiny \
        --model shipped=src/tlp/models/tlp-cpu.pt --model joint=joint-slowdown-s0.pt
"""

from __future__ import annotations

import argparse

import numpy as np

from tlp.dataset import Dataset
from tlp.evaluation import head_scores
from tlp.features.tensors import load_programs
from tlp.model.estimator import TLPModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform", required=True)
    parser.add_argument("--networks", required=True, help="comma-separated held-out networks")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=CHECKPOINT")
    parser.add_argument("--top", type=int, default=8, help="tasks listed per network")
    args = parser.parse_args()
    networks = args.networks.split(",")
    _, test = load_programs(Dataset(args.dataset), args.platform).split_by_network(set(networks))
    scores = {name: head_scores(TLPModel.load(path), test, args.platform)
              for name, path in (spec.split("=", 1) for spec in args.model)}
    keys = np.array(test.task_keys)
    for network in networks:
        rows = []
        for key in sorted(k for k in set(test.task_keys) if network in test.networks_of(k)):
            index = np.nonzero(keys == key)[0]
            latencies = test.latencies[index]
            weight = test.catalogue[key]["networks"][network]
            picks = {name: latencies[np.argmax(s[index])] / latencies.min() for name, s in scores.items()}
            rows.append((weight * latencies.min(), test.catalogue[key].get("name", key), len(index), weight, picks))
        total = sum(row[0] for row in rows)
        print(network)
        for share, name, count, weight, picks in sorted(rows, key=lambda row: -row[0])[: args.top]:
            print(f"  {name:<36} programs {count:<5} weight {weight:<3} share {share / total:.2f}  "
                  + "  ".join(f"{model} {pick:.2f}x" for model, pick in picks.items()))


if __name__ == "__main__":
    main()
