"""TLP on Ansor records, side by side with what can be compared on the same records.

Imports a folder of Ansor measurement logs (``tlp dataset import --format ansor``) into a scratch dataset, holds
out a seeded random share of the tasks (network ``ansor_test``; the rest is ``ansor_train``), trains TLP with the
paper's step featurization and scores it on the held-out tasks with ``tlp eval``'s TenSet top-k. Compared on the
same records:

- ``random``: a random ranking (``tlp eval``'s own baseline, one draw) and ``random-20``, its mean over 20 draws;
- ``xgb-steps``: XGBoost (pairwise ranking objective, grouped by task) on the same step vectors, flattened. This is
  *not* TenSet's XGBoost, whose input is Ansor's per-statement program features: extracting those lowers each
  program with Ansor, which TVM 0.27 no longer has; nor the project's MetaSchedule XGBoost/MLP, which read
  MetaSchedule programs that Ansor records do not contain.

    .venv/bin/python benchmarks/ansor_records/ansor_records.py RECORDS_DIR \
        --out benchmarks/ansor_records/results/ansor_records.json
"""

from __future__ import annotations

import argparse
import json
import platform as host
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

from tlp.dataset import Dataset
from tlp.dataset.ansor import import_ansor, parse_ansor_line
from tlp.evaluation import evaluate, score_models
from tlp.features.ansor_steps import AnsorStepConfig
from tlp.features.tensors import load_programs
from tlp.model.estimator import TLPModel, TrainConfig, mean_task_top_k
from tlp.model.network import ModelConfig

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir, write_json  # pylint: disable=wrong-import-position

TRAIN, TEST = "ansor_train", "ansor_test"


def task_split(files: list[Path], test_fraction: float, seed: int) -> dict[str, dict[str, int]]:
    """The task mapping: a seeded random ``test_fraction`` of the workload keys is the test network."""
    keys: set[str] = set()
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            try:
                keys.add(parse_ansor_line(line).workload_key)
            except ValueError:
                continue
    ordered = sorted(keys)
    rng = np.random.default_rng(seed)
    test = set(rng.choice(len(ordered), size=max(1, round(test_fraction * len(ordered))), replace=False).tolist())
    return {TRAIN: {k: 1 for i, k in enumerate(ordered) if i not in test},
            TEST: {k: 1 for i, k in enumerate(ordered) if i in test}}


def xgb_steps(model: TLPModel, train, test, seed: int) -> np.ndarray:
    """XGBoost ranking on the flattened step vectors of TLP's featurizer (same records, same input)."""
    import xgboost as xgb  # pylint: disable=import-outside-toplevel

    def matrix(programs, with_labels: bool):
        order = np.argsort(programs.group_ids(), kind="stable")
        x = model.featurizer.transform(programs.traces).reshape(len(programs.traces), -1)[order]
        data = xgb.DMatrix(x, label=programs.labels()[order] if with_labels else None,
                           qid=programs.group_ids()[order])
        return data, order

    train_matrix, _ = matrix(train, True)
    booster = xgb.train({"objective": "rank:pairwise", "eta": 0.2, "max_depth": 8, "seed": seed, "nthread": 2},
                        train_matrix, num_boost_round=200)
    test_matrix, order = matrix(test, False)
    scores = np.empty(len(test.traces))
    scores[order] = booster.predict(test_matrix)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", help="folder of Ansor record files")
    parser.add_argument("--out", default=str(results_dir(__file__) / "ansor_records.json"))
    parser.add_argument("--dataset", help="where to import (default: a temporary folder)")
    parser.add_argument("--test-fraction", type=float, default=0.3)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    files = sorted(p for p in Path(args.records).rglob("*.json"))
    mapping = task_split(files, args.test_fraction, args.seed)
    dataset = Dataset(args.dataset or tempfile.mkdtemp(prefix="ansor-records-"))
    started = time.monotonic()
    summary = import_ansor(dataset, [args.records], mapping, progress=False)
    import_seconds = time.monotonic() - started
    (platform_id,) = summary.platforms
    programs = load_programs(dataset, platform_id)
    train, test = programs.split_by_network({TEST})
    kind = str(dataset.store(platform_id).platform.target.get("kind"))
    model = TLPModel(AnsorStepConfig.paper(kind), ModelConfig(hidden=args.hidden),
                     TrainConfig(epochs=args.epochs, seed=args.seed))
    started = time.monotonic()
    history = model.fit(train, progress=True)
    train_seconds = time.monotonic() - started
    results = evaluate(dataset, platform_id, model, ["random"], [TEST], seed=args.seed)
    started = time.monotonic()
    xgb_scores = xgb_steps(model, train, test, args.seed)
    results["xgb-steps"] = score_models(test, xgb_scores, [TEST])
    results["xgb-steps"]["seconds"] = time.monotonic() - started
    # One random draw per task is a noisy baseline on 8 tasks: its expectation, over 20 seeds.
    rng = np.random.default_rng(args.seed)
    random_scores = [rng.random(len(test.traces)) for _ in range(20)]
    draws = [score_models(test, s, [TEST]) for s in random_scores]
    results["random-20"] = {m: float(np.mean([d[m] for d in draws])) for m in ("top1", "top5", "pairwise")}
    # TenSet's top-k sums latencies over tasks, so the slowest tasks decide it; the mean over tasks shows the rest.
    groups, latencies = test.group_ids(), test.latencies
    tlp_scores = model.predict(test.traces, head=model.head_index(platform_id))
    for name, scores in (("tlp", tlp_scores), ("xgb-steps", xgb_scores), ("random-20", None)):
        per_task = {k: float(np.mean([mean_task_top_k(s, latencies, groups, k) for s in random_scores]))
                    if scores is None else mean_task_top_k(scores, latencies, groups, k) for k in (1, 5)}
        results[name].update({"task_mean_top1": per_task[1], "task_mean_top5": per_task[5]})
    row = {
        "date": date.today().isoformat(), "machine": f"{host.processor() or host.machine()}, 2 cores",
        "records": str(args.records), "platform": platform_id, "import": summary.to_json(),
        "import_seconds": round(import_seconds, 1), "test_tasks": sorted(mapping[TEST]),
        "featurizer": model.featurizer.config.to_json(), "hidden": args.hidden, "epochs": args.epochs,
        "best_epoch": history.best_epoch, "train_seconds": round(train_seconds, 1),
        "results": {name: {k: v for k, v in r.items() if k != "per_network"} for name, r in results.items()},
    }
    write_json(args.out, row)
    for name in ("tlp", "xgb-steps", "random-20"):
        r = results[name]
        print(f"{name:<10} top1 {r['top1']:.3f}  top5 {r['top5']:.3f}  pairwise {r['pairwise']:.3f}  "
              f"per-task mean top1 {r['task_mean_top1']:.3f}  top5 {r['task_mean_top5']:.3f}")
    print(f"train {len(train.traces)} programs / {len(set(train.task_keys))} tasks, test {len(test.traces)} programs / "
          f"{len(set(test.task_keys))} tasks; TLP trained in {train_seconds:.0f} s (best epoch {history.best_epoch})")


if __name__ == "__main__":
    main()
