"""Where a tuning run's wall time goes: seconds per stage, in the order the stages ran, for the report."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

# Stage names as the report prints them; the JSON uses the keys.
STAGE_NAMES = {
    "import": "import", "export": "export", "fast_math": "fast-math check", "tasks": "task extraction",
    "cost_model": "cost model load", "compile_check": "compile check", "schedule_library": "schedule library",
    "search": "search", "search_cost_model": "cost model", "search_build": "build", "search_run": "run",
    "search_strategy": "search strategy", "dataset": "dataset append", "zero_measurement": "zero-measurement schedules",
    "compile": "compile", "numerics": "numerics", "timing": "timing", "torch_compile": "torch.compile",
    "other": "other",
}
# Sub-stages printed in parentheses after their stage (they are part of its seconds).
PARTS = {"import": ("export", "fast_math", "tasks"),
         "search": ("search_cost_model", "search_build", "search_run", "search_strategy")}
# What a run is for: the rest of its wall is overhead the report's share counts.
PRODUCTIVE = ("search", "compile")


class Stages:
    """Wall seconds per named stage; a stage entered twice adds up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def update(self, seconds: dict[str, float]) -> None:
        for name, value in seconds.items():
            self.add(name, value)

    def summary(self, wall_s: float) -> dict[str, Any]:
        """The report's ``stages_s``: every stage, ``other`` for what no stage covered, and the share of the wall
        spent outside search and compile."""
        seconds = {name: round(value, 3) for name, value in self.seconds.items()}
        top = sum(value for name, value in self.seconds.items() if not _is_part(name))
        seconds["other"] = round(max(0.0, wall_s - top), 3)
        productive = sum(self.seconds.get(name, 0.0) for name in PRODUCTIVE)
        return {"seconds": seconds, "outside_search_and_compile": round(1 - productive / wall_s, 3) if wall_s else 0.0}


def _is_part(name: str) -> bool:
    return any(name in parts for parts in PARTS.values())


def format_stages(stages: dict[str, Any], wall_s: float) -> list[str]:
    """The report's wall-time-by-stage lines (stages under half a second left out)."""
    seconds = stages["seconds"]
    items = []
    for name, value in seconds.items():
        if _is_part(name) or (value < 0.5 and name != "search"):
            continue
        parts = [f"{STAGE_NAMES.get(p, p)} {seconds[p]:.0f}" for p in PARTS.get(name, ()) if seconds.get(p, 0) >= 0.5]
        items.append(f"{STAGE_NAMES.get(name, name)} {value:.0f} s" + (f" ({', '.join(parts)})" if parts else ""))
    lines = [f"wall time by stage ({wall_s:.0f} s; {stages['outside_search_and_compile'] * 100:.0f} % outside search "
             "and compile):"]
    line = " "
    for item in items:
        if len(line) + len(item) > 110 and line.strip():
            lines.append(line.rstrip(" ·"))
            line = " "
        line += f" {item} ·"
    lines.append(line.rstrip(" ·"))
    return lines
