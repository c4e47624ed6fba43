"""Whether a model's tasks are absent from a dataset: what makes its family held out of training, the schedule
library and self-play (they all read `datasets/tlp-cpu`). Per task of the model (as `tlp tune` extracts them for
this machine's target): its workload key, whether the dataset holds it, and which of the dataset's networks do.
Nothing is measured.

    .venv/bin/python benchmarks/leave_family_out/absent.py benchmarks/leave_platform_out/models/mixer.py \
        --out benchmarks/leave_family_out/results/absent_mixer.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tlp.dataset.store import DEFAULT_DATASET
from tlp.platform import host_target
from tlp.tune.sources import resolve

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import stamp, write_json  # pylint: disable=wrong-import-position


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a .py model file (as `tlp tune` takes it)")
    parser.add_argument("--dataset", default=DEFAULT_DATASET)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    stored = json.loads(Path(args.dataset, "tasks.json").read_text())
    tunable = resolve(args.model, host_target(2))
    tasks = [{"name": t.name, "key": t.key, "weight": int(t.weight), "flops": float(t.flops),
              "in_dataset": t.key in stored, "dataset_networks": sorted(stored.get(t.key, {}).get("networks", {}))}
             for t in tunable.tasks]
    held = [t for t in tasks if t["in_dataset"]]
    write_json(args.out, {**stamp(), "model": args.model, "dataset": args.dataset, "tasks": tasks,
                          "tasks_in_dataset": len(held)})
    print(f"{args.model}: {len(tasks)} tasks, {len(held)} of them in {args.dataset}"
          + "".join(f"\n  {t['name']}: held by {', '.join(t['dataset_networks'])}" for t in held))


if __name__ == "__main__":
    main()
