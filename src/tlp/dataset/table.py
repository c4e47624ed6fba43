"""An append-only JSON-lines table that survives ``kill -9``, ships compressed and detects damage.

A table is a list of sealed, immutable segments (``NAME.0001.xz``, ``NAME.0002.xz``, … each an xz-compressed run of
lines) followed by a plain-text tail ``NAME`` that new lines are appended to. Reading concatenates them, so the
logical content is MetaSchedule's own line format and line numbers mean the same thing as in a single file.

Why segments: measured data must be committed compressed and must never be lost. Appending to the plain tail is
cheap and atomic per line (one write + fsync); ``seal()`` writes the tail as a new segment through a temporary file
and an atomic rename, then empties the tail. A crash between those two steps leaves the tail's lines in both
places; that is detected on the next open (the tail equals the newest segment) and undone.

Why a manifest: a flipped byte in a committed segment must be found and named, not surface as a decompressor
traceback. ``seal()`` records each new segment's sha256 and line count in ``NAME.sha256.json`` (committed with the
segments)::

    {"format": 1, "segments": {"NAME.0001.xz": {"sha256": "…", "lines": 412, "bytes": 37928}, …}}

The entry is written after the segment, so a kill in between leaves an *unrecorded* segment (read without a
checksum; ``repair()`` records it), never a falsely damaged one. Segments sealed before manifests existed are
unrecorded too; ``record_missing()`` adds their entries. A damaged segment raises :class:`DamagedSegment`, or is
skipped and reported to ``on_damage`` when the reader asks for that.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator

from tlp import TLPError

_SEGMENT = re.compile(r"\.(\d{4,})\.xz$")
MANIFEST_FORMAT = 1


class DatasetError(TLPError, RuntimeError):
    """The dataset on disk cannot be used as asked; the message names the file and what is wrong.

    Defined here, the lowest layer of :mod:`tlp.dataset`, so that tables raise it without importing the store
    (``tlp.dataset.store`` re-exports it)."""


def write_error(path: Path, error: OSError) -> DatasetError:
    """A failed write (a full disk, a read-only folder) as one line naming the file; the caller has undone it."""
    what = error.strerror or str(error)
    return DatasetError(f"{path}: {what} while writing; nothing was half-written and nothing stored before is "
                        "lost: free some space (or fix the folder's permissions) and re-run the same command")


@dataclass
class Damage:
    """A segment that cannot be read: which, why, and how many lines it held (``None``: unknown, unrecorded)."""

    path: Path
    problem: str
    lines: int | None

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "problem": self.problem, "lost_lines": self.lines}


class DamagedSegment(DatasetError):
    """A sealed segment is damaged; the message names it and says how to restore it or read around it."""

    def __init__(self, damage: Damage) -> None:
        lost = "an unknown number of" if damage.lines is None else str(damage.lines)
        super().__init__(
            f"{damage.path}: damaged segment ({damage.problem}); restore it from git (`git checkout -- "
            f"{damage.path}`) or skip damaged segments when reading (e.g. `tlp dataset info --skip-damaged`; "
            f"{lost} lines would be lost)")
        self.damage = damage


@dataclass
class SegmentCheck:
    """What :meth:`Table.check` found in one segment or the tail. ``status``: ok, unrecorded or damaged."""

    path: Path
    status: str
    lines: int | None = None
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "status": self.status, "lines": self.lines, "problems": self.problems}


class Table:
    """One logical JSON-lines file made of sealed xz segments plus a plain tail."""

    def __init__(self, tail: Path) -> None:
        self.tail = Path(tail)
        self.manifest_path = self.tail.with_name(self.tail.name + ".sha256.json")

    # ---- reading -------------------------------------------------------------------------------------------
    def segments(self) -> list[Path]:
        """Sealed segments in order: those on disk plus those the manifest lists but that are missing (lost)."""
        pattern = self.tail.name + ".*.xz"
        found = {p for p in self.tail.parent.glob(pattern) if _SEGMENT.search(p.name)}
        found |= {self.tail.with_name(name) for name in self.manifest() if _SEGMENT.search(name)}
        return sorted(found, key=lambda p: int(_SEGMENT.search(p.name).group(1)))  # type: ignore[union-attr]

    def manifest(self) -> dict[str, dict[str, Any]]:
        """Segment name -> ``{"sha256", "lines", "bytes"}`` of the segments whose checksum is recorded."""
        try:
            data = json.loads(self.manifest_path.read_text())
            return dict(data["segments"])
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError) as error:
            raise DatasetError(f"{self.manifest_path}: corrupt checksum manifest ({error}); restore it from git "
                               f"(`git checkout -- {self.manifest_path}`)") from None

    def lines(self, on_damage: Callable[[Damage], None] | None = None,
              skip_segments: Collection[str] = ()) -> Iterator[tuple[str, str]]:
        """Yield ``(location, line)`` for every complete line; ``location`` is ``file:line`` for error messages.
        ``skip_segments``: names of sealed segments left out (those an index already covers).

        A damaged segment raises :class:`DamagedSegment`; with ``on_damage`` it is reported there and skipped
        instead (the callback runs before any later line is yielded, so a caller can stand in for the lost lines).
        A last tail line without its newline is a write cut short by a kill: it is not yielded (``repair`` moves
        it aside when a writer opens the table).
        """
        manifest = self.manifest()
        for segment in self.segments():
            if segment.name in skip_segments:
                continue
            try:
                # Whole segment first: an xz stream's checksum is verified only at its end, so lines decoded
                # before a corrupt spot are not trustworthy either.
                text = _read_segment(segment, manifest.get(segment.name))
            except DamagedSegment as error:
                if on_damage is None:
                    raise
                on_damage(error.damage)
                continue
            for number, line in enumerate(text.split("\n"), start=1):
                if line.strip():
                    yield f"{segment}:{number}", line
        if self.tail.exists():
            with open(self.tail, encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, start=1):
                    if not line.endswith("\n"):
                        break
                    if line.strip():
                        yield f"{self.tail}:{number}", line.rstrip("\n")

    def unfinished_tail(self) -> int:
        """Bytes of a last tail line without its newline (a write cut short by a kill), which readers leave out."""
        try:
            with open(self.tail, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                if size == 0:
                    return 0
                handle.seek(size - 1)
                if handle.read(1) == b"\n":
                    return 0
                handle.seek(0)
                data = handle.read()
        except FileNotFoundError:
            return 0
        return len(data) - (data.rfind(b"\n") + 1)

    # ---- verification ----------------------------------------------------------------------------------------
    def check(self) -> list[SegmentCheck]:
        """Check every segment (checksum when recorded, full decompression, UTF-8, every line JSON) and the tail."""
        manifest = self.manifest()
        checks = []
        for segment in self.segments():
            entry = manifest.get(segment.name)
            try:
                text = _read_segment(segment, entry)
            except DamagedSegment as error:
                checks.append(SegmentCheck(segment, "damaged", error.damage.lines, [error.damage.problem]))
                continue
            lines = text.split("\n")
            problems = _json_problems(lines)
            count = _count(lines)
            if entry is not None and entry.get("lines") != count:
                problems.append(f"holds {count} lines, the manifest says {entry.get('lines')}")
            checks.append(SegmentCheck(segment, "damaged" if problems else "ok" if entry else "unrecorded",
                                       count, problems))
        if self.tail.exists():
            checks.append(self._check_tail())
        return checks

    def _check_tail(self) -> SegmentCheck:
        data = self.tail.read_bytes()
        problems = []
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) < len(data):
            problems.append(f"unfinished last line ({len(data) - len(complete)} bytes, a write cut short by a "
                            "kill; the next writer moves it aside)")
        try:
            lines = complete.decode("utf-8").split("\n")
        except UnicodeDecodeError as error:
            return SegmentCheck(self.tail, "damaged", None, problems + [f"not UTF-8 text (byte {error.start})"])
        problems += _json_problems(lines)
        return SegmentCheck(self.tail, "damaged" if problems else "ok", _count(lines), problems)

    def record_missing(self) -> list[Path]:
        """Record checksums of unrecorded segments that read cleanly (segment files are never rewritten)."""
        manifest = self.manifest()
        added: dict[str, dict[str, Any]] = {}
        for segment in self.segments():
            if segment.name in manifest:
                continue
            try:
                _read_segment(segment, None)
            except DamagedSegment:
                continue  # never bless a damaged segment with a checksum
            added[segment.name] = _entry(segment)
        if added:
            self._record(added)
        return [self.tail.with_name(name) for name in sorted(added)]

    # ---- writing (callers hold the store's lock) --------------------------------------------------------------
    def repair(self) -> list[str]:
        """Make the table consistent after a crash; return what was done (nothing is ever deleted).

        - a partial last line of the tail is moved to ``NAME.partial-<time>`` and cut from the tail;
        - a tail that was already sealed (crash between seal and truncate) is emptied, and the segment's checksum
          recorded if the crash came before that.
        """
        actions: list[str] = []
        if not self.tail.exists():
            return actions
        data = self.tail.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            quarantine = self.tail.with_name(f"{self.tail.name}.partial-{int(time.time())}")
            quarantine.write_bytes(data[cut:])
            with open(self.tail, "r+b") as handle:
                handle.truncate(cut)
                handle.flush()
                os.fsync(handle.fileno())
            actions.append(f"{self.tail}: moved a partial last line ({len(data) - cut} bytes) to {quarantine.name}")
            data = data[:cut]
        segments = self.segments()
        if data and segments:
            newest = segments[-1]
            entry = self.manifest().get(newest.name)
            if _read_segment(newest, entry).encode("utf-8") == data:
                if entry is None:
                    self._record({newest.name: _entry(newest)})
                self._truncate_tail()
                actions.append(f"{self.tail}: tail was already sealed in {newest.name}; emptied it")
        return actions

    def size(self) -> int | None:
        """The tail's size in bytes (``None``: no tail yet): where :meth:`cut_back` returns to."""
        return self.tail.stat().st_size if self.tail.exists() else None

    def cut_back(self, size: int | None) -> None:
        """Undo appends made since :meth:`size` returned ``size`` (a failed write must not leave part of a batch)."""
        if size is None:
            self.tail.unlink(missing_ok=True)
        elif self.tail.exists() and self.tail.stat().st_size > size:
            with open(self.tail, "r+b") as handle:
                handle.truncate(size)
                os.fsync(handle.fileno())

    def append(self, lines: Iterable[str]) -> None:
        """Append complete lines durably (one write, then fsync); a failed write (a full disk) is undone and raised
        as a :class:`DatasetError` naming the tail."""
        payload = "".join(line.rstrip("\n") + "\n" for line in lines)
        if not payload:
            return
        self.tail.parent.mkdir(parents=True, exist_ok=True)
        before = self.size()
        try:
            with open(self.tail, "a", encoding="utf-8") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:
            self.cut_back(before)
            raise write_error(self.tail, error) from None

    def seal(self) -> Path | None:
        """Compress the tail into a new segment, record its checksum and empty the tail. Returns the new segment."""
        if not self.tail.exists() or self.tail.stat().st_size == 0:
            return None
        data = self.tail.read_bytes()
        data = data[: data.rfind(b"\n") + 1]  # never seal a partial line
        if not data:
            return None
        segments = self.segments()
        number = int(_SEGMENT.search(segments[-1].name).group(1)) + 1 if segments else 1  # type: ignore[union-attr]
        segment = self.tail.with_name(f"{self.tail.name}.{number:04d}.xz")
        temporary = segment.with_name(segment.name + ".tmp")
        try:
            with lzma.open(temporary, "wb", preset=9 | lzma.PRESET_EXTREME) as handle:
                handle.write(data)
            with open(temporary, "rb") as handle:
                os.fsync(handle.fileno())
        except OSError as error:  # the tail keeps every line: nothing is lost, the segment is just not made
            temporary.unlink(missing_ok=True)
            raise write_error(segment, error) from None
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        entry = _entry(temporary)
        os.replace(temporary, segment)
        # A kill here leaves the segment unrecorded (read without checksum) and the tail full: repair() finds the
        # tail already sealed, records the entry then and empties the tail.
        self._record({segment.name: entry})
        self._truncate_tail()
        return segment

    def _record(self, entries: dict[str, dict[str, Any]]) -> None:
        """Add manifest entries atomically (temporary file + rename: a kill leaves the old or the new manifest)."""
        segments = {**self.manifest(), **entries}
        temporary = self.manifest_path.with_name(self.manifest_path.name + ".tmp")
        try:
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump({"format": MANIFEST_FORMAT, "segments": segments}, handle, indent=1, sort_keys=True)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:  # the segment stays unrecorded (read without checksum; repair() records it)
            temporary.unlink(missing_ok=True)
            raise write_error(self.manifest_path, error) from None
        os.replace(temporary, self.manifest_path)

    def _truncate_tail(self) -> None:
        with open(self.tail, "r+b") as handle:
            handle.truncate(0)
            handle.flush()
            os.fsync(handle.fileno())

    def write_plain(self, destination: Path) -> int:
        """Write the whole logical table as one plain file (for tools that read MetaSchedule files directly)."""
        count = 0
        with open(destination, "w", encoding="utf-8") as out:
            for _, line in self.lines():
                out.write(line + "\n")
                count += 1
        return count


