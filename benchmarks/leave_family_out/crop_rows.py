"""Which of a task's decisions the model reads: per task of the given networks on one platform, the head's pairwise
accuracy on the task's programs, the rows its traces take as the model lays them out, and the share of its
sampled decisions (tile sizes, categorical picks) that fall past the cascade's first-stage crop (it ranks every
candidate) and past the second stage's (it re-orders the top), and each stage's own pairwise accuracy. Nothing is
measured.

    .venv/bin/python benchmarks/leave_family_out/crop_rows.py --dataset datasets/tlp-cpu-held-out \\
        --platform llvm-emeraldrapids-2c-ecb6fd07 --networks se_mbconv,conv_transpose \\
        --out benchmarks/leave_family_out/results/crop_rows_families_emeraldrapids.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tlp.dataset.store import DEFAULT_DATASET, Dataset
from tlp.evaluation import head_scores, pairwise_accuracy
from tlp.features.featurizer import BOOKKEEPING_KINDS
from tlp.features.tensors import load_programs
from tlp.model.estimator import TLPModel
from tlp.models import model_path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


def decision_rows(trace: Any, compact: bool) -> tuple[int, list[int]]:
    """(rows the trace takes, the row of each instruction that carries a decision), laid out as the featurizer
    does: the compact form skips bookkeeping instructions."""
    insts, decisions = trace
    decided = {int(index) for index, _ in decisions}
    rows, of_decisions = 0, []
    for position, (kind, *_rest) in enumerate(insts):
        if compact and kind in BOOKKEEPING_KINDS:
            continue
        if position in decided:
            of_decisions.append(rows)
        rows += 1
    return rows, of_decisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tlp-cpu")
    parser.add_argument("--dataset", default=DEFAULT_DATASET)
    parser.add_argument("--platform", required=True)
    parser.add_argument("--networks", required=True, help="comma-separated networks of the dataset")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    model = TLPModel.load(model_path(args.model))
    networks = args.networks.split(",")
    _, test = load_programs(Dataset(args.dataset), args.platform, set(networks)).split_by_network(set(networks))
    scores = head_scores(model, test, args.platform)
    # a cascade's stages alone too: does the stage that reads past the first one's crop rank these tasks better?
    stages = {name: head_scores(getattr(model, name), test, args.platform)
              for name in ("first", "second") if hasattr(model, name)}
    groups = test.group_ids()
    compact = model.featurizer.config.compact
    first = getattr(model, "first", model).featurizer.config.seq_len
    second = model.featurizer.config.seq_len
    tasks = []
    for group in np.unique(groups):
        index = np.flatnonzero(groups == group)
        key = test.task_keys[index[0]]
        entry = test.catalogue.get(key, {})
        laid_out = [decision_rows(test.traces[i], compact) for i in index]
        decisions = [row for _, rows in laid_out for row in rows]
        tasks.append({
            "task": entry.get("name", key), "networks": sorted(entry.get("networks", {})), "programs": len(index),
            "pairwise": pairwise_accuracy(scores[index], test.latencies[index], np.zeros(len(index), dtype=int)),
            **{f"pairwise_{name}_stage": pairwise_accuracy(stage[index], test.latencies[index],
                                                           np.zeros(len(index), dtype=int))
               for name, stage in stages.items()},
            "rows_median": statistics.median(rows for rows, _ in laid_out),
            "decisions_past_first_crop": sum(row >= first for row in decisions) / max(len(decisions), 1),
            "decisions_past_second_crop": sum(row >= second for row in decisions) / max(len(decisions), 1),
        })
    write_json(args.out, {**stamp(), "model": args.model, "platform": args.platform, "networks": networks,
                          "first_crop_rows": first, "second_crop_rows": second, "compact": compact, "tasks": tasks})
    for t in sorted(tasks, key=lambda t: t["pairwise"]):
        print(f"{t['pairwise']:.3f} pairwise  {t['rows_median']:>5} rows  {t['decisions_past_first_crop']:.2f} / "
              f"{t['decisions_past_second_crop']:.2f} of decisions past the crops  {t['programs']:>5}  {t['task']}")


if __name__ == "__main__":
    main()
