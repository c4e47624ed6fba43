"""Score trained checkpoints one by one and as an ensemble, as ``tlp eval`` scores one model (issue 10, part 4).

Why: ``tlp eval`` scores one checkpoint; the seed-ensemble results of ``training_recipe/recipe_sweep.py`` need its bundle (every
program featurized once at one crop). This reads the dataset and tuning runs as ``tlp eval`` does, scores each
checkpoint with its own featurizer, and scores the ensemble as the mean of the members' per-task rank percentiles
(what ``recipe_sweep.py score --ensemble`` does; ``--rescore`` adds cascades), on TenSet's top-k over the held-out networks' programs and on the
search-like metrics of the runs' programs. It measures nothing.

    .venv/bin/python benchmarks/ranking/checkpoint_ensemble.py --platform llvm-znver4-2c-2d80d0a8 \\
        --models crop56-seed0.pt crop56-seed1.pt crop56-seed2.pt crop56-seed3.pt \\
        --search-runs R/runs/bench/unseen R/runs/bench/realistic R/runs/bench/networks/bert_tiny \\
        R/runs/bench/networks/mobilenet_v2 --out ensemble56.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))  # the checkout's tlp, installed or not
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py

# pylint: disable=wrong-import-position
from tlp.dataset.store import Dataset
from tlp.evaluation import head_scores, rank_percentiles, score_models
from tlp.evaluation import search_metrics
from tlp.features.tensors import load_programs
from tlp.model.cascade import rerank_top, rescored_count
from tlp.model.estimator import TLPModel
from tlp.workloads import held_out_networks
from common import write_json


def _standardized(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
    out = np.zeros(len(scores))
    for group in np.unique(groups):
        index = groups == group
        out[index] = (scores[index] - scores[index].mean()) / (scores[index].std() or 1.0)
    return out


# How members' scores are combined: the mean of per-task rank percentiles (recipe_sweep's ensembles), of raw scores
# (what distillation's teachers give, and what a search can use call by call), or of per-task standardized scores.
COMBINATIONS = {"rank": rank_percentiles, "raw": lambda scores, groups: np.asarray(scores, dtype=np.float64),
                "standardized": _standardized}


def rescored(first: np.ndarray, second: np.ndarray, groups: np.ndarray, fraction: float, least: int) -> np.ndarray:
    """The cascade's ranking (``TLPCascade``'s, one call per task) from the two stages' scores of every program."""
    out = np.asarray(first, dtype=np.float64).copy()
    for group in np.unique(groups):
        index = np.nonzero(groups == group)[0]
        out[index] = rerank_top(out[index], rescored_count(len(index), least, fraction),
                                lambda top, index=index: second[index][top])
    return out


