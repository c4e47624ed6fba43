"""Which model picks best among a task's random draws: TLP, XGBoost trained on the dataset, or both together?

A search with few trials per task lives on its model's first picks (on ResNet-50 after ~100 trials, ~4 programs
per task). The first round of an XGBoost-guided MetaSchedule run is a broad sample of each task: XGBoost answers
random scores until it holds 100 measurements (``num_warmup_samples``), so the first tasks' batches of 16 are random
draws from the evolutionary search's population, and the later tasks' are chosen by an XGBoost that has seen only
other tasks of the run (``tlp tune``'s scheduler records each batch at once). Here every such batch is scored by TLP (``--model``, the platform's
head), by MetaSchedule's XGBoost trained on the platform's training split (``--xgb``, as ``batch_ranking.py``
trains and caches it; held-out networks excluded) and by two blends of the two (the sum of per-batch z-scores, the
sum of ranks), and the network's Σ weight × latency of each model's top-k picks per task is reported next to the
batch's best and its mean (a random pick). Two model families err in different places; if their blend picks
better, a double-scored first round is worth building.

    .venv/bin/python benchmarks/first_pick_models.py runs/s36/realistic-zen3-resnet50/resnet50/xgb-seed{1,2} \\
        --platform llvm-znver3-2c-1ceb2015 --xgb runs/s39/xgb_zen3.bin --out benchmarks/results/first_pick_models_zen3.json
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import numpy as np

from batch_ranking import TLPScorer, XGBScorer
from tlp.evaluation.search_metrics import read_search_run
from tlp.platform import host_fingerprint

TOP_K = (1, 2, 4)


def _z(scores: np.ndarray) -> np.ndarray:
    return (scores - scores.mean()) / (scores.std() or 1.0)


def _ranks(scores: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(scores)) / len(scores)


def score_run(work_dir: Path, tlp: TLPScorer, xgb: XGBScorer) -> dict[str, float]:
    """Σ weight × latency (ms) of each model's best among its top-k of each task's first batch."""
    run = read_search_run(work_dir)
    first_batches: dict[str, list] = {}
    for record in run.records:
        if record.round == 0 and record.latency is not None:
            first_batches.setdefault(record.workload_key, []).append(record)
    totals: dict[str, float] = {}
    tasks = 0
    for key, records in first_batches.items():
        if len(records) < max(TOP_K):  # a one-program task: nothing to pick
            continue
        tasks += 1
        weight_ms = run.task_weights[key] * 1e3
        latencies = np.array([r.latency for r in records])
        traces = [r.trace_json for r in records]
        tlp_scores = tlp(run, key, traces)
        xgb_scores = np.asarray(xgb(run, key, traces), dtype=np.float64)
        scores = {"tlp": tlp_scores, "xgb": xgb_scores, "z_blend": _z(tlp_scores) + _z(xgb_scores),
                  "rank_blend": _ranks(tlp_scores) + _ranks(xgb_scores)}
        row = {"best": latencies.min(), "random_pick": latencies.mean()}
        for name, values in scores.items():
            order = np.argsort(-values)
            for k in TOP_K:
                row[f"{name}@{k}"] = latencies[order[:k]].min()
        for name, value in row.items():
            totals[name] = totals.get(name, 0.0) + weight_ms * float(value)
    return {"tasks": tasks, "batch_size": max((len(r) for r in first_batches.values()), default=0), **totals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="XGBoost-guided search_efficiency.py work directories")
    parser.add_argument("--platform", required=True)
    parser.add_argument("--model", default="tlp-cpu")
    parser.add_argument("--xgb", type=Path, required=True, help="XGBoost trained on the training split (trained and "
                        "saved here if absent)")
    parser.add_argument("--dataset", type=Path, default=Path("datasets/tlp-cpu"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    tlp = TLPScorer(args.model, args.platform)
    xgb = XGBScorer(args.xgb, args.dataset, args.platform)
    rows = {}
    for work_dir in args.runs:
        rows[str(work_dir)] = score_run(work_dir, tlp, xgb)
        print(work_dir, json.dumps({k: round(v, 3) for k, v in rows[str(work_dir)].items()}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": datetime.datetime.now().isoformat(timespec="minutes"),
                                    "machine": host_fingerprint(), "platform": args.platform, "model": args.model,
                                    "tlp_head": tlp.head_name, "xgb": str(args.xgb), "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
