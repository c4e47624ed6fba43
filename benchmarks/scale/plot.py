"""Seconds and peak memory of each stage against the number of programs, from ``growth.json`` (``growth.py``).

    .venv/bin/python benchmarks/scale/plot.py --label now --label zen4   # writes results/growth.png, prints tables

Rows of each label (a machine's series); the latest row of each (stage, programs) wins (a stage re-run after a
change replaces the old).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir  # pylint: disable=wrong-import-position


def latest_rows(path: Path, label: str) -> dict[tuple[str, int], dict]:
    rows = {}
    for row in json.loads(path.read_text())["rows"]:
        if row["label"] == label and row["returncode"] == 0:
            rows[(row["stage"], row["programs"])] = row
    return rows


def table(rows: dict[tuple[str, int], dict]) -> str:
    sizes = sorted({n for _, n in rows})
    stages = list(dict.fromkeys(stage for stage, _ in rows))
    lines = ["| stage | " + " | ".join(f"{n:,} programs" for n in sizes) + " | per-program cost, last / first |",
             "|---|" + "---|" * (len(sizes) + 1)]
    for stage in stages:
        cells, per_program = [], []
        for n in sizes:
            row = rows.get((stage, n))
            cells.append(f"{row['wall_s']:.0f} s, {row['peak_rss_gb']:.2f} GB" if row else "-")
            if row:
                per_program.append(row["wall_s"] / n)
        growth = f"{per_program[-1] / per_program[0]:.2f}x" if len(per_program) > 1 else "-"
        lines.append(f"| {stage} | " + " | ".join(cells) + f" | {growth} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", action="append", help="a series of growth.json (repeat; default: now)")
    parser.add_argument("--results", type=Path, default=results_dir(__file__) / "growth.json")
    parser.add_argument("--out", type=Path, default=results_dir(__file__) / "growth.png")
    args = parser.parse_args()
    labels = args.label or ["now"]
    series = {label: latest_rows(args.results, label) for label in labels}
    for label, rows in series.items():
        print(f"{label}:\n{table(rows)}\n")
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    figure, (seconds, memory) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, rows in series.items():
        for stage in dict.fromkeys(stage for stage, _ in rows):
            sizes = sorted(n for s, n in rows if s == stage)
            name = stage if len(series) == 1 else f"{stage} ({label})"
            style = "o-" if label == labels[0] else "s--"
            seconds.plot(sizes, [rows[(stage, n)]["wall_s"] for n in sizes], style, label=name)
            memory.plot(sizes, [rows[(stage, n)]["peak_rss_gb"] for n in sizes], style, label=name)
    for axis, name in ((seconds, "wall seconds"), (memory, "peak resident memory, GB (largest process)")):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("programs in the dataset")
        axis.set_ylabel(name)
        axis.grid(True, which="both", alpha=0.3)
    memory.axhline(6, color="gray", linestyle="--", linewidth=1)
    seconds.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
