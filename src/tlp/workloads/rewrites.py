"""Relax graph rewrites for operations that TVM 0.27 imports but cannot compile.

TVM's LLVM code generator lowers comparisons and arithmetic on ``bool`` tensors as if they were floats
(``fcmp oeq i1`` for ``equal``; ``Check failed: t.MatchesCode(kDLFloat)`` for the rest), and legalizes ``max`` /
``argmax`` over bools with no minimum value for the type. PyTorch produces such operations in every HuggingFace
decoder's causal-mask code (``equal`` of two bool tensors), so without these rewrites GPT-2 and Llama import and
tune but never compile. The reproducers are in ``docs/upstream_bugs.md``.

Each rewrite computes the same values on ``int8`` (``True`` = 1) and turns the result back into ``bool`` where the
original op returned ``bool``:

- comparisons (``equal``, ``not_equal``, ``less``, ``less_equal``, ``greater``, ``greater_equal``): compare int8;
- ``maximum``, ``minimum``, ``add``, ``multiply``, ``subtract``, ``max``, ``min``: compute on int8, then ``!= 0``;
- ``argmax``, ``argmin``: on int8 (the indices do not change);
- ``cumsum`` of bool with no dtype: PyTorch's result is int64 (a running count); the Relax frontend leaves the dtype
  unset, which means a bool "sum", so the dtype is set to int64 as PyTorch computes it.
"""

from __future__ import annotations

from typing import Any, Callable

from tlp._tvm import tvm

COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
BOOL_VALUED = ("maximum", "minimum", "add", "multiply", "subtract", "max", "min")
INDEX_VALUED = ("argmax", "argmin")


def _is_bool(expr: Any) -> bool:
    from tvm import relax  # pylint: disable=import-outside-toplevel

    # TVM 0.27 calls an expression's static type ``ty`` (``struct_info`` in earlier releases).
    info = getattr(expr, "ty", None)
    return isinstance(info, relax.TensorType) and str(info.dtype) == "bool"


def _make_rewriter() -> Callable[[Any], Any]:
    from tvm import relax  # pylint: disable=import-outside-toplevel

    ops = {name: tvm.ir.Op.get(f"relax.{name}") for name in COMPARISONS + BOOL_VALUED + INDEX_VALUED + ("cumsum",)}
    by_op = {op: name for name, op in ops.items()}

    @relax.expr_functor.mutator
    class BoolOpRewriter(relax.PyExprMutator):  # type: ignore[misc]
        """Replaces the bool ops TVM cannot lower with the same computation on int8; counts what it changed."""

        def __init__(self, mod: Any) -> None:
            super().__init__(mod)
            self.mod_ = mod
            self.rewritten: dict[str, int] = {}

        def visit_call_(self, call: Any) -> Any:  # pylint: disable=arguments-renamed
            call = super().visit_call_(call)
            name = by_op.get(call.op) if isinstance(call.op, tvm.ir.Op) else None
            if name is None or not any(_is_bool(arg) for arg in call.args):
                return call
            if name == "cumsum":
                if call.attrs.dtype is not None and str(call.attrs.dtype) not in ("", "bool"):
                    return call
                self.rewritten[name] = self.rewritten.get(name, 0) + 1
                return relax.op.cumsum(call.args[0], axis=call.attrs.axis, dtype="int64",
                                       exclusive=call.attrs.exclusive)
            self.rewritten[name] = self.rewritten.get(name, 0) + 1
            args = [self.builder_.emit(relax.op.astype(a, "int8")) if _is_bool(a) else a for a in call.args]
            new = relax.Call(call.op, args, call.attrs, call.ty_args)
            if name in BOOL_VALUED:
                value = self.builder_.emit(new)
                return relax.op.not_equal(value, relax.const(0, "int8"))
            return new

        def transform(self) -> Any:
            for global_var, func in self.mod_.functions.items():
                if isinstance(func, relax.Function):
                    self.builder_.update_func(global_var, self.visit_expr(func))
            return self.builder_.get()

    def rewrite(mod: Any) -> Any:
        rewriter = BoolOpRewriter(mod)
        result = rewriter.transform()
        return result, dict(rewriter.rewritten)

    return rewrite


def rewrite_bool_ops(mod: "tvm.IRModule") -> tuple["tvm.IRModule", dict[str, int]]:
    """``mod`` with every bool op TVM cannot compile replaced (see the module docstring), and how many per op."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    rewritten, counts = _make_rewriter()(mod)
    if counts:
        rewritten = relax.transform.Normalize()(rewritten)
    return (rewritten if counts else mod), counts
