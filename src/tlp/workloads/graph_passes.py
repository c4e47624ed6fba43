"""Graph-level rewrites of an imported network, applied before its tasks are extracted.

Fast math. TVM lowers ``erf`` (hence GELU), ``exp`` and ``tanh`` to exact libm-style code that LLVM does not
vectorise: on BERT-tiny's 128x512 GELU the exact ``erf`` took 0.47 ms and TOPI's ``fast_erf`` 0.036 ms (2-core
Zen 3), and that one task was half the network's time. Its design space holds a single program, so no cost model
can fix it: only the graph can. ``relax.transform.FastMathTransform`` covers ``erf``/``exp``/``tanh``/``softmax``
(so does this pass) but not ``nn.gelu``/``nn.gelu_tanh``, which the PyTorch frontend emits as single ops and whose legalization calls
the exact ``erf``/``tanh`` inside, so this pass covers those too.

The approximations are TOPI's (rational/polynomial, ~1e-7 relative error in float32). Whether a network's outputs
still match PyTorch is checked where the network is imported (:func:`tlp.search.sources.from_torch`): a rewrite
that breaks accuracy is refused there, with the measured error.
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
