"""Workloads: where tuning tasks come from (operators at many shapes, real PyTorch networks).

Public entry: :func:`load_tasks` turns workload names into MetaSchedule tasks; :func:`list_workloads` describes
what is available. Names are network names (``resnet50``), operator families (``conv2d_nchw``), single operators
(``dense_512x512x512``) or groups: ``ops``, ``networks``, ``train`` (training networks), ``test`` (held-out
networks), ``all``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from tlp import TLPError
from tlp.workloads.operators import OPERATORS, operator_families
from tlp.workloads.task import Task

GROUPS = ("ops", "networks", "train", "test", "all")


class UnknownWorkloadError(TLPError, ValueError):
    """A workload name that is neither a network, an operator, a family nor a group."""


def _networks() -> dict[str, Any]:
    # Imported lazily: defining the networks imports torch, which operator-only runs never need.
    from tlp.workloads.networks import NETWORKS  # pylint: disable=import-outside-toplevel

    return NETWORKS


def held_out_networks() -> list[str]:
    """The standard test networks of TenSet/TLP: never used for training."""
    return [name for name, spec in _networks().items() if spec.held_out]


@dataclass(frozen=True)
class WorkloadInfo:
    name: str
    kind: str  # "network" or "operators"
    held_out: bool
    description: str


def list_workloads() -> list[WorkloadInfo]:
    """Every network and operator family, networks first."""
    infos = [WorkloadInfo(n, "network", s.held_out, s.description) for n, s in _networks().items()]
    for family, specs in operator_families().items():
        infos.append(WorkloadInfo(family, "operators", False, f"{len(specs)} shapes"))
    return infos


def expand_names(names: Iterable[str]) -> list[str]:
    """Resolve groups into network/family/operator names, keeping order and dropping repeats."""
    networks = _networks()
    families = operator_families()
    resolved: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name == "ops":
            expanded = list(families)
        elif name == "networks":
            expanded = list(networks)
        elif name == "train":
            expanded = [n for n, s in networks.items() if not s.held_out]
        elif name == "test":
            expanded = [n for n, s in networks.items() if s.held_out]
        elif name == "all":
            expanded = list(networks) + list(families)
        elif name in networks or name in families or name in OPERATORS:
            expanded = [name]
        else:
            known = ", ".join(list(GROUPS) + list(networks) + list(families))
            raise UnknownWorkloadError(f"unknown workload {name!r}; known workloads: {known} (or one operator name)")
        resolved.extend(n for n in expanded if n not in resolved)
    return resolved


def load_tasks(names: Iterable[str], target: dict[str, Any], use_cache: bool = True) -> list[Task]:
    """The tasks of the named workloads, in order. A task shared by several networks appears once per network."""
    networks = _networks()
    families = operator_families()
    tasks: list[Task] = []
    for name in expand_names(names):
        if name in networks:
            from tlp.workloads.extract import tasks_from_torch  # pylint: disable=import-outside-toplevel

            spec = networks[name]
            tasks.extend(tasks_from_torch(name, spec.build, spec.example_inputs, target, use_cache=use_cache))
        elif name in families:
            tasks.extend(spec.task() for spec in families[name])
        else:
            tasks.append(OPERATORS[name].task())
    return tasks


__all__ = ["Task", "load_tasks", "list_workloads", "expand_names", "held_out_networks", "UnknownWorkloadError"]
