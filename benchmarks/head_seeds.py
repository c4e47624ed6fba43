"""How much a platform head's score depends on its training seed (issue 10: is a shipped head a good draw?).

Retrains one platform's head of a model on the programs the dataset holds for it (``tlp adapt --freeze-backbone
--fraction 0 --held-out-fraction 0``), once per seed, each time starting from another head's weights (the way the
shipped head was made when the platform had no head yet), and prints one JSON row per seed: held-out TenSet top-1
and top-5 of the retrained head, per network.

    .venv/bin/python benchmarks/head_seeds.py --platform llvm-znver3-2c-1ceb2015 --start-from llvm-znver4-2c-2d80d0a8 \
        --seeds 1,2,3 --out benchmarks/results/selfplay_zen3/head_seeds.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from tlp.dataset import Dataset
from tlp.model.adapt import adapt
from tlp.model.estimator import TLPModel
from tlp.models import model_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--model", default="tlp-cpu")
    parser.add_argument("--platform", required=True, help="the head to retrain (a platform the dataset holds)")
    parser.add_argument("--start-from", required=True, help="the head whose weights each training starts from")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", required=True, help="JSON lines, one per seed (appended)")
    args = parser.parse_args()
    dataset = Dataset(Path(args.dataset))
    platform = dataset.store(args.platform).platform
    for seed in (int(s) for s in args.seeds.split(",")):
        model = TLPModel.load(model_path(args.model))
        model.copy_heads({args.platform: args.start_from})
        model.train_config = dataclasses.replace(model.train_config, seed=seed)
        with tempfile.TemporaryDirectory() as scratch:
            report = adapt(dataset, model, platform, Path(scratch) / "head.pt", train_fraction=0.0,
                           held_out_fraction=0.0, freeze_backbone=True, progress=False, head_soup=1)
        row = {"seed": seed, "start_from": args.start_from,
               **{k: v for k, v in report.to_json().items() if k not in ("per_network", "out")},
               "per_network_top1": {n: v["top1"] for n, v in report.per_network["own_head"].items()}}
        with open(args.out, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
