"""``tlp eval``: TenSet-style top-k scores of TLP and baselines on the held-out networks, same records for all.

For a network N with tasks t (weights w_t = how often t runs in N):
``top-k(N) = Σ_t w_t · best latency of t / Σ_t w_t · (best true latency among the model's k top-ranked programs of t)``.
Also reported: pairwise ranking accuracy within tasks. Every model is trained on the same training records
(tasks of the held-out networks never appear there) and scored on the same test records.

With tuning work directories (``tlp eval --search-runs DIR...``), every model is also scored on what a search sees
(:mod:`tlp.evaluation.search_metrics`): top-1 among all the runs' measured programs (the headline then: its model
order agreed best with the measured searches),
among the late rounds' programs, and the regret of its pick in a search population.

TenSet's top-1 comes with a bootstrap interval (:mod:`tlp.evaluation.bootstrap`): each task's programs resampled,
every model scored on the same resamples, and the interval of TLP's lead over each baseline.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from tlp.dataset.store import Dataset, DatasetError
from tlp.evaluation.bootstrap import DEFAULT_DRAWS, bootstrap_top1, format_bootstrap
from tlp.features.cache import CHUNK, featurized_chunks
from tlp.features.formats import record_format_of
from tlp.features.tensors import LabeledPrograms, group_rows, load_programs, pick
from tlp.model.estimator import top_k_score
from tlp.platform import METASCHEDULE_FORMAT


def pairwise_accuracy(scores: np.ndarray, latencies: np.ndarray, groups: np.ndarray) -> float:
    """Share of same-task pairs with different latencies that the scores order correctly (faster = higher; a tie
    counts as wrong). Counted in O(n log n) a task, never pair by pair: a task of 10k programs has 50M pairs."""
    right = total = 0
    for _, index in group_rows(groups):
        index = index[~np.isnan(latencies[index])]
        group_right, group_total = _ordered_pairs(np.asarray(scores, dtype=np.float64)[index], latencies[index])
        right, total = right + group_right, total + group_total
    return right / total if total else float("nan")


def _ordered_pairs(scores: np.ndarray, latencies: np.ndarray) -> tuple[int, int]:
    """(pairs of different latencies whose faster program scores strictly higher, pairs of different latencies)."""
    score_rank = np.unique(scores, return_inverse=True)[1] + 1  # 1-based, equal scores share a rank
    tree = np.zeros(int(score_rank.max(initial=0)) + 1, dtype=np.int64)  # Fenwick tree: slower programs per rank
    order = np.argsort(-latencies, kind="stable")  # slowest first
    right, seen, start = 0, 0, 0
    total = 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and latencies[order[stop]] == latencies[order[start]]:
            stop += 1
        tied = order[start:stop]  # equal latencies: no pair among them, so all are counted before any is added
        for rank in score_rank[tied].tolist():
            below, i = 0, rank - 1
            while i > 0:
                below += int(tree[i])
                i -= i & -i
            right += below
        total += seen * len(tied)
        for rank in score_rank[tied].tolist():
            i = rank
            while i < len(tree):
                tree[i] += 1
                i += i & -i
        seen += len(tied)
        start = stop
    return right, total


# Latency ratios (slower / faster) at which pairwise ordering is reported: a model's "resolution" is how far apart two
# programs of a task must be before it orders them right.
RATIO_BINS = (1.0, 1.1, 1.25, 1.5, 2.0, np.inf)
# Program pairs compared at once (memory ~30 bytes a pair).
PAIRS_AT_ONCE = 1 << 22


def pair_counts_by_ratio(scores: np.ndarray, latencies: np.ndarray, groups: np.ndarray | None = None,
                         max_per_group: int = 1500, seed: int = 0) -> np.ndarray:
    """``[bins, 2]``: per latency-ratio bin (:data:`RATIO_BINS`), the same-group pairs the scores order right
    (higher score = faster; a tie counts as wrong) and all pairs. Programs without a latency (NaN) and pairs of equal
    latency are left out; a group of more than ``max_per_group`` programs is subsampled (seeded) to bound memory."""
    groups = np.zeros(len(scores), dtype=np.int64) if groups is None else np.asarray(groups)
    rng = np.random.default_rng(seed)
    counts = np.zeros((len(RATIO_BINS) - 1, 2), dtype=np.int64)
    for _, index in group_rows(groups):
        index = index[~np.isnan(latencies[index])]
        if len(index) > max_per_group:
            index = np.sort(rng.choice(index, max_per_group, replace=False))
        s, lat = np.asarray(scores, dtype=np.float64)[index], latencies[index]
        # The pairs of a block of rows at a time: a task of n programs has n^2 / 2 pairs (30k programs: 7 GB at once).
        for block in np.array_split(np.arange(len(index)), -(-len(index) ** 2 // PAIRS_AT_ONCE) or 1):
            faster = lat[block, None] < lat[None, :]  # each unordered pair once, from its faster program
            ratio = lat[None, :] / np.where(faster, lat[block, None], np.inf)
            right = faster & (s[block, None] > s[None, :])
            bin_of = np.searchsorted(RATIO_BINS, ratio[faster], side="right") - 1
            counts[:, 0] += np.bincount(bin_of, weights=right[faster], minlength=len(counts)).astype(np.int64)
            counts[:, 1] += np.bincount(bin_of, minlength=len(counts))
    return counts


def accuracy_by_ratio(counts: np.ndarray) -> dict[str, Any]:
    """``pair_counts_by_ratio``'s counts as ``{"1-1.1x": {"right": share, "pairs": n}, ...}``."""
    return {f"{lo:g}-{hi:g}x": {"right": float(c[0] / c[1]) if c[1] else None, "pairs": int(c[1])}
            for lo, hi, c in zip(RATIO_BINS[:-1], RATIO_BINS[1:], counts)}


