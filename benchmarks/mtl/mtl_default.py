"""Candidates for the packaged default model with every platform's head (issue 9, part 6), trained from the
feature cache, so it runs where TVM is not installed (a GPU machine).

Methods, each for every seed given:

- ``joint``: MTL-TLP as ``tlp train D --platforms all`` trains it: one backbone, one head per platform, the sum
  of the per-platform LambdaRank losses.
- ``stacked_frozen`` / ``stacked_finetuned``: the joint model's backbone, then each platform's head trained
  again on its own programs after it (``TLPModel.fit_head``), with the backbone frozen / following at 0.1x the
  head's learning rate. Heads are trained one platform after another, the most-measured (Zen 3) last; with a
  fine-tuned backbone the earlier heads then read a backbone that moved after them, which the scores include.
- ``shipped_heads``: the shipped single-platform model (backbone and Zen 3 head unchanged) plus a head per other
  platform trained with the backbone frozen, starting as a copy of the nearest platform's head.

A platform with no training programs (all of its measured programs belong to held-out networks) gets a copy of
the nearest trained platform's head, recorded in the checkpoint's ``head_sources``. Which platform is nearest
(``tlp.platform.nearest_platform``) asks LLVM through TVM for each target's ISA; where TVM is missing, pass the
ranking written beforehand where it is installed (``--write-nearest FILE``, then ``--nearest FILE``).

Writes, under ``--out``: ``results.json`` (per candidate: seed, training seconds and device, the held-out top-1 /
top-5 per platform computed from the cached features, as a first look) and one ``METHOD.tar`` of checkpoints per
method. The numbers to report are computed afterwards with ``tlp eval``, which featurizes the traces again.

    .venv/bin/python benchmarks/mtl/mtl_default.py --cache CACHE_DIR --write-nearest nearest.json     # with TVM
    PYTHONPATH=src python3 benchmarks/mtl/mtl_default.py --cache CACHE_DIR --nearest nearest.json --out OUT \\
        [--seeds 0,1] [--methods joint,stacked_frozen,stacked_finetuned,shipped_heads] [--epochs 60]
"""

from __future__ import annotations

import argparse
import copy
import json
import tarfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tlp.dataset.store import Dataset
from tlp.evaluation import score_models
from tlp.features.cache import read_cache
from tlp.features.featurizer import FeatureConfig
from tlp.features.tensors import FeaturizedPrograms, LabeledPrograms
from tlp.model.estimator import TLPModel, TrainConfig
from tlp.model.network import ModelConfig
from tlp.platform import nearness_ranking

METHODS = ("joint", "stacked_frozen", "stacked_finetuned", "shipped_heads")
SHIPPED = Path(__file__).resolve().parents[2] / "src" / "tlp" / "models" / "tlp-cpu.pt"


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def trained_order(train: FeaturizedPrograms, last: str) -> list[str]:
    """Platforms with training programs, fewest first and ``last`` at the end."""
    counts = {p: int((~np.isnan(train.latencies[:, i])).sum()) for i, p in enumerate(train.platform_ids)}
    trained = sorted((p for p, n in counts.items() if n > 0 and p != last), key=lambda p: (counts[p], p))
    return trained + ([last] if counts.get(last) else [])


def nearest_of(ranking: dict[str, list[str]], platform_id: str, known: list[str]) -> str:
    return next(p for p in ranking[platform_id] if p in known)


def copy_untrained_heads(model: TLPModel, trained: list[str], ranking: dict[str, list[str]]) -> dict[str, str]:
    """Heads of platforms with no training program become copies of the nearest trained platform's head."""
    sources = {p: nearest_of(ranking, p, trained) for p in model.platforms if p not in trained}
    model.copy_heads(sources)
    return sources


