"""Where a tuned network's time goes, task by task, and which tasks no search can improve.

A task's share is ``weight × best latency / Σ weight × best latency`` (the runner's per-task timings; the
end-to-end run adds the VM's overhead on top). A task is *fixed* when every design space MetaSchedule generates
for it has no sampled decision (no tile sizes, unroll factors or compute locations to choose): the space holds
one program, the search sends it no candidates, and no cost model can make it faster. Only graph-level changes
(fast math, fusion, layout) can: BERT-tiny's exact-``erf`` GELU was such a task, half of the network's time.
"""

from __future__ import annotations

from typing import Any

from tlp._tvm import ms, register_tensor_intrinsics, tvm
from tlp.workloads.task import Task

MIN_SHARE = 0.05  # tasks below this share of the time are not listed (unless among the first few)
MAX_LISTED = 8

FIXED_WHY = ("its design space holds one program (MetaSchedule's rules have no tile sizes, unroll factors or "
             "compute locations to choose for it): no search can change it; only graph-level rewrites "
             "(fast math, fusion, layout) can")


def design_space_decisions(task: Task, target_json: dict[str, Any]) -> tuple[int, int]:
    """(design spaces, the most sampled decisions in any of them) of ``task`` under MetaSchedule's default rules."""
    register_tensor_intrinsics(target_json)
    context = ms.TuneContext(mod=task.mod, target=tvm.target.Target(target_json),
                             space_generator="post-order-apply", task_name=task.name, num_threads=1)
    spaces = context.space_generator.generate_design_space(task.mod)
    return len(spaces), most_decisions(spaces)


def most_decisions(spaces: list[Any]) -> int:
    """The most sampled decisions in any of these design spaces (schedules); 0: each space is one program."""
    return max((len(space.trace.decisions) for space in spaces), default=0)


def dominant_tasks(tasks: list[Task], best_latencies: list[float | None],
                   target_json: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks that dominate Σ weight × latency, largest first, each marked tunable or fixed (and why)."""
    costs = [(task, task.weight * latency) for task, latency in zip(tasks, best_latencies) if latency]
    total = sum(cost for _, cost in costs)
    if not total:
        return []
    listed = []
    for rank, (task, cost) in enumerate(sorted(costs, key=lambda item: -item[1])):
        share = cost / total
        if rank >= MAX_LISTED or (share < MIN_SHARE and rank >= 3):
            break
        spaces, decisions = design_space_decisions(task, target_json)
        entry = {"name": task.name, "weight": int(task.weight), "share": round(share, 4),
                 "design_spaces": spaces, "decisions": decisions, "fixed": decisions == 0}
        if entry["fixed"]:
            entry["why"] = FIXED_WHY
        listed.append(entry)
    return listed


def format_dominant_tasks(entries: list[dict[str, Any]]) -> list[str]:
    """Lines for the printed report."""
    if not entries:
        return []
    width = max(len(e["name"]) for e in entries)
    lines = ["\nwhere the time goes (share of Σ weight × task latency):"]
    for entry in entries:
        what = ("fixed: one program, no search can improve it" if entry["fixed"] else
                f"tunable ({entry['design_spaces']} design spaces, {entry['decisions']} decisions)")
        lines.append(f"  {entry['name'].ljust(width)}  {entry['share'] * 100:5.1f} %  {what}")
    if any(e["fixed"] for e in entries):
        lines.append(f"  fixed tasks: {FIXED_WHY}")
    return lines