def rank_percentiles(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each program's rank within its task, 0 (lowest score) to 1 (highest): comparable across models."""
    out = np.zeros(len(scores))
    for _, index in group_rows(groups):
        ranks = np.argsort(np.argsort(scores[index], kind="stable"), kind="stable")
        out[index] = ranks / max(1, len(index) - 1)
    return out


def score_models(programs: LabeledPrograms, scores: np.ndarray, networks: list[str]) -> dict[str, Any]:
    """top-1, top-5 and pairwise accuracy per network, and their means over networks."""
    groups = programs.group_ids()
    per_network: dict[str, Any] = {}
    for network in networks:
        in_network = np.array([network in programs.networks_of(k) for k in programs.task_keys], dtype=bool)
        if not in_network.any():
            continue
        weights: dict[int, float] = {}
        for key, group in zip(programs.task_keys, groups):
            weights[int(group)] = float(programs.catalogue.get(key, {}).get("networks", {}).get(network, 1))
        sub = (scores[in_network], programs.latencies[in_network], groups[in_network])
        per_network[network] = {
            "top1": top_k_score(*sub, k=1, weights=weights),
            "top5": top_k_score(*sub, k=5, weights=weights),
            "pairwise": pairwise_accuracy(*sub),
            "tasks": int(len(np.unique(groups[in_network]))),
            "programs": int(in_network.sum()),
        }
    mean = {m: float(np.mean([r[m] for r in per_network.values()])) if per_network else float("nan")
            for m in ("top1", "top5", "pairwise")}
    return {**mean, "per_network": per_network}


def head_scores(model: Any, test: LabeledPrograms, platform_id: str, groups: np.ndarray | None = None
                ) -> np.ndarray:
    """A TLP model's scores of ``test`` by its head for ``platform_id`` (MTL-TLP: each platform by its head).

    Scored as a search asks: one call per group (default: per task) of programs. A model may rank within a call
    (a cascade re-ranks the top of each call, :mod:`tlp.model.cascade`), so all of a task's programs in one call
    is what its ranking of that task means; a single network scores a program alike in any call."""
    return heads_scores(model, test, [model.head_index(platform_id)], groups)[0]


def heads_scores(model: Any, test: LabeledPrograms, heads: Sequence[int], groups: np.ndarray | None = None
                 ) -> np.ndarray:
    """:func:`head_scores` by each of ``heads`` (head indices), featurized once: shape (len(heads), programs)."""
    groups = test.group_ids() if groups is None else groups
    scores = np.empty((len(heads), len(test.traces)), dtype=np.float64)
    indices = [index for _, index in group_rows(groups)]
    # Featurized in chunks that never straddle a group, in worker processes when there are many programs (the
    # features of all test programs at once would not fit), then scored a whole group at a time.
    parts = [(index, part) for index in indices for part in np.array_split(index, -(-len(index) // CHUNK))]
    chunks = featurized_chunks(((pick(test.traces, part), [test.task_keys[i] for i in part]) for _, part in parts),
                               model.featurizer, test.extents, len(test.traces))
    done: list[np.ndarray] = []
    for (index, part), features in zip(parts, chunks):
        done.append(features)
        if part[-1] == index[-1]:
            group_features = np.concatenate(done)
            for row, head in enumerate(heads):
                scores[row, index] = model.predict_features(group_features, head)
            done = []
    return scores


def score_head(model: Any, test: LabeledPrograms, platform_id: str, networks: list[str]) -> dict[str, Any]:
    """top-k of a TLP model's head for ``platform_id`` on ``test``."""
    return score_models(test, head_scores(model, test, platform_id), networks)


def model_names(results: dict[str, Any]) -> list[str]:
    """The scored models of :func:`evaluate`'s results (the other keys describe the data and the bootstrap)."""
    return [name for name, value in results.items() if isinstance(value, dict) and "per_network" in value]


def evaluate(dataset: Dataset, platform_id: str, model: Any, baselines: list[str], test_networks: list[str],
             seed: int = 0, search_runs: list[str] | None = None, population: int | None = None,
             draws: int | None = None, bootstrap_draws: int = DEFAULT_DRAWS) -> dict[str, Any]:
    """Train the baselines on the training split, score everything on the test split of ``test_networks`` and, given
    ``search_runs`` (tuning work directories), on their measured programs (none of the training records).
    ``bootstrap_draws`` resamples of the test programs give TenSet top-1 intervals (0: none)."""
    # pylint: disable=import-outside-toplevel
    from tlp.evaluation import search_metrics
    from tlp.evaluation.baselines import MetaScheduleBaseline, RandomRanker

    # Training programs' traces only where something trains on them (the baselines) or excludes them (search runs).
    needs_all = search_runs or any(b != "random" for b in baselines)
    programs = load_programs(dataset, platform_id, None if needs_all else set(test_networks))
    model_format = record_format_of(getattr(model, "featurizer", None))
    if model_format != programs.record_format:
        raise DatasetError(f"{dataset.path}/{platform_id} holds {programs.record_format} records; this model reads "
                           f"{model_format} records (train one on this dataset with tlp train)")
    needs_traces = [b for b in baselines if b != "random"]
    if needs_traces and programs.record_format != METASCHEDULE_FORMAT:
        raise DatasetError(f"baselines {', '.join(needs_traces)}: MetaSchedule's models read MetaSchedule program "
                           f"features, which {programs.record_format} records (platform {platform_id}) do not have; "
                           "compare TLP with --baselines random here")
    if search_runs and programs.record_format != METASCHEDULE_FORMAT:
        raise DatasetError(f"--search-runs: tuning runs hold MetaSchedule traces; platform {platform_id} holds "
                           f"{programs.record_format} records, which this model reads")
    train, test = programs.split_by_network(set(test_networks))
    if not test.traces:
        raise DatasetError(f"{dataset.path}: no measured program of the test networks {', '.join(test_networks)}")
    search = None
    if search_runs:
        search = search_metrics.read_held_out_runs(search_runs, train)
        populations = search_metrics.pick_populations(
            search, population or search_metrics.DEFAULT_POPULATION, draws or search_metrics.DEFAULT_DRAWS, seed)
        search_programs = search.labeled()
    results: dict[str, Any] = {}
    started = time.monotonic()
    test_scores = {"tlp": head_scores(model, test, platform_id)}
    results["tlp"] = score_models(test, test_scores["tlp"], test_networks)
    if search is not None:
        scores = head_scores(model, search_programs, platform_id, search.groups)  # one call per run's task
        results["tlp"]["search"] = search_metrics.search_scores(search, scores, populations)
    results["tlp"]["seconds"] = time.monotonic() - started
    for name in baselines:
        started = time.monotonic()
        ranker = RandomRanker(seed) if name == "random" else MetaScheduleBaseline(name, dataset, platform_id)
        ranker.fit(train)
        test_scores[name] = np.asarray(ranker.predict(test))
        results[name] = score_models(test, test_scores[name], test_networks)
        if search is not None:
            scores = (search_metrics.metaschedule_scores(ranker.model, ranker.replay.target, search)
                      if isinstance(ranker, MetaScheduleBaseline) else ranker.predict(search_programs))
            results[name]["search"] = search_metrics.search_scores(search, scores, populations)
        results[name]["seconds"] = time.monotonic() - started
    results["data"] = {"train_programs": len(train.traces), "train_tasks": len(set(train.task_keys)),
                       "test_programs": len(test.traces), "test_tasks": len(set(test.task_keys)),
                       "skipped": dict(programs.skipped)}
    if search is not None:
        results["data"]["search"] = search.summary()
    if bootstrap_draws:
        results["bootstrap"] = bootstrap_top1(test, test_scores, test_networks, bootstrap_draws, seed, reference="tlp")
    return results


def format_search_table(results: dict[str, Any]) -> str:
    """The search-like metrics (the headline when tuning runs were given), one row per model, then per source."""
    from tlp.evaluation.search_metrics import HEADLINE, METRICS  # pylint: disable=import-outside-toplevel

    models = [m for m in model_names(results) if "search" in results[m]]
    data = results["data"]["search"]
    sources = sorted({s for m in models for s in results[m]["search"]["per_source"]})
    columns = [HEADLINE] + [m for m in METRICS if m != HEADLINE]  # the headline first, per source too
    short = {"all_top1": "all1", "late_top1": "late1", "late_top5": "late5", "pick_regret": "regret"}
    per_source = columns[:2]
    lines = [f"search-like ranking ({data['runs']} tuning runs, {data['programs']} programs; headline: "
             f"{HEADLINE.replace('_', ' ')}; lower regret / higher top-k is better)",
             f"{'model':<8} " + " ".join(f"{short[c]:>7}" for c in columns) + "  "
             + "  ".join(f"{s[:16]:>16}" for s in sources),
             " " * (9 + 8 * len(columns)) + "  ".join(f"{'/'.join(short[c] for c in per_source):>16}" for _ in sources)]
    for m in models:
        r = results[m]["search"]
        cells = ["/".join(f"{r['per_source'][s][c]:.3f}" for c in per_source) if s in r["per_source"] else "-"
                 for s in sources]
        lines.append(f"{m:<8} " + " ".join(f"{r[c]:>7.3f}" for c in columns) + "  "
                     + "  ".join(f"{c:>16}" for c in cells))
    trained = [s for s in sources if results[models[0]]["search"]["per_source"][s]["tasks_in_training"]] if models else []
    if trained:
        lines.append(f"trained on (scored, but not held out): tasks of {', '.join(trained)}")
    if data["skipped"]:
        lines.append("skipped: " + "; ".join(f"{n} {why}" for why, n in sorted(data["skipped"].items())))
    return "\n".join(lines)


def format_table(results: dict[str, Any]) -> str:
    models = model_names(results)
    networks = sorted({n for m in models for n in results[m]["per_network"]})
    header = f"{'model':<8} {'top1':>6} {'top5':>6} {'pairs':>6}  " + "  ".join(f"{n:>14}" for n in networks)
    lines = [header, " " * 31 + "  ".join(f"{'top1/top5':>14}" for _ in networks)]
    for m in models:
        r = results[m]
        cells = [f"{r['per_network'][n]['top1']:.3f}/{r['per_network'][n]['top5']:.3f}" if n in r["per_network"]
                 else "-" for n in networks]
        lines.append(f"{m:<8} {r['top1']:>6.3f} {r['top5']:>6.3f} {r['pairwise']:>6.3f}  "
                     + "  ".join(f"{c:>14}" for c in cells))
    data = results["data"]
    lines.append(f"train: {data['train_programs']} programs / {data['train_tasks']} tasks; "
                 f"test: {data['test_programs']} programs / {data['test_tasks']} tasks")
    if "bootstrap" in results:
        lines.append(format_bootstrap(results["bootstrap"]))
    if "search" in data:
        # The search-like metric agrees with measured searches; TenSet's stays for comparison with the literature.
        return format_search_table(results) + "\n\nTenSet top-k over all stored programs of the held-out networks:\n" \
            + "\n".join(lines)
    return "\n".join(lines)


def plot(results: dict[str, Any], path: str) -> None:
    """Bar chart of top-1 and top-5 per network and model."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    models = model_names(results)
    networks = sorted({n for m in models for n in results[m]["per_network"]})
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(networks)), 4), sharey=True)
    width = 0.8 / max(len(models), 1)
    for ax, metric in zip(axes, ("top1", "top5")):
        for i, m in enumerate(models):
            values = [results[m]["per_network"].get(n, {}).get(metric, 0.0) for n in networks]
            ax.bar(np.arange(len(networks)) + i * width, values, width, label=m)
        ax.set_xticks(np.arange(len(networks)) + 0.4 - width / 2, networks, rotation=20)
        ax.set_title(metric)
        ax.set_ylim(0, 1.05)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
