"""Measured programs per minute: `tlp collect` vs MetaSchedule's own `tune_tir` loop, same task, same count.

Both sides use the same builder function and the same timing protocol (3 repeats, cache flush), so the ratio
compares the loops (candidate generation, cost-model training, bookkeeping), not the measurement settings.
Runs alternate between the two sides; the result is the median over repeats. A separate small run shows what
stock `tune_tir` (MetaSchedule's default builder function) does on this machine.

    .venv/bin/python benchmarks/data_collection/collect_throughput.py --task dense_512x512x512 --trials 64 --repeats 3

Stop any other collection first: both sides measure on the same cores.
"""

from __future__ import annotations

import argparse
import json
import platform as host
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from tlp._tvm import build_for_measurement, ms
from tlp.dataset import CollectPlan, Dataset, MeasureConfig, collect
from tlp.platform import Platform
from tlp.workloads import load_tasks

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir, write_json  # pylint: disable=wrong-import-position

RESULTS = results_dir(__file__) / "collect_throughput.json"


def evaluator(config: MeasureConfig) -> "ms.runner.EvaluatorConfig":
    return ms.runner.EvaluatorConfig(number=config.number, repeat=config.repeat, min_repeat_ms=config.min_repeat_ms,
                                     enable_cpu_cache_flush=config.cache_flush)


def run_tlp(task, platform: Platform, trials: int, config: MeasureConfig) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        summary = collect(Dataset(folder), [task], platform, CollectPlan(trials_per_task=trials, batch_size=32),
                          config, progress=False)
        seconds = time.monotonic() - started
    return {"seconds": seconds, "measured": summary.measured, "valid": summary.valid}


def run_tune_tir(task, platform: Platform, trials: int, config: MeasureConfig, stock_builder: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as work_dir:
        builder = ms.builder.LocalBuilder() if stock_builder else ms.builder.LocalBuilder(f_build=build_for_measurement)
        started = time.monotonic()
        database = ms.tune_tir(task.mod, platform.target, work_dir, max_trials_global=trials, num_trials_per_iter=32,
                               builder=builder, runner=ms.runner.LocalRunner(evaluator_config=evaluator(config)))
        seconds = time.monotonic() - started
        records = database.get_all_tuning_records()
    valid = sum(1 for r in records if r.run_secs is not None and len(r.run_secs) and float(r.run_secs[0]) < 1e9)
    return {"seconds": seconds, "measured": len(records), "valid": valid}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="dense_512x512x512")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stock-trials", type=int, default=8, help="candidates for the stock tune_tir run (0: skip)")
    args = parser.parse_args()

    platform = Platform.host()
    task = load_tasks([args.task], platform.target)[0]
    config = MeasureConfig()
    runs: dict[str, list[dict]] = {"tlp_collect": [], "tune_tir": []}
    for repeat in range(args.repeats):
        order = ["tlp_collect", "tune_tir"] if repeat % 2 == 0 else ["tune_tir", "tlp_collect"]
        for side in order:
            result = run_tlp(task, platform, args.trials, config) if side == "tlp_collect" else run_tune_tir(
                task, platform, args.trials, config)
            result["programs_per_min"] = 60 * result["measured"] / result["seconds"]
            runs[side].append(result)
            print(side, json.dumps(result), flush=True)
    medians = {side: statistics.median(r["programs_per_min"] for r in results) for side, results in runs.items()}
    report = {
        "benchmark": "measured programs per minute, tlp collect vs tune_tir",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.hardware.get("cpu_model"), "llvm_cpu": platform.hardware.get("llvm_cpu"),
                    "cores": platform.hardware.get("logical_cores"), "python": host.python_version()},
        "task": args.task,
        "trials": args.trials,
        "measure_config": config.to_json(),
        "runs": runs,
        "median_programs_per_min": medians,
        "ratio_tlp_over_tune_tir": medians["tlp_collect"] / medians["tune_tir"],
        "command": f"python benchmarks/data_collection/collect_throughput.py --task {args.task} --trials {args.trials} "
                   f"--repeats {args.repeats} --stock-trials {args.stock_trials}",
    }
    if args.stock_trials:
        stock = run_tune_tir(task, platform, args.stock_trials, config, stock_builder=True)
        stock["programs_per_min"] = 60 * stock["measured"] / stock["seconds"]
        report["stock_tune_tir"] = stock
        print("stock tune_tir", json.dumps(stock), flush=True)
    write_json(RESULTS, report)
    print(json.dumps({k: report[k] for k in ("median_programs_per_min", "ratio_tlp_over_tune_tir")}, indent=1))


if __name__ == "__main__":
    main()
