"""A work directory's MetaSchedule ``JSONDatabase``, opened so that one bad line does not lose the whole run.

MetaSchedule reads ``database_workload.json`` and ``database_tuning_record.json`` in parallel C++ and stops at the
first line it cannot parse ("parallel_for_dynamic error with Cannot tokenize"): one garbage line, or a last line cut
by a kill, and the work directory could no longer be resumed, compiled or imported. Before opening it we read each
line as TLP's own store does (:func:`tlp.dataset.store.parse_record_line`):

- an unreadable tuning-record line is moved aside, into ``database_tuning_record.json.corrupt-<time>`` beside it
  (nothing is deleted), and counted; the records after it stay valid, as a record names its workload by index;
- a workload line cannot be dropped that way (every later record's index would shift), so an unreadable one is an
  error naming the line, unless it is the cut last line of the file and no record refers to it.

Whatever MetaSchedule still refuses after that is one error line naming the folder.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tlp import TLPError, one_line
from tlp._tvm import ms
from tlp.dataset.store import BadRecord, parse_record_line

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"


@dataclass
class SetAside:
    """Lines of a work directory's database moved aside when it was opened."""

    lines: int = 0
    path: str | None = None  # where they went
    examples: list[str] = field(default_factory=list)

    def message(self) -> str:
        return (f"moved {self.lines} unreadable line{'s' if self.lines != 1 else ''} of the tuning database to "
                f"{self.path} ({'; '.join(self.examples[:2])})")


def open_json_database(work_dir: Path, module_equality: str = "structural") -> tuple[Any, SetAside]:
    """``ms.database.JSONDatabase(work_dir)`` after the repairs above; raises :class:`TLPError` naming what it
    cannot repair."""
    work_dir = Path(work_dir)
    set_aside = repair_database_files(work_dir)
    try:
        database = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality=module_equality)
    except Exception as error:  # pylint: disable=broad-except  # TVM raises several error types for bad files
        raise TLPError(f"{work_dir}: MetaSchedule cannot read this tuning database ({one_line(error)}); move the "
                       "folder aside or give another --work-dir") from None
    return database, set_aside


def repair_database_files(work_dir: Path) -> SetAside:
    """Move unreadable tuning-record lines aside and cut a torn last workload line (see the module doc)."""
    set_aside = SetAside()
    records_path, workloads_path = Path(work_dir) / RECORDS, Path(work_dir) / WORKLOADS
    workloads = _workload_lines(workloads_path)
    good: list[bytes] = []
    bad: list[bytes] = []
    highest_index = -1
    if records_path.exists():
        data = records_path.read_bytes()
        for number, raw in enumerate(data.splitlines(keepends=True), start=1):
            reason = _record_problem(raw, workloads)
            if reason is None:
                good.append(raw)
                highest_index = max(highest_index, json.loads(raw)[0])
            elif raw.strip():
                bad.append(raw if raw.endswith(b"\n") else raw + b"\n")
                if len(set_aside.examples) < 3:
                    set_aside.examples.append(f"line {number}: {reason}")
        if bad:
            aside = records_path.with_name(f"{RECORDS}.corrupt-{int(time.time())}")
            with open(aside, "ab") as handle:
                handle.write(b"".join(bad))
                handle.flush()
                os.fsync(handle.fileno())
            _rewrite(records_path, b"".join(good))
            set_aside.lines, set_aside.path = len(bad), str(aside)
    if workloads_path.exists():
        _check_workloads(workloads_path, highest_index)
    return set_aside


def _workload_lines(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def _record_problem(raw: bytes, workloads: int) -> str | None:
    if not raw.endswith(b"\n"):
        return "last line cut short (a write stopped by a kill)"
    try:
        index = parse_record_line(raw.decode("utf-8"))[0]
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except BadRecord as error:
        return str(error)
    if index >= workloads:
        return f"names workload {index}, but the workload file has {workloads} lines"
    return None


def _check_workloads(path: Path, highest_index: int) -> None:
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    for number, raw in enumerate(lines, start=1):
        try:
            entry = json.loads(raw)
            if not isinstance(entry, list) or len(entry) < 2:
                raise ValueError("not a [hash, module] pair")
        except (ValueError, UnicodeDecodeError):
            last = number == len(lines)
            if last and number - 1 > highest_index:  # cut by a kill before any record used it
                aside = path.with_name(f"{WORKLOADS}.corrupt-{int(time.time())}")
                aside.write_bytes(raw)
                _rewrite(path, b"".join(lines[:-1]))
                return
            raise TLPError(f"{path}:{number}: unreadable workload line; records name workloads by line number, so "
                           f"it cannot be skipped: restore the file, or give another --work-dir") from None


def _rewrite(path: Path, data: bytes) -> None:
    """Replace ``path``'s content atomically (temporary file + rename)."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
