"""Does the compiled model compute what the PyTorch model computes? Max absolute and relative error per output.

A fast wrong model must not be reported as a success, so every end-to-end report runs the compiled network and
PyTorch eager on the same inputs. The relative error of an output is ``max |compiled - eager| / max |eager|``
(normalised by the output's largest magnitude, so that entries near zero do not make it meaningless). An output
passes, as ``numpy.allclose`` would with the output's scale, when

    max |compiled - eager| <= atol + rtol * max |eager|

with ``rtol`` 1e-3 for float32/float64 and 1e-2 for float16/bfloat16, and ``atol`` 1e-5 for every float dtype
(``torch.testing``'s default floor): without the absolute floor, an output of ~1e-40 (denormals) failed with an
error of 9e-41, a relative test of rounding noise. Integer and bool outputs must match exactly. An output whose
eager values are all within ``atol`` of zero is marked ``near_zero``: only the floor judged it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RELATIVE_TOLERANCE = {"float64": 1e-3, "float32": 1e-3, "float16": 1e-2, "bfloat16": 1e-2}
ABSOLUTE_TOLERANCE = {"float64": 1e-5, "float32": 1e-5, "float16": 1e-5, "bfloat16": 1e-5}
EXACT = 0.0  # integers and bools must match exactly


def tolerance(dtype: str) -> float:
    """The relative tolerance an output of ``dtype`` is held to."""
    return RELATIVE_TOLERANCE.get(str(dtype), EXACT)


def absolute_tolerance(dtype: str) -> float:
    """The absolute floor of an output of ``dtype`` (0 for integers and bools)."""
    return ABSOLUTE_TOLERANCE.get(str(dtype), EXACT)


def compare_output(name: str, compiled: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """One output's errors: max abs, max rel (see module docstring), the tolerances and whether it passes."""
    compiled = np.asarray(compiled)
    reference = np.asarray(reference)
    dtype = str(reference.dtype)
    entry: dict[str, Any] = {"name": name, "shape": list(reference.shape), "dtype": dtype,
                             "tolerance_rel": tolerance(dtype), "tolerance_abs": absolute_tolerance(dtype)}
    if compiled.shape != reference.shape:
        return {**entry, "max_abs_err": None, "max_rel_err": None, "ok": False,
                "error": f"shape {list(compiled.shape)} != PyTorch's {list(reference.shape)}"}
    wide_compiled, wide_reference = compiled.astype(np.float64), reference.astype(np.float64)
    difference = np.abs(wide_compiled - wide_reference)
    max_abs = float(difference.max()) if difference.size else 0.0
    scale = float(np.abs(wide_reference).max()) if reference.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    finite = bool(np.isfinite(wide_compiled).all() or not np.isfinite(wide_reference).all())
    ok = finite and max_abs <= entry["tolerance_abs"] + entry["tolerance_rel"] * scale
    result = {**entry, "max_abs_err": max_abs, "max_rel_err": max_rel, "ok": bool(ok)}
    if entry["tolerance_abs"] > 0 and scale <= entry["tolerance_abs"]:
        result["near_zero"] = True  # every PyTorch value within the floor: the relative error says nothing
        result["max_abs_ref"] = scale
    return result


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
                      f"(tolerance {output['tolerance_rel']:.0e} rel + {output.get('tolerance_abs', 0):.0e} abs)")
            if output.get("near_zero"):
                errors += (f"; outputs all near zero (max |PyTorch| {output['max_abs_ref']:.1e}): judged by the "
                           "absolute floor alone")
        lines.append(f"  {output['name']} {output['dtype']}{output['shape']}: {errors} "
                     f"{'ok' if output['ok'] else 'FAILED'}")
    verdict = ("numerics vs PyTorch eager: ok" if numerics["ok"] else
               "NUMERICS FAILED: the compiled model does not compute what the PyTorch model computes")
    if numerics.get("error"):
        verdict += f" ({numerics['error']})"
    return [verdict] + lines
