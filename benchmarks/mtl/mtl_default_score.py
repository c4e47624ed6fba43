"""Score the default-model candidates of ``benchmarks/mtl/mtl_default.py`` here, from the traces (with TVM).

Each checkpoint's head for each platform is scored on that platform's held-out programs with
``tlp.evaluation.score_head`` -- what ``tlp eval --platform P --baselines none`` reports as ``tlp`` -- which reads
and featurizes the traces again, so a mistake in the feature cache the candidates were trained from would show
here. Rows (method, seed, training seconds and device from the training run's ``results.json``, per-platform
top-1 / top-5 / pairwise) are added to ``--into``; rows already there are kept.

    .venv/bin/python benchmarks/mtl/mtl_default_score.py --checkpoints DIR --train-results DIR/results.json \\
        --into benchmarks/mtl/results/mtl_default_candidate.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from tlp.dataset.store import Dataset
from tlp.evaluation import score_head
from tlp.features.tensors import load_programs
from tlp.model.estimator import TLPModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", required=True, help="folder of METHOD-seedN.pt files")
    parser.add_argument("--train-results", required=True, help="results.json of the training run")
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--into", required=True)
    parser.add_argument("--date", required=True)
    parser.add_argument("--machine", required=True, help="where the scoring ran (words)")
    args = parser.parse_args()

    trained = json.loads(Path(args.train_results).read_text())
    by_name = {f"{c['method']}-seed{c['seed']}": c for c in trained["candidates"]}
    dataset = Dataset(args.dataset)
    held_out = trained["held_out_networks"]
    models = {path.stem: TLPModel.load(path) for path in sorted(Path(args.checkpoints).glob("*.pt"))}
    platforms = sorted({p for m in models.values() for p in m.platforms})
    scores: dict[str, dict[str, Any]] = {name: {} for name in models}
    for platform_id in platforms:
        _, test = load_programs(dataset, platform_id).split_by_network(set(held_out))
        networks = sorted({n for k in set(test.task_keys) for n in test.networks_of(k)} & set(held_out))
        for name, model in models.items():
            started = time.monotonic()
            result = score_head(model, test, platform_id, networks)
            scores[name][platform_id] = {"top1": result["top1"], "top5": result["top5"],
                                         "pairwise": result["pairwise"], "programs": len(test.traces),
                                         "networks": networks, "seconds": round(time.monotonic() - started, 1)}
            print(name, platform_id, round(result["top1"], 3), round(result["top5"], 3), flush=True)

    into = Path(args.into)
    existing = json.loads(into.read_text()) if into.is_file() else {}
    rows = existing.get("candidates") or ([existing] if existing else [])  # the first file held one candidate
    rows = [r for r in rows if not (r.get("run") == "mtl_default" and f"{r['method']}-seed{r['seed']}" in models)]
    for name, model in models.items():
        row = by_name[name]
        rows.append({"run": "mtl_default", "method": row["method"], "seed": row["seed"],
                     "train_seconds": row["train_seconds"], "train_device": trained["device"],
                     "torch": trained["torch"], "heads": model.platforms, "head_sources": row["head_sources"],
                     "date": args.date, "scored_on": args.machine, "feature_cache": trained["cache"],
                     "held_out": scores[name]})
    into.write_text(json.dumps({"candidates": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
