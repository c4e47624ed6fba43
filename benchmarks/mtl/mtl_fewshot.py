"""MTL-TLP's few-shot experiment (TLP paper, section 6): how much of a new platform's data does a head need?

For each target platform T and fraction f of T's measured training programs (whole tasks, nested samples: see
``tlp.dataset.collect.sample_tasks``):

- ``target_only``: a TLP model trained on that sample of T alone;
- ``mtl``: one MTL-TLP model (shared backbone, one head per platform) trained on the same sample of T plus every
  other platform's training programs; scored with T's head;
- ``head_frozen`` / ``head_finetuned``: what ``tlp adapt`` does: an MTL model trained *without* T (once per
  target), then a new head for T trained on the sample, starting from the nearest platform's head, with the
  backbone frozen / lightly fine-tuned (0.1x learning rate).

Both are scored on T's measured programs of the held-out networks (TenSet top-1 / top-5, mean over networks).
Rows are appended to ``benchmarks/mtl/results/mtl_fewshot.json`` as they finish (a re-run skips rows it has), and a
PNG plots top-1 against the fraction, one panel per target.

    .venv/bin/python benchmarks/mtl/mtl_fewshot.py --platforms A,B,C [--targets A,B] \
        [--fractions 0.01,0.03,0.07,0.15,1]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform as host
import sys
import time
from pathlib import Path

import numpy as np

from tlp.dataset.collect import sample_tasks
from tlp.dataset.store import Dataset
from tlp.evaluation import score_head
from tlp.features.featurizer import FeatureConfig
from tlp.features.tensors import MultiPlatformPrograms, load_platforms
from tlp.model.estimator import TLPModel, TrainConfig
from tlp.model.network import ModelConfig
from tlp.platform import nearest_platform
from tlp.workloads import held_out_networks

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir, stamp, write_json  # pylint: disable=wrong-import-position

RESULTS = results_dir(__file__)


def target_sample(train: MultiPlatformPrograms, column: int, fraction: float) -> MultiPlatformPrograms:
    """``train`` with column ``column`` kept only on a ``fraction`` sample of its tasks (other columns whole)."""
    measured = ~np.isnan(train.latencies[:, column])
    sizes: dict[str, int] = {}
    for key in np.array(train.task_keys)[measured]:
        sizes[key] = sizes.get(key, 0) + 1
    keep = set(sample_tasks(sizes, fraction))
    latencies = train.latencies.copy()
    latencies[[k not in keep for k in train.task_keys], column] = np.nan
    sampled = MultiPlatformPrograms(train.traces, train.task_keys, latencies, list(train.platform_ids),
                                    train.extents, train.catalogue)
    return sampled.subset(~np.isnan(latencies).all(axis=1))


def held_out_scores(model: TLPModel, test: MultiPlatformPrograms, platform_id: str) -> dict[str, float]:
    result = score_head(model, test.platform(platform_id), platform_id, held_out_networks())
    return {"top1": result["top1"], "top5": result["top5"]}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    targets = sorted({r["target"] for r in rows})
    fig, axes = plt.subplots(1, len(targets), figsize=(5 * len(targets), 4), sharey=True, squeeze=False)
    for ax, target in zip(axes[0], targets):
        for method, style in (("mtl", "o-"), ("target_only", "s--"), ("head_frozen", "^:"),
                              ("head_finetuned", "v:")):
            points = sorted((r["fraction"], r["top1"]) for r in rows if r["target"] == target and r["method"] == method)
            if points:
                ax.plot(*zip(*points), style, label=method)
        ax.set_xscale("log")
        ax.set_xlabel("fraction of the target's training programs")
        ax.set_title(target, fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("held-out top-1")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platforms", required=True, help="comma-separated platform ids (the MTL model's heads)")
    parser.add_argument("--targets", help="targets (default: every platform)")
    parser.add_argument("--fractions", default="0.01,0.03,0.07,0.15,1")
    parser.add_argument("--methods", default="target_only,mtl,head_frozen,head_finetuned")
    parser.add_argument("--seq-len", type=int, default=25)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--patience", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "mtl_fewshot.json"))
    args = parser.parse_args()

    platforms = args.platforms.split(",")
    targets = args.targets.split(",") if args.targets else platforms
    fractions = [float(f) for f in args.fractions.split(",")]
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {"rows": []}
    results.update({**stamp(), "python": host.python_version(),
                    "platforms": platforms, "seq_len": args.seq_len, "hidden": args.hidden, "epochs": args.epochs,
                    "patience": args.patience, "seed": args.seed, "held_out_networks": held_out_networks()})
    done = {(r["target"], r["fraction"], r["method"]) for r in results["rows"]}

    dataset = Dataset(args.dataset)
    data = load_platforms(dataset, platforms)
    train, test = data.split_by_network(set(held_out_networks()))
    shared_full: TLPModel | None = None  # the MTL model with every platform whole: the same for every target
    methods = args.methods.split(",")

    def fit(programs: MultiPlatformPrograms) -> tuple[TLPModel, float]:
        model = TLPModel(FeatureConfig(seq_len=args.seq_len), ModelConfig(hidden=args.hidden),
                         TrainConfig(epochs=args.epochs, patience=args.patience, seed=args.seed))
        started = time.monotonic()
        model.fit(programs, progress=False)
        return model, time.monotonic() - started

    for target in targets:
        column = platforms.index(target)
        without_target: tuple[TLPModel, float] | None = None  # base of the head_* methods, trained once per target
        for fraction in fractions:
            for method in methods:
                if (target, fraction, method) in done:
                    continue
                sampled = target_sample(train, column, fraction)
                target_programs = int((~np.isnan(sampled.latencies[:, column])).sum())
                if not target_programs:
                    print(f"{target} at {fraction}: no training program measured yet, skipped", flush=True)
                    continue
                if method == "target_only":
                    model, seconds = fit(sampled.platform(target))
                elif method.startswith("head_"):
                    if without_target is None:
                        others = [c for c in range(len(platforms)) if c != column]
                        base_data = MultiPlatformPrograms(train.traces, train.task_keys, train.latencies[:, others],
                                                          [platforms[c] for c in others], train.extents,
                                                          train.catalogue)
                        without_target = fit(base_data.subset(~np.isnan(base_data.latencies).all(axis=1)))
                        without_target[0].meta["platform_info"] = {
                            p: dataset.store(p).platform.to_json() for p in platforms}
                    model = copy.deepcopy(without_target[0])
                    wanted = dataset.store(target).platform
                    nearest, _ = nearest_platform(wanted, {p: model.meta["platform_info"][p] for p in model.platforms})
                    started = time.monotonic()
                    model.fit_head(sampled.platform(target), copy_of=nearest,
                                   freeze_backbone=method == "head_frozen", progress=False)
                    seconds = time.monotonic() - started
                elif fraction >= 1.0 and shared_full is not None:
                    model, seconds = shared_full, 0.0
                else:
                    model, seconds = fit(sampled)
                    if fraction >= 1.0:
                        shared_full = model
                row = {"target": target, "fraction": fraction, "method": method, "target_programs": target_programs,
                       "target_tasks": len({k for k, lat in zip(sampled.task_keys, sampled.latencies[:, column])
                                            if lat == lat}),
                       **held_out_scores(model, test, target), "train_seconds": round(seconds, 1)}
                results["rows"].append(row)
                write_json(out, results)
                print(json.dumps(row), flush=True)
    plot(results["rows"], out.with_suffix(".png"))


if __name__ == "__main__":
    main()
