"""Candidates/s of TLP's predict (trace -> features -> network) vs MetaSchedule's PerStoreFeature + XGBoost.

Both go through MetaSchedule's own cost-model interface, ``CostModel.predict(context, candidates)``, on the same
batches of real post-processed candidates (as a search hands them to its cost model). XGBoost is first trained on
the task's measured programs from the dataset (an untrained XGBModel does not extract features). TLP's
trace and feature caches (see ``tlp._tvm.trace_json``) are emptied before every TLP repeat, so each batch starts cold.
Repeats alternate between the two models; we report medians and the ratio of medians.

    .venv/bin/python benchmarks/featurize_throughput.py --repeats 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from pathlib import Path

from tlp._tvm import ms, tvm
from tlp.dataset.sampler import CandidateSampler
from tlp.dataset.store import Dataset
from tlp.platform import Platform, host_fingerprint, host_target
from tlp.search.cost_model import TLPCostModel
from tlp.workloads import load_tasks

DEFAULT_TASKS = ["conv2d_nchw_1x64x56x56_o64_k3_s1_p1_d1", "dense_128x768x768", "softmax_12x128x128"]


def trained_xgb(task, target, dataset: Dataset, platform_id: str) -> tuple:
    context = ms.TuneContext(task.mod, target=tvm.target.Target(target), space_generator="post-order-apply",
                             search_strategy="replay-trace", task_name=task.name, num_threads=2)
    store = dataset.store(platform_id)
    workload = ms.database.Workload(task.mod)
    candidates, results = [], []
    for program in store.latest_programs().values():
        if program.workload_key != task.key or program.latency is None:
            continue
        record = ms.database.TuningRecord.from_json(
            [program.trace_json, program.run_secs, tvm.target.Target(target).export(), program.args_info], workload)
        candidates.append(record.as_measure_candidate())
        results.append(ms.runner.RunnerResult(program.run_secs, None))
    if len(candidates) < 2:
        # Not in the dataset: teach it from a few random candidates with made-up costs; only speed is measured.
        candidates = CandidateSampler(task, target).random(32, seed=7)
        results = [ms.runner.RunnerResult([1e-3 * (1 + i % 5)], None) for i in range(len(candidates))]
    model = ms.cost_model.XGBModel(num_warmup_samples=0, num_tuning_cores=2)
    model.update(context, candidates, results)
    return model, context, len(candidates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS))
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", help="TLP checkpoint (default: the shipped model)")
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--out", default="benchmarks/results/featurize_throughput.json")
    args = parser.parse_args()

    target = host_target()
    platform_id = Platform.host(target).id
    dataset = Dataset(args.dataset)
    tlp_model = TLPCostModel(args.model, target=target)
    rows = []
    for task in load_tasks(args.tasks.split(","), target):
        candidates = CandidateSampler(task, target, num_threads=2).random(args.batch, seed=1)
        xgb, context, xgb_train = trained_xgb(task, target, dataset, platform_id)
        trace_lengths = [len(c.sch.trace.insts) for c in candidates]
        runs = {"tlp": [], "xgb": []}
        for _ in range(args.repeats):
            tlp_model.clear_caches()  # a cold start for every batch
            started = time.perf_counter()
            tlp_model.predict(context, candidates)
            runs["tlp"].append(len(candidates) / (time.perf_counter() - started))
            started = time.perf_counter()
            xgb.predict(context, candidates)
            runs["xgb"].append(len(candidates) / (time.perf_counter() - started))
        medians = {k: statistics.median(v) for k, v in runs.items()}
        row = {"task": task.name, "candidates": len(candidates), "mean_trace_length": statistics.mean(trace_lengths),
               "xgb_trained_on": xgb_train, "candidates_per_s": runs, "median_candidates_per_s": medians,
               "ratio_tlp_over_xgb": medians["tlp"] / medians["xgb"]}
        rows.append(row)
        print(f"{task.name}: TLP {medians['tlp']:.0f}/s, PerStoreFeature+XGB {medians['xgb']:.0f}/s -> "
              f"{row['ratio_tlp_over_xgb']:.1f}x (mean trace {row['mean_trace_length']:.0f} instructions)")
    ratios = [r["ratio_tlp_over_xgb"] for r in rows]
    summary = {"date": datetime.date.today().isoformat(), "machine": host_fingerprint(),
               "python": platform.python_version(), "tvm": tvm.__version__, "batch": args.batch,
               "repeats": args.repeats, "rows": rows, "median_ratio": statistics.median(ratios)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"median ratio over tasks: {summary['median_ratio']:.1f}x -> {args.out}")


if __name__ == "__main__":
    main()
