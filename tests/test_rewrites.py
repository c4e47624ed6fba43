"""Bool ops TVM 0.27 cannot compile: each fails as built, compiles after the rewrite and computes the same values."""

import numpy as np
import pytest

from tlp._tvm import tvm
from tlp.workloads.rewrites import rewrite_bool_ops

X = np.array([[False, True, False, True]])
Y = np.array([[False, False, True, True]])


def _module(build):
    from tvm import relax
    from tvm.script import relax as R

    builder = relax.BlockBuilder()
    a = relax.Var("a", R.Tensor((1, 4), "bool"))
    b = relax.Var("b", R.Tensor((1, 4), "bool"))
    with builder.function("main", [a, b]):
        with builder.dataflow():
            out = builder.emit_output(build(relax.op, a, b))
        builder.emit_func_output(out)
    return builder.get()


def _run(mod):
    from tvm import relax

    machine = relax.VirtualMachine(tvm.compile(relax.get_pipeline("zero")(mod), target="llvm"), tvm.cpu())
    return machine["main"](tvm.runtime.tensor(X), tvm.runtime.tensor(Y)).numpy()


CASES = {  # op -> (Relax expression, what PyTorch computes on the same bools)
    "equal": (lambda op, a, b: op.equal(a, b), X == Y),
    "not_equal": (lambda op, a, b: op.not_equal(a, b), X != Y),
    "less": (lambda op, a, b: op.less(a, b), X < Y),
    "greater_equal": (lambda op, a, b: op.greater_equal(a, b), X >= Y),
    "maximum": (lambda op, a, b: op.maximum(a, b), X | Y),
    "minimum": (lambda op, a, b: op.minimum(a, b), X & Y),
    "add": (lambda op, a, b: op.add(a, b), X | Y),
    "multiply": (lambda op, a, b: op.multiply(a, b), X & Y),
    "max": (lambda op, a, b: op.max(a, axis=[1]), X.max(axis=1)),
    "argmax": (lambda op, a, b: op.argmax(a, axis=1), X.argmax(axis=1)),
    "cumsum": (lambda op, a, b: op.cumsum(a, axis=1), np.cumsum(X, axis=1)),  # PyTorch: int64 running count
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bool_op_fails_in_tvm_and_compiles_after_rewrite(name):
    build, expected = CASES[name]
    mod = _module(build)
    with pytest.raises(Exception, match="kDLFloat|fcmp|min_value"):  # the upstream bug (docs/upstream_bugs.md)
        _run(mod)
    rewritten, counts = rewrite_bool_ops(mod)
    assert counts == {name: 1}
    result = _run(rewritten)
    np.testing.assert_array_equal(result, expected)
    assert result.dtype == expected.dtype


def test_bool_comparison_with_a_constant_is_rewritten():
    from tvm import relax

    rewritten, counts = rewrite_bool_ops(_module(lambda op, a, b: op.equal(a, relax.const(True, "bool"))))
    assert counts == {"equal": 1}
    np.testing.assert_array_equal(_run(rewritten), X)


def test_modules_without_bool_ops_are_returned_unchanged():
    from tvm import relax
    from tvm.script import relax as R

    builder = relax.BlockBuilder()
    a = relax.Var("a", R.Tensor((4,), "float32"))
    with builder.function("main", [a]):
        with builder.dataflow():
            out = builder.emit_output(relax.op.equal(a, a))  # float comparison: TVM compiles it
        builder.emit_func_output(out)
    mod = builder.get()
    rewritten, counts = rewrite_bool_ops(mod)
    assert counts == {} and rewritten.same_as(mod)


def test_a_decoder_causal_mask_from_pytorch_compiles():
    """The pattern of every HuggingFace decoder's mask code: a bool running count compared with itself."""
    import torch
    from tvm import relax

    from tlp.workloads.extract import import_torch

    class Mask(torch.nn.Module):
        def forward(self, positions):
            segment = (positions.diff(prepend=positions[:, :1] - 1) != 1).cumsum(-1)
            return (segment[:, :, None] == segment[:, None, :]) & (positions[:, :, None] >= positions[:, None, :])

    positions = torch.tensor([[0, 1, 2, 0, 1]])
    imported = import_torch(Mask(), (positions,))
    assert imported.rewrites
    mod, _ = relax.frontend.detach_params(imported.mod)
    machine = relax.VirtualMachine(tvm.compile(relax.get_pipeline("zero")(mod), target="llvm"), tvm.cpu())
    result = machine["main"](tvm.runtime.tensor(positions.numpy()))
    result = result[0] if not hasattr(result, "numpy") else result
    np.testing.assert_array_equal(result.numpy(), Mask()(positions).numpy())
