"""Training losses. Labels are per-task normalized throughput: min latency of the task / latency, in (0, 1].

A cost model inside a search only has to *order* the candidates of one task, so TLP trains with LambdaRank: a
pairwise logistic loss whose pairs are weighted by how much swapping them would change the NDCG of the task's
ranking. Pairs never mix tasks. ``listwise`` (softmax cross-entropy against a sharpened label distribution per
task) aims at the first place only, which is what TenSet's top-1 and a search's pick reward; on the Zen 4 held-out
networks it ranked better than LambdaRank (``benchmarks/README.md``, "Listwise loss"). MSE on the labels is the
regression baseline.

Every loss takes an optional per-program ``task_weight`` (the same value for all programs of a task): the loss is
then the weighted mean over tasks instead of the plain mean (``TrainConfig.task_weighting``,
``tlp.model.task_weights``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _groups(group_ids: torch.Tensor) -> list[torch.Tensor]:
    return [torch.nonzero(group_ids == g, as_tuple=True)[0] for g in torch.unique(group_ids)]


def _task_mean(losses: list[torch.Tensor], indices: list[torch.Tensor], scores: torch.Tensor,
               task_weight: torch.Tensor | None) -> torch.Tensor:
    """Mean of the per-task ``losses`` (task ``i`` holds programs ``indices[i]``), weighted by ``task_weight``."""
    if not losses:
        return scores.sum() * 0.0
    stacked = torch.stack(losses)
    if task_weight is None:
        return stacked.mean()
    weight = torch.stack([task_weight[index[0]] for index in indices]).to(stacked.dtype)
    return (weight * stacked).sum() / weight.sum().clamp_min(1e-12)


def lambdarank_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                    task_weight: torch.Tensor | None = None, sigma: float = 1.0) -> torch.Tensor:
    """Mean over tasks of the NDCG-weighted pairwise logistic loss within each task."""
    losses, indices = [], []
    for index in _groups(group_ids):
        if index.numel() < 2:
            continue  # a single program has no pair to rank
        s, y = scores[index], labels[index]
        with torch.no_grad():
            rank = torch.empty_like(s)
            rank[torch.argsort(s, descending=True)] = torch.arange(1, s.numel() + 1, dtype=s.dtype, device=s.device)
            discount = 1.0 / torch.log2(1.0 + rank)
            ideal = (torch.sort(y, descending=True).values / torch.log2(
                2.0 + torch.arange(s.numel(), dtype=s.dtype, device=s.device))).sum().clamp_min(1e-12)
            delta = (y[:, None] - y[None, :]).abs() * (discount[:, None] - discount[None, :]).abs() / ideal
            better = (y[:, None] > y[None, :]).to(s.dtype)
            weight = delta * better
        if weight.sum() <= 0:
            continue  # all labels equal: nothing to learn from this task
        pair_loss = F.softplus(-sigma * (s[:, None] - s[None, :]))
        losses.append((weight * pair_loss).sum() / weight.sum())
        indices.append(index)
    return _task_mean(losses, indices, scores, task_weight)


LISTWISE_TEMPERATURE = 0.1
SOFT_LISTWISE_TEMPERATURE = 0.3


def listwise_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                  task_weight: torch.Tensor | None = None, temperature: float = LISTWISE_TEMPERATURE) -> torch.Tensor:
    """Mean over tasks of the cross-entropy between softmax(scores) and softmax(labels / temperature).

    TenSet's top-1 of a task is the label of the program ranked first, so this loss puts the task's probability
    mass on the programs near the fastest: with labels min/latency in (0, 1] and temperature 0.1, a program at
    half the best throughput gets e^-5 of the best one's target mass. Pairwise losses spend most of their
    gradient ordering the slow tail, which no search ever picks from.
    """
    losses, indices = [], []
    for index in _groups(group_ids):
        if index.numel() < 2:
            continue
        target = torch.softmax(labels[index] / temperature, dim=0)
        losses.append(-(target * torch.log_softmax(scores[index], dim=0)).sum())
        indices.append(index)
    return _task_mean(losses, indices, scores, task_weight)


def mse_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
             task_weight: torch.Tensor | None = None) -> torch.Tensor:
    del group_ids  # regression treats programs independently
    if task_weight is None:
        return F.mse_loss(scores, labels)
    return (task_weight * (scores - labels) ** 2).sum() / task_weight.sum().clamp_min(1e-12)


def expected_slowdown_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                           task_weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over tasks of log E[latency / best latency] of a pick drawn from softmax(scores).

    Why: TenSet's top-1 and a search's pick lose by the *ratio* of the pick to the best, so one pick at 18x the best
    costs a network's score more than many picks at 1.2x; the listwise losses only ask the best programs to come
    first and barely see how slow the program that does come first is. This term's gradient pushes each program's
    score down in proportion to its slowdown (label = best / latency, so the slowdown is 1 / label).
    """
    losses, indices = [], []
    for index in _groups(group_ids):
        if index.numel() < 2:
            continue
        log_slowdown = -torch.log(labels[index].clamp_min(1e-6))
        losses.append(torch.logsumexp(torch.log_softmax(scores[index], dim=0) + log_slowdown, dim=0))
        indices.append(index)
    return _task_mean(losses, indices, scores, task_weight)


