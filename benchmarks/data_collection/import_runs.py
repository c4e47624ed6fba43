"""Add the measured programs of the project's benchmark tuning runs to a dataset (issue 10: search-produced data).

Every benchmark keeps its MetaSchedule work directories (``runs/...``, not committed: their programs go into the
dataset, which is what this script does). Their candidates are measured search programs — evolved by
MetaSchedule's search, guided by TLP, XGBoost or random ranking — which is what the dataset lacks. This walks the work
directories ``<root>/<workload>/<model>-seed<N>/`` that benchmark scripts write, catalogues each task under the
workload's own name, network and weight (the workload is the folder name, ``-topN`` meaning ``--top-tasks N``),
and files the programs under the platform that measured them (a directory whose workload is not known is
refused, named, and left for a re-run), the same way ``tlp tune --dataset`` does
(``tlp.dataset.add_tuning_run``; duplicates by program hash are skipped, so re-running adds nothing).

    .venv/bin/python benchmarks/data_collection/import_runs.py runs/bench/unseen runs/bench/realistic   # measured here
    .venv/bin/python benchmarks/data_collection/import_runs.py runs/bench/search --platform llvm-znver3-2c-1ceb2015
    .venv/bin/python benchmarks/data_collection/import_runs.py runs/lfo-H/mixer --source models/mixer.py  # a .py model

Runs measured while the machine was loaded should not be imported (their latencies are inflated): keep them out
of the roots given here.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from tlp.dataset import Dataset, add_tuning_run
from tlp.tune.sources import SourceError, tuned_tasks


def work_dirs(root: Path) -> list[Path]:
    """MetaSchedule work directories under ``root`` (any depth), without the predicted-schedule databases."""
    return sorted(p.parent for p in root.rglob("database_tuning_record.json")
                  if p.parent.name != "predicted" and p.stat().st_size > 0)


def workload_of(work_dir: Path, root: Path, source: str | None = None) -> tuple[str, int]:
    """``(workload, top tasks)``: ``source`` when given, else from the folder layout
    ``<root>/<workload>[-topN]/<model>-seedN``, or a ``report.json`` naming its source."""
    if source:
        return source, 0
    report = work_dir / "report.json"
    name = json.loads(report.read_text()).get("source") if report.exists() else None
    name = name or (work_dir.parent.name if work_dir.parent != root else work_dir.name)
    match = re.fullmatch(r"(.+)-top(\d+)", name)
    return (match.group(1), int(match.group(2))) if match else (name, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platform", help="a platform of the dataset that measured the runs (default: this machine)")
    # a report names a .py model by its stem, which does not resolve: give the file
    parser.add_argument("--source", help="the workload every run under the roots tuned (a zoo name or a .py file)")
    args = parser.parse_args()
    dataset = Dataset(args.dataset)
    platform = dataset.store(args.platform).platform if args.platform else None
    totals = {"imported": 0, "already_present": 0, "runs": 0, "skipped": 0, "refused": 0}
    for root in args.roots:
        for work_dir in work_dirs(root):
            workload, top = workload_of(work_dir, root, args.source)
            try:
                tasks = tuned_tasks(workload, work_dir, top)
            except SourceError as error:
                # Catalogued under a made-up network, its programs would count for no network's tasks: refuse.
                print(f"{work_dir}: not imported: {error}; put it under <root>/<workload>/<model>-seed<N>/ "
                      f"(or next to a report.json naming its source) and run again", flush=True)
                totals["refused"] += 1
                continue
            # platform None: this machine (add_tuning_run's default, as --measured-here)
            path_part = workload.split(":", 1)[0]
            network = Path(path_part).stem if path_part.endswith((".py", ".onnx")) else workload
            summary = add_tuning_run(dataset, work_dir, platform, tasks, network)  # a model file: its stem names it
            totals["runs"] += 1
            totals["imported"] += summary.imported
            totals["already_present"] += summary.already_present
            totals["skipped"] += sum(summary.skipped.values())
            print(f"{work_dir}: {summary.imported} new, {summary.already_present} already stored, "
                  f"skipped {summary.skipped or 'none'} -> {summary.platform}", flush=True)
    print(json.dumps(totals))


if __name__ == "__main__":
    main()
