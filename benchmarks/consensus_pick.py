"""Pick one seed of a recipe by its agreement with the other seeds, using no latency (issue 10 part 4).

Validation top-1 on training tasks does not predict a seed's held-out score (benchmarks/README, "Eighteen seeds").
This asks whether a label-free signal does: a model's **consensus** is the mean over held-out tasks of the Spearman
correlation between its scores and the mean rank percentile of the *other* models (the programs' features only — a
user can draw such programs for their own network without measuring any). Plan fixed before computing:
``results/consensus_pick/PLAN.md``.

    .venv/bin/python benchmarks/consensus_pick.py --bundle runs/sweepv \
        --scores benchmarks/results/recipe_sweep_runs/lstm1-distil-cpu/scores.npz \
                 benchmarks/results/recipe_sweep_runs/lstm1-distil-cpu/s23/scores.npz \
                 benchmarks/results/recipe_sweep_runs/lstm1-distil-gpu-s34/scores.npz \
        --scored benchmarks/results/recipe_sweep_zen4_lstm1_distil_seeds0-17.json \
        --recipe lstm1-soft-slowdown-distil-transfer-mixed+avg-tail --out benchmarks/results/consensus_pick/result.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from recipe_sweep import _bundle_search_set, test_split  # pylint: disable=import-error
from tlp.evaluation import rank_percentiles
from tlp.features.cache import read_cache


def consensus(percentiles: dict[int, np.ndarray], groups: np.ndarray) -> dict[int, float]:
    """Per model: mean over tasks (2+ programs) of Spearman(its percentiles, the others' mean percentiles)."""
    tasks = [np.nonzero(groups == g)[0] for g in np.unique(groups)]
    tasks = [t for t in tasks if len(t) >= 2]
    out = {}
    for seed, own in percentiles.items():
        others = np.mean([p for s, p in percentiles.items() if s != seed], axis=0)
        values = [spearmanr(own[t], others[t])[0] for t in tasks]
        out[seed] = float(np.nanmean(values))
    return out


def pick(values: dict[int, float]) -> int:
    """The highest value; ties to the lower seed."""
    return min(values, key=lambda s: (-values[s], s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--scores", nargs="+", required=True, help="recipe_sweep train's scores.npz files")
    parser.add_argument("--scored", required=True, help="recipe_sweep score's JSON of the same models")
    parser.add_argument("--recipe", required=True, help="the recipe (with +avg-tail) whose seeds compete")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    bundle = Path(args.bundle)
    meta = json.loads((bundle / "bundle.json").read_text())
    programs, _ = read_cache(bundle / "programs.npz")
    test_groups = test_split(programs, meta).group_ids()
    search_groups = _bundle_search_set(bundle, args.dataset, meta).groups
    scores: dict[str, np.ndarray] = {}
    for path in args.scores:
        scores.update(np.load(path))
    pattern = re.compile(re.escape(args.recipe) + r"-seed(\d+) test$")
    seeds = sorted(int(m.group(1)) for m in map(pattern.match, scores) if m)
    scored = {int(r["seed"]): r for r in json.loads(Path(args.scored).read_text())["rows"]
              if r["recipe"] == args.recipe}
    missing = [s for s in seeds if s not in scored]
    if missing:
        raise SystemExit(f"{args.scored}: no row for seeds {missing} of {args.recipe}")
    test_pct = {s: rank_percentiles(scores[f"{args.recipe}-seed{s} test"], test_groups) for s in seeds}
    search_pct = {s: rank_percentiles(scores[f"{args.recipe}-seed{s} search"], search_groups) for s in seeds}
    on_test, on_search = consensus(test_pct, test_groups), consensus(search_pct, search_groups)
    tenset = {s: scored[s]["top1"] for s in seeds}
    allround = {s: scored[s]["all_top1"] for s in seeds}
    chosen = pick(on_test)

    def corr(values: dict[int, float], target: dict[int, float]) -> float:
        return float(spearmanr([values[s] for s in seeds], [target[s] for s in seeds])[0])

    subsets: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    for size in (s for s in (4, 8) if s < len(seeds)):  # a subset smaller than the set
        gains_tenset, gains_allround = [], []
        for _ in range(30):
            members = sorted(int(s) for s in rng.choice(seeds, size, replace=False))
            choice = pick(consensus({s: test_pct[s] for s in members}, test_groups))
            gains_tenset.append(tenset[choice] - float(np.median([tenset[s] for s in members])))
            gains_allround.append(allround[choice] - float(np.median([allround[s] for s in members])))
        subsets.append({"members": size, "draws": 30,
                        "median_gain_tenset_over_subset_median": float(np.median(gains_tenset)),
                        "median_gain_allround_over_subset_median": float(np.median(gains_allround)),
                        "share_above_subset_median_tenset": float(np.mean(np.array(gains_tenset) > 0))})
    result = {
        "recipe": args.recipe, "seeds": seeds, "test_programs": int(len(test_groups)),
        "search_programs": int(len(search_groups)),
        "per_seed": [{"seed": s, "consensus_test": round(on_test[s], 4), "consensus_search": round(on_search[s], 4),
                      "tenset_top1": round(tenset[s], 4), "all_round_top1": round(allround[s], 4)} for s in seeds],
        "spearman_consensus_test_vs_tenset": corr(on_test, tenset),
        "spearman_consensus_test_vs_allround": corr(on_test, allround),
        "spearman_consensus_search_vs_tenset": corr(on_search, tenset),
        "spearman_consensus_search_vs_allround": corr(on_search, allround),
        "pick": {"seed": chosen, "tenset_top1": tenset[chosen], "all_round_top1": allround[chosen]},
        "median_tenset_top1": float(np.median(list(tenset.values()))),
        "median_all_round_top1": float(np.median(list(allround.values()))),
        "subsets": subsets,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "per_seed"}, indent=1))


if __name__ == "__main__":
    main()
