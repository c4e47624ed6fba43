"""Search efficiency: best latency vs trials (and wall time) of MetaSchedule's search under different cost models.

Same workload, same measuring, several seeds, each run alone:

- ``default``: what ``tlp tune`` runs (the TLP model with the ``tlp`` preset: its first round, batch size and
  population), the held-out networks' own programs left out of the schedule library; ``--set KEY=VALUE`` tries a
  variant of it (runs named ``default+KEY=VALUE``);
- ``xgb``: MetaSchedule's search with its XGBoost model, learning from scratch (``--trials-per-iter``,
  ``--population``);
- ``random``: the same search ranking at random.

Headline: trials (and wall time) TLP needs to reach the latency XGBoost reaches with its full budget, as a ratio
``budget / TLP's trials``. Each run's work directory is kept, so an interrupted benchmark resumes.

Fixed tasks (one program in their design space: no search can change them,
``tlp.search.task_scheduler.task_profile``) count with the same latency in every run: the median of that program's
measurements over all runs of the workload. Each run
measures it once, and run-to-run noise on these memory-bound kernels (up to 1.5x on MobileNetV2's batch norms,
about half of the network's Σ weight × latency) would otherwise decide the comparison. Raw numbers stay beside.

    B=benchmarks/search_efficiency
    .venv/bin/python $B/search_efficiency.py --workloads bert_tiny --trials 200 --models default --seeds 1,2
    .venv/bin/python $B/search_efficiency.py --workloads bert_tiny --trials 200 --models default --set population=128
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

from tlp.dataset.measure import MeasureConfig
from tlp.cli.common import add_target_args, target_of
from tlp.platform import host_fingerprint
from tlp.search.task_scheduler.task_profile import design_space_decisions
from tlp.settings import SettingError, apply_settings, parse_pairs
from tlp.tune import TuneConfig, tune
from tlp.tune.report import curve_points
from tlp.tune.sources import resolve

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir, stamp, write_json  # pylint: disable=wrong-import-position

# The runs compared (name -> TuneConfig settings). A variant of the default is tried with --set KEY=VALUE (run name
# default+KEY=VALUE), not as an entry here: a winner becomes `tlp tune`'s default, a loser one line in the README.
MODELS = {
    # what `tlp tune` runs (the tlp preset and its own sizes), the held-out networks' own programs left out of its
    # schedule library
    "default": dict(cost_model="tlp", transfer_exclude_networks=("held-out",)),
    # MetaSchedule's search with its own models (--trials-per-iter, --population): XGBoost learns from scratch
    "xgb": dict(cost_model="xgb"),
    "random": dict(cost_model="random"),
}


def _first_reaching(points: list[tuple[int, float, float]], goal: float) -> tuple[int, float] | None:
    for trials, wall, latency in points:
        if latency <= goal * (1 + 1e-9):
            return trials, wall
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="bert_tiny")
    parser.add_argument("--models", default="default,xgb", help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--set", dest="settings", action="append", metavar="KEY=VALUE",
                        help="a TuneConfig setting of the default's runs (a variant: runs named default+KEY=VALUE)")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--tlp-model", action="append", default=[],
                        help="TLP checkpoint or packaged name for the default (default: tlp-cpu); repeat it to "
                             "compare several models in one alternating run; runs are stored under tlp@NAME, NAME "
                             "being the checkpoint's file stem")
    parser.add_argument("--top-tasks", type=int, default=0,
                        help="networks: tune only their N heaviest tasks (weight x FLOPs); 0 = all")
    parser.add_argument("--trials", type=int, default=300, help="budget per workload and run (all its tasks)")
    parser.add_argument("--trials-per-iter", type=int, default=32)
    parser.add_argument("--population", type=int, default=512)
    parser.add_argument("--work-dir", default="runs/bench/search")
    add_target_args(parser)  # another mcpu emulates a CPU no dataset holds (leave_platform_out/)
    parser.add_argument("--out", default=str(results_dir(__file__) / "search_efficiency.json"))
    parser.add_argument("--tlp-model-setup-s", type=float, action="append", default=[],
                        help="seconds it took to make the --tlp-model of the same position (e.g. tlp adapt's "
                             "measuring + training): added to its runs' wall times, so a model built on this machine "
                             "pays for its own data; 0 for models without one")
    parser.add_argument("--summarize", action="store_true",
                        help="recompute summaries and figures of the results file without tuning")
    parser.add_argument("--points", default="",
                        help="with --summarize: also print a table of each run's curve at these trial counts "
                             "(comma-separated; the point nearest each), its first point, final latency and wall")
    args = parser.parse_args()
    if args.points and not args.summarize:
        parser.error("--points prints a table of a results file: use it with --summarize")
    try:
        points = [int(n) for n in args.points.split(",")] if args.points else []
    except ValueError:
        parser.error(f"--points takes comma-separated trial counts, got {args.points!r}")

    out = Path(args.out)
    if args.summarize:
        stored = json.loads(out.read_text())
        for workload, result in stored["results"].items():
            if "fixed_tasks" not in result:
                name, _, top = re.fullmatch(r"(.+?)(-top(\d+))?", workload).group(1, 2, 3)
                result["fixed_tasks"] = _fixed_tasks(_tunable(name, result["target"], int(top or 0)).tasks,
                                                     result["target"])
            for model, model_runs in result["runs"].items():
                for run in model_runs:  # runs stored before fixed tasks were recorded: from their work dirs
                    if "fixed_part_s" not in run:
                        _add_fixed_part(run, Path(args.work_dir) / workload / f"{model}-seed{run['seed']}",
                                        result["fixed_tasks"])
            result["summary"] = _summarize(result["runs"], result["trials"], result["fixed_tasks"])
            _plot(result, workload, _figure_path(out, workload))
            print(json.dumps({workload: result["summary"]}, indent=1))
            if points:
                print(_curve_table(result, points))
        write_json(out, stored)
        return
    target = target_of(args)
    if len(args.tlp_model_setup_s) > max(len(args.tlp_model), 1):
        parser.error("more --tlp-model-setup-s than --tlp-model")
    setup_of = dict(zip(args.tlp_model, args.tlp_model_setup_s))
    # (run name, base model, TLP checkpoint or None, setup seconds): every TLP-based model once per checkpoint.
    variants = []
    try:
        settings = parse_pairs(args.settings, "search_efficiency.py")
        apply_settings([TuneConfig()], settings, "search_efficiency.py")  # an unknown key: one line, before tuning
    except SettingError as error:
        parser.error(str(error))
    for name in args.models.split(","):
        if name not in MODELS:
            parser.error(f"unknown model {name!r} in --models; choose among {', '.join(MODELS)}")
        if MODELS[name]["cost_model"] != "tlp":
            variants.append((name, name, None, 0.0))
            continue
        run = name + "".join(f"+{key}={value}" for key, value in settings.items())
        variants += ([(f"{run}@{Path(m).stem}", name, m, setup_of.get(m, 0.0)) for m in args.tlp_model]
                     or [(run, name, None, 0.0)])
    seeds = [int(s) for s in args.seeds.split(",")]
    # Several invocations (different workloads, models or budgets) accumulate in one results file.
    results: dict = json.loads(out.read_text())["results"] if out.exists() else {}
    machine = host_fingerprint()
    for name in args.workloads.split(","):
        tunable = _tunable(name, target, args.top_tasks)
        workload = tunable.name
        weights = [t.weight for t in tunable.tasks]
        fixed = _fixed_tasks(tunable.tasks, target)
        task_set = _task_set(tunable.tasks)
        earlier = results.get(workload, {})
        # A changed graph (e.g. batch norms folded since) gives other tasks: its runs and work dirs cannot continue or
        # be compared with the stored ones. Checked before any tuning.
        if earlier and (earlier.get("task_set", task_set), earlier["tasks"]) != (task_set, len(tunable.tasks)):
            raise SystemExit(f"{out}: {workload}'s stored runs tuned {earlier['tasks']} other tasks than its "
                             f"{len(tunable.tasks)} now (the graph changed since); write to another --out and "
                             "--work-dir")
        runs: dict = {}
        # Alternate models within each seed so machine noise spreads over all of them.
        for seed in seeds:
            for model, base_model, checkpoint, setup_s in variants:
                work_dir = Path(args.work_dir) / workload / f"{model}-seed{seed}"
                config = TuneConfig(trials=args.trials, seed=seed, compile=False, measure=MeasureConfig(),
                                    model_path=checkpoint, **MODELS[base_model])
                if MODELS[base_model]["cost_model"] == "tlp":  # the preset's own sizes, as `tlp tune` runs it
                    config = apply_settings([config], settings, "search_efficiency.py")[0]
                else:  # MetaSchedule's search at the given sizes
                    config = dataclasses.replace(config, population=args.population,
                                                 trials_per_iter=args.trials_per_iter, first_round_trials=None)
                report = tune(tunable, target, work_dir, config)
                resolved = report["config"]
                batch, first = resolved["trials_per_iter"], resolved["first_round_trials"]
                # a schedule library is read before the first batch, outside the history's clock: count it
                setup_s += report.get("transfer_library", {}).get("seconds", 0.0)
                points = [(t, wall + setup_s, latency)
                          for t, wall, latency in curve_points(work_dir / "history.jsonl", weights)]
                runs.setdefault(model, []).append({"seed": seed, "setup_s": setup_s, "trials_per_iter": batch,
                                                   "population": resolved["population"],
                                                   "first_round_trials": first,
                                                   "final_latency_s": points[-1][2] if points else None,
                                                   "wall_s": points[-1][1] if points else None,
                                                   "trials": report["trials"], "curve": points,
                                                   # where the wall went (search: cost model, build, run, strategy)
                                                   "stages_s": report.get("stages_s", {}).get("seconds"),
                                                   "cost_model_time_s": report.get("cost_model_time_s")})
                _add_fixed_part(runs[model][-1], work_dir, fixed)
                print(f"{workload} {model} seed {seed}: {runs[model][-1]['final_latency_s']}", flush=True)
        if earlier.get("trials") == args.trials:
            # Same budget: keep the (model, seed) runs this invocation did not run; runs of another machine are
            # not comparable with this one's (a results file per machine, --out).
            if earlier.get("machine", machine) != machine:
                raise SystemExit(f"{out}: {workload} was measured on {earlier['machine'].get('llvm_cpu')}, this "
                                 f"machine is {machine['llvm_cpu']}; write to another --out")
            runs = _merge_runs(earlier["runs"], runs)
        summary = _summarize(runs, args.trials, fixed)
        results[workload] = {"tasks": len(tunable.tasks), "task_set": task_set, "fixed_tasks": fixed, "trials": args.trials,
                             "trials_per_iter": args.trials_per_iter,
                             "population": args.population, "machine": machine, "target": target,
                             "seeds": sorted({r["seed"] for model_runs in runs.values() for r in model_runs}),
                             "runs": runs, "summary": summary}
        _plot(results[workload], workload, _figure_path(out, workload))
        write_json(out, {**stamp(), "target": target, "results": results})
        print(json.dumps({workload: summary}, indent=1))


def _merge_runs(earlier: dict, new: dict) -> dict:
    """Per model, the earlier runs of seeds this invocation did not run, then the new ones, by seed."""
    merged = {model: list(model_runs) for model, model_runs in earlier.items()}
    for model, model_runs in new.items():
        rerun = {r["seed"] for r in model_runs}
        kept = [r for r in merged.get(model, []) if r["seed"] not in rerun]
        merged[model] = sorted(kept + model_runs, key=lambda r: r["seed"])
    return merged


def _figure_path(out: Path, workload: str) -> Path:
    """results/search_<workload>.png beside the default results file; <results stem>_<workload>.png otherwise, so
    a second study (another machine, other models) never overwrites the first one's figures."""
    stem = "search" if out.stem == "search_efficiency" else out.stem
    return out.with_name(f"{stem}_{workload}.png")


