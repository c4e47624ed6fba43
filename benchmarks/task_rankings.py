"""How TLP models rank each task's programs of tuning runs: where a search's cost model goes wrong (issue 11, part 5).

``tlp eval --search-runs`` gives one number per tuned network; a search that loses one task to XGBoost needs the
task: for every run (a ``tlp tune`` / ``search_efficiency.py`` work directory) and task with at least
``--min-programs`` valid measured programs, each model's Spearman correlation between its scores and the programs'
speeds (1/latency), its top-1 (best latency / latency of its pick) and top-5 (best / best of its five picks).

    .venv/bin/python benchmarks/task_rankings.py runs/s32/realistic-zen3 --models tlp-cpu \\
        --out benchmarks/results/task_rankings_zen3_bert_tiny.json

The scores use the head of ``--platform`` (default: this machine's), as a search on this machine would.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from tlp.evaluation.search_metrics import find_work_dirs, pool_runs, read_search_run
from tlp.model.estimator import TLPModel
from tlp.models import model_path
from tlp.platform import Platform


def rank_quality(scores: np.ndarray, latencies: np.ndarray) -> dict[str, float]:
    """Spearman(score, speed), top-1 and top-5 of one task's programs (higher scores = predicted faster)."""
    order = np.argsort(-scores, kind="stable")
    best = float(latencies.min())
    return {"spearman": float(spearmanr(scores, 1.0 / latencies).correlation),
            "top1": best / float(latencies[order[0]]), "top5": best / float(latencies[order[:5]].min())}


def run_rankings(work_dir: Path, models: dict[str, TLPModel], platform_id: str, min_programs: int
                 ) -> list[dict[str, Any]]:
    search = pool_runs([read_search_run(work_dir)])
    programs = search.labeled()
    rows = []
    for name, model in models.items():
        features = model.featurizer.transform(programs.traces, [programs.extents[k] for k in programs.task_keys])
        scores = model.predict_features(features, model.head_index(platform_id), precision="fp32")
        for group, key in enumerate(search.group_key):
            members = np.flatnonzero(search.groups == group)
            if len(members) < min_programs:
                continue
            rows.append({"run": str(work_dir), "cost_model": search.runs[0].get("cost_model", work_dir.name),
                         "task": search.task_names.get(key, key), "weight": search.weights[group],
                         "programs": len(members), "best_latency_s": float(search.latencies[members].min()),
                         "model": name, **rank_quality(scores[members], search.latencies[members])})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="tuning work directories or folders holding them")
    parser.add_argument("--models", default="tlp-cpu", help="comma-separated checkpoints or packaged names")
    parser.add_argument("--platform", default=None, help="the head to score with (default: this machine's platform)")
    parser.add_argument("--min-programs", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    platform_id = args.platform or Platform.host().id
    models = {name: TLPModel.load(model_path(name)) for name in args.models.split(",")}
    rows = [row for work_dir in find_work_dirs(args.runs)
            for row in run_rankings(work_dir, models, platform_id, args.min_programs)]
    for row in rows:
        print(f"{Path(row['run']).name:28s} {row['task'][:32]:32s} w={row['weight']:<3g} n={row['programs']:<4d} "
              f"{row['model']}: spearman {row['spearman']:+.2f} top-1 {row['top1']:.2f} top-5 {row['top5']:.2f}")
    args.out.write_text(json.dumps({"platform": platform_id, "models": list(models), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
