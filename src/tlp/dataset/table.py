"""An append-only JSON-lines table that survives ``kill -9`` and ships compressed.

A table is a list of sealed, immutable segments (``NAME.0001.xz``, ``NAME.0002.xz``, … each an xz-compressed run of
lines) followed by a plain-text tail ``NAME`` that new lines are appended to. Reading concatenates them, so the
logical content is MetaSchedule's own line format and line numbers mean the same thing as in a single file.

Why segments: measured data must be committed compressed and must never be lost. Appending to the plain tail is
cheap and atomic per line (one write + fsync); ``seal()`` writes the tail as a new segment through a temporary file
and an atomic rename, then empties the tail. A crash between those two steps leaves the tail's lines in both
places; that is detected on the next open (the tail equals the newest segment) and undone.
"""

from __future__ import annotations

import lzma
import os
import re
import time
from pathlib import Path
from typing import Iterable, Iterator

_SEGMENT = re.compile(r"\.(\d{4,})\.xz$")


class Table:
    """One logical JSON-lines file made of sealed xz segments plus a plain tail."""

    def __init__(self, tail: Path) -> None:
        self.tail = Path(tail)

    # ---- reading -------------------------------------------------------------------------------------------
    def segments(self) -> list[Path]:
        pattern = self.tail.name + ".*.xz"
        found = [p for p in self.tail.parent.glob(pattern) if _SEGMENT.search(p.name)]
        return sorted(found, key=lambda p: int(_SEGMENT.search(p.name).group(1)))  # type: ignore[union-attr]

    def lines(self) -> Iterator[tuple[str, str]]:
        """Yield ``(location, line)`` for every complete line; ``location`` is ``file:line`` for error messages.

        A last tail line without its newline is a write cut short by a kill: it is not yielded (``repair`` moves
        it aside when a writer opens the table).
        """
        for segment in self.segments():
            with lzma.open(segment, "rt", encoding="utf-8") as handle:
                for number, line in enumerate(handle, start=1):
                    if line.strip():
                        yield f"{segment}:{number}", line.rstrip("\n")
        if self.tail.exists():
            with open(self.tail, encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, start=1):
                    if not line.endswith("\n"):
                        break
                    if line.strip():
                        yield f"{self.tail}:{number}", line.rstrip("\n")

    # ---- writing (callers hold the store's lock) --------------------------------------------------------------
    def repair(self) -> list[str]:
        """Make the table consistent after a crash; return what was done (nothing is ever deleted).

        - a partial last line of the tail is moved to ``NAME.partial-<time>`` and cut from the tail;
        - a tail that was already sealed (crash between seal and truncate) is emptied.
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
            with lzma.open(segments[-1], "rb") as handle:
                newest = handle.read()
            if newest == data:
                self._truncate_tail()
                actions.append(f"{self.tail}: tail was already sealed in {segments[-1].name}; emptied it")
        return actions

    def append(self, lines: Iterable[str]) -> None:
        """Append complete lines durably (one write, then fsync)."""
        payload = "".join(line.rstrip("\n") + "\n" for line in lines)
        if not payload:
            return
        self.tail.parent.mkdir(parents=True, exist_ok=True)
        with open(self.tail, "a", encoding="utf-8") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())

    def seal(self) -> Path | None:
        """Compress the tail into a new segment and empty the tail. Returns the new segment, if any."""
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
        with lzma.open(temporary, "wb", preset=9 | lzma.PRESET_EXTREME) as handle:
            handle.write(data)
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, segment)
        self._truncate_tail()
        return segment

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