def _tunable(name: str, target: dict, top_tasks: int):
    """The workload (a network's ``top_tasks`` heaviest tasks when given; its name then ends in -topN)."""
    tunable = resolve(name, target)
    return tunable.top_tasks(top_tasks) if top_tasks and tunable.is_network else tunable


def _task_set(tasks: list) -> str:
    """A short digest of the workload's task keys: which tasks its runs tuned."""
    return hashlib.sha1(json.dumps(sorted(t.key for t in tasks)).encode()).hexdigest()[:12]


def _fixed_tasks(tasks: list, target: dict) -> dict[str, int]:
    """{name: weight} of the tasks whose design spaces hold one program (no sampled decision)."""
    return {t.name: int(t.weight) for t in tasks if design_space_decisions(t, target)[1] == 0}


def _add_fixed_part(run: dict, work_dir: Path, fixed: dict[str, int]) -> None:
    """Record in ``run`` the fixed tasks' latencies (end of the run) and their part of each curve point."""
    history, report = work_dir / "history.jsonl", work_dir / "report.json"
    if not (history.exists() and report.exists()):
        return
    # The history holds the tuned tasks only (--top-tasks: the report lists the network's other tasks too).
    names = [t["name"] for t in json.loads(report.read_text())["tasks"] if t.get("tuned", True)]
    part = curve_points(history, [fixed.get(n, 0) for n in names])
    if len(part) != len(run["curve"]):
        raise SystemExit(f"{work_dir}: its history no longer matches the stored curve; re-run it or drop it")
    last = json.loads(history.read_text().splitlines()[-1])["best_s"]
    run["fixed_task_latency_s"] = {n: last[i] for i, n in enumerate(names) if n in fixed}
    run["fixed_part_s"] = [latency for _, _, latency in part]