def soft_listwise_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                       task_weight: torch.Tensor | None = None) -> torch.Tensor:
    """``listwise`` with temperature 0.3: a program at half the best throughput gets e^-1.7 of the best one's target
    mass instead of e^-5, so the order below the first place is learnt too. Why try it: among 32 random draws of an
    unseen shape the runner-up is often far from the best, and a model that only learnt "which one is first" on
    search-rich tasks (many near-best programs) has seen little of that order."""
    return listwise_loss(scores, labels, group_ids, task_weight, temperature=SOFT_LISTWISE_TEMPERATURE)


def listwise_pairwise_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                           task_weight: torch.Tensor | None = None) -> torch.Tensor:
    """``listwise`` plus ``lambdarank``: the first place, and the NDCG-weighted order of the rest (the slow tail of
    random draws that listwise alone ignores)."""
    return (listwise_loss(scores, labels, group_ids, task_weight)
            + lambdarank_loss(scores, labels, group_ids, task_weight))


def soft_listwise_slowdown_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                                task_weight: torch.Tensor | None = None) -> torch.Tensor:
    """``soft-listwise`` plus ``expected_slowdown_loss``: which programs come first, and how slow a wrong first
    pick is (aimed at the catastrophic picks that decide TenSet's top-1 of a network)."""
    return (soft_listwise_loss(scores, labels, group_ids, task_weight)
            + expected_slowdown_loss(scores, labels, group_ids, task_weight))


# The listwise losses and the temperature each compares softmax(labels / T) with softmax(scores) at (what a
# teacher's targets are written for: tlp.model.distil).
LISTWISE_TEMPERATURES = {"listwise": LISTWISE_TEMPERATURE, "soft-listwise": SOFT_LISTWISE_TEMPERATURE}

# Losses with a term that only measured latencies can feed: loss -> (the listwise loss a teacher's targets stand in
# for, the term that reads the measured labels). Distilling with one trains the first on the targets (every program
# with one) and adds the second on the measured programs only. Why: a teacher's targets are log-probabilities, not
# throughputs; read as labels by the slowdown term they would be nonsense, and dropping the term dropped the
# first-pick penalty that made the slowdown teachers better than their soft-listwise students
# (benchmarks/README.md, "Guided transfer programs").
MEASURED_TERMS = {"soft-listwise+slowdown": ("soft-listwise", expected_slowdown_loss)}
# A loss with a measured-only term distils at its listwise part's temperature.
LISTWISE_TEMPERATURES.update({loss: LISTWISE_TEMPERATURES[part] for loss, (part, _) in MEASURED_TERMS.items()})

LOSSES = {"lambdarank": lambdarank_loss, "listwise": listwise_loss, "mse": mse_loss,
          "soft-listwise": soft_listwise_loss, "listwise+pairwise": listwise_pairwise_loss,
          "soft-listwise+slowdown": soft_listwise_slowdown_loss}
