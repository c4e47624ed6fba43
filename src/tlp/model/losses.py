"""Training losses. Labels are per-task normalized throughput: min latency of the task / latency, in (0, 1].

A cost model inside a search only has to *order* the candidates of one task, so TLP trains with LambdaRank: a
pairwise logistic loss whose pairs are weighted by how much swapping them would change the NDCG of the task's
ranking. Pairs never mix tasks. ``listwise`` (softmax cross-entropy against a sharpened label distribution per
task) aims at the first place only, which is what TenSet's top-1 and a search's pick reward; on the Zen 4 held-out
networks it ranked better than LambdaRank (``benchmarks/README.md``, "Listwise loss"). MSE on the labels is the
regression baseline.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _groups(group_ids: torch.Tensor) -> list[torch.Tensor]:
    return [torch.nonzero(group_ids == g, as_tuple=True)[0] for g in torch.unique(group_ids)]


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
    if not losses:
        return scores.sum() * 0.0
    return torch.stack(losses).mean()


LISTWISE_TEMPERATURE = 0.1
SOFT_LISTWISE_TEMPERATURE = 0.3


def listwise_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                  temperature: float = LISTWISE_TEMPERATURE) -> torch.Tensor:
    """Mean over tasks of the cross-entropy between softmax(scores) and softmax(labels / temperature).

    TenSet's top-1 of a task is the label of the program ranked first, so this loss puts the task's probability
    mass on the programs near the fastest: with labels min/latency in (0, 1] and temperature 0.1, a program at
    half the best throughput gets e^-5 of the best one's target mass. Pairwise losses spend most of their
    gradient ordering the slow tail, which no search ever picks from.
    """
    losses = []
    for index in _groups(group_ids):
        if index.numel() < 2:
            continue
        target = torch.softmax(labels[index] / temperature, dim=0)
        losses.append(-(target * torch.log_softmax(scores[index], dim=0)).sum())
    if not losses:
        return scores.sum() * 0.0
    return torch.stack(losses).mean()


def mse_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    del group_ids  # regression treats programs independently
    return F.mse_loss(scores, labels)


def soft_listwise_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``listwise`` with temperature 0.3: a program at half the best throughput gets e^-1.7 of the best one's target
    mass instead of e^-5, so the order below the first place is learnt too. Why try it: among 32 random draws of an
    unseen shape the runner-up is often far from the best, and a model that only learnt "which one is first" on
    search-rich tasks (many near-best programs) has seen little of that order."""
    return listwise_loss(scores, labels, group_ids, temperature=SOFT_LISTWISE_TEMPERATURE)


def listwise_pairwise_loss(scores: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``listwise`` plus ``lambdarank``: the first place, and the NDCG-weighted order of the rest (the slow tail of
    random draws that listwise alone ignores)."""
    return listwise_loss(scores, labels, group_ids) + lambdarank_loss(scores, labels, group_ids)


# The listwise losses and the temperature each compares softmax(labels / T) with softmax(scores) at (what a
# teacher's targets are written for: tlp.model.distil).
LISTWISE_TEMPERATURES = {"listwise": LISTWISE_TEMPERATURE, "soft-listwise": SOFT_LISTWISE_TEMPERATURE}

LOSSES = {"lambdarank": lambdarank_loss, "listwise": listwise_loss, "mse": mse_loss,
          "soft-listwise": soft_listwise_loss, "listwise+pairwise": listwise_pairwise_loss}