def _with_shared_fixed_tasks(runs: dict, fixed: dict[str, int]) -> dict | None:
    """The runs with each fixed task at the median of its latencies over all runs (None when a run lacks them)."""
    every = [r for model_runs in runs.values() for r in model_runs]
    if not fixed or not all("fixed_part_s" in r for r in every):
        return None
    shared = sum(weight * statistics.median(r["fixed_task_latency_s"][name] for r in every)
                 for name, weight in fixed.items())
    adjusted = {}
    for model, model_runs in runs.items():
        adjusted[model] = []
        for r in model_runs:
            curve = [(t, wall, latency - part + shared) for (t, wall, latency), part in zip(r["curve"], r["fixed_part_s"])]
            adjusted[model].append({**r, "curve": curve, "final_latency_s": curve[-1][2] if curve else None})
    return adjusted


def _summarize(runs: dict, budget: int, fixed: dict[str, int] | None = None) -> dict:
    """Per model: median final latency and, per seed, the trials (and wall time) needed to reach the latency
    XGBoost reaches with its full budget (median over XGBoost's seeds); ratios = XGBoost's effort / that effort.
    Computed with the fixed tasks at their shared latency when every run recorded them (``fixed_tasks_shared``);
    ``raw_final_latency_s`` keeps each run's own measurements."""
    raw = {model: [r["final_latency_s"] for r in model_runs] for model, model_runs in runs.items()}
    shared_runs = _with_shared_fixed_tasks(runs, fixed or {})
    runs = shared_runs or runs
    summary = {}
    xgb_goal = statistics.median(r["final_latency_s"] for r in runs["xgb"]) if "xgb" in runs else None
    xgb_wall = statistics.median(r["wall_s"] for r in runs["xgb"]) if "xgb" in runs else None
    for model, model_runs in runs.items():
        row = {"final_latency_s_median": statistics.median(r["final_latency_s"] for r in model_runs),
               "final_latency_s": [r["final_latency_s"] for r in model_runs],
               "raw_final_latency_s": raw[model], "fixed_tasks_shared": shared_runs is not None,
               # A network's latency exists once every task has been measured: the largest trial ratio this budget
               # can show is budget / the trials of that first point (the first round over all tasks).
               "trial_ratio_cap_per_seed": [round(budget / r["curve"][0][0], 2) if r["curve"] else None
                                            for r in model_runs]}
        if xgb_goal is not None:
            reached = [_first_reaching(r["curve"], xgb_goal) for r in model_runs]
            row["trials_to_xgb_final"] = [x[0] if x else None for x in reached]
            row["trial_ratio_per_seed"] = [round(budget / x[0], 2) if x else None for x in reached]
            row["wall_ratio_per_seed"] = [round(xgb_wall / x[1], 2) if x else None for x in reached]
            row["seeds_reaching_xgb_final"] = f"{sum(x is not None for x in reached)}/{len(reached)}"
            if all(reached):
                row["trial_ratio_vs_xgb"] = budget / statistics.median(x[0] for x in reached)
                row["wall_ratio_vs_xgb"] = xgb_wall / statistics.median(x[1] for x in reached)
            # The strict goal: the best XGBoost seed's final latency (a median over two seeds is their mean, and
            # one bad seed moves it a lot).
            best_xgb = min(r["final_latency_s"] for r in runs["xgb"])
            strict = [_first_reaching(r["curve"], best_xgb) for r in model_runs]
            row["trials_to_best_xgb_final"] = [x[0] if x else None for x in strict]
            row["trial_ratio_vs_best_xgb_per_seed"] = [round(budget / x[0], 2) if x else None for x in strict]
            row["wall_ratio_vs_best_xgb_per_seed"] = [round(xgb_wall / x[1], 2) if x else None for x in strict]
        summary[model] = row
    return summary


