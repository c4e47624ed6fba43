"""TenSet's held-out top-1 on re-timed labels: how much of the score is the stored single timings? (issue 10, part 4)

TenSet's top-1 of a network is Σ w·best / Σ w·(latency of the model's pick) over its tasks, every latency one
stored timing. Two fresh timings of one program on these 2-core VMs differ by a median 15-37 %
(``measurement_resolution.py``), so a task's stored best is the luckiest of its programs' draws and a pick is
judged by one draw of its own: the score of every model is pulled down by the noise, and which pick "wins" within
1.1-1.25x is partly chance. The minimum of 3 time-spread timings is stable to 3-4 % (``timing_protocol.py``).

This re-times, on the machine of the scored platform, every program that decides a held-out task's top-1 for the
compared models: per task the ``--top`` programs with the lowest stored latency (where the true best almost surely
is) and each model's first pick, ``--passes`` times, each pass in a fresh ``Measurer``, the order reversed on
alternate passes. Then TenSet's top-1 (the formula of ``tlp eval``) with each program's latency the minimum of its
passes, best = the lowest re-timed latency of the task's re-timed programs, next to the same score on the stored
timings. Run it alone on the machine; the passes are saved as they finish (a rerun with the same ``--out`` resumes).

    .venv/bin/python benchmarks/retime_heldout.py --platform llvm-znver4-2c-2d80d0a8 \\
        --baseline xgb=benchmarks/results/xgb_zen4_test_scores_variants.npz \\
        --baseline mlp-30998=benchmarks/results/mlp_zen4_test_scores_split2.npz \\
        --out benchmarks/results/retime_heldout_zen4.json

Models: the TLP checkpoint (``--model``, default the shipped one, scored by the platform's head) and baselines
whose test scores were saved by ``heldout_picks.py baseline`` (matched to the test programs by task and stored
latency; a program they did not score is never their pick).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

# pylint: disable=wrong-import-position
from tlp._tvm import ms, tvm
from tlp.dataset.measure import time_once
from tlp.dataset.store import Dataset, trace_id
from tlp.evaluation import head_scores, score_models, search_metrics
from tlp.evaluation.baselines import MetaScheduleBaseline, replay_candidates
from tlp.features.tensors import LabeledPrograms, load_programs
from tlp.model.estimator import TLPModel
from tlp.models import model_path
from tlp.platform import Platform
from tlp.workloads import held_out_networks


@dataclasses.dataclass
class ScoredPrograms:
    """The programs one metric ranks, each model's scores of them, and the metric on any latencies of a subset."""

    traces: list[Any]
    task_keys: list[str]
    latencies: np.ndarray  # stored, seconds
    groups: np.ndarray  # what one top-1 ranks within: a task (TenSet) or a (tuned source, task) (all-round)
    scores: dict[str, np.ndarray]
    workload_json: Callable[[str], list[Any]]
    metric: Callable[[np.ndarray, np.ndarray, np.ndarray], dict[str, Any]]  # (scores, latencies, mask) -> top-1

    def ids(self) -> list[str]:
        return [trace_id(k, t) for k, t in zip(self.task_keys, self.traces)]


def aligned_scores(task_keys: list[str], latencies: np.ndarray, path: str) -> np.ndarray:
    """A saved baseline's test scores in the given programs' order, matched by (task, stored latency); unmatched
    programs get -inf (never picked)."""
    saved = np.load(path)
    slots: dict[tuple[str, float], list[int]] = {}
    for i, (key, latency) in enumerate(zip(saved["task_keys"], saved["latencies"])):
        slots.setdefault((str(key), float(latency)), []).append(i)
    scores = np.full(len(task_keys), -np.inf)
    for i, (key, latency) in enumerate(zip(task_keys, latencies)):
        matches = slots.get((key, float(latency)))
        if matches:
            scores[i] = saved["scores"][matches.pop(0)]
    return scores


