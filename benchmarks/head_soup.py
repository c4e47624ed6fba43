"""Several heads of one platform, one backbone: does averaging them remove the head-training lottery? (issue 10)

A frozen-backbone head retrained with another seed moves the platform's held-out TenSet top-1 by ±0.1
(``head_seeds.py``). Here one process reads the platform's programs once, trains the head from the same start with
each seed, and scores on the held-out networks:

- each head alone;
- the **score ensemble**: the mean over heads of each program's rank percentile within its task (scoring cost grows
  with the number of heads, though a head is small next to the backbone);
- the **head soup**: one head whose weights are the mean of the seeds' heads (all start from the same weights and
  see the same frozen inputs, so their average is a head of its own; scoring cost of one head).

    .venv/bin/python benchmarks/head_soup.py --platform llvm-znver3-2c-1ceb2015 --start-from llvm-znver4-2c-2d80d0a8 \
        --seeds 0,1,2,3,4,5 --out benchmarks/results/head_soup_zen3.json --keep runs/s35/heads
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tlp.dataset import Dataset
from tlp.evaluation import head_scores, rank_percentiles, score_models
from tlp.features.tensors import load_programs
from tlp.model.estimator import TLPModel
from tlp.models import model_path
from tlp.workloads import held_out_networks


def summary(result: dict[str, Any]) -> dict[str, Any]:
    return {"top1": round(result["top1"], 4), "top5": round(result["top5"], 4),
            "per_network_top1": {n: round(v["top1"], 3) for n, v in result["per_network"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--model", default="tlp-cpu")
    parser.add_argument("--platform", required=True, help="the head to retrain (a platform the dataset holds)")
    parser.add_argument("--start-from", required=True, help="the head whose weights each training starts from")
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--out", required=True, help="JSON result")
    parser.add_argument("--keep", help="folder for each seed's head weights and the soup's (head_<seed>.pt)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    dataset = Dataset(Path(args.dataset))
    networks = list(held_out_networks())
    started = time.monotonic()
    programs = load_programs(dataset, args.platform)
    train, test = programs.split_by_network(set(networks))
    networks = sorted({n for k in set(test.task_keys) for n in test.networks_of(k)} & set(networks))
    read_seconds = time.monotonic() - started

    shipped = TLPModel.load(model_path(args.model))
    head = shipped.head_index(args.platform)
    rows: dict[str, Any] = {"shipped": summary(score_models(test, head_scores(shipped, test, args.platform),
                                                              networks))}
    print(json.dumps({"shipped": rows["shipped"]}), flush=True)
    states, percentiles, per_seed = [], [], []
    for seed in seeds:
        model = TLPModel.load(model_path(args.model))
        model.copy_heads({args.platform: args.start_from})
        model.train_config = dataclasses.replace(model.train_config, seed=seed)
        t0 = time.monotonic()
        model.fit_head(train, freeze_backbone=True, progress=False)
        seconds = time.monotonic() - t0
        scores = head_scores(model, test, args.platform)
        row = {"seed": seed, "train_seconds": round(seconds, 1), **summary(score_models(test, scores, networks))}
        per_seed.append(row)
        print(json.dumps(row), flush=True)
        states.append({k: v.detach().clone() for k, v in model.net.heads[head].state_dict().items()})
        percentiles.append(rank_percentiles(scores, test.group_ids()))
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            torch.save(states[-1], Path(args.keep) / f"head_{seed}.pt")
    rows["seeds"] = per_seed
    rows["ensemble"] = summary(score_models(test, np.mean(percentiles, axis=0), networks))
    soup = TLPModel.load(model_path(args.model))
    soup.net.heads[head].load_state_dict({k: torch.stack([s[k] for s in states]).mean(dim=0) for k in states[0]})
    rows["soup"] = summary(score_models(test, head_scores(soup, test, args.platform), networks))
    if args.keep:
        torch.save(soup.net.heads[head].state_dict(), Path(args.keep) / "head_soup.pt")
    top1 = [r["top1"] for r in per_seed]
    result = {"platform": args.platform, "start_from": args.start_from, "model": args.model, "seeds": seeds,
              "train_programs": len(train.traces), "test_programs": len(test.traces), "networks": networks,
              "read_seconds": round(read_seconds, 1), "median_seed_top1": float(np.median(top1)),
              "min_seed_top1": min(top1), "max_seed_top1": max(top1), **rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("median_seed_top1", "min_seed_top1", "max_seed_top1")}
                     | {"ensemble": rows["ensemble"]["top1"], "soup": rows["soup"]["top1"],
                        "shipped": rows["shipped"]["top1"]}), flush=True)


if __name__ == "__main__":
    main()
