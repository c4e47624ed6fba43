"""Batch norms folded into the convolutions before them: fewer, fused tasks, the same outputs as PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tlp.tune.fast_math import default_schedule_outputs
from tlp.tune.sources import from_torch
from tlp.workloads.extract import relax_module_from_torch, tasks_from_relax
from tlp.workloads.graph_passes import count_ops

TARGET = {"kind": "llvm", "num-cores": 1}


class ConvBlock(torch.nn.Module):
    """Conv-BN-ReLU6 twice with a residual add (MobileNetV2's pattern), then a BN that follows no conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)  # depthwise
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.bn3 = torch.nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.relu6(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y)) + x
        return self.bn3(torch.relu(y))


@pytest.fixture(scope="module")
def block() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    module = ConvBlock()
    for bn in (module.bn1, module.bn2, module.bn3):  # non-trivial running statistics, as a trained network has
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.5, 0.5)
    return module.eval(), (torch.randn(1, 8, 16, 16),)


def test_batch_norms_fold_into_convs_and_outputs_match_pytorch(block):
    module, inputs = block
    tunable = from_torch("conv_block", module, inputs, TARGET, fast_math=False)
    assert "batch norm: 2 folded into conv2d, 1 decomposed" in tunable.notes, tunable.notes
    assert not count_ops(tunable.relax_mod, {"relax.nn.batch_norm"})
    # Each conv is one task with its epilogue (bias add, clip, residual add); no batch-norm task is left.
    names = [task.name for task in tunable.tasks]
    assert not any("batch_norm" in name for name in names), names
    assert sum("conv2d" in name for name in names) == 2 and all("add" in n for n in names if "conv2d" in n), names
    outputs = default_schedule_outputs(tunable.relax_mod, tunable.params, tunable.inputs, TARGET)
    np.testing.assert_allclose(outputs[0], module(*inputs).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_collect_extracts_the_tasks_tune_meets(block):
    """``tlp collect``'s extraction goes through the same graph, so a dataset holds the tasks a search tunes."""
    module, inputs = block
    tuned = from_torch("conv_block", module, inputs, TARGET, fast_math=False)
    collected = tasks_from_relax(relax_module_from_torch(module, inputs), TARGET, "conv_block")
    assert sorted(t.key for t in collected) == sorted(t.key for t in tuned.tasks)


def test_network_without_batch_norm_is_untouched():
    tunable = from_torch("linear", torch.nn.Linear(4, 4).eval(), (torch.randn(2, 4),), TARGET, fast_math=False)
    assert not any(note.startswith("batch norm") for note in tunable.notes)


def test_onnx_batch_norm_folds_too(tmp_path):
    """An ONNX graph with an explicit BatchNormalization after its Conv (as other exporters write it)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from tlp.tune.sources import resolve

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    scale, bias = rng.uniform(0.5, 1.5, 4).astype("float32"), rng.uniform(-0.5, 0.5, 4).astype("float32")
    mean, var = rng.uniform(-1, 1, 4).astype("float32"), rng.uniform(0.5, 2, 4).astype("float32")
    initializers = [numpy_helper.from_array(a, n) for a, n in
                    ((weight, "w"), (scale, "scale"), (bias, "bias"), (mean, "mean"), (var, "var"))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], epsilon=1e-5),
             helper.make_node("Relu", ["b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], initializers)
    path = tmp_path / "conv_bn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))

    tunable = resolve(str(path), TARGET, fast_math=False)
    assert "batch norm: 1 folded into conv2d" in tunable.notes, tunable.notes
    assert [t.name for t in tunable.tasks if "batch_norm" in t.name] == []
    outputs = default_schedule_outputs(tunable.relax_mod, tunable.params, tunable.inputs, TARGET)
    conv = torch.nn.functional.conv2d(torch.from_numpy(tunable.inputs[0]), torch.from_numpy(weight), padding=1)
    expected = torch.relu((conv - torch.from_numpy(mean)[:, None, None]) / torch.sqrt(torch.from_numpy(var) + 1e-5)[
        :, None, None] * torch.from_numpy(scale)[:, None, None] + torch.from_numpy(bias)[:, None, None])
    np.testing.assert_allclose(outputs[0], expected.numpy(), rtol=1e-4, atol=1e-5)