def _shown_runs(result: dict) -> dict:
    """The runs as tables and figures show them: fixed tasks at their shared latency where every run recorded them."""
    return _with_shared_fixed_tasks(result["runs"], result.get("fixed_tasks", {})) or result["runs"]


def _curve_table(result: dict, counts: list[int]) -> str:
    """A markdown table, one row per run: Σ weight × best task latency (ms) at its first point, at the curve point
    nearest each of ``counts`` trials (— before the first point: no network latency yet), final, wall."""
    runs = _shown_runs(result)
    lines = ["| run | first point | " + " | ".join(f"~{n}" for n in counts) + f" | final ({result['trials']}) | wall |",
             "|---" * (len(counts) + 4) + "|"]
    for model, model_runs in runs.items():
        for run in model_runs:
            curve = run["curve"]
            if not curve:
                continue
            cells = ["—" if n < curve[0][0] else f"{min(curve, key=lambda p: abs(p[0] - n))[2] * 1e3:.2f}"
                     for n in counts]
            lines.append(f"| {model} seed {run['seed']} | {curve[0][2] * 1e3:.2f} @ {curve[0][0]} | "
                         + " | ".join(cells) + f" | {curve[-1][2] * 1e3:.2f} | {run['wall_s']:.0f} s |")
    return "\n".join(lines)


def _plot(result: dict, workload: str, path: Path) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    runs = _shown_runs(result)
    for model, model_runs in runs.items():
        for i, run in enumerate(model_runs):
            if not run["curve"]:
                continue
            trials, wall, latency = (np.array(v) for v in zip(*run["curve"]))
            style = dict(color=f"C{list(runs).index(model)}", alpha=0.8, where="post",
                         label=model if i == 0 else None)
            axes[0].step(trials, latency * 1e3, **style)
            axes[1].step(wall, latency * 1e3, **style)
    axes[0].set_xlabel("measured trials")
    axes[1].set_xlabel("wall time (s)")
    shared = "; fixed tasks shared" if runs is not result["runs"] else ""
    for ax in axes:
        ax.set_ylabel("Σ weight × best task latency (ms)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{workload}: best latency found vs search effort (one line per seed{shared})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
