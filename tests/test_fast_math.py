"""Fast math in the compile path: GELU gets TOPI's fast erf, accepted only when outputs still match PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tlp.tune.fast_math import choose_fast_math, default_schedule_outputs
from tlp.tune.numerics import torch_outputs
from tlp.tune.sources import from_torch
from tlp.workloads.graph_passes import fast_math

TARGET = {"kind": "llvm", "num-cores": 1}


class GeluMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.down(torch.nn.functional.gelu(self.up(x))))


@pytest.fixture(scope="module")
def mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return GeluMLP().eval(), (torch.randn(8, 32) * 3,)


def test_fast_math_rewrites_gelu_and_tanh_and_matches_pytorch(mlp):
    module, inputs = mlp
    tunable = from_torch("gelu_mlp", module, inputs, TARGET)
    assert any(note.startswith("fast math: nn.gelu x1, tanh x1") for note in tunable.notes), tunable.notes
    script = tunable.relax_mod.script()
    assert "R.nn.gelu" not in script and "R.tanh" not in script  # lowered to our TE functions
    outputs = default_schedule_outputs(tunable.relax_mod, tunable.params, tunable.inputs, TARGET)
    np.testing.assert_allclose(outputs[0], module(*inputs).detach().numpy(), rtol=1e-4, atol=1e-5)
    # The fused GELU task is still named after GELU, so reports and datasets read the same with or without it.
    assert any("gelu" in task.name for task in tunable.tasks)
    # The check compiled and ran the network already: `tlp tune` does not compile it again before tuning.
    assert tunable.compiles_with_defaults


def test_no_fast_math_keeps_exact_ops(mlp):
    module, inputs = mlp
    tunable = from_torch("gelu_mlp", module, inputs, TARGET, fast_math=False)
    assert not any(note.startswith("fast math") for note in tunable.notes)
    assert "R.nn.gelu" in tunable.relax_mod.script()
    assert not tunable.compiles_with_defaults  # nothing compiled it: the compile check before tuning runs


def test_rewrite_that_breaks_accuracy_is_refused_with_the_measured_error(mlp):
    module, inputs = mlp
    exact = from_torch("gelu_mlp", module, inputs, TARGET, fast_math=False)
    wrong_reference = [output + 0.5 for output in torch_outputs(module, inputs)]  # what the network must match
    kept, decision = choose_fast_math(exact.relax_mod, exact.params, exact.inputs, TARGET, wrong_reference)
    assert kept is exact.relax_mod and not decision.applied and not decision.compiled
    assert "refused" in decision.note() and "max rel error" in decision.note()
    assert decision.max_rel_err is not None and decision.max_rel_err > 1e-3


def test_network_without_these_ops_is_untouched():
    from tvm.relax.frontend.torch import from_exported_program  # pylint: disable=import-outside-toplevel

    exported = torch.export.export(torch.nn.Linear(4, 4).eval(), (torch.randn(2, 4),))
    mod = from_exported_program(exported, keep_params_as_input=True)
    _, counts = fast_math(mod)
    assert not counts
