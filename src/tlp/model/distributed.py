"""Training on several processes (GPUs, or CPU processes; one node or many) under ``torchrun``.

    torchrun --nproc_per_node 2 -m tlp.cli train DATASET --out model.pt          # gloo on CPUs, nccl on GPUs

Every process runs the same command: the same seed gives each the same weights and the same shuffled steps; each
takes every ``world``-th step of an epoch and the gradients are averaged across processes after each step, so
the processes stay identical (data parallelism, as ``DistributedDataParallel`` does, without its wrapper: the
network is called through its backbone and heads, not one ``forward``). The first process featurizes into the
feature cache while the others wait, then all read the same shards; only it writes the checkpoint.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch
import torch.distributed as dist


def start() -> tuple[int, int]:
    """Join the process group ``torchrun`` describes (its environment variables); ``(rank, world size)``, and
    ``(0, 1)`` outside ``torchrun``."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def world() -> tuple[int, int]:
    """``(rank, world size)`` of the running process group (``(0, 1)`` when there is none)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    if world()[1] > 1:
        dist.barrier()


def stop() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def my_steps(steps: Sequence[Any]) -> Sequence[Any]:
    """This process's share of an epoch's steps: every ``world``-th, the same count on each process (up to
    ``world - 1`` steps of the epoch are left out; the steps are shuffled again each epoch)."""
    rank, size = world()
    if size == 1:
        return steps
    usable = len(steps) - len(steps) % size
    return steps[rank:usable:size]


def same_start(parameters: Sequence[torch.Tensor]) -> None:
    """Every process starts from the first one's weights."""
    if world()[1] > 1:
        for parameter in parameters:
            dist.broadcast(parameter.data, src=0)


def average_gradients(parameters: Sequence[torch.Tensor]) -> None:
    """Each parameter's gradient, averaged over the processes (a process without a loss this step adds zeros)."""
    size = world()[1]
    if size == 1:
        return
    for parameter in parameters:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
        dist.all_reduce(parameter.grad)
        parameter.grad /= size
