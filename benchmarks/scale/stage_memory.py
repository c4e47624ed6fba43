"""Wall time and peak memory of one `tlp` command over a dataset, as a user runs it (a fresh process).

    .venv/bin/python benchmarks/scale/stage_memory.py --label info -- dataset info datasets/tlp-cpu --json
    PYTHONPATH=<a worktree of an older commit>/src .venv/bin/python benchmarks/scale/stage_memory.py --label old ...

Appends one row (the command, wall seconds, peak resident memory of the process, the code's commit) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import TLP_CLI, stamp, write_json  # pylint: disable=wrong-import-position


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True, help="what this row is (e.g. the code's state)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "stage_memory.json"))
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the tlp arguments")
    args = parser.parse_args()
    command = TLP_CLI + [a for a in args.command if a != "--"]
    started = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.monotonic() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: KiB, the largest child's peak
    code = os.environ.get("PYTHONPATH") or "this checkout"
    out = Path(args.out)
    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    row = {"label": args.label, "command": ["tlp", *command[len(TLP_CLI):]], "code": code, "returncode": done.returncode,
           "wall_s": round(wall, 1), "peak_rss_gb": round(peak_kib / 2**20, 2), **stamp()}
    rows.append(row)
    write_json(out, {"rows": rows})
    print(json.dumps(row))


if __name__ == "__main__":
    main()
