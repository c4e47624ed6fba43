"""How well do cost models rank the batches a search actually measured? (issue 11 part 5, issue 10)

A search measures, per task and round, a batch of the candidates its guiding model scored highest. Within such a
batch the latencies still differ (the measured best is often half the worst), so a model that ranked the batch
well would need fewer trials. For every full batch of the given tuning runs this scores the batch with each model
and reports, averaged over batches: the Spearman correlation between score and -latency, the latency of the
model's top pick over the batch's best (1.0 = always the best), the same for the batch's first measured program
(the guiding model's own top pick, as MetaSchedule measures in score order) and for a random pick (the batch
mean), and where in the measured order the batch's best stood.

Models: TLP checkpoints (``--model``, scored with the head of ``--platform``; the nearest head where a checkpoint
has none) and, with ``--xgb FILE``, MetaSchedule's XGBoost trained once on the platform's training split of
``--dataset`` (held-out networks excluded, as ``tlp eval`` trains it) and saved to FILE for the next call.

    .venv/bin/python benchmarks/timing_noise/batch_ranking.py RUN_DIR... --platform llvm-znver3-2c-1ceb2015 \
        --model tlp-cpu --model other.pt --xgb runs/xgb_zen3.tar --out batch_ranking.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from tlp._tvm import ms, tvm
from tlp.dataset import Dataset
from tlp.evaluation import RATIO_BINS, accuracy_by_ratio, pair_counts_by_ratio
from tlp.evaluation.baselines import MetaScheduleBaseline, metaschedule_predict, replay_candidates, replay_context
from tlp.evaluation.search_metrics import SearchRun, find_work_dirs, read_search_run
from tlp.features.featurizer import block_extents
from tlp.features.tensors import load_programs
from tlp.model.estimator import TLPModel
from tlp.models import model_path
from tlp.workloads import held_out_networks

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position

MIN_VALID = 4  # a batch with fewer valid latencies says nothing about ranking


def batches(run: SearchRun, size: int = 0) -> list[tuple[str, list[Any], np.ndarray]]:
    """``(workload key, traces, latencies)`` of each full batch: one task's records of one search round, of
    ``size`` records (0: the run's most common size of a round after the first, i.e. its batch size)."""
    grouped: dict[tuple[str, int], list[Any]] = {}
    for record in run.records:
        grouped.setdefault((record.workload_key, record.round), []).append(record)
    if not size:
        sizes = Counter(len(records) for (_, number), records in grouped.items() if number > 0)
        size = sizes.most_common(1)[0][0] if sizes else 0
    out = []
    for (key, _), records in grouped.items():
        latencies = np.array([np.nan if r.latency is None else r.latency for r in records])
        if len(records) == size and np.count_nonzero(~np.isnan(latencies)) >= MIN_VALID:
            out.append((key, [r.trace_json for r in records], latencies))
    return out


class TLPScorer:
    def __init__(self, spec: str, platform: str) -> None:
        name, _, head = spec.partition("@")  # name@platform: score with that platform's head instead
        platform = head or platform
        self.model = TLPModel.load(model_path(name))
        heads = self.model.platforms
        self.head = self.model.head_index(platform if platform in heads or len(heads) <= 1 else heads[0])
        self.head_name = heads[self.head] if heads else None

    def __call__(self, run: SearchRun, key: str, traces: list[Any]) -> np.ndarray:
        mod = ms.database.Workload.from_json(run.workloads[key]).mod
        features = self.model.featurizer.transform(traces, [block_extents(mod)] * len(traces))
        return np.asarray(self.model.predict_features(features, self.head, 1), dtype=np.float64)


class XGBScorer:
    """MetaSchedule's XGBoost trained on the training split (cached in ``path``), scoring replayed traces."""

    def __init__(self, path: Path, dataset: Path, platform: str) -> None:
        data = Dataset(dataset)
        store = data.store(platform)
        self.target = tvm.target.Target(store.platform.target)
        self.train_seconds = None
        if path.exists():
            self.model = ms.cost_model.XGBModel(num_warmup_samples=0, adaptive_training=False)
            self.model.load(str(path))
        else:
            baseline = MetaScheduleBaseline("xgb", data, platform)
            train, _ = load_programs(data, platform).split_by_network(set(held_out_networks()))
            started = time.monotonic()
            baseline.fit(train)
            self.train_seconds = time.monotonic() - started
            self.model = baseline.model
            path.parent.mkdir(parents=True, exist_ok=True)
            self.model.save(str(path))

    def __call__(self, run: SearchRun, key: str, traces: list[Any]) -> np.ndarray:
        workload = ms.database.Workload.from_json(run.workloads[key])
        return metaschedule_predict(self.model, replay_context(workload.mod, self.target, key),
                                    replay_candidates(workload, traces, self.target))


def pick_ratio(scores: np.ndarray, latencies: np.ndarray) -> float:
    valid = ~np.isnan(latencies)
    return float(latencies[int(np.argmax(np.where(valid, scores, -np.inf)))] / np.nanmin(latencies))


def score_run(run: SearchRun, size: int, scorers: dict[str, Any]) -> dict[str, Any]:
    rows = batches(run, size)
    size = len(rows[0][1]) if rows else 0
    rho: dict[str, list[float]] = {name: [] for name in scorers}
    pick: dict[str, list[float]] = {name: [] for name in scorers}
    pairs = {name: np.zeros((len(RATIO_BINS) - 1, 2), dtype=np.int64) for name in scorers}
    first, mean, best_at = [], [], np.zeros(size, dtype=int)
    for key, traces, latencies in rows:
        valid = ~np.isnan(latencies)
        order = np.arange(size, 0, -1, dtype=np.float64)  # measured order as a score: the first is the top pick
        first.append(pick_ratio(order, latencies))
        mean.append(float(np.nanmean(latencies) / np.nanmin(latencies)))
        best_at[int(np.nanargmin(latencies))] += 1
        for name, scorer in scorers.items():
            scores = scorer(run, key, traces)
            rho[name].append(float(spearmanr(scores[valid], -latencies[valid]).statistic))
            pick[name].append(pick_ratio(scores, latencies))
            pairs[name] += pair_counts_by_ratio(scores, latencies)
    return {"run": str(run.path), "guided_by": run.cost_model, "batch_size": size, "batches": len(rows),
            "measured_first_pick_over_best": float(np.median(first)) if first else None,
            "random_pick_over_best": float(np.median(mean)) if mean else None,
            "best_at_position": best_at.tolist(),
            "models": {name: {"spearman_mean": float(np.nanmean(rho[name])) if rho[name] else None,
                              "top_pick_over_best_median": float(np.median(pick[name])) if pick[name] else None,
                              "pairs_right_by_latency_ratio": accuracy_by_ratio(pairs[name]), "_pairs": pairs[name]}
                       for name in scorers}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="tuning work directories (or folders holding them)")
    parser.add_argument("--platform", required=True, help="whose heads score (and whose XGBoost training split)")
    parser.add_argument("--model", action="append", default=[],
                        help="TLP checkpoint (name or path; NAME@PLATFORM: that platform's head); repeatable")
    parser.add_argument("--xgb", type=Path, help="XGBoost trained on the platform's training split: loaded if the "
                                                 "file exists, else trained (~15 min on 33k records, 2 cores) and saved")
    parser.add_argument("--dataset", type=Path, default=Path("datasets/tlp-cpu"))
    parser.add_argument("--batch", type=int, default=0, help="batch size to score (default: each run's own)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    scorers: dict[str, Any] = {}
    for name in args.model:
        scorer = TLPScorer(name, args.platform)
        scorers[f"tlp:{Path(name.partition('@')[0]).stem}@{scorer.head_name}"] = scorer
    xgb = XGBScorer(args.xgb, args.dataset, args.platform) if args.xgb else None
    if xgb is not None:
        scorers["xgb (trained on the dataset)"] = xgb
    results = []
    pooled = {name: {} for name in scorers}  # guided by -> pair counts, over all runs
    for path in find_work_dirs(args.runs):
        result = score_run(read_search_run(path), args.batch, scorers)
        guide = "tlp" if result["guided_by"].startswith("tlp") else result["guided_by"]
        for name, row in result["models"].items():
            counts = row.pop("_pairs")
            pooled[name][guide] = pooled[name].get(guide, 0) + counts
        results.append(result)
        print(json.dumps(result), flush=True)
    write_json(args.out, {
        **stamp(timespec="seconds"),
        "platform": args.platform, "batch": args.batch, "models": args.model,
        "xgb": None if xgb is None else {"file": str(args.xgb), "train_seconds": xgb.train_seconds},
        "pairs_right_by_latency_ratio": {name: {guide: accuracy_by_ratio(counts) for guide, counts in by_guide.items()}
                                         for name, by_guide in pooled.items()},
        "runs": results})


if __name__ == "__main__":
    main()
