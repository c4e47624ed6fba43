"""How much TenSet's top-1 would move with another sample of programs: a bootstrap over each task's programs.

The held-out tasks' stored programs are a sample (often 32 random draws) of their design spaces, and a network's
top-1 sums latencies over its tasks, so one heavy task whose sample happens to hold a catastrophic program the model
ranks first moves a network's score by 0.1-0.2. Resampling each task's programs with replacement and scoring every model on the *same* resamples gives an
interval for each model's top-1 and, paired, for the difference between two models: a "+0.05 over XGBoost" claim
is then something the data can support or not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tlp.features.tensors import LabeledPrograms

DEFAULT_DRAWS = 200
LEVEL = 0.90  # the interval's coverage: the 5th to the 95th percentile of the draws


def resampled_top1(programs: LabeledPrograms, scores: dict[str, np.ndarray], networks: list[str],
                   draws: int = DEFAULT_DRAWS, seed: int = 0) -> np.ndarray:
    """TenSet top-1 (mean over ``networks``) of each model in ``scores`` (name -> scores of ``programs``, columns in
    that order) on each of ``draws`` resamples of every task's programs: a (draws, models) array. Every model is
    scored on the same resamples, so columns can be compared draw by draw."""
    rng = np.random.default_rng(seed)
    names = list(scores)
    per_network = [[(index, weight) for _, index, weight in programs.network_tasks(n)] for n in networks]
    per_network = [tasks for tasks in per_network if tasks]
    top1 = np.zeros((draws, len(names)))
    for draw in range(draws):
        network_scores = np.zeros((len(per_network), len(names)))
        for n, tasks in enumerate(per_network):
            numerator, denominator = 0.0, np.zeros(len(names))
            for index, weight in tasks:
                sample = rng.choice(index, size=len(index), replace=True)
                latencies = programs.latencies[sample]
                numerator += weight * latencies.min()
                for m, name in enumerate(names):
                    denominator[m] += weight * latencies[np.argmax(scores[name][sample])]
            network_scores[n] = numerator / denominator
        top1[draw] = network_scores.mean(axis=0)
    return top1


def interval(values: np.ndarray) -> dict[str, Any]:
    """Median and the ``LEVEL`` interval of one model's resampled top-1 (or of a paired difference)."""
    low, high = (1 - LEVEL) / 2 * 100, (1 + LEVEL) / 2 * 100
    return {"median": float(np.median(values)),
            "interval": [float(np.percentile(values, low)), float(np.percentile(values, high))]}


def paired_lead(reference: np.ndarray, other: np.ndarray) -> dict[str, Any]:
    """``reference`` minus ``other``, draw by draw: its interval and the share of draws where the reference leads."""
    difference = reference - other
    return {**interval(difference), "reference_leads": float((difference > 0).mean())}


def bootstrap_top1(programs: LabeledPrograms, scores: dict[str, np.ndarray], networks: list[str],
                   draws: int = DEFAULT_DRAWS, seed: int = 0, reference: str | None = None) -> dict[str, Any]:
    """Each model's TenSet top-1 interval over ``draws`` resamples (``resampled_top1``), and the interval of
    ``reference``'s top-1 minus each other model's (paired: the same resamples), with the share of draws where the
    reference leads."""
    names = list(scores)
    top1 = resampled_top1(programs, scores, networks, draws, seed)
    result: dict[str, Any] = {"draws": draws, "level": LEVEL,
                              "models": {name: interval(top1[:, m]) for m, name in enumerate(names)}}
    if reference is not None:
        ref = names.index(reference)
        result["reference"] = reference
        result["differences"] = {name: paired_lead(top1[:, ref], top1[:, m])
                                 for m, name in enumerate(names) if m != ref}
    return result


def format_bootstrap(result: dict[str, Any]) -> str:
    """Lines for ``tlp eval``'s table: each model's interval, then the reference's lead over each other model."""
    level = f"{result['level']:.0%}"
    lines = [f"TenSet top-1, {level} bootstrap interval ({result['draws']} resamples of each task's programs): "
             + "; ".join(f"{name} {r['median']:.3f} [{r['interval'][0]:.3f}, {r['interval'][1]:.3f}]"
                         for name, r in result["models"].items())]
    for name, r in result.get("differences", {}).items():
        lines.append(f"  {result['reference']} - {name}: {r['median']:+.3f} [{r['interval'][0]:+.3f}, "
                     f"{r['interval'][1]:+.3f}], {result['reference']} ahead in {r['reference_leads']:.0%} of draws")
    return "\n".join(lines)
