"""How should a program be timed on a shared machine? Timing spread, and which estimator two timing sets agree on.

``search_efficiency/retime_curves.py`` found two fresh timings of one program differing by a median 15-37 % on a 2-core VM, while the
3 repeats inside one timing agree to ~5 %. This takes programs of a ``retime_curves.py`` result (the ``--noisiest``
programs with the largest spread there, and as many others, seeded), times each of them ``--passes`` times per
variant (a variant: environment settings for TVM's runtime in the measuring processes, e.g. ``TVM_BIND_THREADS=0``;
the empty variant is the default), the variants alternating pass by pass, each pass with a fresh ``Measurer``. Then,
per variant, the median spread (max / min over its passes) and how well two independent sets of timings (the odd
and the even passes) agree on a program's latency when each set is summarised by its first timing, its minimum or
its median: the median |log ratio| between the two sets' estimates (0.05 ≈ 5 %). Run it alone on the machine.

    .venv/bin/python benchmarks/timing_noise/timing_protocol.py retime_curves_zen3_resnet50.json \\
        --variants ";TVM_BIND_THREADS=0" --passes 6 --out benchmarks/timing_noise/results/timing_protocol_zen3.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from tlp.dataset.measure import time_once

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import add_study, stamp, write_json  # pylint: disable=wrong-import-position

add_study("search_efficiency")
from retime_curves import RunPicks  # pylint: disable=wrong-import-position,wrong-import-order

MIN_LATENCY_S = 1e-5  # programs faster than this (reshapes) are timer noise, not kernels


def pick_programs(result: dict[str, Any], noisiest: int, seed: int) -> list[dict[str, Any]]:
    rows = [t for t in result["timings"] if all(t["passes_s"]) and min(t["passes_s"]) >= MIN_LATENCY_S]
    rows.sort(key=lambda t: -max(t["passes_s"]) / min(t["passes_s"]))
    others = rows[noisiest:]
    return rows[:noisiest] + random.Random(seed).sample(others, min(noisiest, len(others)))


def _with_env(settings: str) -> dict[str, str]:
    """Set ``K=V,K=V`` in this process's environment (the Measurer's worker processes inherit it); returns the
    previous environment."""
    before = dict(os.environ)
    for item in filter(None, settings.split(",")):
        key, _, value = item.partition("=")
        os.environ[key] = value
    return before


def agreement(timings: list[list[float | None]]) -> dict[str, float]:
    """Median |log ratio| between the odd and the even passes' estimate of each program, per estimator."""
    estimators = {"first timing": lambda t: t[0], "min": min, "median": statistics.median}
    out = {}
    for name, estimate in estimators.items():
        gaps = [abs(math.log(estimate(t[0::2]) / estimate(t[1::2]))) for t in timings if all(t) and len(t) > 1]
        out[name] = statistics.median(gaps) if gaps else float("nan")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("retimed", type=Path, help="a retime_curves.py result (its runs must be on disk)")
    parser.add_argument("--noisiest", type=int, default=15)
    parser.add_argument("--variants", default=";TVM_BIND_THREADS=0",
                        help="';'-separated environment settings (K=V,K=V); an empty one is the default")
    parser.add_argument("--passes", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = json.loads(args.retimed.read_text())
    programs = pick_programs(result, args.noisiest, args.seed)
    runs = {run: RunPicks(Path(run)) for run in sorted({p["run"] for p in programs})}
    candidates = [runs[p["run"]].candidate(p["record"]) for p in programs]
    target = json.loads((Path(programs[0]["run"]) / "target.json").read_text())
    variants = args.variants.split(";")
    timings: dict[str, list[list[float | None]]] = {v: [[] for _ in programs] for v in variants}
    for number in range(args.passes):
        for variant in variants:
            before = _with_env(variant)
            try:
                latencies = time_once(target, candidates)
            finally:
                os.environ.clear()
                os.environ.update(before)
            for row, latency in zip(timings[variant], latencies):
                row.append(latency)
            print(f"pass {number + 1} {variant or 'default'}", flush=True)
    summary = {}
    for variant, rows in timings.items():
        spreads = [max(t) / min(t) for t in rows if all(t)]
        summary[variant or "default"] = {
            "median_max_over_min": statistics.median(spreads),
            "median_max_over_min_noisiest": statistics.median(spreads[: args.noisiest]),
            "median_max_over_min_others": statistics.median(spreads[args.noisiest:]),
            "odd_vs_even_passes_median_abs_log_ratio": agreement(rows)}
    print(json.dumps(summary, indent=1))
    write_json(args.out, {
        **stamp(timespec="minutes"),
        "retimed": str(args.retimed), "passes": args.passes, "summary": summary,
        "programs": [{"run": p["run"], "record": p["record"], "retime_curves_passes_s": p["passes_s"]}
                     for p in programs],
        "timings": {v or "default": rows for v, rows in timings.items()}})


if __name__ == "__main__":
    main()
