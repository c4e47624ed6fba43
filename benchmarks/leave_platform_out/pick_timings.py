"""Each task's deployed program in two `tlp tune` work directories of one network, timed side by side: the tuned
tasks' best measured programs and the untuned tasks' zero-measurement picks (``WORK/predicted``), so a gap between
two runs' end-to-end latencies can be traced to the tasks that make it. Run it alone on the machine.

    .venv/bin/python benchmarks/leave_platform_out/pick_timings.py RUN_A RUN_B --out results/pick_timings_X.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tlp.dataset.measure import time_once
from tlp.evaluation.search_metrics import records_in_file_order, tuning_record, workload_rows

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


def deployed(work_dir: Path) -> dict[str, tuple[str, Any]]:
    """Workload key -> (``tuned`` or ``predicted``, the program the run compiles for it)."""
    picks: dict[str, tuple[str, Any]] = {}
    for kind, folder in (("tuned", work_dir), ("predicted", work_dir / "predicted")):
        if not (folder / "database_workload.json").exists():
            continue
        rows = workload_rows(folder)
        best: dict[str, tuple[float, str, list]] = {}
        for index, _, latency, line in records_in_file_order(folder):
            key = str(rows[index][0])
            if kind == "tuned" and latency is None:
                continue
            if key not in best or (latency or 0.0) < best[key][0]:
                best[key] = (latency or 0.0, line, rows[index])
        for key, (_, line, row) in best.items():
            picks.setdefault(key, (kind, tuning_record(line, row).as_measure_candidate()))
    return picks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work_dirs", nargs=2, type=Path)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    target = json.loads((args.work_dirs[0] / "target.json").read_text())
    runs = [deployed(d) for d in args.work_dirs]
    names = {t["workload_hash"]: t["task"] for t in json.loads((args.work_dirs[0] / "predicted" / "predicted.json")
                                                                .read_text()).get("tasks", {}).values()}
    keys = sorted(set(runs[0]) & set(runs[1]))
    jobs = [(key, r) for key in keys for r in (0, 1)]  # the two runs' programs of a task side by side
    timings: dict[tuple[str, int], list] = {job: [] for job in jobs}
    for number in range(args.passes):
        order = jobs[::-1] if number % 2 else jobs
        for job, latency in zip(order, time_once(target, [runs[job[1]][job[0]][1] for job in order])):
            timings[job].append(latency)
    rows = []
    for key in keys:
        best = [min((t for t in timings[(key, r)] if t is not None), default=None) for r in (0, 1)]
        rows.append({"workload": key, "task": names.get(f"0x{int(key):016x}"),  # tuned tasks: not named there
                     "kinds": [runs[r][key][0] for r in (0, 1)], "min_s": best,
                     "passes_s": [timings[(key, r)] for r in (0, 1)]})
        print(f"{str(rows[-1]['task'] or key)[:36]:36s}", *(f"{k:9s} {b * 1e6 if b else float('nan'):8.1f} us"
                                                            for k, b in zip(rows[-1]["kinds"], best)))
    write_json(args.out, {**stamp(), "runs": [str(d) for d in args.work_dirs], "passes": args.passes, "rows": rows})


if __name__ == "__main__":
    main()
