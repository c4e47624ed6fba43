"""What ``tlp tune`` can tune, resolved into MetaSchedule tasks (and, for networks, what is needed to run them).

A *source* is one of:

- a workload of the zoo: an operator (``dense_512x512x512``) or a network (``bert_tiny``);
- a Python file: ``path.py`` (or ``path.py:name`` to pick one object) defining a TVMScript ``IRModule`` or
  ``PrimFunc``, a TE workload (a function returning the TE tensors ``[inputs..., output]``), or a PyTorch module
  with its example inputs (``model`` and ``example_inputs``, or ``name`` and ``example_inputs``);
- an ONNX file: ``path.onnx`` (input shapes from the graph; symbolic dimensions are an error).

Networks (zoo, PyTorch, ONNX) keep their Relax module so the tuned database can be compiled end to end, and
PyTorch ones keep the module to compare with eager PyTorch.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tlp import StageError, TLPError, one_line
from tlp._tvm import tvm
from tlp.platform import host_target
from tlp.tune.stages import Stages
from tlp.workloads import UnknownWorkloadError, expand_names, load_tasks
from tlp.workloads.extract import import_torch, tasks_from_relax
from tlp.workloads.graph_passes import inference_graph
from tlp.workloads.rewrites import rewrite_bool_ops
from tlp.workloads.task import Task


class SourceError(TLPError, ValueError):
    """A tuning source that cannot be turned into tasks."""


@dataclass
class Tunable:
    """Tasks to tune, plus what running the whole program needs (networks only)."""

    name: str
    tasks: list[Task]
    relax_mod: Any = None  # Relax IRModule, weights bound as constants (networks; see graph_passes.inference_graph)
    params: list[Any] = field(default_factory=list)  # runtime arguments after the inputs (none once weights are bound)
    inputs: list[Any] = field(default_factory=list)  # example inputs as numpy arrays
    torch_module: Any = None  # returns a tuple of tensors (tlp.workloads.exportable): the numerics reference
    torch_inputs: tuple[Any, ...] = ()
    output_names: list[str] = field(default_factory=list)  # names of the network's outputs, in order
    notes: list[str] = field(default_factory=list)  # what the import changed (dropped outputs, rewritten ops)
    # Tasks of the program set aside by ``top_tasks``: not searched, but still scheduled (predicted schedules,
    # tlp.search.database.predicted) and compiled with the rest.
    untuned: list[Task] = field(default_factory=list)
    # The network already compiled and ran with TVM's default schedules during import (the fast-math check): the
    # compile check before tuning would only repeat it. Binding the weights and folding batch norms afterwards only
    # change constants and give convolutions a bias add.
    compiles_with_defaults: bool = False
    stage_s: dict[str, float] = field(default_factory=dict)  # seconds of the import's own stages (tlp.tune.stages)

    @property
    def is_network(self) -> bool:
        return self.relax_mod is not None

    @property
    def all_tasks(self) -> list[Task]:
        """Every task of the program: those to tune, then those ``top_tasks`` set aside."""
        return self.tasks + self.untuned

    def top_tasks(self, count: int) -> "Tunable":
        """The same program with only its ``count`` heaviest tasks (weight × FLOPs) to tune.

        Tuning a network's few dominant kernels is how one gets most of its speed-up on a small budget. The other
        tasks are kept aside in ``untuned``: ``tlp tune`` gives them the cost model's zero-measurement schedules
        (or, with those turned off, TVM's defaults) when the network is compiled.
        """
        if count <= 0:
            raise SourceError(f"{self.name}: --top-tasks must be positive, got {count}")
        if count >= len(self.tasks):
            return self
        ranked = set(sorted(range(len(self.tasks)), key=lambda i: self.tasks[i].weight * self.tasks[i].flops,
                            reverse=True)[:count])
        kept = [task for i, task in enumerate(self.tasks) if i in ranked]  # keep extraction order
        aside = [task for i, task in enumerate(self.tasks) if i not in ranked]
        return dataclasses.replace(self, name=f"{self.name}-top{count}", tasks=kept, untuned=self.untuned + aside)


def resolve(spec: str, target: dict[str, Any], fast_math: bool = True) -> Tunable:
    """Turn a zoo name, a ``.py`` file or an ``.onnx`` file into a :class:`Tunable`.

    ``fast_math``: networks get fast erf/GELU/exp/tanh when their outputs stay within tolerance
    (:mod:`tlp.tune.fast_math`).
    """
    path_part = spec.split(":", 1)[0]
    if path_part.endswith(".onnx"):
        return _from_onnx(Path(path_part), target, fast_math)
    if path_part.endswith(".py"):
        return _from_python(Path(path_part), spec.split(":", 1)[1] if ":" in spec else None, target, fast_math)
    try:
        names = expand_names([spec])
    except UnknownWorkloadError as error:
        raise SourceError(f"{error}; or give a .py (TVMScript/TE/PyTorch) or .onnx file") from None
    from tlp.workloads import _networks  # pylint: disable=import-outside-toplevel

    if len(names) == 1 and names[0] in _networks():
        network = _networks()[names[0]]
        return from_torch(names[0], network.build(), network.example_inputs(), target, fast_math)
    return Tunable(spec, load_tasks([spec], target))


def tuned_tasks(spec: str, work_dir: str | Path, top_tasks: int = 0) -> list[Task]:
    """The tasks ``tlp tune SPEC [--top-tasks N]`` tuned in ``work_dir``, for cataloguing its records.

    Task extraction follows the target (and fast math, on as ``tlp tune``'s default): the one stamped in the run's
    ``target.json``, this machine's for a run without one, so the task keys match the run's records. Cached per
    (spec, target, top tasks): importing many runs of one workload extracts its tasks once.
    """
    stamp = Path(work_dir) / "target.json"
    target = json.loads(stamp.read_text()) if stamp.exists() else host_target()
    return list(_tuned_tasks(spec, json.dumps(target, sort_keys=True), top_tasks))


@functools.lru_cache(maxsize=16)
def _tuned_tasks(spec: str, target_json: str, top_tasks: int) -> tuple[Task, ...]:
    tunable = resolve(spec, json.loads(target_json))
    return tuple((tunable.top_tasks(top_tasks) if top_tasks else tunable).all_tasks)


# ---- Python files ------------------------------------------------------------------------------------------
def _load_python(path: Path) -> Any:
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    module_name = f"_tlp_source_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as error:  # pylint: disable=broad-except  # any failure of user code is reported the same way
        raise SourceError(f"{path}: failed to import ({type(error).__name__}: {error})") from None
    return module


def _from_python(path: Path, attribute: str | None, target: dict[str, Any], fast_math: bool = True) -> Tunable:
    import torch  # pylint: disable=import-outside-toplevel
    from tvm import te, tirx  # pylint: disable=import-outside-toplevel

    module = _load_python(path)
    names = [attribute] if attribute else [n for n in vars(module) if not n.startswith("_")]
    if attribute and not hasattr(module, attribute):
        raise SourceError(f"{path}: defines no {attribute!r}")
    candidates = [(n, getattr(module, n)) for n in names]
    for name, value in candidates:
        if isinstance(value, torch.nn.Module):
            inputs = getattr(module, "example_inputs", None)
            if inputs is None:
                raise SourceError(f"{path}: PyTorch module {name!r} needs `example_inputs` (a tuple of tensors)")
            return from_torch(path.stem, value, tuple(inputs() if callable(inputs) else inputs), target, fast_math)
    for name, value in candidates:
        if isinstance(value, (tvm.IRModule, tirx.PrimFunc)):
            mod = value if isinstance(value, tvm.IRModule) else tvm.IRModule({"main": value})
            return Tunable(path.stem, [_single_task(f"{path.stem}.{name}", mod)])
    for name, value in candidates:
        if callable(value) and getattr(value, "__module__", None) == module.__name__ and name != "example_inputs":
            try:
                tensors = value()
            except TypeError:
                continue  # needs arguments: not a workload function
            if isinstance(tensors, (list, tuple)) and tensors and all(isinstance(t, te.Tensor) for t in tensors):
                mod = tvm.IRModule({"main": te.create_prim_func(list(tensors))})
                return Tunable(path.stem, [_single_task(f"{path.stem}.{name}", mod)])
    raise SourceError(f"{path}: found no TVMScript IRModule/PrimFunc, TE workload function or PyTorch module "
                      "(with example_inputs) to tune")


def _single_task(name: str, mod: Any) -> Task:
    func = mod["main"] if "main" in [g.name_hint for g in mod.get_global_vars()] else None
    if func is None or len(mod.get_global_vars()) != 1:
        raise SourceError(f"{name}: a TIR source must hold exactly one PrimFunc named 'main'")
    return Task(name=name, mod=mod, weight=1, network="")


# ---- networks ----------------------------------------------------------------------------------------------
def from_torch(name: str, module: Any, example_inputs: tuple[Any, ...], target: dict[str, Any],
               fast_math: bool = True) -> Tunable:
    """A PyTorch module and its example inputs as a network to tune (export, import, tasks; see ``import_torch``)."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from tlp.tune.numerics import torch_outputs  # pylint: disable=import-outside-toplevel

    stages = Stages()
    with stages.timed("export"):
        imported = import_torch(module, example_inputs, name)
        mod, params = relax.frontend.detach_params(imported.mod)
        params = [p.numpy() for p in params.get("main", [])]
        inputs = [t.detach().numpy() for t in example_inputs]
    notes = list(imported.exportable.dropped)
    if imported.rewrites:
        notes.append("bool ops TVM cannot compile rewritten on int8: "
                     + ", ".join(f"{op} x{count}" for op, count in sorted(imported.rewrites.items())))
    if fast_math:
        with stages.timed("fast_math"):
            reference = torch_outputs(imported.exportable.module, example_inputs)
            mod, note, compiled = _fast_math(mod, params, inputs, target, reference)
        notes.extend([note] if note else [])
    else:
        compiled = False
    with stages.timed("tasks"):
        mod, graph_notes = inference_graph(mod, params, len(inputs))
        tasks = tasks_from_relax(mod, target, name)
    notes.extend(graph_notes)
    return Tunable(name, tasks, relax_mod=mod, inputs=inputs,
                   torch_module=imported.exportable.module, torch_inputs=example_inputs, stage_s=stages.seconds,
                   output_names=imported.exportable.output_names, notes=notes, compiles_with_defaults=compiled)


def _fast_math(mod: Any, params: list[Any], inputs: list[Any], target: dict[str, Any],
               reference: list[Any] | None) -> tuple[Any, str | None, bool]:
    """The module to tune, the report's note, and whether that module already compiled with default schedules."""
    from tlp.tune.fast_math import choose_fast_math  # pylint: disable=import-outside-toplevel

    mod, decision = choose_fast_math(mod, params, inputs, target, reference)
    return mod, decision.note(), decision.compiled


def _from_onnx(path: Path, target: dict[str, Any], fast_math: bool = True) -> Tunable:
    import numpy as np  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    try:
        import onnx  # pylint: disable=import-outside-toplevel
        from tvm.relax.frontend.onnx import from_onnx  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise SourceError(f"{path}: ONNX support needs the `onnx` package ({error})") from None
    try:
        graph = onnx.load(str(path))
    except Exception as error:  # pylint: disable=broad-except
        raise SourceError(f"{path}: not a readable ONNX model ({type(error).__name__}: {error})") from None
    shapes, dtypes = {}, {}
    initializers = {init.name for init in graph.graph.initializer}
    for tensor in graph.graph.input:
        if tensor.name in initializers:
            continue
        dims = tensor.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise SourceError(f"{path}: input {tensor.name!r} has a symbolic shape; TLP tunes static shapes only")
        shapes[tensor.name] = [d.dim_value for d in dims]
        dtypes[tensor.name] = onnx.helper.tensor_dtype_to_np_dtype(tensor.type.tensor_type.elem_type).name
    try:
        mod = from_onnx(graph, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=True)
    except Exception as error:  # pylint: disable=broad-except  # unsupported ops surface as many error types
        raise StageError(path.name, "ONNX import", one_line(error),
                         "the op named above is not supported by TVM's ONNX frontend: re-export the model without it "
                         "(another opset) or tune the PyTorch module") from error
    mod, rewrites = rewrite_bool_ops(mod)
    mod, params = relax.frontend.detach_params(mod)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shapes[n]).astype(dtypes[n]) if dtypes[n].startswith("float")
              else np.zeros(shapes[n], dtype=dtypes[n]) for n in shapes]
    notes = ["bool ops TVM cannot compile rewritten on int8: "
             + ", ".join(f"{op} x{count}" for op, count in sorted(rewrites.items()))] if rewrites else []
    params = [p.numpy() for p in params.get("main", [])]
    compiled = False
    if fast_math:  # no PyTorch here: the exact network compiled by TVM is the reference
        mod, note, compiled = _fast_math(mod, params, inputs, target, None)
        notes.extend([note] if note else [])
    mod, graph_notes = inference_graph(mod, params, len(inputs))
    notes.extend(graph_notes)
    return Tunable(path.stem, tasks_from_relax(mod, target, path.stem), relax_mod=mod, inputs=inputs, notes=notes,
                   compiles_with_defaults=compiled)
