"""How often do two timings of a search's batch order its programs alike? (issue 11 part 5, issue 10)

``batch_ranking.py`` found that every model, TLP's and MetaSchedule's XGBoost alike, orders two programs of one
batch within 1.1x at chance and within 1.1-1.25x barely better. A model is scored against the latencies the search
recorded, each one timing of one program; if timing the same programs again orders such pairs differently, part of
that "resolution limit" is the labels, and no model can be scored (or trained) past it.

This samples ``--batches`` full batches of each run (seeded; a batch is one task's records of one search round),
builds and times their programs again ``--passes`` times with the search's measurement settings (``MeasureConfig()``:
3 repeats of at least 20 ms, cache flushed), each pass with a fresh ``Measurer`` (new worker processes) and the
batches in the opposite order of the pass before, and reports per latency-ratio bin the share of a batch's pairs
that two timings order alike: the recorded timing against each pass, and pass against pass. With ``--model`` /
``--xgb`` (as in ``batch_ranking.py``) it also scores each model's pair accuracy against the recorded latencies and
against the mean of the passes. Run it alone on the machine.

    B=benchmarks/timing_noise
    .venv/bin/python $B/measurement_resolution.py runs/s36/realistic-zen3-resnet50/resnet50 \\
        runs/s37/realistic-zen3-mobilenet_v2/mobilenet_v2 --batches 8 --passes 2 --model tlp-cpu \\
        --platform llvm-znver3-2c-1ceb2015 --out $B/results/measurement_resolution_zen3.json
    .venv/bin/python $B/measurement_resolution.py --summarize --out $B/results/measurement_resolution_zen3.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from batch_ranking import TLPScorer, XGBScorer, batches
from tlp._tvm import ms, tvm
from tlp.dataset.measure import time_once
from tlp.dataset.store import mean_latency
from tlp.evaluation import RATIO_BINS, accuracy_by_ratio, pair_counts_by_ratio
from tlp.evaluation.baselines import replay_candidates
from tlp.evaluation.search_metrics import SearchRun, find_work_dirs, read_search_run, records_in_file_order

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


def agreement(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Pair counts ``[bins, 2]`` binned by ``reference``'s ratio: pairs ``other`` orders as ``reference`` does
    (programs without a valid latency in either left out)."""
    both = np.where(np.isnan(other), np.nan, reference)
    return pair_counts_by_ratio(-np.nan_to_num(other, nan=np.inf), both)


def sample_batches(run: SearchRun, count: int, rng: random.Random) -> list[tuple[str, list[Any], np.ndarray]]:
    rows = batches(run)
    return rng.sample(rows, min(count, len(rows)))


