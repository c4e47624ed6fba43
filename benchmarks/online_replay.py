"""Online fine-tuning replayed on measured programs: which way of learning during a search picks better programs
(issue 11, part 5), in minutes per setting instead of a 16-minute search per seed.

The programs of tuning runs (``tlp tune`` / ``search_efficiency.py`` work directories) of one network are pooled
per task (``tlp.evaluation.search_metrics.pool_runs``). A replay plays a search whose candidates are those
programs: a first round of ``--first`` programs per task, then batches of ``--batch`` task after task; each batch
is the model's top-scored programs of the task not measured yet; "measuring" reads their stored latency; after
each batch the model learns as :class:`~tlp.search.cost_model.TLPCostModel` does (``learning_sample`` + ``ranking_examples`` +
``TLPModel.fine_tune``, the same :class:`~tlp.search.cost_model.OnlineTuning` settings). Reported: Σ weight × best
latency over the tasks as a ratio to the pool's best, at given trial counts, median over seeds (each seed keeps a
random ``--keep`` fraction of every task's programs).

What it cannot show: a real search generates its candidates from the model's own preferences (and so finds the
programs the model overrates); here every setting picks among the same fixed programs, found by other searches.

    .venv/bin/python benchmarks/online_replay.py runs/s32/realistic-zen3 \\
        --out benchmarks/results/online_replay_zen3_bert_tiny.json
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tlp.evaluation.search_metrics import find_work_dirs, pool_runs, read_search_run
from tlp.model.estimator import TLPModel
from tlp.models import model_path
from tlp.platform import Platform
from tlp.search.cost_model import OnlineTuning, learning_sample, ranking_examples

# name -> (online settings, one copy of the network per task instead of one shared by all tasks)
# (Every update learnt from all measurements before 2026-11-30: the settings replayed then keep max_examples=None.)
SETTINGS: dict[str, tuple[OnlineTuning, bool]] = {
    "offline": (OnlineTuning(steps=0), False),
    # tlp tune --online-steps 5 (the benchmarks' setting)
    "shared-lr1e-4": (OnlineTuning(steps=5, lr=1e-4, max_examples=None), False),
    "shared-lr3e-4": (OnlineTuning(steps=5, lr=3e-4, max_examples=None), False),
    "shared-lr1e-3": (OnlineTuning(steps=5, lr=1e-3, max_examples=None), False),
    "shared-lr1e-3-warm": (OnlineTuning(steps=5, lr=1e-3, min_task_measurements=3, max_examples=None), False),
    "per-task-lr1e-3": (OnlineTuning(steps=5, lr=1e-3, max_examples=None), True),
    # the same, each update learning from a bounded sample (TLPCostModel's default since 2026-11-30)
    "shared-lr1e-3-warm-sampled": (OnlineTuning(steps=5, lr=1e-3, min_task_measurements=3), False),
    # the same, only the first network (a cascade's first stage) learning whole, the others their head only
    "shared-lr1e-3-warm-sampled-member-heads": (OnlineTuning(steps=5, lr=1e-3, min_task_measurements=3, backbones=1),
                                                False),
    # the same, every network learning only its head
    "shared-lr1e-3-warm-sampled-heads": (OnlineTuning(steps=5, lr=1e-3, min_task_measurements=3, backbones=0), False),
}


def replay(model: TLPModel, head: int, features: np.ndarray, latencies: np.ndarray, pools: dict[int, np.ndarray],
           weights: dict[int, float], online: OnlineTuning, per_task: bool, first: int, batch: int,
           budget: int) -> list[tuple[int, float]]:
    """One replayed search: (trials, Σ weight × best latency / the pool's) after each batch once every task has
    one measurement."""
    models: dict[int | None, TLPModel] = {}
    sampler = np.random.default_rng(0)  # as TLPCostModel's
    measured: dict[int, list[int]] = {task: [] for task in pools}
    pool_best = sum(weights[task] * latencies[pool].min() for task, pool in pools.items())
    curve: list[tuple[int, float]] = []
    trials, size = 0, first
    while trials < budget:
        picked_any = False
        for task, pool in pools.items():
            left = np.setdiff1d(pool, measured[task])
            if len(left) == 0:
                continue
            key = task if per_task else None
            if key not in models:
                models[key] = copy.deepcopy(model)  # the learning copy; the loaded model stays as shipped
            learner = models[key]
            scores = learner.predict_features(features[left], head, precision="fp32")
            measured[task].extend(left[np.argsort(-scores, kind="stable")[:size]].tolist())
            trials += min(size, len(left))
            picked_any = True
            if online.steps and len(measured[task]) >= online.min_task_measurements:
                learnt = [task] if per_task else list(pools)
                examples = ranking_examples(learning_sample(
                    [(features[measured[t]], latencies[measured[t]]) for t in learnt], learnt.index(task),
                    online.max_examples, sampler))
                if examples is not None:
                    learner.fine_tune(*examples, online.steps, online.lr, None, head, online.backbones)
            if all(measured.values()):
                best = sum(weights[t] * latencies[measured[t]].min() for t in pools)
                curve.append((trials, float(best / pool_best)))
        if not picked_any:
            break
        size = batch
    return curve


def at(curve: list[tuple[int, float]], trials: int) -> float:
    """The curve's value after at most ``trials`` trials (NaN before its first point)."""
    reached = [value for count, value in curve if count <= trials]
    return reached[-1] if reached else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="tuning work directories or folders holding them (one network)")
    parser.add_argument("--model", default="tlp-cpu", help="checkpoint or packaged name")
    parser.add_argument("--platform", default=None, help="the head to score with (default: this machine's platform)")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated among {', '.join(SETTINGS)}")
    parser.add_argument("--min-programs", type=int, default=100, help="tasks with at least this many programs")
    parser.add_argument("--first", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--keep", type=float, default=0.6)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--marks", default="25,50,75,100,150,200")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    for name in args.settings.split(","):
        if name not in SETTINGS:
            parser.error(f"unknown setting {name!r}; choose among {', '.join(SETTINGS)}")

    search = pool_runs([read_search_run(work_dir) for work_dir in find_work_dirs(args.runs)])
    programs = search.labeled()
    model = TLPModel.load(model_path(args.model))
    platform_id = args.platform or Platform.host().id
    head = model.head_index(platform_id)
    features = model.featurizer.transform(programs.traces, [programs.extents[k] for k in programs.task_keys])
    tasks = [g for g in range(len(search.group_key)) if (search.groups == g).sum() >= args.min_programs]
    weights = {g: search.weights[g] for g in tasks}
    marks = [int(m) for m in args.marks.split(",")]
    results: dict[str, Any] = {}
    for name in args.settings.split(","):
        online, per_task = SETTINGS[name]
        curves = []
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            pools = {g: members[rng.random(len(members)) < args.keep]
                     for g in tasks for members in [np.flatnonzero(search.groups == g)]}
            torch.manual_seed(seed)
            curves.append(replay(model, head, features, search.latencies, pools, weights, online, per_task,
                                 args.first, args.batch, args.budget))
        medians = {mark: float(np.median([at(curve, mark) for curve in curves])) for mark in marks}
        results[name] = {"online": vars(online), "per_task": per_task, "median_ratio_at": medians, "curves": curves}
        print(f"{name:20s} " + " ".join(f"{mark}:{value:.3f}" for mark, value in medians.items()), flush=True)
    args.out.write_text(json.dumps({
        "runs": [str(path) for path in find_work_dirs(args.runs)], "model": args.model, "platform": platform_id,
        "tasks": {search.task_names.get(search.group_key[g], search.group_key[g]): {
            "weight": weights[g], "programs": int((search.groups == g).sum())} for g in tasks},
        "first": args.first, "batch": args.batch, "keep": args.keep, "seeds": args.seeds, "results": results},
        indent=1))


if __name__ == "__main__":
    main()
