"""PyTorch module -> MetaSchedule tasks, the way TVM's Relax flow does it, with an on-disk cache.

``torch.export`` (of the module's tensor outputs, :mod:`tlp.workloads.exportable`) ->
``relax.frontend.torch.from_exported_program`` -> bool ops TVM cannot compile rewritten (:mod:`tlp.workloads.rewrites`)
-> weights bound and batch norms folded (:func:`tlp.workloads.graph_passes.inference_graph`, as ``tlp tune`` does)
-> ``relax.get_pipeline("zero")`` (legalize and fuse: without it there are no TIR functions, hence no tasks) ->
``meta_schedule.relax_integration.extract_tasks``.
Extraction of a large network takes tens of seconds on 2 cores, so results are cached per network, TVM version
and network source.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable

from tlp import StageError, TLPError, one_line
from tlp.cache import cache_root
from tlp._tvm import ms, structural_hash, tvm
from tlp.workloads.exportable import Exportable, make_exportable
from tlp.workloads.graph_passes import inference_graph
from tlp.workloads.rewrites import rewrite_bool_ops
from tlp.workloads.task import Task


# Part of the task cache's key: bumped when the graph tasks are extracted from changes (2: batch norms folded;
# 3: functions with the same anchor block share one task).
GRAPH_VERSION = 3


def cache_dir() -> Path:
    """Where extracted tasks are cached (``$TLP_CACHE_DIR``, default ``~/.cache/tlp``)."""
    return cache_root() / "tasks"


@dataclass
class ImportedTorch:
    """A PyTorch module imported into Relax, with what the import changed (see :mod:`tlp.workloads.exportable`)."""

    mod: "tvm.IRModule"  # parameters as inputs, bool ops TVM cannot compile rewritten
    exportable: Exportable  # the module actually exported (tensor outputs only): PyTorch's reference
    rewrites: dict[str, int]  # op name -> bool ops rewritten (tlp.workloads.rewrites)


def import_torch(module: "Any", example_inputs: tuple[Any, ...], name: str | None = None) -> ImportedTorch:
    """Export a PyTorch module and import it into Relax; export/import failures are one-line :class:`StageError`."""
    import torch  # pylint: disable=import-outside-toplevel
    from tvm.relax.frontend.torch import from_exported_program  # pylint: disable=import-outside-toplevel

    name = name or type(module).__name__
    try:
        exportable = make_exportable(module, example_inputs)
    except TLPError:
        raise
    except Exception as error:  # pylint: disable=broad-except  # any failure of user code is reported the same way
        raise StageError(name, "eager run", one_line(error),
                         "check that model(*example_inputs) runs in PyTorch (shapes and dtypes of the inputs)") from error
    try:
        with torch.no_grad():
            exported = torch.export.export(exportable.module, example_inputs)
    except Exception as error:  # pylint: disable=broad-except
        raise StageError(name, "torch.export", one_line(error),
                         "make the forward exportable (no data-dependent Python control flow, tensors in and out); "
                         "--debug shows torch.export's traceback") from error
    try:
        mod = from_exported_program(exported, keep_params_as_input=True)
    except Exception as error:  # pylint: disable=broad-except  # unsupported ops surface as many error types
        raise StageError(name, "Relax import", one_line(error),
                         "the op named above is not supported by TVM's PyTorch frontend: replace it in the model "
                         "or export to ONNX and tune the .onnx file") from error
    mod, rewrites = rewrite_bool_ops(mod)
    return ImportedTorch(mod, exportable, rewrites)


def relax_module_from_torch(module: "Any", example_inputs: tuple[Any, ...]) -> "tvm.IRModule":
    """Export a PyTorch module and import it into Relax, as the graph ``tlp tune`` extracts its tasks from (weights
    bound, batch norms folded; :func:`tlp.workloads.graph_passes.inference_graph`)."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    mod, params = relax.frontend.detach_params(import_torch(module, example_inputs).mod)
    mod, _ = inference_graph(mod, [p.numpy() for p in params.get("main", [])], len(example_inputs))
    return mod


def tasks_from_relax(mod: "tvm.IRModule", target: dict[str, Any], network: str) -> list[Task]:
    """Legalize + fuse a Relax module and extract its tuning tasks (name, TIR module, weight, variants).

    Fused functions with the same anchor block (MetaSchedule's ``module_equality="anchor-block"``: the same
    convolution with and without a residual add, say) are one task: the search gives the shared kernel the trials
    of all of them, and the compiled network runs each with the tuned function's best schedule
    (:mod:`tlp.search.database.shared_schedules`). Folding batch norms into the convolutions split
    ResNet-18's every stage into two such tasks, and a search tuned one half well and the other badly.
    """
    from tvm import relax  # pylint: disable=import-outside-toplevel

    mod = relax.get_pipeline("zero")(mod)
    extracted = ms.relax_integration.extract_tasks(mod, tvm.target.Target(target))
    # Grouped here rather than by extract_tasks(module_equality="anchor-block"), which in TVM 0.27 overcounts a
    # group's weight (ResNet-18: 27 kernel calls for 24) and names only one of the functions it groups.
    index = ms.database.MemoryDatabase(module_equality="anchor-block")
    groups: dict[int, list[Any]] = {}
    for task in extracted:
        first = index.commit_workload(task.mod).mod  # the first function with this anchor block
        groups.setdefault(structural_hash(first), []).append(task)
    tasks = []
    for group in groups.values():
        # The heaviest function is the one tuned (ties: the first): its own epilogue is what gets measured.
        tuned = max(group, key=lambda t: int(t.weight))
        tasks.append(Task(name=tuned.task_name, mod=tuned.mod, weight=sum(int(t.weight) for t in group),
                          network=network,
                          variants=tuple((t.task_name, int(t.weight)) for t in group if t is not tuned)))
    return tasks



def tasks_from_torch(
    network: str,
    build: Callable[[], Any],
    example_inputs: Callable[[], tuple[Any, ...]],
    target: dict[str, Any],
    use_cache: bool = True,
) -> list[Task]:
    """The tasks of a PyTorch network, from the cache when this exact network was extracted before."""
    source = inspect.getsource(inspect.getmodule(build) or build)
    digest = hashlib.sha1(
        json.dumps([network, tvm.__version__, target.get("kind"), source, GRAPH_VERSION], sort_keys=True).encode()
    ).hexdigest()[:12]
    path = cache_dir() / f"{network}-{digest}.json"
    if use_cache and path.exists():
        try:
            return [Task.from_json(item) for item in json.loads(path.read_text())]
        except (ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)  # a corrupt cache entry is only a cache miss
    tasks = tasks_from_relax(relax_module_from_torch(build(), example_inputs()), target, network)
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write-then-rename so a killed extraction never leaves a truncated cache file behind.
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
            json.dump([t.to_json() for t in tasks], tmp)
        os.replace(tmp.name, path)
    return tasks
