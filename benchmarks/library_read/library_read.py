"""How long a schedule library takes to read: from the dataset (the first ``tlp tune`` after the dataset changed)
and from its cache (every later one). The ``tlp`` preset reads one per ``tlp tune`` when the checkout's dataset holds
the machine's platform, so this is the preset's set-up cost.

    .venv/bin/python benchmarks/library_read/library_read.py \
        --platforms llvm-znver4-2c-2d80d0a8,llvm-emeraldrapids-2c-ecb6fd07 \
        --out benchmarks/library_read/results/library_read_emeraldrapids.json

Each platform is read ``--repeats`` times cold (a fresh cache folder each time) and cached, alternating; medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tlp.dataset import Dataset
from tlp.search.search_strategy.library import ScheduleLibrary

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


def _timed_read(dataset: Dataset, platform_id: str, cache_dir: Path) -> tuple[float, int]:
    started = time.perf_counter()
    library = ScheduleLibrary.from_dataset(dataset, platform_id, cache_dir=cache_dir)
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
        programs = sum(1 for _ in dataset.store(platform_id).records.lines())
        cold, cached, workloads = [], [], 0
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as cache_dir:
                seconds, workloads = _timed_read(dataset, platform_id, Path(cache_dir))
                cold.append(seconds)
                cached.append(_timed_read(dataset, platform_id, Path(cache_dir))[0])
        results[platform_id] = {"stored_records": programs, "workloads": workloads, "cold_s": cold, "cached_s": cached,
                                "cold_s_median": statistics.median(cold), "cached_s_median": statistics.median(cached)}
        print(f"{platform_id}: {programs} records, {workloads} workloads: read {statistics.median(cold):.1f} s, "
              f"from the cache {statistics.median(cached):.2f} s (medians of {args.repeats})")
    write_json(args.out, {**stamp(), "dataset": args.dataset, "results": results})


if __name__ == "__main__":
    main()
