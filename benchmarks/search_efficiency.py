"""Search efficiency: best latency vs trials (and wall time) of MetaSchedule's search under different cost models.

Same search (``tlp tune``: gradient task scheduler + evolutionary search, same population and batch size), same
budgets, several seeds, one run; only the cost model changes:

- ``tlp``: the shipped TLP model, offline;
- ``tlp-online``: the same, fine-tuned on the search's own measurements (``--online-steps``);
- ``xgb``: MetaSchedule's default XGBoost model (learns from scratch during the search);
- ``random``: random ranking.

A model may carry its own batch sizes, ``NAME:B`` or ``NAME:F/B`` (run name ``NAME-bB``, ``NAME-fF``): batches of
B, and a first round of F per task (``tlp tune --first-round-trials``). A trained model needs no warm-up round of
full batches, and on a whole network the first round (one batch of every task) decides the first point of the
curve, so it caps the trial ratio a budget can show (``trial_ratio_cap_per_seed``). Without them a model uses
``--trials-per-iter`` and full first batches.

Headline: trials (and wall time) TLP needs to reach the latency XGBoost reaches with its full budget, as a ratio
``budget / TLP's trials``. Each run's work directory is kept, so an interrupted benchmark resumes.

    .venv/bin/python benchmarks/search_efficiency.py --workloads bert_tiny --trials 300 --seeds 1,2
    .venv/bin/python benchmarks/search_efficiency.py --workloads mobilenet_v2,resnet50 --top-tasks 4 --trials 128
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path

import numpy as np

from tlp.dataset.measure import MeasureConfig
from tlp.platform import host_fingerprint, host_target
from tlp.search.report import curve_points
from tlp.search.sources import resolve
from tlp.search.tune import TuneConfig, tune

MODELS = {"tlp": dict(cost_model="tlp"), "tlp-online": dict(cost_model="tlp", online_steps=5),
          "xgb": dict(cost_model="xgb"), "random": dict(cost_model="random")}


def _first_reaching(points: list[tuple[int, float, float]], goal: float) -> tuple[int, float] | None:
    for trials, wall, latency in points:
        if latency <= goal * (1 + 1e-9):
            return trials, wall
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="bert_tiny")
    parser.add_argument("--models", default="tlp,tlp-online,xgb,random",
                        help="comma-separated; NAME:B measures batches of B (default --trials-per-iter), "
                             "NAME:F/B also a first round of F per task")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--tlp-model", action="append", default=[],
                        help="TLP checkpoint or packaged name for tlp/tlp-online (default: tlp-cpu); repeat it to "
                             "compare several models in one alternating run; runs are stored under tlp@NAME, NAME "
                             "being the checkpoint's file stem")
    parser.add_argument("--top-tasks", type=int, default=0,
                        help="networks: tune only their N heaviest tasks (weight x FLOPs); 0 = all")
    parser.add_argument("--trials", type=int, default=300, help="budget per workload and run (all its tasks)")
    parser.add_argument("--trials-per-iter", type=int, default=32)
    parser.add_argument("--population", type=int, default=512)
    parser.add_argument("--work-dir", default="runs/bench/search")
    parser.add_argument("--out", default="benchmarks/results/search_efficiency.json")
    parser.add_argument("--tlp-model-setup-s", type=float, action="append", default=[],
                        help="seconds it took to make the --tlp-model of the same position (e.g. tlp adapt's "
                             "measuring + training): added to its runs' wall times, so a model built on this machine "
                             "pays for its own data; 0 for models without one")
    parser.add_argument("--summarize", action="store_true",
                        help="recompute summaries and figures of the results file without tuning")
    args = parser.parse_args()

    out = Path(args.out)
    if args.summarize:
        stored = json.loads(out.read_text())
        for workload, result in stored["results"].items():
            result["summary"] = _summarize(result["runs"], result["trials"])
            _plot(result, workload, _figure_path(out, workload))
            print(json.dumps({workload: result["summary"]}, indent=1))
        out.write_text(json.dumps(stored, indent=1))
        return
    target = host_target()
    if len(args.tlp_model_setup_s) > max(len(args.tlp_model), 1):
        parser.error("more --tlp-model-setup-s than --tlp-model")
    setup_of = dict(zip(args.tlp_model, args.tlp_model_setup_s))
    # (run name, base model, TLP checkpoint or None, setup seconds): every TLP-based model once per checkpoint.
    variants = []
    for spec in args.models.split(","):
        base_model, first, batch = _parse_model(spec, args.trials_per_iter, parser)
        name = base_model + (f"-f{first}" if first else "") + (f"-b{batch}" if batch != args.trials_per_iter else "")
        if MODELS[base_model]["cost_model"] == "tlp" and args.tlp_model:
            variants += [(f"{name}@{Path(m).stem}", base_model, first, batch, m, setup_of.get(m, 0.0))
                         for m in args.tlp_model]
        else:
            variants.append((name, base_model, first, batch, None, 0.0))
    seeds = [int(s) for s in args.seeds.split(",")]
    # Several invocations (different workloads, models or budgets) accumulate in one results file.
    results: dict = json.loads(out.read_text())["results"] if out.exists() else {}
    machine = host_fingerprint()
    for name in args.workloads.split(","):
        tunable = resolve(name, target)
        if args.top_tasks and tunable.is_network:
            tunable = tunable.top_tasks(args.top_tasks)
        workload = tunable.name
        weights = [t.weight for t in tunable.tasks]
        runs: dict = {}
        # Alternate models within each seed so machine noise spreads over all of them.
        for seed in seeds:
            for model, base_model, first, batch, checkpoint, setup_s in variants:
                work_dir = Path(args.work_dir) / workload / f"{model}-seed{seed}"
                config = TuneConfig(trials=args.trials, trials_per_iter=batch, first_round_trials=first, seed=seed,
                                    population=args.population, compile=False, measure=MeasureConfig(),
                                    model_path=checkpoint, **MODELS[base_model])
                report = tune(tunable, target, work_dir, config)
                points = [(t, wall + setup_s, latency)
                          for t, wall, latency in curve_points(work_dir / "history.jsonl", weights)]
                runs.setdefault(model, []).append({"seed": seed, "setup_s": setup_s, "trials_per_iter": batch,
                                                   "first_round_trials": first,
                                                   "final_latency_s": points[-1][2] if points else None,
                                                   "wall_s": points[-1][1] if points else None,
                                                   "trials": report["trials"], "curve": points})
                print(f"{workload} {model} seed {seed}: {runs[model][-1]['final_latency_s']}", flush=True)
        earlier = results.get(workload, {})
        if earlier.get("trials") == args.trials:
            # Same budget: keep the (model, seed) runs this invocation did not run; runs of another machine are
            # not comparable with this one's (a results file per machine, --out).
            if earlier.get("machine", machine) != machine:
                raise SystemExit(f"{out}: {workload} was measured on {earlier['machine'].get('llvm_cpu')}, this "
                                 f"machine is {machine['llvm_cpu']}; write to another --out")
            runs = _merge_runs(earlier["runs"], runs)
        summary = _summarize(runs, args.trials)
        results[workload] = {"tasks": len(tunable.tasks), "trials": args.trials, "trials_per_iter": args.trials_per_iter,
                             "population": args.population, "machine": machine, "target": target,
                             "seeds": sorted({r["seed"] for model_runs in runs.values() for r in model_runs}),
                             "runs": runs, "summary": summary}
        _plot(results[workload], workload, _figure_path(out, workload))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "machine": machine,
                                   "target": target, "results": results}, indent=1))
        print(json.dumps({workload: summary}, indent=1))


def _parse_model(spec: str, default_batch: int, parser: argparse.ArgumentParser) -> tuple[str, int | None, int]:
    """``NAME``, ``NAME:B`` or ``NAME:F/B`` -> (model, first-round trials or None, batch size)."""
    name, _, sizes = spec.partition(":")
    if name not in MODELS:
        parser.error(f"unknown model {name!r} in --models; choose among {', '.join(MODELS)}")
    first, _, batch = sizes.rpartition("/")
    if not all(n.isdigit() and int(n) > 0 for n in (first, batch) if n) or (sizes.endswith("/")):
        parser.error(f"--models {spec!r}: expected NAME:B or NAME:F/B with positive integers")
    batch_size = int(batch) if batch else default_batch
    return name, int(first) if first and int(first) < batch_size else None, batch_size


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


def _summarize(runs: dict, budget: int) -> dict:
    """Per model: median final latency and, per seed, the trials (and wall time) needed to reach the latency
    XGBoost reaches with its full budget (median over XGBoost's seeds); ratios = XGBoost's effort / that effort."""
    summary = {}
    xgb_goal = statistics.median(r["final_latency_s"] for r in runs["xgb"]) if "xgb" in runs else None
    xgb_wall = statistics.median(r["wall_s"] for r in runs["xgb"]) if "xgb" in runs else None
    for model, model_runs in runs.items():
        row = {"final_latency_s_median": statistics.median(r["final_latency_s"] for r in model_runs),
               "final_latency_s": [r["final_latency_s"] for r in model_runs],
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


def _plot(result: dict, workload: str, path: Path) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for model, model_runs in result["runs"].items():
        for i, run in enumerate(model_runs):
            if not run["curve"]:
                continue
            trials, wall, latency = (np.array(v) for v in zip(*run["curve"]))
            style = dict(color=f"C{list(result['runs']).index(model)}", alpha=0.8, where="post",
                         label=model if i == 0 else None)
            axes[0].step(trials, latency * 1e3, **style)
            axes[1].step(wall, latency * 1e3, **style)
    axes[0].set_xlabel("measured trials")
    axes[1].set_xlabel("wall time (s)")
    for ax in axes:
        ax.set_ylabel("best latency (ms, Σ weight × task)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{workload}: best latency found vs search effort (one line per seed)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
