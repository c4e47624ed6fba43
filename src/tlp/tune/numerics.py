"""Does the compiled model compute what the PyTorch model computes? Max absolute and relative error per output.

A fast wrong model must not be reported as a success, so every end-to-end report runs the compiled network and
PyTorch eager on the same inputs. The relative error of an output is ``max |compiled - eager| / max |eager|``
(normalised by the output's largest magnitude, so that entries near zero do not make it meaningless). An output
fails when that exceeds the tolerance of its dtype: 1e-3 for float32/float64, 1e-2 for float16/bfloat16, exact
equality for integer and bool outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RELATIVE_TOLERANCE = {"float64": 1e-3, "float32": 1e-3, "float16": 1e-2, "bfloat16": 1e-2}
EXACT = 0.0  # integers and bools must match exactly


def tolerance(dtype: str) -> float:
    """The relative tolerance an output of ``dtype`` is held to."""
    return RELATIVE_TOLERANCE.get(str(dtype), EXACT)


def compare_output(name: str, compiled: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """One output's errors: max abs, max rel (see module docstring), the tolerance and whether it passes."""
    compiled = np.asarray(compiled)
    reference = np.asarray(reference)
    entry: dict[str, Any] = {"name": name, "shape": list(reference.shape), "dtype": str(reference.dtype),
                             "tolerance_rel": tolerance(str(reference.dtype))}
    if compiled.shape != reference.shape:
        return {**entry, "max_abs_err": None, "max_rel_err": None, "ok": False,
                "error": f"shape {list(compiled.shape)} != PyTorch's {list(reference.shape)}"}
    wide_compiled, wide_reference = compiled.astype(np.float64), reference.astype(np.float64)
    difference = np.abs(wide_compiled - wide_reference)
    max_abs = float(difference.max()) if difference.size else 0.0
    scale = float(np.abs(wide_reference).max()) if reference.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    finite = bool(np.isfinite(wide_compiled).all() or not np.isfinite(wide_reference).all())
    ok = finite and max_rel <= entry["tolerance_rel"]
    return {**entry, "max_abs_err": max_abs, "max_rel_err": max_rel, "ok": bool(ok)}


def compare_outputs(names: list[str], compiled: list[np.ndarray], reference: list[np.ndarray]) -> dict[str, Any]:
    """Every output compared; ``ok`` only when all pass and the output counts agree."""
    outputs = [compare_output(n, c, r) for n, c, r in zip(names, compiled, reference)]
    result: dict[str, Any] = {"reference": "PyTorch eager", "outputs": outputs,
                              "ok": bool(outputs) and all(o["ok"] for o in outputs)}
    if len(compiled) != len(reference):
        result["ok"] = False
        result["error"] = f"{len(compiled)} compiled outputs, {len(reference)} from PyTorch"
    return result


def vm_outputs(result: Any) -> list[np.ndarray]:
    """A Relax VM result (a tensor or a nested tuple of them) as a flat list of numpy arrays."""
    if hasattr(result, "numpy"):
        return [result.numpy()]
    flat: list[np.ndarray] = []
    for item in result:
        flat.extend(vm_outputs(item))
    return flat


def torch_outputs(module: Any, inputs: tuple[Any, ...]) -> list[np.ndarray]:
    """PyTorch eager outputs of a module returning a tuple of tensors (:mod:`tlp.workloads.exportable`)."""
    import torch  # pylint: disable=import-outside-toplevel

    with torch.no_grad():
        result = module(*inputs)
    result = result if isinstance(result, (tuple, list)) else (result,)
    return [t.detach().cpu().numpy() for t in result]


def format_numerics(numerics: dict[str, Any]) -> list[str]:
    """Lines for the printed report; a failure is loud."""
    lines = []
    for output in numerics["outputs"]:
        if output["max_abs_err"] is None:
            errors = output.get("error", "")
        else:
            errors = (f"max abs err {output['max_abs_err']:.2e}, max rel err {output['max_rel_err']:.2e} "
                      f"(tolerance {output['tolerance_rel']:.0e})")
        lines.append(f"  {output['name']} {output['dtype']}{output['shape']}: {errors} "
                     f"{'ok' if output['ok'] else 'FAILED'}")
    verdict = ("numerics vs PyTorch eager: ok" if numerics["ok"] else
               "NUMERICS FAILED: the compiled model does not compute what the PyTorch model computes")
    if numerics.get("error"):
        verdict += f" ({numerics['error']})"
    return [verdict] + lines
