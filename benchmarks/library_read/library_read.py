"""How long a schedule library takes to read: from the store's index of each workload's fastest programs (what a
fresh clone of a sealed dataset has) and by parsing every record (a store never sealed since the index came). The
``tlp`` preset reads one per ``tlp tune`` when the checkout's dataset holds the machine's platform, so this is the
preset's set-up cost.

    .venv/bin/python benchmarks/library_read/library_read.py \
        --platforms llvm-znver4-2c-2d80d0a8,llvm-emeraldrapids-2c-ecb6fd07 \
        --out benchmarks/library_read/results/library_read_emeraldrapids.json

Each platform is read ``--repeats`` times each way, alternating (a copy of the platform without its index for the
full read), in this process; medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tlp.dataset import Dataset
from tlp.dataset.best_programs import INDEX_NAME
from tlp.search.search_strategy.library import ScheduleLibrary

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


def _timed_read(dataset: Dataset, platform_id: str) -> tuple[float, int]:
    started = time.perf_counter()
    library = ScheduleLibrary.from_dataset(dataset, platform_id)
    return time.perf_counter() - started, len(library)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--platforms", required=True, help="comma-separated platform ids the dataset holds")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dataset = Dataset(args.dataset)
    results = {}
    for platform_id in args.platforms.split(","):
        store = dataset.store(platform_id)
        if not (store.path / INDEX_NAME).exists():
            sys.exit(f"{store.path}: no {INDEX_NAME}; run `tlp dataset seal {args.dataset}` first")
        programs = sum(1 for _ in store.records.lines())
        with tempfile.TemporaryDirectory() as scratch:
            unindexed = Dataset(Path(scratch) / "dataset")
            unindexed.path.mkdir()
            shutil.copy(dataset.path / "tasks.json", unindexed.path / "tasks.json")
            shutil.copytree(store.path, unindexed.path / platform_id, ignore=shutil.ignore_patterns(INDEX_NAME))
            indexed, full, workloads = [], [], 0
            for _ in range(args.repeats):
                seconds, workloads = _timed_read(dataset, platform_id)
                indexed.append(seconds)
                full.append(_timed_read(unindexed, platform_id)[0])
        results[platform_id] = {"stored_records": programs, "workloads": workloads, "index_s": indexed,
                                "full_read_s": full, "index_s_median": statistics.median(indexed),
                                "full_read_s_median": statistics.median(full)}
        print(f"{platform_id}: {programs} records, {workloads} workloads: from the index "
              f"{statistics.median(indexed):.2f} s, every record parsed {statistics.median(full):.1f} s "
              f"(medians of {args.repeats})")
    write_json(args.out, {**stamp(), "dataset": args.dataset, "results": results})


if __name__ == "__main__":
    main()
