"""What one online fine-tuning update costs as a search's measurements pile up: learning from every measurement so
far (``OnlineTuning(max_examples=None)``, the behaviour before 2026-11-30) against a bounded sample of them
(``learning_sample``, the default limit and others), with the model and settings a search uses; and, with
``--backbones``, updates where only the first networks learn whole and the rest their heads
(``OnlineTuning.backbones``).

The measured programs of tuning work directories are pooled per task; for each count of measurements a random draw of
that many stands for "a search after that many trials", and one update is timed on a fresh copy of the model: the
sample, the examples, and ``fine_tune`` with the search's steps, rate and time limit (``OnlineTuning.max_seconds``).
Limits alternate within each repeat; reported: the median seconds and steps per update.

    .venv/bin/python benchmarks/online_updates/online_update_cost.py \\
        runs/s52/mnv2/mobilenet_v2/tlp-online-lr3-warm-headroom-diverse-f2-b8-seed1 \\
        --out benchmarks/online_updates/results/online_update_cost_rocketlake.json
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tlp.evaluation.search_metrics import find_work_dirs, pool_runs, read_search_run
from tlp.model.estimator import TLPModel
from tlp.models import model_path
from tlp.platform import Platform
from tlp.search.cost_model import OnlineTuning, learning_sample, ranking_examples

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="tuning work directories or folders holding them")
    parser.add_argument("--model", default="tlp-cpu", help="checkpoint or packaged name")
    parser.add_argument("--counts", default="128,256,512,1000", help="measurements so far (comma-separated)")
    parser.add_argument("--limits", default=f"all,{OnlineTuning().max_examples},128",
                        help="measurements one update learns from; 'all' = every one")
    parser.add_argument("--backbones", default="all",
                        help="networks learning whole per update (OnlineTuning.backbones; 'all' = every one), "
                             "comma-separated: each is timed with each limit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    online = OnlineTuning(steps=5, lr=1e-3)  # the search benchmarks' online setting (search_efficiency.py)
    limits = [None if limit == "all" else int(limit) for limit in args.limits.split(",")]
    backbones = [None if count == "all" else int(count) for count in args.backbones.split(",")]
    # (name, limit, backbones); named by the limit alone when every network learns whole (the earlier results' names)
    variants = [(str(limit or "all") + ("" if count is None else f", {count} whole"), limit, count)
                for count in backbones for limit in limits]

    search = pool_runs([read_search_run(work_dir) for work_dir in find_work_dirs(args.runs)])
    programs = search.labeled()
    model = TLPModel.load(model_path(args.model))
    head = model.head_index(Platform.host().id)
    features = model.featurizer.transform(programs.traces, [programs.extents[k] for k in programs.task_keys])
    rng = np.random.default_rng(0)
    results = []
    for count in [int(c) for c in args.counts.split(",")]:
        drawn = rng.choice(len(search.latencies), min(count, len(search.latencies)), replace=False)
        tasks = [(features[members], search.latencies[members])
                 for group in np.unique(search.groups[drawn]) for members in [drawn[search.groups[drawn] == group]]]
        timings: dict[str, list[tuple[float, int]]] = {name: [] for name, _, _ in variants}
        for repeat in range(args.repeats):
            for name, limit, count in (variants if repeat % 2 == 0 else variants[::-1]):  # alternate: noise spreads
                learner = copy.deepcopy(model)
                torch.manual_seed(repeat)
                started = time.perf_counter()
                examples = ranking_examples(learning_sample(tasks, repeat % len(tasks), limit,
                                                            np.random.default_rng(repeat)))
                assert examples is not None
                steps = learner.fine_tune(*examples, online.steps, online.lr, online.max_seconds, head, count)
                timings[name].append((time.perf_counter() - started, steps))
        row = {"measurements": int(len(drawn)), "tasks": len(tasks),
               "per_limit": {name: {"median_s": float(np.median([s for s, _ in runs])),
                                    "steps": [n for _, n in runs], "seconds": [s for s, _ in runs]}
                             for name, runs in timings.items()}}
        results.append(row)
        print(f"{row['measurements']:5d} measurements, {row['tasks']} tasks: " + "  ".join(
            f"{name}: {value['median_s']:.2f} s ({value['steps'][0]} steps)" for name, value in row["per_limit"].items()),
            flush=True)
    write_json(args.out, {
        **stamp(), "model": args.model,
        "runs": [str(path) for path in find_work_dirs(args.runs)], "online": vars(online),
        "torch_threads": torch.get_num_threads(), "results": results})


if __name__ == "__main__":
    main()
