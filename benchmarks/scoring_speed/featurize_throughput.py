"""Candidates/s of TLP's predict (trace -> features -> network) vs MetaSchedule's PerStoreFeature + XGBoost.

Both go through MetaSchedule's own cost-model interface, ``CostModel.predict(context, candidates)``, on the same
batches of real post-processed candidates (as a search hands them to its cost model). XGBoost is first trained on
the task's measured programs from the dataset (an untrained XGBModel does not extract features).

TLP is timed twice per repeat: *cold* (its trace and feature caches, see ``tlp._tvm.trace_json``, emptied first:
the search's first batch) and *warm* (caches filled by scoring another random batch of the same task first: every
later batch of a search, which keeps its cost model). A breakdown splits TLP's warm time into reading traces,
featurizing and the network. Repeats alternate between the models; we report medians and ratios of medians.
Each task also checks that the fast path's scores equal the straightforward path's (``to_plain(trace.as_json())``,
uncached featurization, ``TLPNet.forward`` on the whole batch) and records the largest difference, in fp32 and
in the precision predict uses here (``scoring_precision``: bfloat16 on CPUs with native bfloat16, with the
Kendall tau of its ranking against the straightforward one; ``TLP_SCORING_PRECISION=fp32`` times fp32), and
the load average around the task (other processes on the machine slow both sides, TLP's network more).

    .venv/bin/python benchmarks/scoring_speed/featurize_throughput.py --repeats 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tlp._tvm import ms, to_plain, trace_json, tvm
from tlp.dataset.sampler import CandidateSampler
from tlp.dataset.store import Dataset
from tlp.model.inference import resolve_precision
from tlp.platform import Platform, host_target
from tlp.search.cost_model import TLPCostModel
from tlp.workloads import load_tasks

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir, stamp, write_json  # pylint: disable=wrong-import-position

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
    parser.add_argument("--out", default=str(results_dir(__file__) / "featurize_throughput.json"))
    args = parser.parse_args()

    target = host_target()
    platform_id = Platform.host(target).id
    dataset = Dataset(args.dataset)
    tlp_model = TLPCostModel(args.model, target=target)
    # XGBoost learns from this machine's measured records; on a platform the dataset does not hold yet, from those of
    # the platform whose head TLP scores with (only the speed is measured: the size of XGBoost's trees matters here,
    # not whether the latencies are this machine's).
    records_platform = platform_id if platform_id in dataset.platform_ids() else tlp_model.head_platform
    precision = resolve_precision("auto", getattr(tlp_model.model, "parts", [tlp_model.model])[0].net)  # as predict
    rows = []
    for task in load_tasks(args.tasks.split(","), target):
        sampler = CandidateSampler(task, target, num_threads=2)
        candidates = sampler.random(args.batch, seed=1)
        earlier_batch = sampler.random(args.batch, seed=2)  # what a search scored before: fills TLP's caches
        xgb, context, xgb_train = trained_xgb(task, target, dataset, records_platform)
        trace_lengths = [len(c.sch.trace.insts) for c in candidates]
        runs: dict[str, list[float]] = {"tlp_cold": [], "tlp_warm": [], "xgb": []}
        parts: dict[str, list[float]] = {"trace_ms": [], "featurize_ms": [], "network_ms": []}
        for _ in range(args.repeats):
            tlp_model.clear_caches()
            runs["tlp_cold"].append(_per_second(lambda: tlp_model.predict(context, candidates), len(candidates)))
            tlp_model.clear_caches()
            tlp_model.predict(context, earlier_batch)
            before = dict(tlp_model.seconds)  # TLPCostModel's own counters split predict into its three steps
            runs["tlp_warm"].append(_per_second(lambda: tlp_model.predict(context, candidates), len(candidates)))
            for part, seconds in tlp_model.seconds.items():
                parts[f"{part}_ms"].append((seconds - before[part]) * 1e3 / len(candidates))
            runs["xgb"].append(_per_second(lambda: xgb.predict(context, candidates), len(candidates)))
        medians = {k: statistics.median(v) for k, v in runs.items()}
        difference = _fast_vs_straightforward(tlp_model, context, candidates)
        row = {"task": task.name, "load_average_1min": os.getloadavg()[0],
               "max_abs_score_difference_fast_vs_straightforward": difference["fp32"],
               "default_precision_vs_straightforward": difference, "candidates": len(candidates),
               "mean_trace_length": statistics.mean(trace_lengths),
               "xgb_trained_on": xgb_train, "candidates_per_s": runs, "median_candidates_per_s": medians,
               "ratio_tlp_cold_over_xgb": medians["tlp_cold"] / medians["xgb"],
               "ratio_tlp_warm_over_xgb": medians["tlp_warm"] / medians["xgb"],
               "tlp_warm_ms_per_candidate": {k: statistics.median(v) for k, v in parts.items()}}
        rows.append(row)
        print(f"{task.name}: TLP cold {medians['tlp_cold']:.0f}/s, warm {medians['tlp_warm']:.0f}/s, "
              f"PerStoreFeature+XGB {medians['xgb']:.0f}/s -> {row['ratio_tlp_cold_over_xgb']:.1f}x cold, "
              f"{row['ratio_tlp_warm_over_xgb']:.1f}x warm (mean trace {row['mean_trace_length']:.0f} instructions; "
              f"warm ms/candidate {row['tlp_warm_ms_per_candidate']}; fast vs straightforward scores differ by at "
              f"most {difference['fp32']:.1e} in fp32, {difference['default']:.1e} in {precision} (Kendall tau "
              f"{difference['default_kendall_tau']:.4f}))")
    summary = {**stamp(),
               "platform": platform_id, "xgb_records_platform": records_platform,
               "python": platform.python_version(), "tvm": tvm.__version__, "model": args.model or "shipped",
               "scoring_precision": precision, "batch": args.batch, "repeats": args.repeats, "rows": rows,
               "median_ratio_cold": statistics.median(r["ratio_tlp_cold_over_xgb"] for r in rows),
               "median_ratio_warm": statistics.median(r["ratio_tlp_warm_over_xgb"] for r in rows)}
    write_json(args.out, summary)
    print(f"median ratio over tasks: {summary['median_ratio_cold']:.1f}x cold, {summary['median_ratio_warm']:.1f}x warm "
          f"-> {args.out}")


def _fast_vs_straightforward(tlp_model: TLPCostModel, context, candidates) -> dict[str, float]:
    """The fast path's scores against the plain one (trace JSON, features, ``TLPNet.forward`` on the whole batch):
    largest |difference| in fp32 and in the precision predict uses (``auto``: bfloat16 on CPUs that have it
    natively), and the Kendall tau of the latter's ranking. A model of several networks (an ensemble, a cascade)
    is checked network by network, each on the features it reads: the largest differences of any, the lowest tau."""
    model, extents = tlp_model.model, tlp_model._task(context).extents
    features = model.featurizer.transform([trace_json(c.sch.trace) for c in candidates],
                                          [extents] * len(candidates), tlp_model._feature_cache)
    plain_features = model.featurizer.transform([to_plain(c.sch.trace.as_json()) for c in candidates],
                                                [extents] * len(candidates))
    read = getattr(model, "_features_for", lambda _, f: f)  # a composite's networks may read other crops
    rows = []
    for network in getattr(model, "parts", [model]):
        with torch.no_grad():
            plain = network.net.eval()(torch.from_numpy(read(network, plain_features)), tlp_model.head).numpy()
        fast = {precision: network.predict_features(read(network, features), tlp_model.head, precision=precision)
                for precision in ("fp32", "auto")}
        a, b = fast["auto"], plain
        concordance = np.sign(a[:, None] - a[None, :]) * np.sign(b[:, None] - b[None, :])
        rows.append({"fp32": float(np.abs(fast["fp32"] - plain).max()), "default": float(np.abs(a - plain).max()),
                     "default_kendall_tau": float(concordance.sum() / (len(a) * (len(a) - 1))),
                     "default_same_best": bool(np.argmax(a) == np.argmax(b))})
    return {"fp32": max(r["fp32"] for r in rows), "default": max(r["default"] for r in rows),
            "default_kendall_tau": min(r["default_kendall_tau"] for r in rows),
            "default_same_best": all(r["default_same_best"] for r in rows), "networks": len(rows)}


def _per_second(score, count: int) -> float:
    started = time.perf_counter()
    score()
    return count / (time.perf_counter() - started)


if __name__ == "__main__":
    main()
