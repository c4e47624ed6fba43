"""Where on the held-out tasks does a trace model lose to MetaSchedule's XGBoost? (issue 10, part 4)

TenSet's top-1 of a network is Σ w·best / Σ w·(latency of the model's pick), so it is decided by the tasks where a
model's first pick is several times slower than the best program, weighted by how long those tasks run. This
benchmark lists, per model, the ratio pick / best on every held-out task of one platform, split by how many
programs the task has (on the Zen 4, 96 % of the programs of held-out tasks with at most 64 programs are draws
from the design space; the larger tasks hold mostly search-produced programs), and the tasks that cost each
network the most.

Two steps (the first trains XGBoost as ``tlp eval --baselines xgb`` does, ~15 min on 2 cores for 31k records):

    .venv/bin/python benchmarks/heldout_picks.py baseline --platform llvm-znver4-2c-2d80d0a8 \\
        --out benchmarks/results/xgb_zen4_test_scores.npz
    .venv/bin/python benchmarks/heldout_picks.py report --bundle .sweep --baseline \\
        benchmarks/results/xgb_zen4_test_scores.npz --scores benchmarks/results/recipe_sweep_runs/cpu3/scores.npz \\
        --models lstm+avg-tail --json benchmarks/results/heldout_picks_zen4.json

With ``--bootstrap N`` (default 200) each model's TenSet top-1 also gets a 90 % interval over N resamples of every
task's programs, and its lead over the first baseline on the same resamples (``tlp.evaluation.bootstrap``, what
``tlp eval`` prints): how much of a difference in TenSet top-1 the held-out sample can support.

``--bundle`` is a ``recipe_sweep.py prepare`` bundle of the same platform (its test split is the one scored);
``--scores`` files are ``recipe_sweep.py train`` outputs; ``--models`` picks the recipes whose seeds are read
(each seed a model, and their rank-percentile mean as one ensemble).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

# pylint: disable=wrong-import-position
from recipe_sweep import test_split  # the same bundle -> test programs as the sweep's scores
from tlp.evaluation import rank_percentiles, score_models

SMALL_TASK = 64  # programs: on the Zen 4, held-out tasks up to this size hold (almost) only random draws
_GROUPS = (("all", lambda n: True), (f"<={SMALL_TASK}", lambda n: n <= SMALL_TASK),
           (f">{SMALL_TASK}", lambda n: n > SMALL_TASK))


def baseline(args: argparse.Namespace) -> None:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset
    from tlp.evaluation.baselines import MetaScheduleBaseline
    from tlp.features.tensors import load_programs
    from tlp.workloads import held_out_networks

    dataset = Dataset(args.dataset)
    train, test = load_programs(dataset, args.platform).split_by_network(set(held_out_networks()))
    started = time.monotonic()
    ranker = MetaScheduleBaseline(args.baseline, dataset, args.platform)
    ranker.fit(train)
    scores = ranker.predict(test)
    np.savez_compressed(args.out, scores=scores, latencies=np.asarray(test.latencies, dtype=np.float64),
                        task_keys=np.array(test.task_keys), baseline=args.baseline, platform=args.platform,
                        train_programs=len(train.traces), seconds=time.monotonic() - started)
    print(f"{args.out}: {args.baseline} trained on {len(train.traces)} programs, {len(scores)} test scores")


def _pick_ratios(scores: np.ndarray, latencies: np.ndarray, keys: np.ndarray) -> dict[str, float]:
    ratios = {}
    for key in np.unique(keys):
        index = np.nonzero(keys == key)[0]
        ratios[str(key)] = float(latencies[index[np.argmax(scores[index])]] / latencies[index].min())
    return ratios


def _summary(ratios: dict[str, float], sizes: dict[str, int]) -> dict[str, Any]:
    out = {}
    for label, keep in _GROUPS:
        values = np.array([r for k, r in ratios.items() if keep(sizes[k])])
        out[label] = {"tasks": int(len(values)), "median": float(np.median(values)),
                      "geomean": float(np.exp(np.log(values).mean())), "over_2x": float(np.mean(values > 2)),
                      "over_3x": float(np.mean(values > 3))}
    return out


def _origin_mix(dataset_path: str, platform: str, sizes: dict[str, int]) -> dict[str, Any]:
    """Per task group: how the dataset's valid programs of those tasks were produced (random / evolved draws of
    ``tlp collect``, search rounds, imports), re-measured programs under their first origin."""
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.info import task_origins
    from tlp.dataset.store import Dataset

    per_task = task_origins(Dataset(dataset_path), platform)
    out = {}
    print(f"\nhow the held-out tasks' programs were produced ({dataset_path}, now)")
    for label, keep in _GROUPS:
        counts = sum((per_task.get(k, Counter()) for k, n in sizes.items() if keep(n)), Counter())
        total = sum(counts.values())
        in_bundle = sum(n for n in sizes.values() if keep(n))
        out[label] = {"programs": total, "programs_in_bundle": in_bundle, "sources": dict(counts.most_common())}
        shares = ", ".join(f"{source} {count / total:.0%}" for source, count in counts.most_common())
        print(f"  tasks {label:<5} {total:>6} programs ({in_bundle} in the bundle): {shares}")
    return out


def _bootstrap(test: Any, models: dict[str, np.ndarray], baseline_name: str, networks: list[str], draws: int
               ) -> dict[str, Any]:
    """Each model's TenSet top-1 interval and its lead over ``baseline_name``, every model scored on the same
    resamples (one ``resampled_top1`` call)."""
    # pylint: disable=import-outside-toplevel
    from tlp.evaluation.bootstrap import interval, paired_lead, resampled_top1

    names = list(models)
    top1 = resampled_top1(test, models, networks, draws, seed=0)
    base = top1[:, names.index(baseline_name)]
    out = {}
    print(f"\n{'model':<26} TenSet top-1, 90 % interval over {draws} resamples; lead over {baseline_name}")
    for m, name in enumerate(names):
        row = interval(top1[:, m])
        lead = ""
        if name != baseline_name:
            row["lead"] = paired_lead(top1[:, m], base)
            low, high = row["lead"]["interval"]
            lead = (f"  lead {row['lead']['median']:+.3f} [{low:+.3f}, {high:+.3f}], "
                    f"ahead in {row['lead']['reference_leads']:.0%}")
        out[name] = row
        print(f"{name:<26} {row['median']:.3f} [{row['interval'][0]:.3f}, {row['interval'][1]:.3f}]{lead}")
    return out


def report(args: argparse.Namespace) -> None:
    # pylint: disable=import-outside-toplevel
    from tlp.features.cache import read_cache

    bundle = Path(args.bundle)
    meta = json.loads((bundle / "bundle.json").read_text())
    programs, _ = read_cache(bundle / "programs.npz")
    test = test_split(programs, meta)
    test = dataclasses.replace(test, latencies=test.latencies[:, 0])
    keys = np.array(test.task_keys)
    models: dict[str, np.ndarray] = {}
    for path in args.baseline:  # the first one is the reference of the costliest-task lists
        base = np.load(path)
        if str(base["platform"]) != meta["platform"] or not np.array_equal(base["task_keys"], keys) \
                or not np.allclose(base["latencies"].reshape(-1), test.latencies):
            raise SystemExit(f"{path}: its test programs are not the bundle's ({meta['platform']}); "
                             "run the baseline step again on the dataset the bundle was prepared from")
        name = str(base["baseline"])  # the same baseline trained on other records: named by its file too
        models[name if name not in models else f"{name} ({Path(path).stem})"] = base["scores"]
    baseline_name = next(iter(models))
    wanted = args.models.split(",")
    for path in args.scores:
        with np.load(path) as npz:
            for name in npz.files:
                recipe = name.rsplit("-seed", 1)[0]
                if name.endswith(" test") and recipe in wanted:
                    models[name[: -len(" test")]] = npz[name]
    groups = test.group_ids()
    for recipe in wanted:
        members = [m for m in models if m.rsplit("-seed", 1)[0] == recipe]
        if len(members) > 1:
            mean = sum(rank_percentiles(models[m], groups) for m in members) / len(members)
            models[f"{recipe} x{len(members)}"] = mean
    sizes = {str(k): int((keys == k).sum()) for k in np.unique(keys)}
    result: dict[str, Any] = {"platform": meta["platform"], "bundle": str(bundle), "baseline": args.baseline,
                              "models": {}, "costliest": {}}
    print(f"pick / best latency per held-out task ({meta['platform']}); tasks with <= {SMALL_TASK} programs are "
          "(on the Zen 4) almost all random draws")
    print(f"{'model':<26} {'tasks':<7} {'n':>3} {'median':>7} {'geomean':>8} {'>2x':>5} {'>3x':>5}")
    ratios = {}
    for name, scores in models.items():
        ratios[name] = _pick_ratios(scores, test.latencies, keys)
        result["models"][name] = _summary(ratios[name], sizes)
        for label, row in result["models"][name].items():
            print(f"{name:<26} {label:<7} {row['tasks']:>3} {row['median']:>7.2f} {row['geomean']:>8.2f} "
                  f"{row['over_2x']:>5.2f} {row['over_3x']:>5.2f}")
    # TenSet's scores of the same models (what recipe_sweep.py score reports; baselines: tlp eval's)
    result["tenset"] = {}
    print(f"\n{'model':<26} TenSet top-1 / top-5 over {len(keys)} held-out programs")
    for name, scores in models.items():
        tenset = score_models(test, scores, meta["held_out_networks"])
        result["tenset"][name] = {"top1": tenset["top1"], "top5": tenset["top5"],
                                  "per_network_top1": {n: r["top1"] for n, r in tenset["per_network"].items()}}
        print(f"{name:<26} {tenset['top1']:.3f} / {tenset['top5']:.3f}")
    if args.bootstrap:
        result["bootstrap"] = _bootstrap(test, models, baseline_name, meta["held_out_networks"], args.bootstrap)
    result["origins"] = _origin_mix(args.dataset, meta["platform"], sizes)
    # The tasks that cost each network the most under the first model of --models (ensemble if there is one).
    focus = next((m for m in models if " x" in m), list(models)[-1])
    for network in meta["held_out_networks"]:
        rows = []
        for key in sizes:
            weight = test.catalogue.get(key, {}).get("networks", {}).get(network)
            if not weight:
                continue
            best = float(test.latencies[keys == key].min())
            rows.append({"task": key, "name": test.catalogue[key].get("name"), "weight": weight,
                         "programs": sizes[key], "best_ms": best * 1e3,
                         "loss_ms": weight * best * (ratios[focus][key] - 1) * 1e3,
                         "ratio": ratios[focus][key], "baseline_ratio": ratios[baseline_name][key]})
        rows.sort(key=lambda r: -r["loss_ms"])
        result["costliest"][network] = rows[: args.top]
        print(f"\n{network}: costliest tasks for {focus} (weight x (pick - best)) vs {baseline_name}")
        for r in rows[: args.top]:
            print(f"  {r['name']:<28} w{r['weight']:>3} n{r['programs']:>5} best {r['best_ms']:7.3f} ms  "
                  f"loss {r['loss_ms']:7.2f} ms  pick/best {r['ratio']:5.2f} vs {r['baseline_ratio']:5.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    b = steps.add_parser("baseline")
    b.add_argument("--dataset", default="datasets/tlp-cpu")
    b.add_argument("--platform", required=True)
    b.add_argument("--baseline", default="xgb", choices=["xgb", "mlp"])
    b.add_argument("--out", required=True)
    r = steps.add_parser("report")
    r.add_argument("--bundle", required=True)
    r.add_argument("--dataset", default="datasets/tlp-cpu", help="read for the origin mix of the held-out tasks")
    r.add_argument("--baseline", required=True, nargs="+", help="the baseline step's .npz file(s)")
    r.add_argument("--scores", nargs="+", required=True, help="recipe_sweep.py train scores.npz files")
    r.add_argument("--models", default="lstm+avg-tail", help="comma-separated recipes")
    r.add_argument("--top", type=int, default=5)
    r.add_argument("--bootstrap", type=int, default=200, help="resamples for TenSet top-1 intervals (0: none)")
    r.add_argument("--json")
    args = parser.parse_args()
    {"baseline": baseline, "report": report}[args.step](args)


if __name__ == "__main__":
    main()
