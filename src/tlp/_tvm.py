"""The one place where TLP imports TVM and MetaSchedule.

Why this module exists: ``import tvm.s_tir.tensor_intrin`` (done by ``TuneContext`` and by MetaSchedule's
default builder in *every* build worker) registers the tensor intrinsics of every backend and takes ~34 s on our
2-core machines, 28 s of it for CUDA alone. MetaSchedule's ``LocalBuilder`` starts fresh worker processes for each
batch, so with its default build function the first build of every worker pays that import and hits the 30 s
build timeout. We register only the intrinsics of the CPU family we compile for, which is all an LLVM target's
schedule rules can use; the CUDA intrinsics are registered when a CUDA target asks for them.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import platform as _host_platform
import sys
import types
import warnings
from pathlib import Path
from typing import Any, Iterator

import tvm  # noqa: F401  (re-exported for the rest of the package)
import tvm_ffi

# A Ctrl-C while MetaSchedule's C++ side is calling back into Python (our builder's ``build``, a runner future's
# ``result``: where a measurement waits) raises KeyboardInterrupt inside the callback; the FFI re-raises errors of
# unregistered kinds as RuntimeError, so `tlp collect` died with a traceback instead of stopping cleanly.
tvm_ffi.error.register_error("KeyboardInterrupt", KeyboardInterrupt)

_INTRIN_PACKAGE = "tvm.s_tir.tensor_intrin"


def _intrin_families() -> tuple[str, ...]:
    machine = _host_platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return ("arm_cpu",)
    return ("x86",)


_REGISTERED_FAMILIES: set[str] = set()


def register_tensor_intrinsics(target: Any = "llvm") -> None:
    """Register the tensor intrinsics that schedules for ``target`` (a kind name, a JSON dict or a TVM Target) can
    use, and no others. Call it before a ``TuneContext`` of a CUDA target is made (its schedule rules name the
    WMMA intrinsics: "TensorIntrin 'wmma_fill_16x16x16_f32' is not registered") or a CUDA trace is replayed;
    the first call for CUDA takes ~15 s, later ones nothing."""
    if isinstance(target, str):
        target_kind = target
    elif isinstance(target, dict):
        target_kind = str(target.get("kind", "llvm"))
    else:
        target_kind = str(target.kind.name)
    families = ("cuda",) if target_kind == "cuda" else _intrin_families()
    if _REGISTERED_FAMILIES.issuperset(families):
        return
    import tvm.s_tir  # pylint: disable=import-outside-toplevel

    package = sys.modules.get(_INTRIN_PACKAGE)
    if package is None:
        # A package object without its __init__ (which imports every backend): submodules still import normally.
        package = types.ModuleType(_INTRIN_PACKAGE)
        package.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
        package.__package__ = _INTRIN_PACKAGE
        sys.modules[_INTRIN_PACKAGE] = package
        tvm.s_tir.tensor_intrin = package  # type: ignore[attr-defined]
    for family in families:
        importlib.import_module(f"{_INTRIN_PACKAGE}.{family}")
        _REGISTERED_FAMILIES.add(family)


register_tensor_intrinsics()

from tvm.s_tir import meta_schedule as ms  # noqa: E402  pylint: disable=wrong-import-position


def structural_hash(obj: Any) -> int:
    """TVM's structural hash (the identity MetaSchedule uses for workloads and programs)."""
    return int(tvm_ffi.structural_hash(obj))


def use_runtime_threads(threads: int) -> int:
    """Run this process's compiled code on ``threads`` threads (0: leave TVM's choice); return the count TVM's
    thread pool actually uses.

    Why: on these VMs TVM's default pool ran one thread on 2 cores (``runtime.NumThreads() == 1``): BERT-tiny's
    tuned network took 1.95 ms end to end instead of 0.99 ms with 2 threads, while
    the runner, which sets the thread count for its workers, had measured its kernels at 2 threads. The pool reads ``TVM_NUM_THREADS`` once,
    when it starts, so this must run before any kernel of the process does; the returned count says whether it did.
    """
    if threads > 0:
        os.environ["TVM_NUM_THREADS"] = str(threads)
    return int(tvm_ffi.get_global_func("runtime.NumThreads")())


