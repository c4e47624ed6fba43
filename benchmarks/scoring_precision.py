"""Held-out quality of the shipped model scored in fp32 and in bfloat16 (``precision="auto"`` on CPUs with native
bfloat16), from the feature cache: is bfloat16 scoring as good a ranker?

For every head of the model with held-out programs in the dataset: TenSet top-1 / top-5 and pairwise accuracy
(the numbers ``tlp eval`` reports), the largest |score difference| against ``TLPNet.forward`` and the smallest
and median per-task Kendall tau of the scores against it. The features come from the feature cache
(``tlp.features.cache``; built on first use, which needs TVM and a few minutes).

    .venv/bin/python benchmarks/scoring_precision.py --out benchmarks/results/scoring_precision.json
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import numpy as np
import torch

from tlp.dataset.store import Dataset
from tlp.evaluation import score_models
from tlp.features.cache import load_or_featurize
from tlp.features.featurizer import FeatureConfig
from tlp.features.tensors import LabeledPrograms
from tlp.model.estimator import TLPModel
from tlp.model.inference import ChunkedScorer, native_bf16
from tlp.models import model_path
from tlp.platform import host_fingerprint
from tlp.workloads import held_out_networks


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a: (concordant - discordant pairs) / all pairs."""
    if len(a) < 2:
        return float("nan")
    concordance = np.sign(a[:, None] - a[None, :]) * np.sign(b[:, None] - b[None, :])
    return float(concordance.sum() / (len(a) * (len(a) - 1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tlp-cpu")
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--out", default="benchmarks/results/scoring_precision.json")
    args = parser.parse_args()

    model = TLPModel.load(model_path(args.model))
    held_out = list(model.meta.get("held_out_networks") or held_out_networks())
    programs = load_or_featurize(Dataset(args.dataset), list(model.platforms), held_out,
                                 model.featurizer.config if isinstance(model.featurizer.config, FeatureConfig)
                                 else FeatureConfig()).programs
    if programs.featurizer.to_json() != model.featurizer.to_json():
        raise SystemExit("the cache's vocabularies differ from the model's: not this model's features")
    _, test = programs.split_by_network(set(held_out))
    rows = {}
    for platform_id in test.platform_ids:
        if platform_id not in model.platforms:
            continue
        one = test.platform(platform_id)
        labeled = LabeledPrograms([None] * len(one.task_keys), one.latencies[:, 0], one.task_keys, {}, one.catalogue)
        head, groups = model.head_index(platform_id), labeled.group_ids()
        with torch.inference_mode():
            reference = ChunkedScorer(model.net.eval()).scores(torch.from_numpy(one.features), (head,))[:, 0]
        row: dict = {"programs": len(one.task_keys)}
        for precision in ("fp32", "bf16"):
            scores = model.predict_features(one.features, head, precision=precision)
            result = score_models(labeled, scores, held_out)
            taus = [kendall_tau(scores[groups == g], reference[groups == g]) for g in np.unique(groups)]
            row[precision] = {"top1": result["top1"], "top5": result["top5"], "pairwise": result["pairwise"],
                              "max_abs_difference_vs_forward": float(np.abs(scores - reference).max()),
                              "min_task_kendall_tau": float(np.nanmin(taus)),
                              "median_task_kendall_tau": float(np.nanmedian(taus))}
        rows[platform_id] = row
        print(platform_id, {p: {k: round(v, 4) for k, v in row[p].items()} for p in ("fp32", "bf16")}, flush=True)
    summary = {"date": datetime.date.today().isoformat(), "machine": host_fingerprint(), "torch": torch.__version__,
               "native_bf16": native_bf16(), "model": args.model, "held_out_networks": held_out, "heads": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
