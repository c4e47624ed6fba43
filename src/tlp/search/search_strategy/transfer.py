"""Schedules transferred between workloads: a stored program's trace, replayed on a new task's workload.

A network's tasks repeat one structure at many shapes (ResNet-50: 3x3 and 1x1 convolutions with bias and ReLU at
four stages). A schedule that measured well on one of them — its tiling structure, unroll, vectorisation, compute
locations — is a strong guess for the next one, once its tile sizes fit the new loop extents ("transfer-tuning",
Gibson and Cano, 2022). MetaSchedule's search never looks across tasks: each task's evolutionary search starts
from random programs and its own measured ones only.

:func:`replayed_candidates` replays stored traces of other workloads (a schedule library's) on a task. A trace names blocks by their names and samples tile sizes for loops of its own extents, so the replay
(``Trace.apply_to_schedule`` with a decision provider) keeps every decision but ``SamplePerfectTile``, whose tile
sizes are mapped to the factorisation of the new extent nearest in log scale (inner tiles weigh most: they decide
register blocking and vectorisation). Only traces of the task's own structure are replayed: the blocks they name
must be among those a design space of the task names (a stored trace names fewer: MetaSchedule drops the lookups of
blocks it never touched), and they must tile a loop nest exactly when that design space does. Without that check a
trace that touches only the root block (a reshape's: parallel, vectorise, unroll annotations) replays on any
workload and leaves a convolution unscheduled (a version relying on failed replays alone did exactly that). The task's post-processors then run on each replayed schedule as on
any candidate.

Which transferred schedule to measure is the cost model's call (:class:`tlp.search.search_strategy.first_round.FirstRoundSearch`):
a trained model ranks them on a task it has no measurement of, which a model learning from scratch cannot.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterable

from tlp._tvm import ms, structural_hash, tvm


@functools.lru_cache(maxsize=4096)
def _factorizations(extent: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered way to write ``extent`` as a product of ``parts`` positive factors."""
    if parts == 1:
        return ((extent,),)
    small = [d for d in range(1, math.isqrt(extent) + 1) if extent % d == 0]  # O(sqrt) even for a vocabulary
    divisors = sorted(set(small + [extent // d for d in small]))
    return tuple((first,) + rest for first in divisors for rest in _factorizations(extent // first, parts - 1))


def fit_tiles(tiles: list[int], extent: int, max_innermost: int) -> list[int]:
    """The factorisation of ``extent`` into ``len(tiles)`` factors nearest ``tiles`` (log scale, inner factors
    weighted most), with the innermost factor at most ``max_innermost`` (when positive) where one exists."""
    parts = len(tiles)
    weights = [2.0 ** i for i in range(parts)]  # outer ... inner

    def distance(candidate: tuple[int, ...]) -> float:
        return sum(w * abs(math.log(c) - math.log(max(t, 1))) for w, c, t in zip(weights, candidate, tiles))

    candidates = _factorizations(int(extent), parts)
    allowed = [c for c in candidates if max_innermost <= 0 or c[-1] <= max_innermost] or list(candidates)
    return list(min(allowed, key=distance))


def replay_on(trace: Any, mod: Any) -> Any | None:
    """``trace`` (of another workload) replayed on ``mod`` with its tile sizes refitted; None where it does not
    replay (another structure)."""
    sch = tvm.s_tir.Schedule(mod, debug_mask=0)

    def refit(inst: Any, inputs: list[Any], attrs: list[Any], decision: Any) -> Any:
        if inst.kind.name != "SamplePerfectTile" or decision is None:
            return decision
        extent = getattr(sch.get(inputs[0]).extent, "value", None)  # an IntImm's; None for a symbolic extent
        if not isinstance(extent, int):
            return decision
        return fit_tiles([int(d) for d in decision], extent, int(attrs[1]))

    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=refit)
    except Exception:  # pylint: disable=broad-except  # TVM raises several kinds; any means "does not replay"
        return None
    return sch


def structure(trace: Any) -> tuple[frozenset[str], bool]:
    """The blocks a trace names (its ``GetSBlock`` instructions before post-processing) and whether it samples tile
    sizes: what a trace of another task must match to be replayed on this one."""
    names, tiles = set(), False
    for inst in trace.insts:
        if inst.kind.name == "EnterPostproc":
            break
        if inst.kind.name == "GetSBlock":
            names.add(str(inst.attrs[0]))
        tiles = tiles or inst.kind.name == "SamplePerfectTile"
    return frozenset(names), tiles


def fits(source: tuple[frozenset[str], bool], spaces: list[tuple[frozenset[str], bool]]) -> bool:
    """Whether a trace of ``source``'s structure can schedule a task with these design-space structures."""
    return any(source[0] <= names and source[1] == tiles for names, tiles in spaces)


def replayed_candidates(records: Iterable[Any], context: Any, exclude: set[int] = frozenset(),
                        design_spaces: list[Any] | None = None) -> list[Any]:
    """``records`` (tuning records of other workloads) whose trace :func:`fits` one of the task's ``design_spaces``
    (default: generated from ``context``), replayed on the task and post-processed, in the records' order; programs
    whose structural hash is in ``exclude`` (or repeat an earlier one) left out."""
    if design_spaces is None:
        design_spaces = context.space_generator.generate_design_space(context.mod)
    spaces = [structure(space.trace) for space in design_spaces]
    postprocs = list(context.space_generator.postprocs)
    seen = set(exclude)
    candidates = []
    for record in records:
        if not fits(structure(record.trace), spaces):
            continue
        sch = replay_on(record.trace, context.mod)
        if sch is None:
            continue
        # As MetaSchedule post-processes its own candidates: behind an EnterPostproc mark, so that the search,
        # re-applying the stored trace with a mutated decision, leaves the post-processors' instructions out.
        # Without it they replay as schedule steps, and after another compute location they no longer fit (a
        # MobileNetV2 search with a schedule library crashed on that).
        sch.enter_postproc()
        if not all(postproc.apply(sch) for postproc in postprocs):
            continue
        key = structural_hash(sch.mod)
        if key not in seen:
            seen.add(key)
            # As MetaSchedule assembles a candidate: arguments of the scheduled function (a rewritten weight layout
            # changes their shapes), its layout-transforming preprocessing left out.
            candidates.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod,
                                                                                             remove_preproc=True)))
    return candidates