def time_pass(picked: list[tuple[SearchRun, str, list[Any], np.ndarray]], target: dict, reverse: bool) -> list[np.ndarray]:
    """One timing of every picked batch's programs in a fresh Measurer: per batch, the latencies (NaN: failed)."""
    tvm_target = tvm.target.Target(target)
    order = list(range(len(picked)))[::-1] if reverse else list(range(len(picked)))
    candidates, owner = [], []
    for b in order:
        run, key, traces, _ = picked[b]
        workload = ms.database.Workload.from_json(run.workloads[key])
        for candidate in replay_candidates(workload, traces, tvm_target):
            candidates.append(candidate)
            owner.append(b)
    out: list[list[float]] = [[] for _ in picked]
    for b, latency in zip(owner, time_once(target, candidates)):
        out[b].append(np.nan if latency is None else latency)
    return [np.array(x) for x in out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="tuning work directories (or folders holding them)")
    parser.add_argument("--batches", type=int, default=8, help="full batches sampled per run")
    parser.add_argument("--passes", type=int, default=2, help="timings of every sampled program")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--platform", help="whose heads score (--model) and whose training split XGBoost learns")
    parser.add_argument("--model", action="append", default=[], help="TLP checkpoint to score (as batch_ranking.py)")
    parser.add_argument("--xgb", type=Path, help="XGBoost file as in batch_ranking.py")
    parser.add_argument("--dataset", type=Path, default=Path("datasets/tlp-cpu"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--summarize", action="store_true", help="recompute the timing statistics of --out's "
                        "stored timings (no measuring; the models' rows are kept)")
    args = parser.parse_args()
    if args.summarize:
        result = json.loads(args.out.read_text())
        _summarize(result)
        write_json(args.out, result)
        return
    if not args.runs:
        parser.error("give the tuning work directories to sample (or --summarize an --out file)")
    if (args.model or args.xgb) and not args.platform:
        parser.error("--model / --xgb need --platform")
    rng = random.Random(args.seed)
    picked = []
    for path in find_work_dirs(args.runs):
        run = read_search_run(path)
        picked += [(run, key, traces, latencies) for key, traces, latencies in sample_batches(run, args.batches, rng)]
    target = json.loads((picked[0][0].path / "target.json").read_text())
    passes, seconds = [], []
    for p in range(args.passes):
        started = time.monotonic()
        passes.append(time_pass(picked, target, reverse=bool(p % 2)))
        seconds.append(time.monotonic() - started)
        print(f"pass {p + 1}: {sum(len(b) for b in passes[-1])} programs in {seconds[-1]:.0f} s", flush=True)

    scorers: dict[str, Any] = {}
    for name in args.model:
        scorer = TLPScorer(name, args.platform)
        scorers[f"tlp:{Path(name.partition('@')[0]).stem}@{scorer.head_name}"] = scorer
    if args.xgb:
        scorers["xgb (trained on the dataset)"] = XGBScorer(args.xgb, args.dataset, args.platform)
    models: dict[str, dict[str, np.ndarray]] = {}  # guide -> comparison -> counts
    for b, (run, key, traces, recorded) in enumerate(picked):
        retimed = np.nanmean(np.stack([p[b] for p in passes]), axis=0)
        for name, scorer in scorers.items():
            scores = scorer(run, key, traces)
            _add(models, _guide(run.cost_model), f"{name} vs recorded", pair_counts_by_ratio(scores, recorded))
            _add(models, _guide(run.cost_model), f"{name} vs re-timed (mean of passes)",
                 pair_counts_by_ratio(scores, retimed))
    result = {
        **stamp(timespec="minutes"),
        "runs": [str(p) for p in find_work_dirs(args.runs)], "batches_per_run": args.batches, "passes": args.passes,
        "seed": args.seed, "pass_seconds": seconds, "models": args.model, "xgb": str(args.xgb) if args.xgb else None,
        "models_by_latency_ratio": {guide: {name: accuracy_by_ratio(c) for name, c in by_name.items()}
                                    for guide, by_name in models.items()},
        "batches": [{"run": str(run.path), "guided_by": run.cost_model, "workload": key,
                     "recorded_s": _floats(recorded), "passes_s": [_floats(p[b]) for p in passes]}
                    for b, (run, key, _, recorded) in enumerate(picked)]}
    _summarize(result)
    write_json(args.out, result)


def _guide(cost_model: str) -> str:
    return "tlp" if cost_model.startswith("tlp") else cost_model


def _add(pooled: dict[str, dict[str, np.ndarray]], group: str, name: str, counts: np.ndarray) -> None:
    pooled.setdefault(group, {}).setdefault(name, np.zeros((len(RATIO_BINS) - 1, 2), dtype=np.int64))
    pooled[group][name] += counts


def _summarize(result: dict[str, Any]) -> None:
    """Timing agreement and noise from the stored timings, pooled per guide and per tuned network (the run's
    parent folder), and the spread of the 3 repeats within one recorded timing (each run's records); printed and
    added to ``result``."""
    agreement_counts: dict[str, dict[str, np.ndarray]] = {}
    log_ratios: dict[str, dict[str, list[float]]] = {}
    for batch in result["batches"]:
        recorded = np.array([np.nan if v is None else v for v in batch["recorded_s"]])
        timings = [np.array([np.nan if v is None else v for v in p]) for p in batch["passes_s"]]
        for group in (_guide(batch.get("guided_by", "tlp")), Path(batch["run"]).parent.name):
            noise = log_ratios.setdefault(group, {"recorded vs pass": [], "pass vs pass": []})
            for p, timing in enumerate(timings):
                _add(agreement_counts, group, f"recorded vs pass {p + 1}", agreement(recorded, timing))
                noise["recorded vs pass"] += _abs_log_ratios(recorded, timing)
                for q in range(p + 1, len(timings)):
                    _add(agreement_counts, group, f"pass {p + 1} vs pass {q + 1}", agreement(timing, timings[q]))
                    noise["pass vs pass"] += _abs_log_ratios(timing, timings[q])
    within: dict[str, list[float]] = {}
    for run in result["runs"]:
        for _, _, _, line in records_in_file_order(run):
            run_secs = [float(s) for s in json.loads(line)[1][1] or []]
            if len(run_secs) > 1 and min(run_secs) > 0 and mean_latency(run_secs) is not None:
                within.setdefault(Path(run).parent.name, []).append(math.log(max(run_secs) / min(run_secs)))
    result["agreement_by_latency_ratio"] = {g: {n: accuracy_by_ratio(c) for n, c in by_name.items()}
                                            for g, by_name in agreement_counts.items()}
    result["timing_noise_abs_log_ratio"] = {g: {n: _quantiles(v) for n, v in by_name.items() if v}
                                            for g, by_name in log_ratios.items()}
    result["within_record_log_max_over_min"] = {g: _quantiles(v) for g, v in within.items()}
    for group, by_name in result["agreement_by_latency_ratio"].items():
        print(group, json.dumps(result["timing_noise_abs_log_ratio"].get(group)),
              json.dumps(result["within_record_log_max_over_min"].get(group)))
        rows = {**by_name, **result.get("models_by_latency_ratio", {}).get(group, {})}
        for name, row in rows.items():
            print(f"  {name:55s} " + "  ".join(
                f"{k}: {v['right']:.2f} ({v['pairs']})" if v["right"] is not None else f"{k}: -" for k, v in row.items()))


def _abs_log_ratios(a: np.ndarray, b: np.ndarray) -> list[float]:
    both = ~(np.isnan(a) | np.isnan(b))
    return [float(x) for x in np.abs(np.log(a[both] / b[both]))]


def _quantiles(values: list[float]) -> dict[str, float]:
    return {"median": float(np.median(values)), "p90": float(np.quantile(values, 0.9)), "n": len(values)}


def _floats(values: np.ndarray) -> list[float | None]:
    return [None if np.isnan(v) else float(v) for v in values]


if __name__ == "__main__":
    main()
