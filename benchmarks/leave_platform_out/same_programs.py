"""How this machine times programs a stored platform also timed: per program measured by both, its latency in the
tuning runs given (this machine) over its stored latency on ``--platform`` (the fastest stored timing). A machine
whose fingerprint differs from a stored platform's only a little (the same CPU model, say) is another platform or
not by what these ratios say: their median (speed) and their spread across programs (ranking).

    .venv/bin/python benchmarks/leave_platform_out/same_programs.py runs/s81/resnet50/resnet50/default-seed1 \\
        --dataset datasets/tlp-cpu-held-out --platform llvm-emeraldrapids-2c-ecb6fd07 --out results/same_programs.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from tlp.dataset.store import Dataset, trace_id
from tlp.evaluation.search_metrics import records_in_file_order, workload_rows

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


def measured_here(work_dirs: list[Path]) -> dict[str, tuple[str, float]]:
    """Program id -> (task's workload key, its latency in the runs: the fastest if measured in several)."""
    here: dict[str, tuple[str, float]] = {}
    for work_dir in work_dirs:
        rows = workload_rows(work_dir)
        for index, trace, latency, _ in records_in_file_order(work_dir):
            if latency is None or rows[index] is None:
                continue
            key = str(rows[index][0])
            program = trace_id(key, trace)
            if program not in here or latency < here[program][1]:
                here[program] = (key, latency)
    return here


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work_dirs", nargs="+", type=Path, help="tuning work directories measured on this machine")
    parser.add_argument("--dataset", required=True, help="a dataset holding --platform's timings of programs")
    parser.add_argument("--platform", required=True, help="the stored platform to compare with")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    here = measured_here(args.work_dirs)
    stored: dict[str, float] = {}
    for program in Dataset(args.dataset).store(args.platform).iter_programs():
        if program.id in here and program.latency is not None:
            stored[program.id] = min(program.latency, stored.get(program.id, float("inf")))
    ratios = sorted(here[p][1] / stored[p] for p in stored)
    if not ratios:
        raise SystemExit(f"no program of {', '.join(map(str, args.work_dirs))} is stored for {args.platform}")
    summary = {"programs_here": len(here), "programs_in_both": len(ratios), "tasks": len({here[p][0] for p in stored}),
               "median_ratio": statistics.median(ratios), "min_ratio": ratios[0], "max_ratio": ratios[-1],
               "quartiles": statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios}
    write_json(args.out, {**stamp(), "runs": [str(w) for w in args.work_dirs], "dataset": args.dataset,
                          "platform": args.platform, "summary": summary, "ratios": ratios})
    print(summary)


if __name__ == "__main__":
    main()