@contextlib.contextmanager
def unnamed_log_handlers_set_aside() -> Iterator[None]:
    """MetaSchedule's logging set-up (``get_loggers_from_work_dir``, also inside ``tune_tir``) lists its logger's
    handlers by name and fails on an unnamed one (pytest's capture handlers, a notebook's own): for the duration,
    those are set aside, then given back."""
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    unnamed = [h for h in ms_logger.handlers if h.get_name() is None]
    for handler in unnamed:
        ms_logger.removeHandler(handler)
    try:
        yield
    finally:
        for handler in unnamed:
            ms_logger.addHandler(handler)


def build_for_measurement(mod: "tvm.IRModule", target: "tvm.target.Target", _params: Any) -> Any:
    """MetaSchedule's default build, minus the import of every backend's tensor intrinsics (see module doc).

    Runs inside builder worker processes; it must stay importable from this module by name (cloudpickle ships a
    reference to it).
    """
    from tvm.driver import build as tvm_build  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # pylint: disable=import-outside-toplevel

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def _index_safe_fill(random_fill: Any) -> Any:
    """Random data for float tensors, zeros for integer tensors.

    MetaSchedule fills every argument with random bits; for gathers (``take``, embeddings) the integer tensor holds
    indices, random ones point outside the table and the runner process segfaults. Zero is a valid index for any
    gather and a harmless value elsewhere, so timings of such tasks become measurable.
    """

    def fill(tensor: Any) -> None:
        dtype = str(tensor.dtype)
        if dtype.startswith(("int", "uint")):
            import numpy as np  # pylint: disable=import-outside-toplevel

            tensor.copyfrom(np.zeros(tuple(tensor.shape), dtype=dtype))
        else:
            random_fill(tensor)

    return fill


def alloc_arguments_local(device: Any, args_info: Any, alloc_repeat: int) -> list[Any]:
    """``LocalRunner``'s argument allocation with index-safe integer tensors (runs in runner workers)."""
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common  # pylint: disable=import-outside-toplevel

    random_fill = tvm.get_global_func("tvm.contrib.random.random_fill_for_measure")
    return alloc_argument_common(_index_safe_fill(random_fill), device, args_info, alloc_repeat)


def alloc_arguments_rpc(session: Any, device: Any, args_info: Any, alloc_repeat: int) -> list[Any]:
    """``RPCRunner``'s argument allocation with index-safe integer tensors."""
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common  # pylint: disable=import-outside-toplevel

    random_fill = session.get_function("tvm.contrib.random.random_fill_for_measure")
    return alloc_argument_common(_index_safe_fill(random_fill), device, args_info, alloc_repeat)


