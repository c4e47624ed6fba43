"""A stored trace replayed into the program it schedules: the program hash an import computes for every record.

A MetaSchedule log holds traces, not programs, so an import replays each record (MetaSchedule's JSONDatabase does
too when it loads). Two costs of TVM's replay are paid once per workload or skipped, with the same IR:

- the schedule of the unscheduled workload is made once per workload and copied for each trace (a copy is ~12x
  cheaper than a new schedule, which analyses every block);
- ``SampleComputeLocation`` with a recorded decision still collects every feasible location of its block (a
  compute-at check per loop: about a third of a replay). A recorded decision is one the sampler (or a mutator)
  chose among those locations of this same state, so it names its loop directly: ``-1`` the root (the
  ``ComputeAt`` that follows does nothing), ``-2`` inline, ``d >= 0`` the ``d``-th loop around the block's first
  consumer. The trace is replayed with that said outright (``GetConsumers``, ``GetLoops``, ``ComputeAt`` at loop
  ``d``). A trace's JSON must name every result of ``GetConsumers``/``GetLoops``, so how many there are is learnt
  from the first literal replay of each trace shape and kept; a wrong count makes TVM refuse the rewritten trace,
  and the trace is then replayed as recorded. The count never decides which loop is chosen.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from tlp._tvm import ms, tvm
from tlp.dataset.sampler import program_hash_of

SAMPLE_LOCATION = "SampleComputeLocation"
ROOT, INLINE = -1, -2  # SampleComputeLocation's decisions that name no loop
# Learnt result counts kept per process (a trace shape's entry is a few integers; cleared when this many).
MAX_SHAPES = 200_000

# (workload key, hash of the instructions) -> (consumers, loops of the first consumer) at each location sample.
_shapes: dict[tuple[str, int], list[tuple[int, int]]] = {}


def replayed_hash(workload_key: str, workload_text: str, trace_json: Any) -> str:
    """The program hash of ``trace_json`` replayed on the workload (``workload_text``: its database JSON line).
    Raises whatever TVM raises for a trace that does not replay on it."""
    trace_json = with_bool_annotations(trace_json)
    base = _unscheduled(workload_text)
    try:
        insts = trace_json[0]
        samples = [i for i, inst in enumerate(insts) if inst[0] == SAMPLE_LOCATION]
    except (TypeError, IndexError, KeyError):
        samples = []  # not a trace this module reads: TVM says what is wrong with it
    if not samples:
        return _replayed(base, trace_json)[1]
    key = (workload_key, hash(json.dumps(insts)))
    shapes = _shapes.get(key)
    if shapes is not None:
        direct = _locations_named(trace_json, samples, shapes)
        if direct is not None:
            try:
                return _replayed(base, direct)[1]
            except Exception:  # pylint: disable=broad-except  # other counts for these decisions: replay as recorded
                pass
    schedule, phash = _replayed(base, trace_json)
    if len(_shapes) >= MAX_SHAPES:
        _shapes.clear()
    _shapes[key] = _location_shapes(base, schedule.trace)
    return phash


def _replayed(base: Any, trace_json: Any) -> tuple[Any, str]:
    schedule = base.copy()
    tvm.s_tir.Trace.apply_json_to_schedule(trace_json, schedule)
    return schedule, program_hash_of(schedule.mod)


@lru_cache(maxsize=256)
def _unscheduled(workload_text: str) -> Any:
    return tvm.s_tir.Schedule(ms.database.Workload.from_json(json.loads(workload_text)).mod)


def _location_shapes(base: Any, trace: Any) -> list[tuple[int, int]]:
    """How many consumers the block of each location sample has, and how many loops its first consumer, in the
    state the sample sees (the trace replayed once more, asked before each sample and stopped after the last)."""
    schedule = base.copy()
    samples = sum(inst.kind.name == SAMPLE_LOCATION for inst in trace.insts)
    shapes: list[tuple[int, int]] = []

    def ask(inst: Any, inputs: Any, _attrs: Any, decision: Any) -> Any:
        if inst.kind.name == SAMPLE_LOCATION:
            consumers = schedule.get_consumers(inputs[0])
            shapes.append((len(consumers), len(schedule.get_loops(consumers[0])) if consumers else 0))
            if len(shapes) == samples:
                raise _Asked()
        return decision

    try:
        trace.apply_to_schedule(schedule, remove_postproc=False, decision_provider=ask)
    except Exception:  # pylint: disable=broad-except  # _Asked, as TVM passes it back
        pass
    return shapes


class _Asked(Exception):
    """Every location sample has been asked: the rest of the replay is not needed."""


def _locations_named(trace_json: Any, samples: list[int], shapes: list[tuple[int, int]]) -> Any | None:
    """``trace_json`` with each location sample replaced by the location its decision names, or None where a
    sample's result is used otherwise than by the one ``ComputeAt`` that follows it (MetaSchedule's rule)."""
    insts, decisions = trace_json
    decided = {index: value for index, value in decisions}
    if len(shapes) != len(samples):
        return None
    replaced: dict[int, list[Any]] = {}
    for index, (consumers, loops) in zip(samples, shapes):
        block, loop = insts[index][1][0], insts[index][3][0]
        users = [i for i in range(index + 1, len(insts)) if loop in insts[i][1]]
        decision = decided.get(index)
        if len(users) != 1 or insts[users[0]][0] != "ComputeAt" or insts[users[0]][1] != [block, loop] \
                or not isinstance(decision, int):
            return None
        kind, inputs, attrs, outputs = insts[users[0]]
        if decision == ROOT:  # computed at the root: where the block already is
            replaced[index], replaced[users[0]] = [], []
        elif decision == INLINE:
            replaced[index], replaced[users[0]] = [], [["ComputeInline", [block], [], []]]
        elif 0 <= decision < loops and consumers:
            consumer_names = [f"b_at{index}_{i}" for i in range(consumers)]
            loop_names = [f"l_at{index}_{i}" for i in range(loops)]
            replaced[index] = [["GetConsumers", [block], [], consumer_names],
                               ["GetLoops", [consumer_names[0]], [], loop_names]]
            replaced[users[0]] = [[kind, [block, loop_names[decision]], attrs, outputs]]
        else:
            return None
    new_insts: list[Any] = []
    new_index: dict[int, int] = {}
    for index, inst in enumerate(insts):
        if index in replaced:
            new_insts.extend(replaced[index])
        else:
            new_index[index] = len(new_insts)
            new_insts.append(inst)
    return [new_insts, [[new_index[index], value] for index, value in decisions if index in new_index]]


# MetaSchedule's JSONDatabase writes the boolean value of this annotation as 1; replayed as written, the IR says
# ``1`` where the measured candidate said ``True`` and the program hash differs from the one collection computed.
_BOOL_ANNOTATIONS = {"meta_schedule.layout_rewrite_preproc"}


def with_bool_annotations(trace_json: Any) -> Any:
    """``trace_json`` with the boolean annotations a database file turned into integers turned back."""
    try:
        insts, decisions = trace_json
        fixed = [[kind, [inputs[0], bool(inputs[1])], attrs, outputs]
                 if kind == "Annotate" and attrs and attrs[0] in _BOOL_ANNOTATIONS and type(inputs[1]) is int
                 else [kind, inputs, attrs, outputs] for kind, inputs, attrs, outputs in insts]
    except (TypeError, ValueError, IndexError):
        return trace_json  # not a trace this function understands: replay it as it is
    return [fixed, decisions]