def search_aligned_scores(ids: list[str], path: str) -> np.ndarray:
    """A baseline's saved scores of the search programs (``--train-baseline``), matched by trace id."""
    saved = np.load(path)
    if "search_ids" not in saved:
        sys.exit(f"{path}: holds no search-program scores (made without --search-runs)")
    by_id = dict(zip(map(str, saved["search_ids"]), saved["search_scores"]))
    return np.array([by_id.get(i, -np.inf) for i in ids], dtype=np.float64)


def sweep_scores(paths: list[str], recipe: str, part: str, count: int) -> dict[str, np.ndarray]:
    """``recipe_sweep.py train`` scores of every seed of ``recipe`` (``seed<N>`` -> scores): ``part`` "test" or
    "search", in the order of that sweep's bundle, which must be the order scored here (checked by the caller)."""
    scores: dict[str, np.ndarray] = {}
    for path in paths:
        saved = np.load(path)
        for key in saved.files:
            name, _, which = key.rpartition(" ")
            head, _, seed = name.rpartition("-seed")
            if head == recipe and which == part:
                if len(saved[key]) != count:
                    sys.exit(f"{path}: {key} scores {len(saved[key])} programs, not the {count} scored here")
                scores[f"seed{seed}"] = np.asarray(saved[key], dtype=np.float64)
    if not scores:
        sys.exit(f"{', '.join(paths)}: no {part} scores of recipe {recipe}")
    return dict(sorted(scores.items(), key=lambda item: int(item[0][4:])))


def chosen_programs(programs: ScoredPrograms, top: int) -> dict[int, list[str]]:
    """Index -> why it is re-timed: ``best-<rank>`` among its group's stored latencies, ``<model>``: its pick."""
    roles: dict[int, list[str]] = {}
    for group in np.unique(programs.groups):
        index = np.nonzero(programs.groups == group)[0]
        for rank, i in enumerate(index[np.argsort(programs.latencies[index], kind="stable")[:top]]):
            roles.setdefault(int(i), []).append(f"best-{rank + 1}")
        for name, s in programs.scores.items():
            roles.setdefault(int(index[np.argmax(s[index])]), []).append(name)
    return roles


