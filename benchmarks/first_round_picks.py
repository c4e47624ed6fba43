"""Which two programs should a first round measure? Pick rules scored on a platform's stored held-out programs.

A whole-network search at ~100 trials lives on its first round: ``tlp tune --first-round-trials 2`` measures each
task's model top 2, and the network's latency after it is Σ weight × (the faster of the two). TenSet's top-k asks
the same of stored programs: per held-out network ``Σ w·best / Σ w·(fastest of the picks)``. This scores, for each
``--model`` (a cascade: a first stage ranks, an ensemble re-ranks its top, :mod:`tlp.model.cascade`), the rules

- ``top1`` … ``top4``: the model's k best-scored programs of each task (``top2`` is the first round's rule);
- ``top1+member``: the model's first, then the ensemble member's own first choice (``first_choices``, among what
  the first stage passes on) that the whole model ranks highest, other than the first pick: the members disagree
  where the mean is unsure;
- ``top1+first``: the model's first, then the first stage's own first (before the ensemble re-ranked it);
- ``top1+minimax``: the model's first, then the program whose worst rank over the members is best,

on every held-out task the dataset stores for ``--platform`` (all its programs in one call per task, as a search
scores a population). Stored programs of held-out networks on a platform searched there are mostly search programs,
closer to what a first round chooses among than random draws. Measures nothing; scoring 16k programs with the
five-network cascade takes ~4 min on 2 cores.

    .venv/bin/python benchmarks/first_round_picks.py --model tlp-cpu --model runs/s55/models/rl7k-soup4.pt \\
        --platform llvm-rocketlake-2c-0a9ff87c --out benchmarks/results/first_round_picks_rocketlake.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tlp.dataset.store import Dataset
from tlp.features.tensors import LabeledPrograms, load_programs
from tlp.model.cascade import DEFAULT_LEAST
from tlp.model.estimator import TLPModel
from tlp.models import model_path
from tlp.workloads import held_out_networks

Rule = Callable[[np.ndarray], list[int]]


def part_scores(model: Any, test: LabeledPrograms, platform_id: str) -> dict[str, np.ndarray]:
    """Per program: the model's score, and for a cascade its first stage's, each ensemble member's, and whether a
    member chose it first (``first_choices``, as the search's member picks ask it; one call per task, features made
    once)."""
    head = model.head_index(platform_id)
    groups = test.group_ids()
    members = getattr(getattr(model, "second", None), "members", None) or []
    scores = {"model": np.empty(len(test.traces))}
    if hasattr(model, "first"):
        scores["first"] = np.empty(len(test.traces))
    for number in range(len(members)):
        scores[f"member{number}"] = np.empty(len(test.traces))
    if members:
        scores["chosen_by_member"] = np.zeros(len(test.traces), dtype=bool)
    for group in np.unique(groups):
        index = np.nonzero(groups == group)[0]
        features = model.featurizer.transform([test.traces[i] for i in index],
                                              [test.extents.get(test.task_keys[i]) for i in index])
        scores["model"][index] = model.predict_features(features, head)
        if "first" in scores:
            # pylint: disable-next=protected-access
            scores["first"][index] = model.first.predict_features(model._features_for(model.first, features), head)
        for number, member in enumerate(members):
            scores[f"member{number}"][index] = member.predict_features(features, head)
        if members:
            scores["chosen_by_member"][index[model.first_choices(features, head)]] = True
    return scores


def pick_rules(scores: dict[str, np.ndarray]) -> dict[str, Rule]:
    """The rules above, each mapping a task's program rows to its picks (rows)."""
    model = scores["model"]
    members = [scores[k] for k in sorted(scores) if k.startswith("member")]

    def ranked(rows: np.ndarray, by: np.ndarray) -> np.ndarray:
        return rows[np.argsort(-by[rows], kind="stable")]

    def top(k: int) -> Rule:
        return lambda rows: list(ranked(rows, model)[:k])

    def then(second: Callable[[np.ndarray, int], list[int]]) -> Rule:
        def rule(rows: np.ndarray) -> list[int]:
            order = ranked(rows, model)
            others = [r for r in second(rows, int(order[0])) if r != order[0]]
            return [int(order[0]), int(others[0] if others else order[min(1, len(order) - 1)])]
        return rule

    def shortlist(rows: np.ndarray) -> np.ndarray:
        return ranked(rows, scores["first"])[:DEFAULT_LEAST]

    def member_firsts(rows: np.ndarray, _: int) -> list[int]:
        return [int(r) for r in ranked(rows[scores["chosen_by_member"][rows]], model)]

    def minimax(rows: np.ndarray, _: int) -> list[int]:
        short = shortlist(rows)
        worst = np.max([np.argsort(np.argsort(-m[short], kind="stable"), kind="stable") for m in members], axis=0)
        return [int(r) for r in short[np.argsort(worst, kind="stable")]]

    rules = {f"top{k}": top(k) for k in (1, 2, 3, 4)}
    if "chosen_by_member" in scores and "first" in scores:
        rules["top1+member"] = then(member_firsts)
        rules["top1+first"] = then(lambda rows, _: [int(r) for r in ranked(rows, scores["first"])])
        rules["top1+minimax"] = then(minimax)
    return rules


def score_rules(test: LabeledPrograms, rules: dict[str, Rule], networks: list[str]) -> dict[str, Any]:
    """Per network and rule: Σ w·best / Σ w·(fastest pick), and per task the pick / best ratio of each rule."""
    latencies = test.latencies
    out: dict[str, Any] = {}
    for network in networks:
        tasks = test.network_tasks(network)
        if not tasks:
            continue
        best_sum, picked_sum, per_task = 0.0, dict.fromkeys(rules, 0.0), {}
        for key, index, weight in tasks:
            best = float(latencies[index].min())
            best_sum += weight * best
            per_task[key] = {"weight": weight, "programs": len(index), "best_s": best}
            for name, rule in rules.items():
                picked = float(latencies[rule(index)].min())
                picked_sum[name] += weight * picked
                per_task[key][name] = round(picked / best, 4)
        out[network] = {"tasks": len(tasks), "programs": sum(len(index) for _, index, _ in tasks),
                        "score": {name: round(best_sum / value, 4) for name, value in picked_sum.items()},
                        "per_task": per_task}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True,
                        help="checkpoint or packaged name; repeat. NAME@PLATFORM: that model with --platform's head "
                             "replaced by PLATFORM's (is it the head or the backbone that ranks?)")
    parser.add_argument("--platform", required=True)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    networks = list(held_out_networks())
    _, test = load_programs(Dataset(args.dataset), args.platform).split_by_network(set(networks))
    result: dict[str, Any] = {"platform": args.platform, "test_programs": len(test.traces), "models": {}}
    for name in args.model:
        started = time.monotonic()
        path, _, head_from = name.partition("@")
        model = TLPModel.load(model_path(path))
        if head_from:
            model.copy_heads({args.platform: head_from})
        scores = part_scores(model, test, args.platform)
        per_network = score_rules(test, pick_rules(scores), networks)
        result["models"][name] = {"seconds": round(time.monotonic() - started, 1), "per_network": per_network}
        for network, row in per_network.items():
            print(f"{name} {network} ({row['tasks']} tasks): "
                  + ", ".join(f"{rule} {value:.3f}" for rule, value in row["score"].items()), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
