"""Which offline evaluation predicts how a cost model does inside the search?

Scores TLP (default ``tlp-cpu``), TLP-small (``tlp-cpu-small``), MetaSchedule's XGBoost (trained on the dataset's
training records exactly as ``tlp eval`` trains it) and random on

- TenSet's top-1 over the dataset's stored programs of the tuned tasks (what ``tlp eval`` has reported so far);
- the search-like metrics of :mod:`tlp.evaluation.search_metrics` over the programs the search-efficiency runs
  measured (the 40 runs of 2026-11-22, all pooled per workload and task; their tarball left the tree, git keeps it:
  ``git show 312e08d:benchmarks/results/search_runs.tar.xz > /tmp/search_runs.tar.xz``): late-round top-1/5,
  pick regret in populations of one run's late-round programs, all-round top-1;

and checks each metric's model order against the searches' measured outcome per workload: the median over seeds
of the final latency of the run guided by the same model (``tlp``, ``tlp@tlp-cpu-small``, ``xgb``, ``random``),
relative to the best of those four on that workload. Agreement: Kendall's tau and Spearman's rho over the
(workload, model) pairs (metric oriented so that a positive value agrees), and, within each workload, the share of
model pairs ordered the same way by metric and search. The latencies are the stored ones (measured on the Zen 3
machine of the search runs); nothing is re-measured. Scoring caches to ``--cache`` (the XGBoost fit takes minutes).

    .venv/bin/python benchmarks/ranking/search_metrics.py --runs /tmp/search_runs.tar.xz \
        --out benchmarks/ranking/results/search_metrics.json

Other runs (``--run-dirs DIR...``): with ``--models-from-runs`` the scored models are the ones that guided them,
each run's checkpoint read from its report (``model_path``; ``--default-model`` for runs of the shipped model,
online-tuned runs are skipped: their model changed during the search), plus XGBoost / random where they ran.
``--combine-with FILE`` adds an earlier result's (workload, model) rows to the agreement (scope ``pooled``), e.g.
the Zen 4 searches of the retrained models with the Zen 3 study:

    B=benchmarks/ranking/results
    .venv/bin/python benchmarks/ranking/search_metrics.py --run-dirs runs/bench/unseen --models-from-runs \
        --platform llvm-znver4-2c-2d80d0a8 --combine-with $B/search_metrics.json \
        --cache /tmp/search_metrics_zen4.npz --out $B/search_metrics_zen4.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from tlp.dataset.store import Dataset
from tlp.evaluation import search_metrics
from tlp.evaluation.baselines import MetaScheduleBaseline, RandomRanker
from tlp.features.tensors import LabeledPrograms, load_programs
from tlp.model.estimator import TLPModel, top_k_score
from tlp.models import model_path
from tlp.platform import Platform
from tlp.workloads import held_out_networks

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir, write_json  # pylint: disable=wrong-import-position

# Scored model -> the search runs it guided (their cost_model name).
SCORED = {"tlp": "tlp", "tlp-small": "tlp@tlp-cpu-small", "xgb": "xgb", "random": "random"}
TLP_CHECKPOINTS = {"tlp": "tlp-cpu", "tlp-small": "tlp-cpu-small"}
# metric -> (where it lives, True when higher is better)
METRICS = {"tenset_top1": True, "all_top1": True, "late_top1": True, "late_top5": True, "pick_regret": False,
           "pick_regret_equal": False}


def extract(tarball: Path, into: Path) -> Path:
    search_dir = into / "runs" / "bench" / "search"
    if not search_dir.is_dir():
        into.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as archive:
            archive.extractall(into, filter="data")
    return search_dir


def outcomes(search_dir: Path) -> dict[str, dict[str, list[float]]]:
    """source -> search model -> final latency (Σ weight × best task latency, seconds) per seed, seed order."""
    found: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for work_dir in search_metrics.find_work_dirs([search_dir]):
        run = search_metrics.read_search_run(work_dir)
        report = json.loads((work_dir / "report.json").read_text())
        found.setdefault(run.source, {}).setdefault(run.cost_model, []).append(
            (int(report["config"]["seed"]), float(report["tasks_latency_s"])))
    return {s: {m: [v for _, v in sorted(runs)] for m, runs in models.items()} for s, models in found.items()}


def stored_subset(programs: LabeledPrograms, keys: set[str]) -> LabeledPrograms:
    return programs.subset(np.array([k in keys for k in programs.task_keys], dtype=bool))


def models_of_runs(search_dirs: list[Path], default_model: str) -> tuple[dict[str, str], dict[str, str]]:
    """(scored model -> the run label it guided, TLP model -> checkpoint) for the runs under ``search_dirs``."""
    scored, checkpoints = {}, {}
    for work_dir in search_metrics.find_work_dirs(search_dirs):
        run = search_metrics.read_search_run(work_dir)
        config = json.loads((work_dir / "report.json").read_text()).get("config", {})
        if run.cost_model in ("xgb", "random", "mlp"):
            scored[run.cost_model] = run.cost_model
        elif run.cost_model.startswith("tlp") and not config.get("online_steps"):
            scored[run.cost_model] = run.cost_model
            checkpoints[run.cost_model] = str(config.get("model_path") or default_model)
    return scored, checkpoints


def rows_of_result(path: Path) -> list[dict[str, Any]]:
    """The (workload, model) rows of an earlier result file, as ``main`` builds them (for ``--combine-with``)."""
    result = json.loads(path.read_text())
    rows = []
    for source, entry in result["per_source"].items():
        for model, values in entry["models"].items():
            if values.get("search_relative") is not None:
                rows.append({"source": f"{source} ({path.stem})", "model": model,
                             "held_out": not any(entry["in_training"]), **values})
    return rows


def score_all(args: argparse.Namespace, dataset: Dataset, programs: LabeledPrograms, train: LabeledPrograms,
              stored: LabeledPrograms, search: search_metrics.SearchSet) -> dict[str, dict[str, np.ndarray]]:
    """model -> {"stored": scores of ``stored``, "search": scores of the pooled search programs}; cached."""
    cache = Path(args.cache) if args.cache else None
    if cache and cache.exists():
        data = np.load(cache)
        scores = {m: {"stored": data[f"{m}_stored"], "search": data[f"{m}_search"]} for m in args.models
                  if f"{m}_stored" in data and len(data[f"{m}_stored"]) == len(stored.traces)
                  and len(data[f"{m}_search"]) == len(search.traces)}
        if len(scores) == len(args.models):
            print(f"scores from {cache}")
            return scores
    labeled = search.labeled()
    scores, seconds = {}, {}
    for name, checkpoint in args.checkpoints.items():
        if name not in args.models:
            continue
        started = time.monotonic()
        model = TLPModel.load(checkpoint if Path(checkpoint).is_file() else model_path(checkpoint))
        head = model.head_index(args.platform)
        scores[name] = {
            "stored": model.predict(stored.traces, [stored.extents.get(k) for k in stored.task_keys], head),
            "search": model.predict(labeled.traces, [labeled.extents.get(k) for k in labeled.task_keys], head)}
        seconds[name] = time.monotonic() - started
    if "xgb" in args.models:
        started = time.monotonic()
        xgb = MetaScheduleBaseline("xgb", dataset, args.platform)
        xgb.fit(train)
        print(f"xgb trained on {len(train.traces)} programs in {time.monotonic() - started:.0f} s", flush=True)
        scores["xgb"] = {"stored": xgb.predict(stored),
                         "search": search_metrics.metaschedule_scores(xgb.model, xgb.replay.target, search)}
        seconds["xgb"] = time.monotonic() - started
    random = RandomRanker(args.seed)
    scores["random"] = {"stored": random.predict(stored), "search": random.predict(labeled)}
    print("scoring seconds: " + ", ".join(f"{m} {s:.0f}" for m, s in seconds.items()))
    if cache:
        np.savez(cache, **{f"{m}_{part}": np.asarray(v[part]) for m, v in scores.items() for part in v})
    return scores


def tenset_top_k(stored: LabeledPrograms, scores: np.ndarray, keys: list[str], weights: dict[str, float],
                 k: int) -> float:
    """TenSet's top-k over the stored programs of ``keys`` (weights: the tuned workload's task weights)."""
    keep = np.array([key in keys for key in stored.task_keys], dtype=bool)
    groups = np.array([keys.index(key) for key in np.array(stored.task_keys)[keep]])
    return float(top_k_score(np.asarray(scores)[keep], stored.latencies[keep], groups, k,
                             {i: weights[key] for i, key in enumerate(keys)}))


def agreement(rows: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """How well ``metric`` orders the (workload, model) pairs as the searches did (positive = agrees)."""
    rows = [r for r in rows if np.isfinite(r[metric])]
    sign = -1.0 if METRICS[metric] else 1.0  # "badness": lower is better, like the search outcome
    badness = [sign * r[metric] for r in rows]
    outcome = [r["search_relative"] for r in rows]
    tau = stats.kendalltau(badness, outcome)
    rho = stats.spearmanr(badness, outcome)
    agree = disagree = 0
    per_source = {}
    for source in sorted({r["source"] for r in rows}):
        inside = [(sign * r[metric], r["search_relative"]) for r in rows if r["source"] == source]
        a = d = 0
        for (m1, o1), (m2, o2) in itertools.combinations(inside, 2):
            if m1 == m2 or o1 == o2:
                continue
            a, d = (a + 1, d) if (m1 < m2) == (o1 < o2) else (a, d + 1)
        per_source[source] = {"agree": a, "disagree": d}
        agree, disagree = agree + a, disagree + d
    return {"pairs": len(rows), "kendall_tau": float(tau.statistic), "kendall_p": float(tau.pvalue),
            "spearman_rho": float(rho.statistic), "spearman_p": float(rho.pvalue),
            "within_workload_agree": agree, "within_workload_disagree": disagree,
            "within_workload_share": agree / (agree + disagree) if agree + disagree else float("nan"),
            "per_source": per_source}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="/tmp/search_runs.tar.xz",
                        help="a tarball of tuning work directories (the module docstring says where the study's is)")
    parser.add_argument("--extract-to", default="/tmp/search_runs")
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform", default="llvm-znver3-2c-1ceb2015", help="where the runs and the dataset's "
                        "training records were measured (the models' head)")
    parser.add_argument("--population", type=int, default=search_metrics.DEFAULT_POPULATION)
    parser.add_argument("--draws", type=int, default=search_metrics.DEFAULT_DRAWS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", help=f"scored models (default: {', '.join(SCORED)}; with --models-from-runs: all "
                        "of the runs')")
    parser.add_argument("--run-dirs", nargs="+", help="tuning work directories (or folders of them) instead of --runs")
    parser.add_argument("--models-from-runs", action="store_true", help="score the models that guided the runs")
    parser.add_argument("--default-model", default="tlp-cpu", help="checkpoint of runs made with the shipped model")
    parser.add_argument("--combine-with", nargs="*", default=[], help="earlier result files whose rows join the "
                        "agreement (scope 'pooled')")
    parser.add_argument("--cache", default="/tmp/search_metrics_scores.npz")
    parser.add_argument("--out", default=str(results_dir(__file__) / "search_metrics.json"))
    args = parser.parse_args()
    search_dirs = [Path(d) for d in args.run_dirs] if args.run_dirs else [extract(Path(args.runs),
                                                                                    Path(args.extract_to))]
    scored, args.checkpoints = (models_of_runs(search_dirs, args.default_model) if args.models_from_runs
                                else (dict(SCORED), dict(TLP_CHECKPOINTS)))
    scored.setdefault("random", "random")  # the floor: scored even where no random search ran
    args.models = [m for m in (args.models or ",".join(scored)).split(",") if m]
    if set(args.models) - set(scored):
        parser.error(f"unknown models {', '.join(sorted(set(args.models) - set(scored)))} (of {', '.join(scored)})")
    dataset = Dataset(args.dataset)
    programs = load_programs(dataset, args.platform)
    train, _ = programs.split_by_network(set(held_out_networks()))
    search = search_metrics.read_held_out_runs(search_dirs, train)
    populations = search_metrics.pick_populations(search, args.population, args.draws, args.seed)
    stored = stored_subset(programs, set(search.group_key))
    scores = score_all(args, dataset, programs, train, stored, search)
    finals: dict[str, dict[str, list[float]]] = {}
    for search_dir in search_dirs:
        for source, models in outcomes(search_dir).items():
            finals.setdefault(source, {}).update(models)

    rows, per_source = [], {}
    for source in search.sources:
        groups = [g for g, s in enumerate(search.group_source) if s == source]
        keys = [search.group_key[g] for g in groups]
        weights = {search.group_key[g]: search.weights[g] for g in groups}
        medians = {m: statistics.median(finals[source][run]) for m, run in scored.items()
                   if run in finals[source] and m in scores}
        best = min(medians.values())
        entry: dict[str, Any] = {
            "tasks": [search.task_names[k] for k in keys], "in_training": [k in search.training_tasks for k in keys],
            "stored_programs": int(sum(k in keys for k in stored.task_keys)),
            "search_final_latency_ms": {run: [round(v * 1e3, 4) for v in values]
                                        for run, values in sorted(finals[source].items())},
            "models": {}}
        for model, run in scored.items():
            if model not in scores:
                continue
            metrics = search_metrics.search_scores(search, scores[model]["search"], populations)["per_source"][source]
            row = {"source": source, "model": model, "held_out": not any(entry["in_training"]),
                   "tenset_top1": tenset_top_k(stored, scores[model]["stored"], keys, weights, 1),
                   "tenset_top5": tenset_top_k(stored, scores[model]["stored"], keys, weights, 5),
                   **{m: metrics[m] for m in ("all_top1", "late_top1", "late_top5", "pick_regret",
                                              "pick_regret_equal")},
                   "search_median_ms": medians[model] * 1e3 if model in medians else None,
                   "search_relative": medians[model] / best if model in medians else None}
            entry["models"][model] = {k: v for k, v in row.items() if k not in ("source", "model", "held_out")}
            entry.update({k: metrics[k] for k in ("programs", "late_programs", "populations")})
            if model in medians:
                rows.append(row)
        per_source[source] = entry

    held_out_rows = [r for r in rows if r["held_out"]]
    agreements = {"all_workloads": {m: agreement(rows, m) for m in METRICS},
                  "held_out_workloads": {m: agreement(held_out_rows, m) for m in METRICS}}
    if args.combine_with:
        pooled = held_out_rows + [r for path in args.combine_with for r in rows_of_result(Path(path)) if r["held_out"]]
        agreements["pooled_held_out_workloads"] = {m: agreement(pooled, m) for m in METRICS}
    result = {
        "date": time.strftime("%Y-%m-%d"), "scored_on": Platform.host().id,
        "latencies_measured_on": args.platform,
        "command": "benchmarks/ranking/search_metrics.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in
                                                              vars(args).items()
                                                              if k not in ("out", "cache", "models", "checkpoints"))
                   + " --models " + ",".join(args.models),
        "population": args.population, "draws": args.draws, "seed": args.seed, "checkpoints": args.checkpoints,
        "search_set": search.summary(), "per_source": per_source, "agreement": agreements,
    }
    write_json(args.out, result)
    print(f"{'workload':<18} {'model':<10} {'search':>7} {'tenset1':>7} {'all1':>6} {'late1':>6} {'late5':>6} "
          f"{'regret':>7} {'regretEq':>8}")
    for r in rows:
        print(f"{r['source'][:18]:<18} {r['model']:<10} {r['search_relative']:>7.3f} {r['tenset_top1']:>7.3f} "
              f"{r['all_top1']:>6.3f} {r['late_top1']:>6.3f} {r['late_top5']:>6.3f} {r['pick_regret']:>7.3f} "
              f"{r['pick_regret_equal']:>8.3f}")
    for scope, table in agreements.items():
        print(f"\nagreement with the searches, {scope} ({table['tenset_top1']['pairs']} pairs):")
        for metric, a in table.items():
            print(f"  {metric:<18} tau {a['kendall_tau']:+.3f} (p {a['kendall_p']:.2f})  rho {a['spearman_rho']:+.3f}"
                  f"  within-workload pairs {a['within_workload_agree']}/{a['within_workload_agree'] + a['within_workload_disagree']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