def _summary(test_result: dict[str, Any], search_result: dict[str, Any] | None) -> dict[str, Any]:
    out = {"tenset_top1": test_result["top1"], "tenset_top5": test_result["top5"],
           "per_network_top1": {n: r["top1"] for n, r in test_result["per_network"].items()}}
    if search_result is not None:
        out.update({"all_top1": search_result["all_top1"], "late_top1": search_result["late_top1"],
                    "pick_regret": search_result["pick_regret"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform", required=True, help="the platform whose labels (and heads) are scored")
    parser.add_argument("--models", nargs="+", required=True, help="checkpoints (.pt)")
    parser.add_argument("--search-runs", nargs="*", default=[], help="tuning work directories, as tlp eval's")
    parser.add_argument("--subsets", type=int, nargs="*", default=[],
                        help="also score every ensemble of this many members (e.g. 2 3)")
    parser.add_argument("--first-stage", help="a checkpoint whose ranking the ensemble re-ranks at its top only "
                                              "(--rescore-top): a cheap model filters, the ensemble orders the rest")
    parser.add_argument("--rescore", nargs="*", default=["0.1:8", "0:32"], metavar="FRACTION:LEAST",
                        help="with --first-stage: how many of each task's programs the ensemble re-ranks: the first "
                             "stage's top FRACTION of them, at least LEAST")
    parser.add_argument("--out", required=True)
    parser.add_argument("--save-scores", help="also write every member's raw scores of the test and search programs "
                                              "(.npz: test_<name>, search_<name>, with the programs' task groups)")
    args = parser.parse_args()

    networks = held_out_networks()
    train, test = load_programs(Dataset(args.dataset), args.platform).split_by_network(set(networks))
    search = populations = None
    if args.search_runs:
        search = search_metrics.read_held_out_runs(args.search_runs, train)
        populations = search_metrics.pick_populations(search)
        search_programs = search.labeled()
    test_groups = test.group_ids()
    names, results = [], {}
    test_scores: dict[str, list[np.ndarray]] = {c: [] for c in COMBINATIONS}
    search_scores_by: dict[str, list[np.ndarray]] = {c: [] for c in COMBINATIONS}
    for path in args.models:
        started = time.monotonic()
        model = TLPModel.load(path)
        scores = head_scores(model, test, args.platform)
        name = Path(path).stem
        names.append(name)
        for combination, transform in COMBINATIONS.items():
            test_scores[combination].append(transform(scores, test_groups))
        search_result = None
        if search is not None:
            scores_of_runs = head_scores(model, search_programs, args.platform, search.groups)
            for combination, transform in COMBINATIONS.items():
                search_scores_by[combination].append(transform(scores_of_runs, search.groups))
            search_result = search_metrics.search_scores(search, scores_of_runs, populations)
        results[name] = _summary(score_models(test, scores, networks), search_result)
        print(f"{name}: {json.dumps(results[name])} ({time.monotonic() - started:.0f} s)", flush=True)

    def ensemble(members: tuple[int, ...], combination: str = "rank") -> dict[str, Any]:
        test_mean = np.mean([test_scores[combination][i] for i in members], axis=0)
        search_result = None
        if search is not None:
            search_mean = np.mean([search_scores_by[combination][i] for i in members], axis=0)
            search_result = search_metrics.search_scores(search, search_mean, populations)
        return _summary(score_models(test, test_mean, networks), search_result)

    everyone = tuple(range(len(names)))
    cascades = {}
    if args.first_stage:
        first = TLPModel.load(args.first_stage)
        first_test = head_scores(first, test, args.platform)
        first_search = (head_scores(first, search_programs, args.platform, search.groups)
                        if search is not None else None)
        results[f"first stage {Path(args.first_stage).stem}"] = _summary(
            score_models(test, first_test, networks),
            search_metrics.search_scores(search, first_search, populations) if search is not None else None)
        ensemble_test = np.mean(test_scores["raw"], axis=0)
        ensemble_search = np.mean(search_scores_by["raw"], axis=0) if search is not None else None
        for spec in args.rescore:
            fraction, least = float(spec.split(":")[0]), int(spec.split(":")[1])
            test_result = score_models(test, rescored(first_test, ensemble_test, test_groups, fraction, least),
                                       networks)
            search_result = None
            if search is not None:
                search_result = search_metrics.search_scores(
                    search, rescored(first_search, ensemble_search, search.groups, fraction, least), populations)
            name = f"top {fraction:g}, at least {least}"
            cascades[name] = _summary(test_result, search_result)
            print(f"cascade {name}: {json.dumps(cascades[name])}", flush=True)
    ensembles = {"+".join(names): ensemble(everyone)}
    ensembles.update({f"{'+'.join(names)} ({combination})": ensemble(everyone, combination)
                      for combination in COMBINATIONS if combination != "rank"})
    for size in args.subsets:
        for members in itertools.combinations(range(len(names)), size):
            ensembles["+".join(names[i] for i in members)] = ensemble(members)
    for name, result in ensembles.items():
        print(f"ensemble {name}: {json.dumps(result)}", flush=True)
    out = {"platform": args.platform, "dataset": args.dataset, "test_programs": len(test.traces),
           "test_tasks": len(set(test.task_keys)), "train_programs": len(train.traces),
           "search": search.summary() if search is not None else None,
           "models": results, "ensembles": ensembles,
           **({"first_stage": args.first_stage, "cascades": cascades} if args.first_stage else {})}
    write_json(args.out, out)
    if args.save_scores:
        arrays = {f"test_{n}": s for n, s in zip(names, test_scores["raw"])}
        arrays.update({f"search_{n}": s for n, s in zip(names, search_scores_by["raw"])})
        np.savez_compressed(args.save_scores, test_groups=test_groups, test_latencies=test.latencies,
                            **({"search_groups": search.groups} if search is not None else {}), **arrays)


if __name__ == "__main__":
    main()
