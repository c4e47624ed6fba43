"""Compile the variants of a task with the task's schedule (functions that share an anchor block).

A network's fused functions with the same anchor block (the same convolution, another elementwise epilogue) are
one task (:func:`tlp.workloads.extract.tasks_from_relax`): only one of them is searched and measured. At compile
time each of the others asks the database for a schedule of its own, finds none, and would keep TVM's
unscheduled default. :class:`SharedScheduleDatabase` answers such a query with the best record of the function
that shares its anchor block, replayed on the variant by MetaSchedule's ``ScheduleUsingAnchorTrace`` (the anchor
block's instructions; the epilogue blocks are inlined). A function's own record, when a database has one (a
work directory tuned before tasks were shared), comes first. It is also the compile database's ordering of the
measured records before the predicted ones (:func:`tlp.search.database.predicted.measured_then_predicted`).

Relax's ``MetaScheduleApplyDatabase`` replays such a record with ``ScheduleUsingAnchorTrace`` when the record's
function is not the one asked for; what it lacks is the lookup, which MetaSchedule's databases do only when the
whole tuning database uses ``module_equality="anchor-block"`` (and then every task must be tuned that way).
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm.ir.utils import derived_object

from tlp import TLPError
from tlp._tvm import ms, structural_hash, tvm


@derived_object
class SharedScheduleDatabase(ms.database.PyDatabase):
    """Read-only view of ``databases`` (in order of preference: measured, then predicted) for compiling.

    A function's own record comes from the first database that has one; a function without any gets the record of
    the function with the same anchor block, from the first database that has that. ``shared`` records which
    functions were served the second way. (MetaSchedule's ``OrderedUnionDatabase`` would order the databases but
    cannot list its records, which the anchor index needs.)
    """

    def __init__(self, *databases: Any) -> None:
        super().__init__()
        self.databases = [database for database in databases if database is not None]
        self._anchors = ms.database.MemoryDatabase(module_equality="anchor-block")
        seen: set[int] = set()
        for database in self.databases:
            for record in database.get_all_tuning_records():
                key = structural_hash(record.workload.mod)
                if key not in seen:
                    seen.add(key)
                    self._anchors.commit_workload(record.workload.mod)
        self.shared: set[str] = set()  # functions compiled with the schedule of their anchor block's tuned function

    def _first_record(self, mod: Any, target: Any, workload_name: str | None) -> Any:
        for database in self.databases:
            record = database.query_tuning_record(mod, target, workload_name)
            if record is not None:
                return record
        return None

    def _tuned_with_same_anchor(self, mod: Any) -> Any:
        """The tuned function's module whose anchor block is ``mod``'s (None when there is none)."""
        if not self._anchors.has_workload(mod):
            return None
        return self._anchors.commit_workload(mod).mod

    def query_tuning_record(self, mod: Any, target: Any, workload_name: str | None = None) -> Any:
        """``mod``'s own best record, else the best record of the tuned function with ``mod``'s anchor block.

        Relax's ``MetaScheduleApplyDatabase`` asks this, and replays a record of a structurally different function
        with ``ScheduleUsingAnchorTrace`` itself.
        """
        own = self._first_record(mod, target, workload_name)
        if own is not None:
            return own
        tuned = self._tuned_with_same_anchor(mod)
        record = None if tuned is None else self._first_record(tuned, target, workload_name)
        if record is None or not _replays_on(record, mod, target):
            return None  # TVM's default: a trace that does not fit the variant would fail the whole compile
        self.shared.add(workload_name or "main")
        return record

    def query_schedule(self, mod: Any, target: Any, workload_name: str | None = None) -> Any:
        record = self.query_tuning_record(mod, target, workload_name)
        if record is None:
            return None
        from tvm.s_tir.meta_schedule.trace_apply import (  # pylint: disable=import-outside-toplevel
            schedule_using_anchor_trace)

        schedule = tvm.s_tir.Schedule(mod, debug_mask=0)
        if tvm_ffi.structural_equal(record.workload.mod, mod):
            record.trace.apply_to_schedule(schedule, remove_postproc=False)
        else:
            schedule_using_anchor_trace(schedule, record.trace, target)
        return schedule

    def query_ir_module(self, mod: Any, target: Any, workload_name: str | None = None) -> Any:
        schedule = self.query_schedule(mod, target, workload_name)
        return schedule.mod if schedule is not None else None

    def has_workload(self, mod: Any) -> bool:
        return self._tuned_with_same_anchor(mod) is not None  # every stored workload is in the anchor index

    def commit_workload(self, mod: Any) -> Any:
        raise TLPError("the compile database is read-only: workloads belong in the tuning database")

    def commit_tuning_record(self, record: Any) -> None:
        raise TLPError("the compile database is read-only: records belong in the tuning database")

    def get_top_k(self, workload: Any, top_k: int) -> list[Any]:
        for database in self.databases:
            records = list(database.get_top_k(workload, top_k)) if database.has_workload(workload.mod) else []
            if records:
                return records
        return []

    def get_all_tuning_records(self) -> list[Any]:
        return [record for database in self.databases for record in database.get_all_tuning_records()]

    def __len__(self) -> int:
        return sum(len(database) for database in self.databases)


def _replays_on(record: Any, mod: Any, target: Any) -> bool:
    """Whether ``record``'s anchor trace schedules ``mod``: a trace can name what the variant lacks (its tuned
    function's epilogue as the anchor's one consumer, where the variant has none)."""
    from tvm.s_tir.meta_schedule.trace_apply import (  # pylint: disable=import-outside-toplevel
        schedule_using_anchor_trace)

    try:
        schedule_using_anchor_trace(tvm.s_tir.Schedule(mod, debug_mask=0), record.trace, target)
    except Exception:  # pylint: disable=broad-except  # TVM raises several kinds; any means "does not fit"
        return False
    return True


def compile_database(database: Any) -> SharedScheduleDatabase:
    """``database`` as the compile database (itself when it already is one, so its ``shared`` stays readable)."""
    return database if isinstance(database, SharedScheduleDatabase) else SharedScheduleDatabase(database)
