"""Graph-level rewrites of an imported network, applied before its tasks are extracted.

Fast math. TVM lowers ``erf`` (hence GELU), ``exp`` and ``tanh`` to exact libm-style code that LLVM does not
vectorise: on BERT-tiny's 128x512 GELU the exact ``erf`` took 0.47 ms and TOPI's ``fast_erf`` 0.036 ms (2-core
Zen 3), and that one task was half the network's time. Its design space holds a single program, so no cost model
can fix it: only the graph can. ``relax.transform.FastMathTransform`` covers ``erf``/``exp``/``tanh``/``softmax``
(so does this pass) but not ``nn.gelu``/``nn.gelu_tanh``, which the PyTorch frontend emits as single ops and whose legalization calls
the exact ``erf``/``tanh`` inside, so this pass covers those too.

The approximations are TOPI's (rational/polynomial, ~1e-7 relative error in float32). Whether a network's outputs
still match PyTorch is checked where the network is imported (:func:`tlp.tune.sources.from_torch`): a rewrite
that breaks accuracy is refused there, with the measured error.

Batch norm folding. PyTorch's ``BatchNorm2d`` imports as ``relax.nn.batch_norm``, which ``FuseOps`` cannot fuse
into the convolution before it: every conv of MobileNetV2 became two tasks, the conv and a memory-bound
``fused_batch_norm*_tir_clip*`` pass over its output whose design space holds one program. Those passes were half
of MobileNetV2's tuned time (5.7-6.9 ms of ~12 ms, 2-core Zen 2) and no search could touch them. With the weights
bound, TVM's ``FoldBatchnormToConv2D`` scales the conv's weights and leaves a bias add, which fuses into the conv
(with the ReLU6 clip and the residual add): 57 tasks become 33. Batch norms that follow no conv (DenseNet's
pre-activation ones) are decomposed into elementwise ops that fuse with their neighbours. This is exact algebra
(Relay's ``SimplifyInference`` + ``FoldScaleAxis`` did the same by default, so TenSet's networks had it); the tuned
network is still checked against PyTorch.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable

from tlp._tvm import tvm


def fast_gelu(x: Any) -> Any:
    """GELU (erf form) of a TE tensor with TOPI's fast erf: what fast math lowers ``nn.gelu`` to."""
    from tvm import topi, tirx  # pylint: disable=import-outside-toplevel

    half = tirx.const(0.5, x.dtype)
    return x * (half + topi.fast_erf(x * tirx.const(math.sqrt(0.5), x.dtype)) * half)


def _fast_gelu_tanh(x: Any) -> Any:
    from tvm import topi, tirx  # pylint: disable=import-outside-toplevel

    dtype = x.dtype
    inner = tirx.const(math.sqrt(2.0 / math.pi), dtype) * (x + tirx.const(0.044715, dtype) * x * x * x)
    return tirx.const(0.5, dtype) * x * (tirx.const(1.0, dtype) + topi.fast_tanh(inner))


def _dtype(expr: Any) -> str:
    """The element type of a Relax tensor expression ("" when it is not a tensor)."""
    try:
        return str(expr.ty.dtype)
    except AttributeError:
        return ""


def _fast_math_ops() -> dict[str, tuple[str, Callable[..., Any]]]:
    """Relax op -> (PrimFunc name hint, TE compute with fast approximations). Names are kept so task names match
    the exact network's (``fused_reshape10_gelu_reshape11`` stays that)."""
    from tvm import topi  # pylint: disable=import-outside-toplevel

    return {
        "relax.nn.gelu": ("gelu", fast_gelu),
        "relax.nn.gelu_tanh": ("gelu_tanh", _fast_gelu_tanh),
        "relax.erf": ("erf", topi.fast_erf),
        "relax.exp": ("exp", topi.fast_exp),
        "relax.tanh": ("tanh", topi.fast_tanh),
        # Softmax's exact exp is most of its time (default schedule 0.105 -> 0.044 ms on 2x128x128, Zen 4).
        "relax.nn.softmax": ("softmax", topi.nn.fast_softmax),
    }