def _read_segment(path: Path, entry: dict[str, Any] | None) -> str:
    """A segment's text, checked against its manifest entry when there is one; raises :class:`DamagedSegment`."""
    lines = entry.get("lines") if entry else None

    def damaged(problem: str) -> DamagedSegment:
        return DamagedSegment(Damage(path, problem, lines))

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise damaged("missing, though its checksum is recorded") from None
    if entry is not None and hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise damaged("checksum mismatch: the file changed after it was sealed")
    decompressor = lzma.LZMADecompressor(lzma.FORMAT_XZ)
    try:
        raw = decompressor.decompress(data)
    except lzma.LZMAError as error:
        raise damaged(f"not a valid xz file: {error}") from None
    if not decompressor.eof:
        raise damaged("truncated: the xz stream ends early")
    if decompressor.unused_data:
        raise damaged(f"{len(decompressor.unused_data)} unexpected bytes after the end of the xz stream")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise damaged(f"not UTF-8 text (byte {error.start} of the decompressed data)") from None


def _entry(path: Path) -> dict[str, Any]:
    """The manifest entry of a (clean) segment file."""
    data = path.read_bytes()
    return {"sha256": hashlib.sha256(data).hexdigest(), "lines": _count(_read_segment(path, None).split("\n")),
            "bytes": len(data)}


def _count(lines: list[str]) -> int:
    """Lines a reader yields (blank ones are skipped), so a count can stand in for a lost segment's lines."""
    return sum(1 for line in lines if line.strip())


def _json_problems(lines: list[str], limit: int = 3) -> list[str]:
    """One problem per line that is not JSON (the first ``limit``, then a count)."""
    bad = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                json.loads(line)
            except ValueError:
                bad.append(number)
    problems = [f"line {number} is not valid JSON" for number in bad[:limit]]
    if len(bad) > limit:
        problems.append(f"{len(bad) - limit} more lines are not valid JSON")
    return problems
