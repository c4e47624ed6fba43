"""Several heads of one platform, one backbone: does averaging them remove the head-training lottery? (issue 10)

A frozen-backbone head retrained with another seed moves the platform's held-out TenSet top-1 by ±0.1
(``benchmarks/mtl/README.md``). Here one process reads the platform's programs once, trains the head from the same start with
each seed, and scores on the held-out networks:

- each head alone;
- the **score ensemble**: the mean over heads of each program's rank percentile within its task (scoring cost grows
  with the number of heads, though a head is small next to the backbone);
- the **head soup**: one head whose weights are the mean of the seeds' heads (all start from the same weights and
  see the same frozen inputs, so their average is a head of its own; scoring cost of one head). What
  ``TLPModel.fit_head(soup=K)`` and ``tlp adapt --head-soup K`` make.

Programs come from the dataset (TenSet top-1 on the platform's held-out networks), or with ``--bundle`` from a
``training_recipe/recipe_sweep.py`` bundle (its test split and search set: TenSet and all-round top-1, as the sweep scores them):

    B=benchmarks/mtl
    .venv/bin/python $B/head_soup.py --platform llvm-znver3-2c-1ceb2015 --start-from llvm-znver4-2c-2d80d0a8 \
        --seeds 0,1,2,3,4,5 --out $B/results/head_soup_zen3.json --keep runs/s35/heads
    .venv/bin/python $B/head_soup.py --platform llvm-znver3-2c-1ceb2015 --start-from llvm-znver4-2c-2d80d0a8 \
        --seeds 0,1,2,3 --from-kept runs/s35/heads --out $B/results/head_soup_zen3_seeds0123.json
    .venv/bin/python $B/head_soup.py --bundle runs/sweepv --model seed10.pt --platform llvm-znver4-2c-2d80d0a8 \
        --start-from llvm-znver4-2c-2d80d0a8 --seeds 0,1,2,3 --out head_soup_seed10.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tlp.evaluation import head_scores, rank_percentiles, score_models
from tlp.model.estimator import TLPModel, average_states
from tlp.models import model_path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import add_study, write_json  # pylint: disable=wrong-import-position

add_study("training_recipe")  # recipe_sweep.py: its bundles and metrics


class DatasetPrograms:
    """The platform's stored programs: training split, and TenSet top-1 on the held-out networks."""

    def __init__(self, dataset: str, platform: str) -> None:
        from tlp.dataset import Dataset  # pylint: disable=import-outside-toplevel
        from tlp.features.tensors import load_programs  # pylint: disable=import-outside-toplevel
        from tlp.workloads import held_out_networks  # pylint: disable=import-outside-toplevel

        networks = set(held_out_networks())
        self.platform = platform
        self.train, self.test = load_programs(Dataset(Path(dataset)), platform).split_by_network(networks)
        self.networks = sorted({n for k in set(self.test.task_keys) for n in self.test.networks_of(k)} & networks)
        self.groups = {"test": self.test.group_ids()}

    def scores(self, model: TLPModel) -> dict[str, np.ndarray]:
        return {"test": head_scores(model, self.test, self.platform)}

    def metrics(self, scores: dict[str, np.ndarray]) -> dict[str, Any]:
        result = score_models(self.test, scores["test"], self.networks)
        return {"top1": round(result["top1"], 4), "top5": round(result["top5"], 4),
                "per_network_top1": {n: round(v["top1"], 3) for n, v in result["per_network"].items()}}


