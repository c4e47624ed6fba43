"""Training losses. Labels are per-task normalized throughput: min latency of the task / latency, in (0, 1].

A cost model inside a search only has to *order* the candidates of one task, so every loss ranks within tasks
(never across them) and is the plain mean over a batch's tasks. Two are selectable (``TrainConfig.loss``, the keys
of :data:`LOSSES`):

- ``lambdarank`` (the paper's, the default): a pairwise logistic loss whose pairs are weighted by how much swapping
  them would change the NDCG of the task's ranking;
- ``soft-listwise+slowdown`` (the shipped model's): softmax cross-entropy against softmax(labels / 0.3) per task
  (which programs come first, the order below them learnt too), plus the expected slowdown of a pick drawn from
  softmax(scores) (how slow a wrong first pick is).

MSE, plain listwise (temperature 0.1), soft-listwise alone and listwise + LambdaRank were tried and superseded by
these two (``benchmarks/training_recipe/README.md``, "What was learned"; their numbers in git history).

Distillation (:mod:`tlp.model.distil`) trains the listwise part on a teacher's targets and the slowdown term on the
measured labels only (:data:`MEASURED_TERMS`).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

Loss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _groups(group_ids: torch.Tensor) -> list[torch.Tensor]:
    return [torch.nonzero(group_ids == g, as_tuple=True)[0] for g in torch.unique(group_ids)]


def _task_mean(losses: list[torch.Tensor], scores: torch.Tensor) -> torch.Tensor:
    """Mean of the per-task ``losses`` (zero, still attached to ``scores``, when no task had one)."""
    if not losses:
        return scores.sum() * 0.0
    return torch.stack(losses).mean()


def lambdarank_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                    sigma: float = 1.0) -> torch.Tensor:
    """Mean over tasks of the NDCG-weighted pairwise logistic loss within each task."""
    losses = []
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
    return _task_mean(losses, scores)


# softmax(labels / T) is what the listwise part compares softmax(scores) with: a program at half the best
# throughput gets e^-1.7 of the best one's target mass, so the order below the first place is learnt too.
SOFT_LISTWISE_TEMPERATURE = 0.3


def soft_listwise_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                       temperature: float = SOFT_LISTWISE_TEMPERATURE) -> torch.Tensor:
    """Mean over tasks of the cross-entropy between softmax(scores) and softmax(labels / temperature).

    TenSet's top-1 of a task is the label of the program ranked first, so this loss puts the task's probability
    mass on the programs near the fastest; pairwise losses spend most of their gradient ordering the slow tail,
    which no search ever picks from. (Not selectable alone: the listwise part of ``soft-listwise+slowdown``.)
    """
    losses = []
    for index in _groups(group_ids):
        if index.numel() < 2:
            continue
        target = torch.softmax(labels[index] / temperature, dim=0)
        losses.append(-(target * torch.log_softmax(scores[index], dim=0)).sum())
    return _task_mean(losses, scores)


def expected_slowdown_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Mean over tasks of log E[latency / best latency] of a pick drawn from softmax(scores).

    Why: TenSet's top-1 and a search's pick lose by the *ratio* of the pick to the best, so one pick at 18x the best
    costs a network's score more than many picks at 1.2x; the listwise loss only asks the best programs to come
    first and barely sees how slow the program that does come first is. This term's gradient pushes each program's
    score down in proportion to its slowdown (label = best / latency, so the slowdown is 1 / label). Alone it stops
    learning once no mass sits on a slow program: it trains only beside the listwise loss.
    """
    losses = []
    for index in _groups(group_ids):
        if index.numel() < 2:
            continue
        log_slowdown = -torch.log(labels[index].clamp_min(1e-6))
        losses.append(torch.logsumexp(torch.log_softmax(scores[index], dim=0) + log_slowdown, dim=0))
    return _task_mean(losses, scores)


def soft_listwise_slowdown_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``soft_listwise_loss`` plus ``expected_slowdown_loss``: which programs come first, and how slow a wrong first
    pick is (aimed at the catastrophic picks that decide TenSet's top-1 of a network)."""
    return soft_listwise_loss(scores, labels, group_ids) + expected_slowdown_loss(scores, labels, group_ids)


LOSSES: dict[str, Loss] = {"lambdarank": lambdarank_loss, "soft-listwise+slowdown": soft_listwise_slowdown_loss}

# Losses with a term that only measured latencies can feed: loss -> (its listwise part, which a teacher's targets
# feed, the term that reads the measured labels). Distilling with one trains the first on the targets (every program
# with one) and adds the second on the measured programs only. Why: a teacher's targets are log-probabilities, not
# throughputs; read as labels by the slowdown term they would be nonsense, and dropping the term dropped the
# first-pick penalty that made the slowdown teachers better than their soft-listwise students
# (benchmarks/README.md, "Guided transfer programs").
MEASURED_TERMS: dict[str, tuple[Loss, Loss]] = {
    "soft-listwise+slowdown": (soft_listwise_loss, expected_slowdown_loss)}

# The losses distillation can train with, and the temperature T their listwise part compares softmax(labels / T)
# with softmax(scores) at (what a teacher's targets are written for: tlp.model.distil). A pairwise loss reads labels
# as gains, which a teacher's log-probabilities are not.
LISTWISE_TEMPERATURES = {"soft-listwise+slowdown": SOFT_LISTWISE_TEMPERATURE}