def fast_math(mod: "tvm.IRModule") -> tuple["tvm.IRModule", Counter]:
    """``mod`` with GELU/erf/exp/tanh/softmax lowered to TOPI's fast approximations, and how many of each were
    rewritten. Float32/float16 calls only (TOPI's fast versions exist for those); other dtypes keep the exact op.
    """
    from tvm import relax  # pylint: disable=import-outside-toplevel
    from tvm.relax import expr_functor  # pylint: disable=import-outside-toplevel

    table = _fast_math_ops()
    counts: Counter = Counter()

    @expr_functor.mutator
    class FastMath(relax.PyExprMutator):  # pylint: disable=too-few-public-methods
        def visit_call_(self, call: Any) -> Any:  # noqa: N802  (TVM's visitor name)
            call = super().visit_call_(call)
            op = getattr(call.op, "name", None)
            if op in table and call.args and _dtype(call.args[0]) in ("float32", "float16"):
                name, compute = table[op]
                counts[op.removeprefix("relax.")] += 1
                extra = [int(call.attrs.axis)] if op == "relax.nn.softmax" else []
                return self.builder_.call_te(compute, call.args[0], *extra, primfunc_name_hint=name)
            return call

    mutator = FastMath(mod)
    for global_var, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(global_var, mutator.visit_expr(func))
    return mutator.builder_.get(), counts


def bind_weights(mod: "tvm.IRModule", params: list[Any], num_inputs: int) -> "tvm.IRModule":
    """``mod`` with its weights bound as constants: ``main`` then takes the example inputs only.

    Why: with weights as runtime inputs, what the graph computes from weights alone runs on every call. PyTorch's
    ``Linear`` imports as ``permute_dims(W)`` + ``matmul``, so each layer transposed its weight on every inference
    (a quarter of BERT-tiny's compiled time, 2-core Zen 4). Bound, ``FoldConstant`` computes those once at compile
    time and the transposes are no longer tasks to tune. The tuned matmuls are the same tasks either way. Batch
    norms can only be folded into convolutions once their weights are constants (:func:`fold_batch_norms`).
    """
    from tvm import relax  # pylint: disable=import-outside-toplevel

    if not params:
        return mod
    weights = list(mod["main"].params)[num_inputs:]
    if len(weights) != len(params):
        raise ValueError(f"main takes {len(weights)} weights after its {num_inputs} inputs, {len(params)} given")
    return relax.transform.BindParams("main", {var: tvm.runtime.tensor(value)
                                               for var, value in zip(weights, params)})(mod)


def count_ops(mod: "tvm.IRModule", names: set[str]) -> Counter:
    """How many calls of each Relax op in ``names`` (``"relax.nn.batch_norm"``) the module's Relax functions make."""
    from tvm import relax  # pylint: disable=import-outside-toplevel
    from tvm.relax import expr_functor  # pylint: disable=import-outside-toplevel

    counts: Counter = Counter()

    @expr_functor.visitor
    class CountOps(relax.PyExprVisitor):  # pylint: disable=too-few-public-methods
        def visit_call_(self, call: Any) -> None:  # noqa: N802  (TVM's visitor name)
            super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name in names:
                counts[name] += 1

    visitor = CountOps()
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            visitor.visit_expr(func)
    return counts


def fold_batch_norms(mod: "tvm.IRModule") -> tuple["tvm.IRModule", Counter]:
    """``mod`` with inference batch norms folded into the convolutions before them (constant weights only) and the
    rest decomposed into elementwise ops, and how many of each: ``{"folded into conv2d": n, "decomposed": m}``."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    batch_norm = "relax.nn.batch_norm"
    before = count_ops(mod, {batch_norm})[batch_norm]
    if not before:
        return mod, Counter()
    mod = relax.transform.FoldBatchnormToConv2D()(mod)
    left = count_ops(mod, {batch_norm})[batch_norm]
    if left:
        # Only when batch norms remain: the pass also decomposes other composite ops (attention), which nothing
        # here asked for.
        mod = relax.transform.DecomposeOpsForInference()(mod)
    counts = Counter({"folded into conv2d": before - left, "decomposed": left})
    return mod, +counts


def inference_graph(mod: "tvm.IRModule", params: list[Any], num_inputs: int) -> tuple["tvm.IRModule", list[str]]:
    """The graph to extract tasks from and compile: weights bound, batch norms folded; and notes on what changed.

    One function for every path (``tlp tune`` of a network or ONNX file, ``tlp collect`` of a zoo network) so the
    tasks a dataset holds are the tasks a search meets.
    """
    mod, folded = fold_batch_norms(bind_weights(mod, params, num_inputs))
    notes = ["batch norm: " + ", ".join(f"{count} {how}" for how, count in folded.items())] if folded else []
    return mod, notes