class BundlePrograms:
    """A recipe_sweep bundle: its training records of the platform, test split and search set, scored as the sweep
    scores them (TenSet and all-round top-1)."""

    def __init__(self, bundle: str, dataset: str) -> None:
        # pylint: disable=import-outside-toplevel,import-error
        from recipe_sweep import _bundle_search_set, test_split
        from tlp.evaluation import search_metrics
        from tlp.features.cache import read_cache

        path = Path(bundle)
        self.meta = json.loads((path / "bundle.json").read_text())
        self.platform = self.meta["platform"]
        self.networks = self.meta["held_out_networks"]
        programs, _ = read_cache(path / "programs")
        self.train, _ = programs.platform(self.platform).split_by_network(set(self.networks))
        test = test_split(programs, self.meta)
        self.test = dataclasses.replace(test, latencies=test.latencies[:, 0])
        self.search = _bundle_search_set(path, dataset, self.meta)
        self.search_features = np.load(path / "search.npz")["features"]
        self.populations = search_metrics.pick_populations(self.search)
        self.groups = {"test": self.test.group_ids(), "search": self.search.groups}

    def scores(self, model: TLPModel) -> dict[str, np.ndarray]:
        head = model.head_index(self.platform)
        return {"test": model.predict_features(self.test.features, head, precision="fp32"),
                "search": model.predict_features(self.search_features, head, precision="fp32")}

    def metrics(self, scores: dict[str, np.ndarray]) -> dict[str, Any]:
        from recipe_sweep import _metrics  # pylint: disable=import-outside-toplevel,import-error

        result = _metrics(self.test, scores["test"], self.search, scores["search"], self.populations, self.networks)
        return {"top1": round(result["top1"], 4), "top5": round(result["top5"], 4),
                "all_top1": round(result["all_top1"], 4), "late_top1": round(result["late_top1"], 4),
                "per_network_top1": {n: round(v, 3) for n, v in result["per_network_top1"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--bundle", help="a recipe_sweep bundle instead of the dataset (its platform's head)")
    parser.add_argument("--model", default="tlp-cpu")
    parser.add_argument("--platform", required=True, help="the head to retrain (a platform the data holds)")
    parser.add_argument("--start-from", required=True, help="the head whose weights each training starts from")
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--out", required=True, help="JSON result")
    parser.add_argument("--keep", help="folder for each seed's head weights and the soup's (head_<seed>.pt)")
    parser.add_argument("--from-kept", metavar="DIR", help="train nothing: the seeds' heads kept by an earlier --keep "
                        "(a soup of a subset of them)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.monotonic()
    data = BundlePrograms(args.bundle, args.dataset) if args.bundle else DatasetPrograms(args.dataset, args.platform)
    if data.platform != args.platform:
        raise SystemExit(f"--bundle {args.bundle} scores platform {data.platform}, not {args.platform}")
    read_seconds = time.monotonic() - started

    shipped = TLPModel.load(model_path(args.model))
    head = shipped.head_index(args.platform)
    rows: dict[str, Any] = {"model_as_is": data.metrics(data.scores(shipped))}
    print(json.dumps({"model_as_is": rows["model_as_is"]}), flush=True)
    states, percentiles, per_seed = [], [], []
    for seed in seeds:
        model = TLPModel.load(model_path(args.model))
        t0 = time.monotonic()
        if args.from_kept:
            model.net.heads[head].load_state_dict(torch.load(Path(args.from_kept) / f"head_{seed}.pt"))
        else:
            if args.start_from != args.platform:
                model.copy_heads({args.platform: args.start_from})
            model.train_config = dataclasses.replace(model.train_config, seed=seed)
            model.fit_head(data.train, freeze_backbone=True, progress=False)
        seconds = time.monotonic() - t0
        scores = data.scores(model)
        per_seed.append({"seed": seed, "train_seconds": round(seconds, 1), **data.metrics(scores)})
        print(json.dumps(per_seed[-1]), flush=True)
        states.append({k: v.detach().clone() for k, v in model.net.heads[head].state_dict().items()})
        percentiles.append({name: rank_percentiles(s, data.groups[name]) for name, s in scores.items()})
        if args.keep and not args.from_kept:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            torch.save(states[-1], Path(args.keep) / f"head_{seed}.pt")
    rows["seeds"] = per_seed
    rows["ensemble"] = data.metrics({name: np.mean([p[name] for p in percentiles], axis=0) for name in data.groups})
    soup = TLPModel.load(model_path(args.model))
    soup.net.heads[head].load_state_dict(average_states(states))
    rows["soup"] = data.metrics(data.scores(soup))
    if args.keep:
        torch.save(soup.net.heads[head].state_dict(), Path(args.keep) / "head_soup.pt")
    top1 = [r["top1"] for r in per_seed]
    result = {"platform": args.platform, "start_from": args.start_from, "model": args.model, "seeds": seeds,
              "from_kept": args.from_kept,
              "bundle": args.bundle, "train_programs": len(data.train.task_keys),
              "test_programs": len(data.test.task_keys), "networks": data.networks,
              "read_seconds": round(read_seconds, 1), "median_seed_top1": float(np.median(top1)),
              "min_seed_top1": min(top1), "max_seed_top1": max(top1), **rows}
    write_json(args.out, result)
    print(json.dumps({k: result[k] for k in ("median_seed_top1", "min_seed_top1", "max_seed_top1")}
                     | {"ensemble": rows["ensemble"], "soup": rows["soup"], "model_as_is": rows["model_as_is"]}),
          flush=True)


if __name__ == "__main__":
    main()
