"""Does a row summing the tiling decisions help TLP rank held-out convolutions? (issue 10, part 4)

Where TenSet's top-1 is lost on the held-out networks, the shipped model's first pick is often a program with a
huge register tile (ResNet-50 ``conv2d21``: 16x7x7 accumulators, 15.4 ms, where the best program, 1x7x7, runs in
1.1 ms). Each tile factor sits on its own ``SamplePerfectTile`` row, so the register tile is a product over four
rows that the single attention layer has to learn to add up (in log space). This experiment gives it the sums
directly: a first row, kind ``TilingSummary``, whose numbers are Σ log2(factor) per tiling level over the trace's
tilings with 4+ factors (innermost first: register tile ... parallel nest) and with fewer (reduction), and
log2(1 + how many of each); the trace follows, one row later (seq_len - 1 instructions).

Variants (``base``: the same features without the row) train on one platform's training networks (hidden 128,
25 rows, the recipe of ``benchmarks/README.md`` "Listwise loss") and are scored with TenSet's top-1/top-5 on its
held-out networks (``tlp eval``'s scores). ``base`` with listwise loss reproduces ``tlp train --seq-len 25
--hidden 128 --loss listwise`` of the same seed exactly.

Ensembles (fixed before scoring): each run's test scores are kept beside ``--out``; after the runs, the mean of
per-task rank percentiles of every variant's seeds, and of all runs, is scored the same way (``ensembles``).

    .venv/bin/python benchmarks/tiling_summary.py --platform llvm-znver4-2c-2d80d0a8 --variants base,summary \\
        --seeds 0,1,2 --loss listwise --out benchmarks/results/tiling_summary_zen4.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tlp.dataset.store import Dataset
from tlp.evaluation import rank_percentiles, score_models
from tlp.features.featurizer import FeatureConfig, TraceFeaturizer
from tlp.features.tensors import FeaturizedPrograms, LabeledPrograms, load_programs
from tlp.features.vocab import Vocabulary
from tlp.model.estimator import TLPModel, TrainConfig
from tlp.model.network import ModelConfig
from tlp.platform import host_fingerprint
from tlp.workloads import held_out_networks

SUMMARY_KIND = "TilingSummary"
SPATIAL_LEVELS, REDUCTION_LEVELS = 4, 2  # CPU multi-level tiling: SSRSRS (4 spatial factors, 2 reduction)


def tiling_summary(trace: Any) -> list[float]:
    """Σ log2(factor) per level, innermost first, for tilings of >= 4 and of < 4 factors; log2(1 + their counts)."""
    insts, decisions = trace
    spatial, reduction, counts = [0.0] * SPATIAL_LEVELS, [0.0] * REDUCTION_LEVELS, [0, 0]
    for index, decision in decisions:
        position = int(index)
        if position >= len(insts) or insts[position][0] != "SamplePerfectTile" or not isinstance(decision, list):
            continue
        long_tiling = len(decision) >= SPATIAL_LEVELS
        sums = spatial if long_tiling else reduction
        counts[0 if long_tiling else 1] += 1
        for level, factor in enumerate(reversed(decision[-len(sums):])):
            if isinstance(factor, (int, float)) and factor >= 1:
                sums[level] += math.log2(factor)
    return spatial + reduction + [math.log2(1 + counts[0]), math.log2(1 + counts[1])]


def featurize(train: LabeledPrograms, test: LabeledPrograms, seq_len: int, summary: bool
              ) -> tuple[TraceFeaturizer, np.ndarray, np.ndarray]:
    """(featurizer, train features, test features); with ``summary`` the first row is the tiling summary."""
    config = FeatureConfig(seq_len=seq_len)
    fitted = TraceFeaturizer(config).fit(train.traces)
    if not summary:
        return fitted, *(fitted.transform(p.traces, [p.extents.get(k) for k in p.task_keys]) for p in (train, test))
    # The summary kind joins the kind vocabulary like any instruction kind, counted once per training trace.
    counts: Counter = Counter({SUMMARY_KIND: len(train.traces)})
    for insts, _ in train.traces:
        counts.update(inst[0] for inst in insts)
    kinds = Vocabulary.build(counts)
    trace_rows = TraceFeaturizer(FeatureConfig(seq_len=seq_len - 1), kinds, fitted.strings)
    numbers = config.columns()["numbers"].start
    out = []
    for programs in (train, test):
        rows = trace_rows.transform(programs.traces, [programs.extents.get(k) for k in programs.task_keys])
        features = np.zeros((len(rows), seq_len, config.width), dtype=np.float32)
        features[:, 1:] = rows
        features[:, 0, 0] = kinds.id(SUMMARY_KIND)
        for i, trace in enumerate(programs.traces):
            values = tiling_summary(trace)
            features[i, 0, numbers : numbers + len(values)] = values
        out.append(features)
    return TraceFeaturizer(config, kinds, fitted.strings), out[0], out[1]


def score_ensembles(test: LabeledPrograms, runs: dict[str, np.ndarray], networks: list[str]) -> dict[str, Any]:
    """Per variant (its seeds) and over all runs: TenSet top-1/top-5 of the mean rank percentile."""
    groups = test.group_ids()
    members = {f"{v} x{sum(k.startswith(v + ' ') for k in runs)}": [k for k in runs if k.startswith(v + " ")]
               for v in sorted({k.split(" ")[0] for k in runs})}
    members[f"all {len(runs)}"] = list(runs)
    out = {}
    for name, keys in members.items():
        scores = score_models(test, sum(rank_percentiles(runs[k], groups) for k in keys) / len(keys), networks)
        out[name] = {"members": keys, "top1": scores["top1"], "top5": scores["top5"],
                     "per_network_top1": {n: r["top1"] for n, r in scores["per_network"].items()}}
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform", required=True)
    parser.add_argument("--variants", default="base,summary")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--loss", default="listwise")
    parser.add_argument("--seq-len", type=int, default=25)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads (two runs side by side on 2 cores)")
    parser.add_argument("--out", default="benchmarks/results/tiling_summary.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    networks = held_out_networks()
    train, test = load_programs(Dataset(args.dataset), args.platform).split_by_network(set(networks))
    out = Path(args.out)
    stored = json.loads(out.read_text()) if out.exists() else {"rows": []}
    scores_path = out.with_name(out.stem + "_scores.npz")  # test scores per run, for the ensembles
    kept = dict(np.load(scores_path)) if scores_path.exists() else {}
    for variant in args.variants.split(","):
        featurizer, x_train, x_test = featurize(train, test, args.seq_len, variant == "summary")
        data = FeaturizedPrograms(x_train, list(train.task_keys), np.asarray(train.latencies).reshape(-1, 1),
                                  [args.platform], train.catalogue, featurizer)
        for seed in (int(s) for s in args.seeds.split(",")):
            model = TLPModel(featurizer.config, ModelConfig(hidden=args.hidden),
                             TrainConfig(loss=args.loss, seed=seed, device="cpu"))
            start = time.perf_counter()
            history = model.fit(data, progress=False)
            train_s = time.perf_counter() - start
            test_scores = model.predict_features(x_test, 0, precision="fp32")
            kept[f"{variant} {args.loss} seed{seed}"] = test_scores
            scores = score_models(test, test_scores, networks)
            row = {"variant": variant, "loss": args.loss, "seed": seed, "best_epoch": history.best_epoch,
                   "best_val_top1": history.best_val_top1, "train_s": round(train_s, 1), "top1": scores["top1"],
                   "top5": scores["top5"], "per_network_top1": {n: r["top1"] for n, r in scores["per_network"].items()},
                   "date": datetime.date.today().isoformat(), "machine": host_fingerprint()}
            print(json.dumps(row), flush=True)
            key = (variant, args.loss, seed)
            stored["rows"] = [r for r in stored["rows"] if (r["variant"], r["loss"], r["seed"]) != key] + [row]
            stored.update(platform=args.platform, seq_len=args.seq_len, hidden=args.hidden,
                          train_programs=len(train.traces), test_programs=len(test.traces))
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(stored, indent=1))
            np.savez_compressed(scores_path, **kept)
    runs = {k: v for k, v in kept.items() if k.split(" ")[1] == args.loss and len(v) == len(test.traces)}
    stored["ensembles"] = {"what": "mean of per-task rank percentiles of the members' test scores",
                           "rows": score_ensembles(test, runs, networks)}
    out.write_text(json.dumps(stored, indent=1))


if __name__ == "__main__":
    main()
