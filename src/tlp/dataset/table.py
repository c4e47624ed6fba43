"""An append-only JSON-lines table that survives ``kill -9``, ships compressed and detects damage.

A table is a list of sealed, immutable segments (``NAME.0001.xz``, ``NAME.0002.xz``, … each an xz-compressed run of
lines) followed by a plain-text tail ``NAME`` that new lines are appended to. Reading concatenates them, so the
logical content is MetaSchedule's own line format and line numbers mean the same thing as in a single file.

Why segments: measured data must be committed compressed and must never be lost. Appending to the plain tail is
cheap and atomic per line (one write + fsync); ``seal()`` writes the tail as new segments (each at most
:data:`SEGMENT_BYTES` of text, since a reader decodes a segment whole) through temporary files and atomic renames,
then empties the tail. A journal written first tells the next writer (``repair()``) of a seal a crash cut short:
it removes the seal's segments when the tail still holds their lines, and records them when the tail was emptied.
(A tail equal to the newest segment, what a crash in the one-segment seal of older versions left, is undone too.)

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator

from tlp import TLPError

_SEGMENT = re.compile(r"\.(\d{4,})\.xz$")
MANIFEST_FORMAT = 1
# Text a segment holds at most: readers decode a whole segment at once (an xz checksum is checked at its end).
SEGMENT_BYTES = 64 << 20
SEGMENT_PRESET = 9 | lzma.PRESET_EXTREME


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
                size = position = handle.seek(0, os.SEEK_END)
                while position:  # backwards a block at a time: the tail may hold gigabytes
                    step = min(1 << 20, position)
                    position -= step
                    handle.seek(position)
                    newline = handle.read(step).rfind(b"\n")
                    if newline >= 0:
                        return size - (position + newline + 1)
                return size
        except FileNotFoundError:
            return 0

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
        partial = self.unfinished_tail()
        if partial:
            cut = self.tail.stat().st_size - partial
            quarantine = self.tail.with_name(f"{self.tail.name}.partial-{int(time.time())}")
            with open(self.tail, "r+b") as handle:
                handle.seek(cut)
                quarantine.write_bytes(handle.read())
                handle.truncate(cut)
                handle.flush()
                os.fsync(handle.fileno())
            actions.append(f"{self.tail}: moved a partial last line ({partial} bytes) to {quarantine.name}")
        if self.journal_path.exists():
            actions.append(self._finish_or_undo_seal(self.tail.stat().st_size))
        size = self.tail.stat().st_size
        segments = self.segments()
        if size and segments:
            newest = segments[-1]
            entry = self.manifest().get(newest.name)
            text = _read_segment(newest, entry).encode("utf-8")
            if len(text) == size and self.tail.read_bytes() == text:
                if entry is None:
                    self._record({newest.name: _entry(newest)})
                self._truncate_tail()
                actions.append(f"{self.tail}: tail was already sealed in {newest.name}; emptied it")
        return actions

    def _finish_or_undo_seal(self, tail_bytes: int) -> str:
        """After a kill in :meth:`seal`: an emptied tail means the seal's segments hold its lines (record any left
        unrecorded); a full one means they are copies of lines the tail still holds (remove them: it seals again)."""
        try:
            first = int(json.loads(self.journal_path.read_text())["first_segment"])
        except (ValueError, KeyError, TypeError):
            first = None  # a kill while writing the journal: no segment was made yet
        sealed = [s for s in self.segments() if first is not None and s.exists()
                  and int(_SEGMENT.search(s.name).group(1)) >= first]  # type: ignore[union-attr]
        if tail_bytes == 0:
            manifest = self.manifest()
            self._record({s.name: _entry(s) for s in sealed if s.name not in manifest})
            self.journal_path.unlink()
            return f"{self.tail}: finished a seal cut short ({len(sealed)} segments)"
        manifest = self.manifest()
        if any(s.name in manifest for s in sealed):
            self._record({}, forget=[s.name for s in sealed])
        self._undo_seal(sealed)
        for temporary in self.tail.parent.glob(self.tail.name + ".*.xz.tmp"):
            temporary.unlink()
        return f"{self.tail}: removed {len(sealed)} segments of a seal cut short (the tail holds their lines)"

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

    def seal(self) -> list[Path]:
        """Compress the tail into new segments of at most :data:`SEGMENT_BYTES` of text each (a reader decodes a
        whole segment at once), record their checksums and empty the tail. Returns the new segments.

        The tail is read a segment at a time and segments are compressed on every core (xz releases the GIL), so a
        large tail (an import of a million records) seals in bounded memory. A journal (``NAME.sealing``) written
        first lets :meth:`repair` finish or undo a seal a kill cut short."""
        end = self._complete_bytes()  # never seal a partial line
        if not end:
            return []
        segments = self.segments()
        first = int(_SEGMENT.search(segments[-1].name).group(1)) + 1 if segments else 1  # type: ignore[union-attr]
        made: list[Path] = []
        entries: dict[str, dict[str, Any]] = {}
        try:
            _write_durably(self.journal_path, json.dumps({"first_segment": first}))
            workers = os.cpu_count() or 1
            with ThreadPoolExecutor(workers) as pool:
                pending: list[Any] = []
                for number, piece in enumerate(self._pieces(end), start=first):
                    segment = self.tail.with_name(f"{self.tail.name}.{number:04d}.xz")
                    pending.append(pool.submit(_write_segment, segment, piece))
                    made.append(segment)
                    if len(pending) > workers:  # bounded: a few segments' text in memory
                        entries.update([pending.pop(0).result()])
                entries.update(future.result() for future in pending)
        except OSError as error:  # the tail keeps every line: nothing is lost, the segments are just not made
            self._undo_seal(made)
            raise write_error(Path(error.filename) if error.filename else self.tail, error) from None
        except BaseException:
            self._undo_seal(made)
            raise
        # A kill from here on leaves the journal: repair() records what is unrecorded and empties the tail.
        self._record(entries)
        self._truncate_tail()
        self.journal_path.unlink(missing_ok=True)
        return made

    @property
    def journal_path(self) -> Path:
        return self.tail.with_name(self.tail.name + ".sealing")

    def _complete_bytes(self) -> int:
        """Bytes of the tail up to its last newline."""
        size = self.size()
        return size - self.unfinished_tail() if size else 0

    def _pieces(self, end: int) -> Iterator[bytes]:
        """The tail's first ``end`` bytes as runs of whole lines of at most SEGMENT_BYTES (a longer line alone)."""
        with open(self.tail, "rb") as handle:
            buffer, left = b"", end
            while left or buffer:
                if left and len(buffer) < SEGMENT_BYTES:
                    data = handle.read(min(SEGMENT_BYTES - len(buffer), left))
                    left -= len(data)
                    buffer += data
                cut = buffer.rfind(b"\n", 0, SEGMENT_BYTES) + 1
                while not cut:  # one line longer than a segment: a segment of its own
                    newline = buffer.find(b"\n")
                    data = handle.read(min(SEGMENT_BYTES, left)) if newline < 0 else b""
                    left -= len(data)
                    buffer += data
                    cut = newline + 1 if newline >= 0 else (0 if data else len(buffer))
                yield buffer[:cut]
                buffer = buffer[cut:]

    def _undo_seal(self, made: list[Path]) -> None:
        """Remove the segments of a seal that did not finish (the tail still holds their lines) and its journal."""
        for segment in made:
            segment.unlink(missing_ok=True)
            segment.with_name(segment.name + ".tmp").unlink(missing_ok=True)
        self.journal_path.unlink(missing_ok=True)

    def _record(self, entries: dict[str, dict[str, Any]], forget: Collection[str] = ()) -> None:
        """Add manifest entries atomically (temporary file + rename: a kill leaves the old or the new manifest)."""
        segments = {name: entry for name, entry in {**self.manifest(), **entries}.items() if name not in forget}
        temporary = self.manifest_path.with_name(self.manifest_path.name + ".tmp")
        try:
            _write_durably(temporary, json.dumps({"format": MANIFEST_FORMAT, "segments": segments}, indent=1,
                                                 sort_keys=True) + "\n")
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


def _write_durably(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _write_segment(segment: Path, data: bytes) -> tuple[str, dict[str, Any]]:
    """Compress ``data`` (whole lines) into ``segment`` through a temporary file; its manifest entry."""
    temporary = segment.with_name(segment.name + ".tmp")
    try:
        compressed = lzma.compress(data, format=lzma.FORMAT_XZ, preset=SEGMENT_PRESET)
        with open(temporary, "wb") as handle:
            handle.write(compressed)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:  # a full disk: named by the segment it was writing
        temporary.unlink(missing_ok=True)
        raise write_error(segment, error) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, segment)
    lines = _count(data.decode("utf-8", errors="replace").split("\n"))
    return segment.name, {"sha256": hashlib.sha256(compressed).hexdigest(), "lines": lines, "bytes": len(compressed)}


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
