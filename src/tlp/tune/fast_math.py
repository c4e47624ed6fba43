"""Fast math for a network being tuned: applied only when the outputs still match the reference.

The rewrite itself is :func:`tlp.workloads.graph_passes.fast_math`. Here it is accepted or refused: the rewritten
network is compiled with TVM's default schedules (seconds; ``tlp tune`` does the same compile before tuning anyway)
and run on the example inputs; its outputs are compared with PyTorch eager (or, for ONNX files, which have no
PyTorch reference, with the exact-math network compiled the same way) under :mod:`tlp.tune.numerics`'
tolerances. A rewrite that breaks accuracy is refused with the measured error, and the exact network is tuned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tlp import one_line
from tlp._tvm import ms, tvm, use_runtime_threads
from tlp.tune.numerics import compare_outputs, vm_outputs
from tlp.workloads.graph_passes import fast_math


@dataclass
class FastMathDecision:
    """What was decided for one network, for the report."""

    applied: bool
    rewritten: dict[str, int]  # op -> calls rewritten (empty: the network has none of these ops)
    max_rel_err: float | None = None  # worst output's relative error of the fast network vs the reference
    reference: str = ""
    reason: str = ""  # why it was refused
    # The module returned compiled and ran with TVM's default schedules here, so `tlp tune` need not compile it
    # again before tuning (check_compiles): tens of seconds saved on large networks.
    compiled: bool = False

    def note(self) -> str | None:
        """One line for the report (None when the network has nothing to rewrite)."""
        if not self.rewritten:
            return None
        ops = ", ".join(f"{op} x{count}" for op, count in sorted(self.rewritten.items()))
        if self.applied:
            return (f"fast math: {ops} lowered to fast approximations (max rel error {self.max_rel_err:.1e} vs "
                    f"{self.reference}; --set fast_math=false keeps exact math)")
        return f"fast math refused for {ops}: {self.reason}; exact math kept"


def default_schedule_outputs(mod: Any, params: list[np.ndarray], inputs: list[np.ndarray],
                             target_json: dict[str, Any]) -> list[np.ndarray]:
    """Outputs of ``mod`` (parameters as trailing inputs) compiled with TVM's default schedules."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    use_runtime_threads(int(target_json.get("num-cores", 0)))  # the first kernels of a `tlp tune` process run here
    executable = ms.relax_integration.compile_relax(ms.database.MemoryDatabase(), mod,
                                                    tvm.target.Target(target_json), params=None)
    device = tvm.cpu()
    machine = relax.VirtualMachine(executable, device)
    arguments = [tvm.runtime.tensor(a, device) for a in list(inputs) + list(params)]
    return vm_outputs(machine["main"](*arguments))


def choose_fast_math(mod: Any, params: list[np.ndarray], inputs: list[np.ndarray], target_json: dict[str, Any],
                     reference: list[np.ndarray] | None = None) -> tuple[Any, FastMathDecision]:
    """``mod`` with fast math when its outputs stay within tolerance of ``reference`` (PyTorch eager's outputs;
    ``None``: the exact network's own outputs), else ``mod`` unchanged; and the decision."""
    fast, counts = fast_math(mod)
    decision = FastMathDecision(applied=False, rewritten=dict(counts))
    if not counts:
        return mod, decision
    decision.reference = "PyTorch eager" if reference is not None else "the exact-math network"
    try:
        if reference is None:
            reference = default_schedule_outputs(mod, params, inputs, target_json)
            decision.compiled = True  # the exact network, kept if the fast one is refused
        outputs = default_schedule_outputs(fast, params, inputs, target_json)
    except Exception as error:  # pylint: disable=broad-except  # any compile/run failure means: keep exact math
        decision.reason = f"the rewritten network did not compile and run ({one_line(error)})"
        return mod, decision
    numerics = compare_outputs([f"output{i}" for i in range(len(reference))], outputs, reference)
    errors = [o["max_rel_err"] for o in numerics["outputs"] if o["max_rel_err"] is not None]
    decision.max_rel_err = max(errors) if errors else None
    if not numerics["ok"]:
        worst = max(numerics["outputs"], key=lambda o: o["max_rel_err"] if o["max_rel_err"] is not None else np.inf)
        decision.reason = (f"outputs differ from {decision.reference} beyond tolerance ({worst['name']}: max rel "
                           f"error {worst['max_rel_err']}, tolerance {worst['tolerance_rel']:.0e})")
        return mod, decision
    decision.applied = decision.compiled = True
    return fast, decision
