"""Kill safety of `tlp collect`: SIGKILL it at random moments, restart it each time, and count what was lost.

A collection into a temporary dataset is killed (the collector and its build/run workers, SIGKILL to the process
group) after seeded random delays, and restarted each time; the last start runs to completion. Just before each
kill the script reads which programs the store holds with their metadata: those were reported (appended with
fsync) and must survive. At the end it checks:

- lost: programs seen stored before a kill that the final dataset lacks (must be 0);
- duplicated: records of a program (same trace id, or same workload and program hash) beyond the first (must be 0);
- `tlp dataset verify` exits 0 (segments' checksums, full decompression, every tail line JSON).

    .venv/bin/python benchmarks/reliability/kill_safety.py --kills 10 --seed 0

Writes benchmarks/reliability/results/kill_safety.json. About 10 minutes on 2 busy cores with the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from tlp.dataset import Dataset
from tlp.platform import Platform

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import TLP_CLI, results_dir, write_json  # pylint: disable=wrong-import-position

RESULTS = results_dir(__file__) / "kill_safety.json"
TLP = TLP_CLI  # three items, as "tlp" stands for them in the recorded command


def stored_programs(dataset: Path, platform_id: str) -> dict[str, dict]:
    """Program id -> metadata of every program stored with its metadata (what a collector has reported)."""
    if not (dataset / platform_id / "platform.json").exists():
        return {}
    store = Dataset(dataset).store(platform_id)
    return {p.id: p.meta for p in store.iter_programs() if p.meta}


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    platform_id = Platform.host().id
    with tempfile.TemporaryDirectory(prefix="kill_safety_") as folder:
        dataset = Path(folder) / "dataset"
        command = TLP + ["collect", "--workloads", args.workloads, "--dataset", str(dataset), "--trials-per-task",
                         str(args.trials_per_task), "--batch-size", str(args.batch_size), "--min-repeat-ms", "2",
                         "--seed", str(args.seed), "-q"]
        reported: dict[str, dict] = {}
        kills = []
        started = time.monotonic()
        for number in range(args.kills):
            delay = rng.uniform(args.min_delay, args.max_delay)
            collector = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
            time.sleep(delay)
            before = stored_programs(dataset, platform_id)  # read just before the kill: all of it must survive
            finished = collector.poll() is not None
            if not finished:
                os.killpg(collector.pid, signal.SIGKILL)  # the collector and its builder/runner workers
            collector.wait()
            reported.update(before)
            kills.append({"kill": number + 1, "after_s": round(delay, 2), "stored_before": len(before),
                          "collector_had_finished": finished})
            print(f"kill {number + 1}: after {delay:.1f} s, {len(before)} programs stored", flush=True)
        final_run = subprocess.run(command, capture_output=True, text=True)
        seconds = time.monotonic() - started
        store = Dataset(dataset).store(platform_id)
        programs = list(store.iter_programs())
        ids = Counter(p.id for p in programs)
        hashes = Counter((p.workload_key, p.meta["program_hash"]) for p in programs if p.meta.get("program_hash"))
        duplicated = sum(n - 1 for n in ids.values()) + sum(n - 1 for n in hashes.values())
        lost = sorted(set(reported) - set(ids))
        verify = subprocess.run(TLP + ["dataset", "verify", str(dataset)], capture_output=True, text=True)
        partial = sorted(p.name for p in (dataset / platform_id).glob("*.partial-*"))
        try:
            exhausted = json.loads(final_run.stdout).get("exhausted_tasks", [])
        except json.JSONDecodeError:
            exhausted = ["(final run printed no summary)"]
        per_task = Counter(p.workload_key for p in programs)
        names = {key: entry["name"] for key, entry in Dataset(dataset).catalogue().items()}
        # Complete: every task has its programs, unless its design space ran out of new ones (reported as such).
        incomplete = sorted(names[k] for k in names if per_task[k] < args.trials_per_task and names[k] not in exhausted)
        return {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": {"platform": platform_id, "cpu": Platform.host().hardware.get("cpu_model"),
                        "cores": os.cpu_count(), "python": host.python_version()},
            "command": " ".join(["tlp"] + command[3:]).replace(str(dataset), "DATASET"),
            "seed": args.seed, "kills": len([k for k in kills if not k["collector_had_finished"]]),
            "kill_log": kills,
            "records": len(programs), "records_per_task": {names[k]: n for k, n in per_task.items()},
            "exhausted_tasks": exhausted, "incomplete_tasks": incomplete,
            "records_without_metadata": sum(1 for p in programs if not p.meta),
            "reported_before_kills": len(reported), "lost": len(lost), "lost_ids": lost[:20],
            "duplicated": duplicated, "final_run_rc": final_run.returncode,
            "verify_rc": verify.returncode, "verify_output": verify.stdout.strip().splitlines()[-5:],
            "partial_lines_quarantined": partial, "seconds": round(seconds, 1),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="dense_64x64x64,softmax_1x1000,softmax_2x128x128")
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--min-delay", type=float, default=5.0,
                        help="seconds after a start (a start takes ~10 s before its first batch is stored)")
    parser.add_argument("--max-delay", type=float, default=25.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = run(args)
    write_json(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("kill_log", "verify_output")}, indent=1))
    ok = (result["lost"] == 0 and result["duplicated"] == 0 and result["verify_rc"] == 0
          and result["final_run_rc"] == 0 and not result["incomplete_tasks"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
