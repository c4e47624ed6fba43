"""Search curves with the picks re-timed: what a network would run at if the search stopped at each point.

A search keeps, per task, the program with the lowest *recorded* latency, one timing of it. Timing the same
program again (a new build, new worker processes) differs by a median 15 % on ResNet-50's kernels and 37 % on
BERT-tiny's, 2x and more in one case of ten (``benchmarks/timing_noise/measurement_resolution.py``). So a task's best recorded
latency is the minimum over noisy draws, lower the more a task was measured: the curves ``search_efficiency.py``
draws (and the trials to XGBoost's final latency read off them) compare minima of different numbers of draws.

This re-times every program that was a task's best at some point of each run (``--passes`` times, each pass with a
fresh ``Measurer``, every run's programs in one pass, the order reversed on alternate passes so drift spreads over
all runs), and redraws each curve with the re-timed latency of the program the search would deploy at each point: Σ weight ×
re-timed latency of each task's best-recorded program, a program's re-timed latency being the minimum of its passes
(``--estimator``; ``timing_protocol.py`` found two sets of 3 time-spread timings agreeing to ~3 % on their minima,
~17 % on single timings). Fixed tasks (one program in every run) count with the estimate over all runs' re-timings. Then the ``search_efficiency.py`` summary on those curves: trials and wall
time to XGBoost's (re-timed) final latency. Run it alone on the machine.

    B=benchmarks/search_efficiency
    .venv/bin/python $B/retime_curves.py runs/s36/realistic-zen3-resnet50/resnet50/* --passes 3 --out first.json
    .venv/bin/python $B/retime_curves.py runs/s36/realistic-zen3-resnet50/resnet50/* --estimator median \\
        --summarize first.json --out median.json  # redrawn, nothing measured
    .venv/bin/python $B/retime_curves.py RUNS... --summarize first.json second.json --out pooled.json  # min of 6
"""

from __future__ import annotations

import argparse
import json
import sys
import statistics
import time
from pathlib import Path
from typing import Any

from search_efficiency import _curve_table, _summarize
from tlp.dataset.measure import time_once
from tlp.evaluation.search_metrics import read_search_run, records_in_file_order, tuning_record, workload_rows
from tlp.tune.report import curve_points, history_entries

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


ESTIMATORS = {"min": min, "median": statistics.median}


class RunPicks:
    """One run's history replayed from its records: each task's best-recorded program after every batch."""

    def __init__(self, work_dir: Path) -> None:
        self.path = work_dir
        report = json.loads((work_dir / "report.json").read_text())
        self.model = Path(work_dir).name.rsplit("-seed", 1)[0]
        self.seed = int(report["config"]["seed"])
        self.trials = int(report["config"]["trials"])
        run = read_search_run(work_dir)
        self.weights = run.task_weights  # workload key -> weight
        self.workloads = workload_rows(work_dir)
        self.keys = [str(w[0]) if w else None for w in self.workloads]
        self.records = records_in_file_order(work_dir)
        # (trials, wall, {key: record position of its best so far}) after each batch, history's order
        self.points: list[tuple[int, float, dict[str, int]]] = []
        best: dict[str, tuple[float, int]] = {}
        consumed = 0
        # a schedule library is read before the first batch, outside the history's clock: counted, as
        # search_efficiency.py counts it
        setup_s = float((report.get("transfer_library") or {}).get("seconds", 0.0))
        for entry, wall in history_entries(work_dir / "history.jsonl"):
            wall += setup_s
            for position in range(consumed, min(entry["trials"], len(self.records))):
                index, _, latency, _ = self.records[position]
                key = self.keys[index]
                if latency is not None and (key not in best or latency < best[key][0]):
                    best[key] = (latency, position)
            consumed = entry["trials"]
            if len(best) == len(self.weights):
                self.points.append((entry["trials"], wall,
                                    {k: p for k, (_, p) in best.items()}))
        # the history's own curve must be the one replayed here (same records, same bests)
        # the tuned tasks only: a report lists the untuned ones too (--top-tasks), after them, with no history
        weights = [t["weight"] for t in report["tasks"] if t.get("tuned", True)]
        expected = curve_points(work_dir / "history.jsonl", weights)
        replayed = self.curve(lambda p: self.records[p][2])
        if [round(x[2], 9) for x in expected] != [round(x[2], 9) for x in replayed]:
            raise SystemExit(f"{work_dir}: its history and records disagree; cannot replay its curve")

    def picks(self) -> set[int]:
        """Record positions that were some task's best at some point."""
        return {p for _, _, chosen in self.points for p in chosen.values()}

    def candidate(self, position: int) -> Any:
        index, _, _, line = self.records[position]
        return tuning_record(line, self.workloads[index]).as_measure_candidate()

    def curve(self, latency_of: Any) -> list[tuple[int, float, float]]:
        return [(trials, wall, float(sum(self.weights[k] * latency_of(p) for k, p in chosen.items())))
                for trials, wall, chosen in self.points]