def tenset_programs(args: argparse.Namespace, dataset: Dataset, test: LabeledPrograms,
                    tlp_scores: np.ndarray) -> ScoredPrograms:
    """The test split, TenSet's top-1 (``tlp eval``'s formula: per network, then the mean over networks)."""
    scores = {"tlp": tlp_scores}
    for spec in args.baseline:
        name, path = spec.split("=", 1)
        scores[name] = aligned_scores(test.task_keys, test.latencies, path)
    if args.sweep_scores:
        scores.update(sweep_scores(args.sweep_scores, args.sweep_recipe, "test", len(test.traces)))
    networks = held_out_networks()

    def metric(s: np.ndarray, latencies: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
        subset = dataclasses.replace(test.subset(mask), latencies=latencies[mask])
        result = score_models(subset, s[mask], networks)
        return {"top1": result["top1"], "per_network": {n: r["top1"] for n, r in result["per_network"].items()}}
    groups = np.unique(np.array(test.task_keys), return_inverse=True)[1]
    return ScoredPrograms(test.traces, test.task_keys, test.latencies, groups, scores,
                          dataset.store(args.platform).workload_json, metric)


def search_programs(args: argparse.Namespace, model: TLPModel, search: search_metrics.SearchSet) -> ScoredPrograms:
    """The tuning runs' pooled programs (none of the training records), all-round top-1 (``tlp eval
    --search-runs``'s headline: per tuned source, then the mean over sources)."""
    labeled = search.labeled()
    scores = {"tlp": np.asarray(model.predict(labeled.traces, [labeled.extents.get(k) for k in search.task_keys],
                                              model.head_index(args.platform)), dtype=np.float64)}
    ids = [trace_id(k, t) for k, t in zip(search.task_keys, search.traces)]
    for spec in args.baseline:
        name, path = spec.split("=", 1)
        scores[name] = search_aligned_scores(ids, path)
    if args.sweep_scores:
        scores.update(sweep_scores(args.sweep_scores, args.sweep_recipe, "search", len(search.traces)))

    def metric(s: np.ndarray, latencies: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
        per_source = {}
        for source in search.sources:
            in_source = mask & np.isin(search.groups, [g for g, x in enumerate(search.group_source) if x == source])
            per_source[source] = search_metrics._top_k(s, latencies, search.groups, in_source, 1, search.weights)
        return {"top1": float(np.nanmean(list(per_source.values()))), "per_source": per_source}
    return ScoredPrograms(search.traces, search.task_keys, search.latencies, search.groups, scores,
                          lambda key: search.workloads[key], metric)


def train_baseline(args: argparse.Namespace, dataset: Dataset, train: LabeledPrograms, test: LabeledPrograms,
                   search: search_metrics.SearchSet | None, path: str) -> None:
    """Train MetaSchedule's ``args.train_baseline`` as ``tlp eval`` does and save its scores of the test split
    (``heldout_picks.py baseline``'s format) and, with ``--search-runs``, of the search programs."""
    started = time.monotonic()
    ranker = MetaScheduleBaseline(args.train_baseline, dataset, args.platform)
    ranker.fit(train)
    extra = {}
    if search is not None:
        extra = {"search_scores": search_metrics.metaschedule_scores(ranker.model, ranker.replay.target, search),
                 "search_ids": np.array([trace_id(k, t) for k, t in zip(search.task_keys, search.traces)])}
    np.savez_compressed(path, scores=np.asarray(ranker.predict(test)), latencies=test.latencies,
                        task_keys=np.array(test.task_keys), baseline=args.train_baseline, platform=args.platform,
                        train_programs=len(train.traces), seconds=time.monotonic() - started, **extra)
    print(f"{path}: {args.train_baseline} trained on {len(train.traces)} programs in "
          f"{time.monotonic() - started:.0f} s", flush=True)


def measure(programs: ScoredPrograms, roles: dict[int, list[str]], args: argparse.Namespace,
            out: dict[str, Any]) -> None:
    """``args.passes`` timings of every chosen program, each pass saved into ``out`` (and to disk) when done."""
    order = sorted(roles)
    all_ids = programs.ids()
    ids = [all_ids[i] for i in order]
    if out["passes"] and [p["id"] for p in out["programs"]] != ids:
        sys.exit(f"{args.out}: its passes timed other programs (another model, --top or dataset); use a new --out")
    target = tvm.target.Target(Dataset(args.dataset).store(args.platform).platform.target)
    workloads: dict[str, Any] = {}
    candidates = []
    for i in order:
        key = programs.task_keys[i]
        if key not in workloads:
            workloads[key] = ms.database.Workload.from_json(programs.workload_json(key))
        candidates.append(replay_candidates(workloads[key], [programs.traces[i]], target)[0])
    out["programs"] = [{"id": t, "task": programs.task_keys[i], "group": int(programs.groups[i]),
                        "stored": float(programs.latencies[i]), "roles": roles[i]} for t, i in zip(ids, order)]
    while len(out["passes"]) < args.passes:
        reverse = len(out["passes"]) % 2 == 1
        sequence = list(range(len(order)))[:: -1 if reverse else 1]
        started = time.monotonic()
        latencies = time_once(target.export(), [candidates[i] for i in sequence])
        timed = dict(zip(sequence, latencies))
        out["passes"].append({"seconds": time.monotonic() - started, "finished": datetime.datetime.now().isoformat(
            timespec="seconds"), "latencies": [timed[n] for n in range(len(order))]})
        Path(args.out).write_text(json.dumps(out, indent=1))
        print(f"pass {len(out['passes'])}: {len(order)} programs in {out['passes'][-1]['seconds']:.0f} s", flush=True)


def report(programs: ScoredPrograms, out: dict[str, Any]) -> dict[str, Any]:
    """Each model's top-1 on the stored timings (all programs), on the stored timings of the chosen programs (the
    same number: the check that every pick and best was chosen) and on the re-timed ones (each chosen program at
    the minimum of its passes; programs no pass timed are left out)."""
    position = {t: i for i, t in enumerate(programs.ids())}
    retimed = np.full(len(programs.traces), np.nan)
    for number, program in enumerate(out["programs"]):
        timings = [p["latencies"][number] for p in out["passes"] if p["latencies"][number] is not None]
        if timings:
            retimed[position[program["id"]]] = min(timings)
    chosen = ~np.isnan(retimed)
    everything = np.ones(len(programs.traces), dtype=bool)
    summary: dict[str, Any] = {name: {"stored": programs.metric(s, programs.latencies, everything),
                                      "chosen_stored": programs.metric(s, programs.latencies, chosen),
                                      "retimed": programs.metric(s, retimed, chosen)}
                               for name, s in programs.scores.items()}
    # The same with fewer stored-fastest programs re-timed per group: if the score still moves from --top / 2 to
    # --top, re-timing more of each group could move it further.
    for top in sorted({1, 2, 4, out["top"] // 2, out["top"]} - {0}):
        kept = np.zeros(len(programs.traces), dtype=bool)
        for program in out["programs"]:
            if any(not r.startswith("best-") or int(r[5:]) <= top for r in program["roles"]):
                kept[position[program["id"]]] = True
        for name, s in programs.scores.items():
            summary[name].setdefault("retimed_by_top", {})[top] = programs.metric(s, retimed, chosen & kept)["top1"]
    ratios = retimed[chosen] / programs.latencies[chosen]
    summary["timing"] = {
        "programs": len(out["programs"]), "retimed": int(chosen.sum()),
        "retimed_over_stored": {"median": float(np.median(ratios)), "p10": float(np.percentile(ratios, 10)),
                                "p90": float(np.percentile(ratios, 90))},
        "stored_best_is_retimed_best": _stored_best_kept(programs, retimed, chosen),
        "retimed_best_stored_rank": _retimed_best_rank(out, retimed, position), "timing_spread": timing_spread(out)}
    return summary


def timing_spread(out: dict[str, Any]) -> dict[str, float]:
    """How far one fresh timing lands from the stored one, and two fresh timings from each other (median |log
    ratio| as a fraction): the noise the minimum of the passes removes. Needs only a results file."""
    passes = np.array([[np.nan if p["latencies"][n] is None else p["latencies"][n] for p in out["passes"]]
                       for n in range(len(out["programs"]))], dtype=np.float64)
    stored = np.array([p["stored"] for p in out["programs"]])
    spread = {"first_pass_vs_stored": float(np.expm1(np.nanmedian(np.abs(np.log(passes[:, 0] / stored)))))}
    if passes.shape[1] > 1:
        spread["first_vs_second_pass"] = float(np.expm1(np.nanmedian(np.abs(np.log(passes[:, 0] / passes[:, 1])))))
    return spread


def _stored_best_kept(programs: ScoredPrograms, retimed: np.ndarray, chosen: np.ndarray) -> float:
    """Share of groups whose stored best is still the best after re-timing."""
    same, groups = 0, 0
    for group in np.unique(programs.groups[chosen]):
        index = np.nonzero(chosen & (programs.groups == group))[0]
        same += int(np.argmin(programs.latencies[index]) == np.argmin(retimed[index]))
        groups += 1
    return same / groups


def _retimed_best_rank(out: dict[str, Any], retimed: np.ndarray, position: dict[str, int]) -> dict[str, int]:
    """How often the re-timed best was the stored best-1, best-2, ... (or only a model's pick): if the deepest
    stored rank wins often, ``--top`` was too small to be sure the true best was re-timed."""
    best: dict[int, tuple[float, list[str]]] = {}
    for program in out["programs"]:
        latency = retimed[position[program["id"]]]
        if latency < best.get(program["group"], (np.inf, []))[0]:
            best[program["group"]] = (latency, program["roles"])
    counts: dict[str, int] = {}
    for _, roles in best.values():
        rank = next((r for r in roles if r.startswith("best-")), "a pick only")
        counts[rank] = counts.get(rank, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (len(item[0]), item[0])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform", help="the platform scored (required); run this on its machine")
    parser.add_argument("--model", default=None, help="TLP checkpoint (default: the shipped model)")
    parser.add_argument("--baseline", action="append", default=[], metavar="NAME=NPZ",
                        help="a baseline's saved test scores (heldout_picks.py baseline)")
    parser.add_argument("--sweep-scores", nargs="+", metavar="NPZ",
                        help="recipe_sweep.py scores of a recipe's seeds (bundle of this dataset's test split and "
                             "search runs, same order): each seed's picks are re-timed too")
    parser.add_argument("--sweep-recipe", default="lstm1-soft-slowdown-distil-transfer-mixed+avg-tail")
    parser.add_argument("--top", type=int, default=8, help="stored-fastest programs re-timed per task")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--search-runs", nargs="+", metavar="DIR",
                        help="score all-round top-1 over these tuning runs' programs instead of TenSet's test split")
    parser.add_argument("--train-baseline", choices=("xgb", "mlp"),
                        help="first train this MetaSchedule model as tlp eval does and save its scores")
    parser.add_argument("--train-baseline-out", metavar="NPZ", help="where --train-baseline saves its scores")
    parser.add_argument("--out", help="the re-timing results (JSON; resumed when it exists)")
    parser.add_argument("--timing-of", metavar="JSON",
                        help="only print the timing spread of a results file (nothing scored or measured)")
    args = parser.parse_args()
    if args.timing_of:
        print(json.dumps(timing_spread(json.loads(Path(args.timing_of).read_text()))))
        return
    if not args.platform:
        parser.error("--platform is required")
    for spec in args.baseline:
        if "=" not in spec or not Path(spec.split("=", 1)[1]).is_file():
            parser.error(f"--baseline {spec!r}: expected NAME=NPZ with an existing file (heldout_picks.py baseline)")
    if not args.out and not args.train_baseline:
        parser.error("--out is required (unless only --train-baseline runs)")
    if args.train_baseline and not args.train_baseline_out:
        parser.error("--train-baseline needs --train-baseline-out")
    host = Platform.host().id
    if args.platform != host:
        sys.exit(f"this machine is platform {host}; {args.platform} must be re-timed on its own machine")
    started = time.monotonic()
    dataset = Dataset(args.dataset)
    train, test = load_programs(dataset, args.platform).split_by_network(set(held_out_networks()))
    search = search_metrics.read_held_out_runs(args.search_runs, train) if args.search_runs else None
    if args.train_baseline:
        train_baseline(args, dataset, train, test, search, args.train_baseline_out)
        if not args.out:
            return
    model = TLPModel.load(model_path(args.model))
    programs = (search_programs(args, model, search) if search is not None else
                tenset_programs(args, dataset, test, np.asarray(head_scores(model, test, args.platform), np.float64)))
    unscored = {name: int(np.isinf(s).sum()) for name, s in programs.scores.items()}
    roles = chosen_programs(programs, args.top)
    print(f"{len(programs.traces)} programs in {len(np.unique(programs.groups))} groups (unscored per model: "
          f"{unscored}); re-timing {len(roles)} ({time.monotonic() - started:.0f} s to score)", flush=True)
    out = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {"passes": []}
    out.update({"platform": args.platform, "host": host, "top": args.top, "model": str(model_path(args.model)),
                "baselines": args.baseline, "unscored": unscored, "metric": "all-round top-1" if args.search_runs
                else "TenSet top-1", "search_runs": args.search_runs, "programs_scored": len(programs.traces),
                "date": datetime.date.today().isoformat()})
    measure(programs, roles, args, out)
    out["summary"] = report(programs, out)
    Path(args.out).write_text(json.dumps(out, indent=1))
    for name, row in out["summary"].items():
        if name != "timing":
            parts = row["retimed"].get("per_network") or row["retimed"]["per_source"]
            print(f"{name:<12} stored {row['stored']['top1']:.3f}  chosen-stored {row['chosen_stored']['top1']:.3f}  "
                  f"re-timed {row['retimed']['top1']:.3f}  " + "  ".join(f"{n} {v:.3f}" for n, v in parts.items()))
    print(json.dumps(out["summary"]["timing"]))

if __name__ == "__main__":
    main()
