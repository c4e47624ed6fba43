"""PyTorch module -> MetaSchedule tasks, the way TVM's Relax flow does it, with an on-disk cache.

``torch.export`` -> ``relax.frontend.torch.from_exported_program`` -> ``relax.get_pipeline("zero")`` (legalize and
fuse: without it there are no TIR functions, hence no tasks) -> ``meta_schedule.relax_integration.extract_tasks``.
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
from typing import Any, Callable

from tlp._tvm import ms, tvm
from tlp.workloads.task import Task


def cache_dir() -> Path:
    """Where extracted tasks are cached (``$TLP_CACHE_DIR``, default ``~/.cache/tlp``)."""
    return Path(os.environ.get("TLP_CACHE_DIR", Path.home() / ".cache" / "tlp")) / "tasks"


def relax_module_from_torch(module: "Any", example_inputs: tuple[Any, ...]) -> "tvm.IRModule":
    """Export a PyTorch module and import it into Relax (weights are not needed to get the tasks)."""
    import torch  # pylint: disable=import-outside-toplevel
    from tvm.relax.frontend.torch import from_exported_program  # pylint: disable=import-outside-toplevel

    with torch.no_grad():
        exported = torch.export.export(module.eval(), example_inputs)
    return from_exported_program(exported, keep_params_as_input=True)


def tasks_from_relax(mod: "tvm.IRModule", target: dict[str, Any], network: str) -> list[Task]:
    """Legalize + fuse a Relax module and extract its tuning tasks (name, TIR module, weight)."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    mod = relax.get_pipeline("zero")(mod)
    extracted = ms.relax_integration.extract_tasks(mod, tvm.target.Target(target))
    return [Task(name=t.task_name, mod=t.mod, weight=int(t.weight), network=network) for t in extracted]


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
        json.dumps([network, tvm.__version__, target.get("kind"), source], sort_keys=True).encode()
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
