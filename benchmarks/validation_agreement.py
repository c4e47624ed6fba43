"""Does a training's validation top-1 say which model ranks the held-out networks better? (issue 10, part 4)

Every ``recipe_sweep.py`` training keeps the epoch with the best validation top-1 (programs of the *training*
networks). If that number ranked the trained models as the held-out scores do, choosing among seeds or recipes by
it would be sound. This reads the rows of the committed sweep results (best-epoch models; weight averages have no
validation score of their own) and prints Spearman's rank correlation of validation top-1 with TenSet top-1 and
with the all-round (search-like) top-1 on the held-out networks: over all trainings, and within each recipe's
seeds (groups of at least ``--min-seeds``).

    .venv/bin/python benchmarks/validation_agreement.py --json benchmarks/results/validation_agreement.json
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
from collections import defaultdict
from pathlib import Path

from scipy.stats import spearmanr

RESULTS = str(Path(__file__).resolve().parent / "results" / "recipe_sweep_zen4*.json")
METRICS = ("top1", "all_top1")


def rows_of(pattern: str) -> list[dict]:
    """Best-epoch rows with a validation score and both held-out metrics, tagged with their results file; a
    training scored into several files with the same numbers (the same runs re-reported) counts once."""
    rows, seen = [], set()
    for path in sorted(glob.glob(pattern)):
        for row in json.loads(Path(path).read_text()).get("rows", []):
            if "+avg" in row["recipe"] or "best_val_top1" not in row or any(row.get(m) is None for m in METRICS):
                continue
            key = (row["recipe"], row["seed"], row["best_val_top1"], *(row[m] for m in METRICS))
            if key not in seen:
                seen.add(key)
                rows.append({**row, "file": Path(path).name})
    return rows


def agreement(rows: list[dict], min_seeds: int) -> dict:
    overall = {m: float(spearmanr([r["best_val_top1"] for r in rows], [r[m] for r in rows]).statistic)
               for m in METRICS}
    groups = defaultdict(list)
    for row in rows:
        groups[(row["file"], row["recipe"])].append(row)
    within = {}
    for (path, recipe), members in groups.items():
        if len(members) >= min_seeds:
            within[f"{path}:{recipe}"] = {"seeds": len(members), **{
                m: float(spearmanr([r["best_val_top1"] for r in members], [r[m] for r in members]).statistic)
                for m in METRICS}}
    medians = {m: statistics.median(g[m] for g in within.values()) for m in METRICS}
    return {"trainings": len(rows), "overall_spearman": overall, "within_recipe_median_spearman": medians,
            "within_recipe": within}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=RESULTS, help="glob of recipe_sweep.py score outputs")
    parser.add_argument("--min-seeds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = agreement(rows_of(args.results), args.min_seeds)
    print(f"{result['trainings']} trainings; Spearman of validation top-1 with "
          + ", ".join(f"{m} {v:+.2f}" for m, v in result["overall_spearman"].items())
          + f"; within a recipe's seeds ({len(result['within_recipe'])} groups), median "
          + ", ".join(f"{m} {v:+.2f}" for m, v in result["within_recipe_median_spearman"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
