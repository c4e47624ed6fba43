"""The tune report's 'where the time goes': shares, and which tasks no search can improve."""

from __future__ import annotations

import torch

from tlp.tune.sources import from_torch
from tlp.search.task_scheduler.task_profile import design_space_decisions, dominant_tasks, format_dominant_tasks

TARGET = {"kind": "llvm", "num-cores": 1}


class LinearGelu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x)).transpose(0, 1)


def test_matmul_is_tunable_elementwise_is_fixed_and_shares_sum_to_one():
    tunable = from_torch("linear_gelu", LinearGelu().eval(), (torch.randn(16, 64),), TARGET)
    by_kind = {task.name: design_space_decisions(task, TARGET)[1] for task in tunable.tasks}
    assert any("matmul" in name and decisions > 0 for name, decisions in by_kind.items()), by_kind
    assert any("matmul" not in name and decisions == 0 for name, decisions in by_kind.items()), by_kind
    latencies = [1e-4 * (i + 1) for i in range(len(tunable.tasks))]
    entries = dominant_tasks(tunable.tasks, latencies, TARGET)
    assert entries and entries == sorted(entries, key=lambda e: -e["share"])
    assert abs(sum(e["share"] for e in entries) - 1.0) < 1e-3  # few tasks: all are listed
    assert all(e["fixed"] == (e["decisions"] == 0) and ("why" in e) == e["fixed"] for e in entries)
    text = "\n".join(format_dominant_tasks(entries))
    assert "where the time goes" in text and "%" in text


def test_no_latencies_lists_nothing():
    tunable = from_torch("linear_gelu", LinearGelu().eval(), (torch.randn(16, 64),), TARGET)
    assert dominant_tasks(tunable.tasks, [None] * len(tunable.tasks), TARGET) == []