def retime_all(runs: list[RunPicks], passes: int) -> tuple[dict[tuple[int, int], list[float]], list[float]]:
    """(run number, record position) -> its latency in each pass (None: failed), in measuring order (pass 1 in
    this order, pass 2 reversed, ...), and each pass's seconds."""
    target_json = json.loads((runs[0].path / "target.json").read_text())
    # interleave the runs (each run's k-th pick side by side) so a slow stretch of the machine falls on all of them
    jobs = [(r, p) for r, run in enumerate(runs) for p in sorted(run.picks())]
    rank = {(r, p): k for r, run in enumerate(runs) for k, p in enumerate(sorted(run.picks()))}
    jobs.sort(key=lambda job: (rank[job], job[0]))
    candidates = [runs[r].candidate(p) for r, p in jobs]
    timings: dict[tuple[int, int], list[float | None]] = {job: [] for job in jobs}
    seconds = []
    for number in range(passes):
        order = list(range(len(jobs)))[:: -1 if number % 2 else 1]
        started = time.monotonic()
        for i, latency in zip(order, time_once(target_json, [candidates[i] for i in order])):
            timings[jobs[i]].append(latency)  # None: failed this time
        seconds.append(time.monotonic() - started)
        print(f"pass {number + 1}: {len(jobs)} programs in {seconds[-1]:.0f} s", flush=True)
    return timings, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work_dirs", nargs="+", type=Path, help="the runs of one workload (search_efficiency.py's "
                        "work directories: MODEL-seedN)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--points", default="100,250,500,750", help="trial counts of the printed table")
    parser.add_argument("--estimator", choices=sorted(ESTIMATORS), default="min",
                        help="a program's re-timed latency from its passes (timing_protocol.py: the minimum of "
                             "timings spread over time is the stablest)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--summarize", type=Path, nargs="+", metavar="RESULT",
                        help="redraw the curves from earlier results' timings (no measuring), e.g. with another "
                             "--estimator; the work directories must be those results' runs (or some of them), "
                             "named alike; several "
                             "results of the same runs pool their passes (each program's estimate over all of them)")
    args = parser.parse_args()
    runs = [RunPicks(d) for d in args.work_dirs]
    if args.summarize:
        number = {str(run.path): r for r, run in enumerate(runs)}
        raw, seconds, args.passes = {}, [], 0
        for path in args.summarize:
            stored = json.loads(path.read_text())
            # a result may hold more runs than these (an earlier re-timing of a larger set): only these are read
            timings_here = {(number[t["run"]], t["record"]): t["passes_s"] for t in stored["timings"]
                            if t["run"] in number}
            if set(timings_here) != {(r, p) for r, run in enumerate(runs) for p in run.picks()}:
                raise SystemExit(f"{path}: its timings are not of these runs' picks")
            for job, values in timings_here.items():
                raw.setdefault(job, []).extend(values)
            seconds += stored["pass_seconds"]
            args.passes += stored["passes"]
    else:
        raw, seconds = retime_all(runs, args.passes)
    timings = {job: [t for t in values if t is not None] for job, values in raw.items()}
    estimate = ESTIMATORS[args.estimator]
    # a fixed task (one program in every run) counts alike in all runs: the median of all its re-timings
    one_program = {k for k in runs[0].weights if all(len({c[k] for _, _, c in run.points}) == 1 and
                                                      sum(1 for i, *_ in run.records if run.keys[i] == k) == 1
                                                      for run in runs)}
    shared = {k: estimate([t for r, run in enumerate(runs) for p in {c[k] for _, _, c in run.points}
                           for t in timings[(r, p)]]) for k in one_program}
    results: dict[str, Any] = {"recorded": {}, "retimed": {}}
    failed = []
    for r, run in enumerate(runs):
        key_of = {p: run.keys[run.records[p][0]] for p in run.picks()}

        def retimed(position: int, r: int = r, key_of: dict = key_of) -> float:
            key = key_of[position]
            if key in shared:
                return shared[key]
            values = timings[(r, position)]
            if not values:
                failed.append(f"{runs[r].path}: record {position} no longer runs")
                return float("nan")
            return estimate(values)

        for kind, latency_of in (("recorded", lambda p, run=run: run.records[p][2]), ("retimed", retimed)):
            curve = run.curve(latency_of)
            results[kind].setdefault(run.model, []).append({
                "seed": run.seed, "curve": curve, "final_latency_s": curve[-1][2], "wall_s": curve[-1][1],
                "trials": run.points[-1][0], "run": str(run.path)})
    budget = max(run.trials for run in runs)
    points = [int(n) for n in args.points.split(",")]
    out = {**stamp(timespec="minutes"),
           "passes": args.passes, "pass_seconds": seconds, "estimator": args.estimator, "programs_retimed": len(timings),
           "fixed_tasks": sorted(shared), "failed": failed,
           "spread": _spread(raw, runs, estimate),
           # every re-timed program, in pass 1's measuring order: its recorded latency and one latency per pass
           "timings": [{"run": str(runs[r].path), "record": p, "workload": runs[r].keys[runs[r].records[p][0]],
                        "recorded_s": runs[r].records[p][2], "passes_s": values}
                       for (r, p), values in raw.items()]}
    for kind in ("recorded", "retimed"):
        summary = _summarize(results[kind], budget)
        out[kind] = {"runs": results[kind], "summary": summary}
        print(f"== {kind}")
        print(json.dumps({m: {k: v for k, v in s.items() if "ratio" in k or "final" in k or "trials_to" in k}
                          for m, s in summary.items()}, indent=1))
        print(_curve_table({"runs": results[kind], "trials": budget}, points))
    write_json(args.out, out)


def _spread(raw: dict[tuple[int, int], list[float | None]], runs: list[RunPicks], estimate: Any) -> dict[str, Any]:
    """How much one timing moves: per program, max / min of its re-timings (median over programs); per pass, the
    median over programs of that pass's timing / the median of the other passes' (1.00: no drift of a whole pass); and the median of recorded / re-timed latency of the picks (below 1: the search kept lucky timings)."""
    complete = {job: t for job, t in raw.items() if t and all(t)}
    ratios = [max(t) / min(t) for t in complete.values() if len(t) > 1]
    passes = len(next(iter(complete.values()), []))
    recorded = [runs[r].records[p][2] / estimate(t) for (r, p), t in complete.items() if runs[r].records[p][2]]
    return {"programs": len(ratios), "median_max_over_min": statistics.median(ratios) if ratios else float("nan"),
            "pass_over_other_passes": [statistics.median(t[k] / statistics.median(t[:k] + t[k + 1:])
                                                         for t in complete.values()) for k in range(passes)],
            "recorded_over_retimed_median": statistics.median(recorded) if recorded else float("nan")}

if __name__ == "__main__":
    main()
