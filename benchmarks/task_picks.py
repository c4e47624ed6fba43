"""Per task, each checkpoint's first pick as a multiple of the best stored program (TenSet's top-1 per task).

TenSet top-1 of a network is decided by a few heavy tasks; ``--networks`` lists them, heaviest first (weight x best
latency), with every model's pick / best, so a model's network score can be traced to the picks that made it.
``--families`` lists every stored task of some operator families instead (``tlp.features.report.operator_family``;
training and held-out tasks alike, each marked), to see whether a model ranks a kind of kernel even where it
trained on it.

    .venv/bin/python benchmarks/task_picks.py --platform llvm-znver4-2c-2d80d0a8 --networks bert_base,bert_tiny \\
        --model shipped=src/tlp/models/tlp-cpu.pt --model joint=joint-slowdown-s0.pt
    .venv/bin/python benchmarks/task_picks.py --platform llvm-znver4-2c-2d80d0a8 --families layer_norm,softmax \\
        --model shipped=src/tlp/models/tlp-cpu.pt --json picks.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from tlp.dataset import Dataset
from tlp.evaluation import head_scores
from tlp.features.report import operator_family
from tlp.features.tensors import LabeledPrograms, load_programs
from tlp.model.estimator import TLPModel
from tlp.workloads import held_out_networks


def _picks(programs: LabeledPrograms, task_keys: np.ndarray, scores: dict[str, np.ndarray], key: str
           ) -> tuple[np.ndarray, dict[str, float]]:
    """A task's latencies and each model's first pick / best (``task_keys``: ``programs.task_keys`` as an array)."""
    index = np.nonzero(task_keys == key)[0]
    latencies = programs.latencies[index]
    return latencies, {name: float(latencies[np.argmax(s[index])] / latencies.min()) for name, s in scores.items()}


def _scores(programs: LabeledPrograms, specs: list[str], platform: str) -> dict[str, np.ndarray]:
    return {name: head_scores(TLPModel.load(path), programs, platform)
            for name, path in (spec.split("=", 1) for spec in specs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform", required=True)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--networks", help="comma-separated held-out networks")
    what.add_argument("--families", help="comma-separated operator families (e.g. layer_norm,fused_softmax_broadcast_to)")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=CHECKPOINT")
    parser.add_argument("--top", type=int, default=8, help="tasks listed per network")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    programs = load_programs(Dataset(args.dataset), args.platform)
    rows: list[dict] = []
    if args.families:
        families = set(args.families.split(","))
        keys = sorted({k for k in programs.task_keys
                       if operator_family(programs.catalogue.get(k, {}).get("name", k)) in families},
                      key=lambda k: (programs.catalogue[k].get("name", k), k))
        chosen = programs.subset(np.isin(np.array(programs.task_keys), keys))
        scores = _scores(chosen, args.model, args.platform)
        chosen_keys = np.array(chosen.task_keys)
        held_out = set(held_out_networks())
        for key in keys:
            latencies, picks = _picks(chosen, chosen_keys, scores, key)
            networks = sorted(programs.networks_of(key))
            split = "held-out" if held_out & set(networks) else "training"
            rows.append({"task": programs.catalogue[key].get("name", key), "key": key, "networks": networks,
                         "split": split, "programs": len(latencies), "best_us": float(latencies.min() * 1e6),
                         "picks": picks})
            print(f"  {rows[-1]['task']:<30} {','.join(networks)[:24]:<24} {split:<8} programs {len(latencies):<5} "
                  f"best {latencies.min() * 1e6:8.2f} us  " + "  ".join(f"{m} {p:.2f}x" for m, p in picks.items()))
    else:
        networks = args.networks.split(",")
        _, test = programs.split_by_network(set(networks))
        scores = _scores(test, args.model, args.platform)
        test_keys = np.array(test.task_keys)
        for network in networks:
            listed = []
            for key in sorted(k for k in set(test.task_keys) if network in test.networks_of(k)):
                latencies, picks = _picks(test, test_keys, scores, key)
                weight = test.catalogue[key]["networks"][network]
                listed.append({"network": network, "task": test.catalogue[key].get("name", key), "key": key,
                               "programs": len(latencies), "weight": weight,
                               "share": float(weight * latencies.min()), "picks": picks})
            total = sum(row["share"] for row in listed)
            print(network)
            for row in sorted(listed, key=lambda row: -row["share"])[: args.top]:
                row["share"] /= total
                print(f"  {row['task']:<36} programs {row['programs']:<5} weight {row['weight']:<3} share "
                      f"{row['share']:.2f}  " + "  ".join(f"{m} {p:.2f}x" for m, p in row["picks"].items()))
                rows.append(row)
    if args.json:
        args.json.write_text(json.dumps({"dataset": args.dataset, "platform": args.platform, "models": args.model,
                                         "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
