"""Functions with the same anchor block (one conv, two epilogues) are one task, and both run its schedule."""

from __future__ import annotations

import pytest
import torch

from tlp.tune.report import format_report
from tlp.tune.sources import from_torch
from tlp.tune.run import TuneConfig, tune


class BasicBlock(torch.nn.Module):
    """ResNet's basic block: the same 3x3 conv once without and once with the residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv2(torch.relu(self.conv1(x))) + x)


@pytest.fixture(scope="module")
def block(host_platform):
    torch.manual_seed(0)
    return from_torch("basic_block", BasicBlock().eval(), (torch.randn(1, 8, 12, 12),), host_platform.target,
                      fast_math=False)


def test_the_same_conv_with_two_epilogues_is_one_task(block):
    convs = [task for task in block.tasks if "conv2d" in task.name]
    assert len(convs) == 1, [task.name for task in block.tasks]
    (conv,) = convs
    ((variant, variant_weight),) = conv.variants
    assert conv.weight == 2 and variant_weight == 1 and conv.own_weight == 1
    assert "conv2d" in variant and variant != conv.name


@pytest.mark.slow
def test_the_variant_is_compiled_with_the_tuned_schedule_and_matches_pytorch(block, host_platform, tmp_path):
    config = TuneConfig(trials=8, trials_per_iter=8, population=64, cost_model="random", predicted_schedules=False)
    report = tune(block, host_platform.target, tmp_path, config)
    (conv,) = [task for task in report["tasks"] if "conv2d" in task["name"]]
    assert conv["best_latency_s"] and conv["variants"]
    # The variant got the tuned conv's schedule (replayed by its anchor block), not TVM's unscheduled default.
    assert report["shared_schedules"] == list(conv["variants"])
    assert report["numerics"]["ok"], report["numerics"]
    text = format_report(report)
    assert f"{conv['variants'][0]} (as {conv['name']})" in text
    # The report gives each timing round; rounds far apart (a busy machine) are flagged with what to do.
    assert len(report["end_to_end_rounds_s"]) == len(report["torch_eager_rounds_s"]) == 5
    assert "warning: the timing rounds differ" not in format_report(
        {**report, "end_to_end_rounds_s": [1.0, 1.1], "torch_eager_rounds_s": [2.0, 2.1]})
    noisy = format_report({**report, "end_to_end_rounds_s": [1.0, 1.6], "torch_eager_rounds_s": [2.0, 2.1]})
    assert "warning: the timing rounds differ by up to 60 %" in noisy and "run the same `tlp tune`" in noisy



def test_a_variant_the_tuned_trace_does_not_fit_keeps_tvms_default(host_platform):
    """A matmul without the epilogue its anchor's tuned function had: the trace reverse-computes the epilogue at
    the matmul's tiles, which the variant lacks; serving it would fail the whole network's compile."""
    from tvm import te

    from tlp._tvm import ms, tvm
    from tlp.search.database.shared_schedules import SharedScheduleDatabase

    a, b, c = te.placeholder((8, 64), name="a"), te.placeholder((64, 64), name="b"), te.placeholder((64,), name="c")
    k = te.reduce_axis((0, 64), name="k")
    matmul = te.compute((8, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="matmul")
    add = te.compute((8, 64), lambda i, j: c[j] + matmul[i, j], name="T_add")
    tuned = tvm.IRModule({"main": te.create_prim_func([a, b, c, add])})
    variant = tvm.IRModule({"main": te.create_prim_func([a, b, matmul])})
    target = tvm.target.Target(host_platform.target)
    spaces = ms.TuneContext(mod=tuned, target=target, space_generator="post-order-apply",
                            num_threads=1).space_generator.generate_design_space(tuned)
    trace = next(s.trace for s in spaces if any(i.kind.name == "ReverseComputeAt" for i in s.trace.insts))
    database = ms.database.MemoryDatabase(module_equality="structural")
    database.commit_tuning_record(ms.database.TuningRecord(trace, database.commit_workload(tuned), [1e-5], target,
                                                           ms.arg_info.ArgInfo.from_prim_func(tuned["main"])))
    shared = SharedScheduleDatabase(database)
    assert shared.has_workload(variant)  # the same anchor block: the variant would be served the tuned trace
    assert shared.query_tuning_record(variant, target, "variant") is None and not shared.shared
    assert shared.query_tuning_record(tuned, target, "tuned") is not None
