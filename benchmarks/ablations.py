"""Ablations of TLP on the shipped dataset: architecture, loss, crop size — same split, same seed, one run.

Every variant trains on the training networks' tasks (held-out networks excluded, as ``tlp train``) and is scored
on the held-out networks with TenSet's top-1/top-5 (``tlp eval``'s metric). Results are written as JSON and a
markdown table.

    .venv/bin/python benchmarks/ablations.py --epochs 30 --out benchmarks/results/ablations.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

from tlp.dataset.store import Dataset
from tlp.evaluation import score_models
from tlp.features.featurizer import FeatureConfig
from tlp.features.tensors import load_programs
from tlp.model.estimator import TLPModel, TrainConfig
from tlp.model.network import ModelConfig
from tlp.platform import host_fingerprint
from tlp.workloads import held_out_networks

VARIANTS = {
    "attention + lambdarank (TLP)": dict(arch="attention", loss="lambdarank", seq_len=80),
    "lstm + lambdarank": dict(arch="lstm", loss="lambdarank", seq_len=80),
    "transformer + lambdarank": dict(arch="transformer", loss="lambdarank", seq_len=80),
    "attention + mse": dict(arch="attention", loss="mse", seq_len=80),
    "attention + lambdarank, crop 25": dict(arch="attention", loss="lambdarank", seq_len=25),
    "attention + lambdarank, crop 40": dict(arch="attention", loss="lambdarank", seq_len=40),
    "attention + lambdarank, hidden 64": dict(arch="attention", loss="lambdarank", seq_len=80, hidden=64),
    # Cheaper networks for scoring speed (the network is most of TLP's time per candidate):
    "attention + lambdarank, crop 25, hidden 128": dict(arch="attention", loss="lambdarank", seq_len=25, hidden=128),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--only", help="semicolon-separated variant names (default: all)")
    parser.add_argument("--out", default="benchmarks/results/ablations.json")
    args = parser.parse_args()

    dataset = Dataset(args.dataset)
    platform_id = args.platform or dataset.platform_ids()[0]
    programs = load_programs(dataset, platform_id)
    networks = held_out_networks()
    train, test = programs.split_by_network(set(networks))
    out = Path(args.out)
    rows = json.loads(out.read_text())["rows"] if out.exists() else {}
    chosen = args.only.split(";") if args.only else list(VARIANTS)
    for name in chosen:
        spec = VARIANTS[name]
        started = time.monotonic()
        model = TLPModel(FeatureConfig(seq_len=spec["seq_len"]), ModelConfig(arch=spec["arch"], hidden=spec.get("hidden", 256)),
                         TrainConfig(epochs=args.epochs, loss=spec["loss"], seed=args.seed, device=args.device))
        history = model.fit(train, progress=False)
        scores = model.predict(test.traces, [test.extents.get(k) for k in test.task_keys])
        result = score_models(test, scores, networks)
        rows[name] = {**spec, "top1": result["top1"], "top5": result["top5"], "pairwise": result["pairwise"],
                      "per_network": result["per_network"], "best_epoch": history.best_epoch,
                      "train_seconds": round(time.monotonic() - started, 1)}
        print(f"{name}: top1 {result['top1']:.3f} top5 {result['top5']:.3f} pairwise {result['pairwise']:.3f} "
              f"({rows[name]['train_seconds']:.0f} s)", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "machine": host_fingerprint(),
                                   "platform": platform_id, "epochs": args.epochs, "seed": args.seed,
                                   "train_programs": len(train.traces), "test_programs": len(test.traces),
                                   "rows": rows}, indent=1))
    print("\n| variant | top-1 | top-5 | pairwise |\n|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['top1']:.3f} | {row['top5']:.3f} | {row['pairwise']:.3f} |")


if __name__ == "__main__":
    main()
