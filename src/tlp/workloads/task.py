"""A tuning task: one TIR function that MetaSchedule tunes, and where it came from."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tlp._tvm import ms, tvm


@dataclass
class Task:
    """One MetaSchedule tuning task.

    ``weight`` is how many times the task's kernel runs in one inference of ``network`` (the weight MetaSchedule's
    ``extract_tasks`` reports), which TenSet-style scores and end-to-end latency estimates multiply by; for a
    network it counts the ``variants`` too.
    ``variants``: ``(name, weight)`` of the network's other fused functions with the same anchor block (the same
    convolution or matmul, another elementwise epilogue, e.g. with and without a residual add). They are not tuned
    apart: the compiled network runs them with this task's schedule (:mod:`tlp.search.database.shared_schedules`).
    """

    name: str
    mod: "tvm.IRModule"
    weight: int = 1
    network: str = ""
    variants: tuple[tuple[str, int], ...] = ()

    @cached_property
    def workload_json(self) -> list[Any]:
        """MetaSchedule's JSON form of the workload: ``[structural hash, base64 IRModule]``."""
        return list(ms.database.Workload(self.mod).as_json())

    @cached_property
    def flops(self) -> float:
        """Floating-point operations of one run (0 when TVM cannot count them)."""
        return flop_count(self.mod)

    @cached_property
    def io_bytes(self) -> int:
        """Bytes of the kernel's arguments (inputs and outputs): what one run must move at least once."""
        return io_byte_count(self.mod)

    @property
    def own_weight(self) -> int:
        """Runs of this function itself (``weight`` less its variants'): what a dataset catalogues for its workload,
        which the variants' own workloads are catalogued apart from."""
        return self.weight - sum(weight for _, weight in self.variants)

    @property
    def key(self) -> str:
        """MetaSchedule's structural hash of the module: the identity of the task across networks and datasets."""
        return str(self.workload_json[0])

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "weight": self.weight, "network": self.network, "workload": self.workload_json,
                "variants": [list(variant) for variant in self.variants]}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Task":
        mod = ms.database.Workload.from_json(data["workload"]).mod
        return Task(name=data["name"], mod=mod, weight=int(data.get("weight", 1)), network=data.get("network", ""),
                    variants=tuple((str(name), int(weight)) for name, weight in data.get("variants", ())))


def flop_count(mod: "tvm.IRModule") -> float:
    """Floating-point operations of one run of the task (for GFLOPS reports); 0 when TVM cannot count them."""
    try:
        from tvm.s_tir.analysis import estimate_tir_flops  # pylint: disable=import-outside-toplevel

        return float(estimate_tir_flops(mod))
    except Exception:  # pylint: disable=broad-except  # counting is best-effort on exotic IR
        return 0.0


def io_byte_count(mod: "tvm.IRModule") -> int:
    """Bytes of every buffer argument of the module's functions: a lower bound on one run's memory traffic (a
    kernel reads each input and writes each output at least once; it may read less of a gather's table)."""
    total = 0
    for func in mod.functions.values():
        for param in getattr(func, "params", ()):
            if not hasattr(param, "shape"):  # a scalar argument, not a buffer
                continue
            elements = 1
            for extent in param.shape:
                elements *= int(extent)
            total += elements * tvm.runtime.DataType(param.dtype).bits // 8
    return total