def held_out_scores(model: TLPModel, test: FeaturizedPrograms, networks: list[str]) -> dict[str, Any]:
    """Top-1 / top-5 per platform head on the cached features of the held-out programs (a first look)."""
    out = {}
    for platform_id in test.platform_ids:
        if platform_id not in model.platforms:
            continue
        one = test.platform(platform_id)
        labeled = LabeledPrograms([None] * len(one.task_keys), one.latencies[:, 0], one.task_keys, {}, one.catalogue)
        scores = model.predict_features(one.features, model.head_index(platform_id))
        result = score_models(labeled, np.asarray(scores), networks)
        out[platform_id] = {"top1": result["top1"], "top5": result["top5"], "programs": len(one.task_keys)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", required=True, help="feature cache file of the dataset's platforms")
    parser.add_argument("--dataset", default="datasets/tlp-cpu", help="for the platforms' descriptions only")
    parser.add_argument("--out", help="folder for results.json and the checkpoints")
    parser.add_argument("--nearest", help="platform nearness ranking written by --write-nearest (no TVM needed)")
    parser.add_argument("--write-nearest", help="write the platforms' nearness ranking (needs TVM) and stop")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--base", default=str(SHIPPED), help="the shipped model (for shipped_heads)")
    parser.add_argument("--last", default="llvm-znver3-2c-1ceb2015", help="the platform whose head is trained last")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    programs, cache_meta = read_cache(Path(args.cache))
    dataset = Dataset(args.dataset)
    info = {p: dataset.store(p).platform.to_json() for p in programs.platform_ids}
    if args.write_nearest:
        Path(args.write_nearest).write_text(json.dumps(nearness_ranking(info), indent=1))
        return
    ranking = json.loads(Path(args.nearest).read_text()) if args.nearest else nearness_ranking(info)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    held_out = list(cache_meta["key"]["held_out_networks"])
    train, test = programs.split_by_network(set(held_out))
    order = trained_order(train, args.last)
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    results: dict[str, Any] = {"device": device_name(), "torch": torch.__version__, "cache": cache_meta["digest"],
                               "held_out_networks": held_out, "head_order": order, "candidates": []}

    def record(method: str, seed: int, model: TLPModel, seconds: float, checkpoints: list[Path]) -> None:
        model.meta.update({"platform_info": info, "held_out_networks": held_out, "dataset": args.dataset,
                           "feature_cache": cache_meta["digest"], "recipe": method, "train_device": device_name(),
                           "train_seconds": round(seconds, 1)})
        path = out / f"{method}-seed{seed}.pt"
        model.save(path)
        checkpoints.append(path)
        row = {"method": method, "seed": seed, "train_seconds": round(seconds, 1), "device": device_name(),
               "heads": model.platforms, "head_sources": model.meta.get("head_sources", {}),
               "cached_feature_scores": held_out_scores(model, test, held_out)}
        results["candidates"].append(row)
        (out / "results.json").write_text(json.dumps(results, indent=1))
        print(json.dumps({k: row[k] for k in ("method", "seed", "train_seconds")}),
              {p: round(v["top1"], 3) for p, v in row["cached_feature_scores"].items()}, flush=True)

    def pack(method: str, checkpoints: list[Path]) -> None:
        with tarfile.open(out / f"{method}.tar", "w") as tar:
            for path in checkpoints:
                tar.add(path, arcname=path.name)
        for path in checkpoints:
            path.unlink()

    # The cheapest method first: if the machine's time runs out, the most likely default is already trained.
    if "shipped_heads" in methods:
        checkpoints = []
        for seed in seeds:
            model = TLPModel.load(args.base)
            model.train_config = replace(model.train_config, seed=seed, device=args.device, epochs=args.epochs)
            started = time.monotonic()
            for platform_id in order:
                if platform_id in model.platforms:
                    continue  # the shipped head stays as it is
                nearest = nearest_of(ranking, platform_id, model.platforms)
                model.fit_head(train.platform(platform_id), copy_of=nearest, freeze_backbone=True, progress=False)
            for platform_id in programs.platform_ids:  # the untrained ones, in the dataset's order
                if platform_id not in model.platforms:
                    assert model.net is not None
                    model.net.add_head()
                    model.platforms = model.platforms + [platform_id]
            copy_untrained_heads(model, [p for p in model.platforms if p in order], ranking)
            record("shipped_heads", seed, model, time.monotonic() - started, checkpoints)
        pack("shipped_heads", checkpoints)

    joint: dict[int, tuple[TLPModel, float]] = {}
    if any(m in methods for m in ("joint", "stacked_frozen", "stacked_finetuned")):
        checkpoints: list[Path] = []
        for seed in seeds:
            model = TLPModel(FeatureConfig(seq_len=80), ModelConfig(hidden=args.hidden),
                             TrainConfig(epochs=args.epochs, seed=seed, device=args.device))
            started = time.monotonic()
            model.fit(train, progress=False)
            seconds = time.monotonic() - started
            copy_untrained_heads(model, order, ranking)
            joint[seed] = (model, seconds)
            if "joint" in methods:
                record("joint", seed, model, seconds, checkpoints)
        if checkpoints:
            pack("joint", checkpoints)

    for method, freeze in (("stacked_frozen", True), ("stacked_finetuned", False)):
        if method not in methods:
            continue
        checkpoints = []
        for seed in seeds:
            base, joint_seconds = joint[seed]
            model = copy.deepcopy(base)
            started = time.monotonic()
            for platform_id in order:
                model.fit_head(train.platform(platform_id), freeze_backbone=freeze, backbone_lr_scale=0.1,
                               progress=False)
            copy_untrained_heads(model, order, ranking)
            record(method, seed, model, joint_seconds + time.monotonic() - started, checkpoints)
        pack(method, checkpoints)


if __name__ == "__main__":
    main()
