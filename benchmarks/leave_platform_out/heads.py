"""Which head ranks a platform the model has no head for: each head of the shipped model, the one `tlp tune` takes
(the nearest, :func:`tlp.platform.nearest_platform`) and means of several heads (rank percentiles, raw scores,
z-scores; all heads or those of the platform's vector ISA), scored on the held-out platform's stored programs
(top-1 / top-5 per network, as `tlp eval`). Nothing is measured.

    .venv/bin/python benchmarks/leave_platform_out/heads.py --platform llvm-haswell-2c-on-znver4-dfe2f5b7 \
        --dataset datasets/tlp-cpu-held-out --networks bert_tiny,mobilenet_v2 \
        --out benchmarks/leave_platform_out/results/heads_haswell-on-znver4.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from tlp.dataset.store import DEFAULT_DATASET, Dataset
from tlp.evaluation import heads_scores, rank_percentiles, score_models
from tlp.features.tensors import group_rows, load_programs
from tlp.model.estimator import TLPModel
from tlp.models import model_path
from tlp.platform import Platform, isa_family, nearest_platform

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


def _z(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each task's scores as z-scores (a head's scale set aside)."""
    out = np.empty_like(scores)
    for _, rows in group_rows(groups):
        out[rows] = (scores[rows] - scores[rows].mean()) / (scores[rows].std() or 1.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", required=True, help="a platform of the dataset the model has no head for")
    parser.add_argument("--model", default="tlp-cpu")
    parser.add_argument("--dataset", default=DEFAULT_DATASET)
    parser.add_argument("--networks", help="comma-separated networks to score (default: every network of the "
                                           "platform's tasks, variants sharing a task included)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    model = TLPModel.load(model_path(args.model))
    if args.platform in model.platforms:
        raise SystemExit(f"--platform {args.platform}: the model has its own head for it; give a held-out platform")
    dataset = Dataset(args.dataset)
    programs = load_programs(dataset, args.platform)
    networks = args.networks.split(",") if args.networks else sorted(
        {n for key in set(programs.task_keys) for n in programs.networks_of(key)})
    wanted = Platform.from_json(json.loads((dataset.path / args.platform / "platform.json").read_text()))
    info = model.meta.get("platform_info") or {}
    nearest, _ = nearest_platform(wanted, {p: info.get(p, {}) for p in model.platforms})  # as TLPCostModel chooses
    scores = heads_scores(model, programs, list(range(len(model.platforms))))
    groups = programs.group_ids()
    results = {head: score_models(programs, row, networks) for head, row in zip(model.platforms, scores)}
    family = [row for head, row in zip(model.platforms, scores)
              if isa_family(info.get(head, {}).get("target", {})) == isa_family(wanted.target)]
    means = {"mean of heads": [rank_percentiles(row, groups) for row in scores],  # per-task rank percentiles
             "mean of heads (raw scores)": scores,
             "mean of heads (per-task z-scores)": [_z(row, groups) for row in scores],
             "mean of the same-ISA heads": [rank_percentiles(row, groups) for row in family]}
    for name, rows in means.items():
        results[name] = score_models(programs, np.mean(rows, 0), networks)
    write_json(args.out, {**stamp(), "platform": args.platform, "nearest_head": nearest, "networks": networks,
                          "programs": len(programs.traces), "tasks": int(len(np.unique(groups))), "heads": results})
    for head, result in sorted(results.items(), key=lambda item: -item[1]["top1"]):
        per = ", ".join(f"{n} {r['top1']:.3f}" for n, r in result["per_network"].items())
        print(f"{head:42s} top-1 {result['top1']:.3f} top-5 {result['top5']:.3f} ({per})"
              + ("  <- tlp tune's (nearest)" if head == nearest else ""))


if __name__ == "__main__":
    main()