def to_plain(value: Any) -> Any:
    """FFI containers and TVM scalars -> plain Python (JSON-serializable, stable for hashing)."""
    if isinstance(value, (str, bool)) or value is None:
        return value if not isinstance(value, str) else str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if hasattr(value, "items"):
        return {str(k): to_plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if hasattr(value, "__iter__"):
        return [to_plain(v) for v in value]
    if hasattr(value, "value"):
        return to_plain(value.value)
    return str(value)


from tvm.s_tir.schedule.trace import _json_from_tvm  # noqa: E402  pylint: disable=wrong-import-position
from tvm.ir.prim.expr import IntImm as _IntImm  # noqa: E402  pylint: disable=wrong-import-position
from tvm.tirx.function import IndexMap as _IndexMap  # noqa: E402  pylint: disable=wrong-import-position

_TRACE_AS_JSON = tvm_ffi.get_global_func("s_tir.schedule.TraceAsJSON")
_STRUCTURAL_HASH = tvm_ffi.get_global_func("ffi.StructuralHash")
# Per mode (index maps as JSON text / opaque): instruction hash -> its plain JSON; instruction-list hash -> list.
_INSTRUCTION_CACHE: dict[bool, dict[int, Any]] = {True: {}, False: {}}
_INSTRUCTION_CACHE_LIMIT = 200_000
_TRACE_CACHE: dict[bool, dict[int, Any]] = {True: {}, False: {}}
_TRACE_CACHE_LIMIT = 20_000
# How ``trace.as_json()`` writes an IndexMap: TVM's JSON graph, compact (an input) or indented by 2 (the padding
# attribute of TransformLayout, TransformBlockLayout's attribute); either way its first key is this.
_INDEX_MAP_JSON_KEY = '"root_index"'
# What ``trace_json(..., index_maps_as_text=False)`` writes instead; no block or annotation is named so.
OPAQUE_INDEX_MAP = "<IndexMap>"


def clear_trace_caches() -> None:
    """Forget every cached instruction (benchmarks use it to measure cold starts)."""
    for cache in (*_INSTRUCTION_CACHE.values(), *_TRACE_CACHE.values(), _TEXT_TRACE_CACHE, _TEXT_INSTRUCTION_CACHE):
        cache.clear()


def _plain_decision(value: Any) -> Any:
    """``to_plain`` of one decision (or its instruction index), about 2x faster on what decisions hold.

    Decisions are ints (``SampleCategorical``'s index) and arrays of ints (``SamplePerfectTile``'s factors),
    instruction indices are ``IntImm``: those take the short path, anything else TVM's converter and ``to_plain``.
    """
    if type(value) is int:  # pylint: disable=unidiomatic-typecheck  # bool is an int subclass: to_plain's path
        return value
    if isinstance(value, tvm_ffi.Array):
        return [_plain_decision(item) for item in value]
    if isinstance(value, _IntImm):
        return to_plain(value.value)
    return to_plain(_json_from_tvm(value))


def is_index_map_text(value: Any) -> bool:
    """Whether ``value`` is an IndexMap as ``trace.as_json()`` writes it (a JSON graph)."""
    return isinstance(value, str) and value.startswith("{") and _INDEX_MAP_JSON_KEY in value[:32]


def _plain_json(value: Any, index_maps_as_text: bool) -> Any:
    """``to_plain(_json_from_tvm(value))``; with ``index_maps_as_text=False`` an IndexMap becomes
    :data:`OPAQUE_INDEX_MAP` instead of its JSON graph (TVM's ``save_json``: ~0.2 ms each), also where TVM
    already wrote it as text (an attribute)."""
    if not index_maps_as_text:
        if isinstance(value, _IndexMap):
            return OPAQUE_INDEX_MAP
        if isinstance(value, tvm_ffi.Array):
            return [_plain_json(item, False) for item in value]
        plain = to_plain(_json_from_tvm(value))
        return OPAQUE_INDEX_MAP if is_index_map_text(plain) else plain
    return to_plain(_json_from_tvm(value))


_NATIVE_TRACE_TEXT: Any = None  # the compiled reader's function; False where it cannot be built or is turned off
_TEXT_TRACE_CACHE: dict[str, Any] = {}  # instruction lines of a trace -> their parsed list (one object per list)
_TEXT_INSTRUCTION_CACHE: dict[str, Any] = {}  # one instruction's line -> its parsed JSON
_TEXT_TRACE_CACHE_LIMIT = 8_192


def native_trace_reader() -> Any:
    """The compiled trace reader (``_trace_text.cc``, built by tvm-ffi on first use and cached under
    ``~/.cache/tvm-ffi``), or None where no C++ compiler builds it or ``TLP_NATIVE_TRACE=0`` turns it off."""
    global _NATIVE_TRACE_TEXT  # pylint: disable=global-statement
    if _NATIVE_TRACE_TEXT is None:
        _NATIVE_TRACE_TEXT = False
        if os.environ.get("TLP_NATIVE_TRACE", "1") != "0":
            try:
                import tvm_ffi.cpp  # pylint: disable=import-outside-toplevel

                source = (Path(__file__).parent / "_trace_text.cc").read_text()
                _NATIVE_TRACE_TEXT = tvm_ffi.cpp.load_inline("tlp_trace_text", cpp_sources=source,
                                                             functions=["trace_text"]).trace_text
            except Exception as error:  # pylint: disable=broad-except  # no compiler: the Python reader works
                warnings.warn(f"TLP's compiled trace reader is unavailable ({type(error).__name__}: "
                              f"{str(error)[:200]}); reading traces in Python (about 2x slower scoring)",
                              RuntimeWarning, stacklevel=3)
    return _NATIVE_TRACE_TEXT or None


def _trace_json_native(reader: Any, trace: Any) -> Any | None:
    """``trace_json(trace, False)`` from the compiled reader's text; None if it cannot write this trace."""
    try:
        text = reader(trace, OPAQUE_INDEX_MAP)
    except Exception:  # pylint: disable=broad-except  # something AsJSON writes its own way: take TVM's path
        return None
    cut = text.rfind("\n")
    decisions = json.loads(text[cut + 1 :])
    if cut < 0:
        return [[], decisions]
    body = text[:cut]
    insts = _TEXT_TRACE_CACHE.get(body)
    if insts is None:
        if len(_TEXT_TRACE_CACHE) >= _TEXT_TRACE_CACHE_LIMIT:
            _TEXT_TRACE_CACHE.clear()
        if len(_TEXT_INSTRUCTION_CACHE) >= _INSTRUCTION_CACHE_LIMIT:
            _TEXT_INSTRUCTION_CACHE.clear()
        lines = _TEXT_INSTRUCTION_CACHE
        # The same instruction is the same object in every list: the featurizer caches rows by identity.
        insts = _TEXT_TRACE_CACHE[body] = [lines.get(line) or lines.setdefault(line, json.loads(line))
                                           for line in body.split("\n")]
    return [insts, decisions]


def trace_json(trace: Any, index_maps_as_text: bool = True) -> Any:
    """``to_plain(trace.as_json())``, about 9x faster: the cost model calls this for every candidate of a search.

    The C++ half of ``Trace.as_json`` is cheap (~10 us); converting its FFI containers to Python costs one FFI
    call per element (~40 us per instruction). The candidates of one search repeat the same instructions (those
    of a few sketches, with names fixed by their position) and differ mostly in their decisions, so each
    instruction's JSON is converted once and then found by its structural hash (one C++ call). The returned
    lists are shared between calls: treat them as read-only.

    ``index_maps_as_text=False``: IndexMaps (``TransformLayout``'s, which the RewriteLayout post-processor gives
    almost every candidate of a dense or convolution its own) are written as :data:`OPAQUE_INDEX_MAP`, not as
    their JSON graph. For a featurizer whose string vocabulary holds no index map (it then reads every one as
    out-of-vocabulary), the features are the same; the JSON graph cost ~0.2 ms per candidate. This mode reads
    the trace with the compiled reader (:func:`native_trace_reader`) where it is available: one C++ call writes
    the whole trace as text, which Python's json parses (instructions seen before are found by their text).
    """
    if not index_maps_as_text:
        reader = native_trace_reader()
        if reader is not None:
            plain = _trace_json_native(reader, trace)
            if plain is not None:
                return plain
    insts_json, decisions_json = _TRACE_AS_JSON(trace, False)
    decisions = [[_plain_decision(index), _plain_decision(value)] for index, value in decisions_json]
    # Whole instruction lists repeat too (same sketch, same post-processing): one hash finds them, and returning
    # the very same list object lets the featurizer reuse its rows (it caches by list identity).
    whole_key = _STRUCTURAL_HASH(insts_json, False, False)
    traces, instructions = _TRACE_CACHE[index_maps_as_text], _INSTRUCTION_CACHE[index_maps_as_text]
    cached = traces.get(whole_key)
    if cached is not None:
        return [cached, decisions]
    insts = []
    for inst in insts_json:
        key = _STRUCTURAL_HASH(inst, False, False)
        plain = instructions.get(key)
        if plain is None:
            if len(instructions) >= _INSTRUCTION_CACHE_LIMIT:
                instructions.clear()
            # Through TVM's own converter first: it writes an IndexMap (TransformLayout) as its JSON graph.
            plain = instructions[key] = _plain_json(inst, index_maps_as_text)
        insts.append(plain)
    if len(traces) >= _TRACE_CACHE_LIMIT:
        traces.clear()
    traces[whole_key] = insts
    return [insts, decisions]


__all__ = ["trace_json", "clear_trace_caches", "to_plain", "alloc_arguments_local", "alloc_arguments_rpc", "tvm", "ms", "structural_hash", "build_for_measurement", "register_tensor_intrinsics"]
