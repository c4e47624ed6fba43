"""Zero-measurement picks of the default search against a variant of it: seconds per task and the picks' speed.

A variant is ``PredictionConfig`` fields (``--variant max_rounds=1``; in ``tlp tune``: ``--set
prediction.max_rounds=1``). Per task with something to sample of the given models (benchmarks/model_coverage),
both searches run with the same seed, in alternating order; where their picks differ, both are timed together
with the project's ``Measurer`` in ``--rounds`` rounds (medians, alternating which goes first).

    .venv/bin/python benchmarks/zero_measurement/compare_variant.py --models convnext,swin --variant max_rounds=1 \
        --out benchmarks/zero_measurement/results/rounds_emeraldrapids.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from tlp._tvm import ms, structural_hash, tvm
from tlp.dataset.measure import MeasureConfig, Measurer
from tlp.dataset.store import mean_latency
from tlp.platform import host_target
from tlp.search.cost_model import TLPCostModel
from tlp.search.database.predicted import PredictionConfig, predict_schedule
from tlp.search.search_strategy.first_round import nothing_to_sample
from tlp.tune.sources import resolve

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import BENCHMARKS, stamp, write_json  # pylint: disable=wrong-import-position

SOURCE = """import sys
sys.path.insert(0, {folder!r})
import torch
torch.manual_seed(0)
from model_coverage import MODELS
model, example_inputs = MODELS[{name!r}][1]()
"""


def _variant(text: str) -> PredictionConfig:
    """``key=value,key=value`` -> the default PredictionConfig with those fields set (typed as the defaults)."""
    config = PredictionConfig()
    for pair in filter(None, text.split(",")):
        key, _, value = pair.partition("=")
        default = getattr(config, key)
        parsed = value.lower() in ("1", "true", "yes") if isinstance(default, bool) else type(default)(value)
        config = replace(config, **{key: parsed})
    return config


def _scheduled(task: Any, record: Any) -> Any:
    schedule = tvm.s_tir.Schedule(task.mod)
    record.trace.apply_to_schedule(schedule, remove_postproc=False)
    return schedule.mod


def _time_together(target: dict[str, Any], mods: list[Any], rounds: int) -> list[float | None]:
    measurer = Measurer(target, MeasureConfig(repeat=3, min_repeat_ms=20))
    samples: list[list[float]] = [[] for _ in mods]
    try:
        for index in range(rounds):
            order = list(range(len(mods)))[:: 1 if index % 2 == 0 else -1]  # alternate which side goes first
            infos = [ms.arg_info.ArgInfo.from_entry_func(mods[i], remove_preproc=True) for i in order]
            results, _ = measurer.measure([mods[i] for i in order], infos)
            for i, result in zip(order, results):
                latency = mean_latency(result.run_secs, result.error) if result.run_secs else None
                if latency is not None:
                    samples[i].append(latency)
    finally:
        measurer.close()
    return [statistics.median(values) if values else None for values in samples]


def _with_choices(tasks: list[Any], target: dict[str, Any], count: int) -> list[Any]:
    """The ``count`` heaviest tasks (weight × FLOPs; 0: all) with something to sample: on a one-program task both
    searches find the same program."""
    chosen = []
    for task in sorted(tasks, key=lambda t: -float(t.weight) * float(t.flops or 0)):
        context = ms.TuneContext(mod=task.mod, target=tvm.target.Target(target), space_generator="post-order-apply")
        if not nothing_to_sample(context.space_generator.generate_design_space(task.mod)):
            chosen.append(task)
    return chosen[:count] if count else chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="convnext,swin", help="benchmarks/model_coverage model names")
    parser.add_argument("--variant", required=True, help="PredictionConfig fields, key=value,key=value")
    parser.add_argument("--tasks-per-model", type=int, default=0, help="the heaviest N tasks with choices (0: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    variants = {"default": PredictionConfig(), "variant": _variant(args.variant)}
    target = host_target()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cost_model = TLPCostModel(target=target)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models.split(","):
            source = Path(scratch) / f"{name}.py"
            source.write_text(SOURCE.format(folder=str(BENCHMARKS / "model_coverage"), name=name))
            tunable = resolve(str(source), target)
            for task in _with_choices(tunable.all_tasks, target, args.tasks_per_model):
                row: dict[str, Any] = {"model": name, "task": task.name, "weight": int(task.weight)}
                picks = {}
                # Alternated per task: the second search of a task finds the model's feature cache warm.
                order = list(variants.items())[:: 1 if len(rows) % 2 == 0 else -1]
                for variant, config in order:
                    started = time.monotonic()
                    _, record = predict_schedule(task, target, cost_model, replace(config))
                    row[f"{variant}_s"] = round(time.monotonic() - started, 2)
                    picks[variant] = None if record is None else _scheduled(task, record)
                both = [picks[v] for v in variants]  # in the dict's order
                row["same_pick"] = None not in both and structural_hash(both[0]) == structural_hash(both[1])
                if None not in both and not row["same_pick"]:
                    latencies = _time_together(target, both, args.rounds)
                    row.update({f"{v}_latency_s": latency for v, latency in zip(variants, latencies)})
                rows.append(row)
                print(row, flush=True)
                write_json(args.out, {**stamp(), "variant": args.variant, "rows": rows})
    seconds = {v: sum(r[f"{v}_s"] for r in rows) for v in variants}
    ratios = [r["variant_latency_s"] / r["default_latency_s"] for r in rows
              if r.get("variant_latency_s") and r.get("default_latency_s")]
    weighted = {v: sum(r["weight"] * (r.get(f"{v}_latency_s") or 0) for r in rows if r.get("variant_latency_s")
                       and r.get("default_latency_s")) for v in variants}
    summary = {"variant": args.variant, "tasks": len(rows), "same_pick": sum(bool(r["same_pick"]) for r in rows),
               "seconds": seconds,
               "latency_ratio_geomean_where_different": statistics.geometric_mean(ratios) if ratios else None,
               "weighted_latency_where_different_s": weighted}
    write_json(args.out, {**stamp(), "variant": args.variant, "summary": summary, "rows": rows})
    print(summary)


if __name__ == "__main__":
    main()
