"""Random draws of the held-out architectures at another input size: TenSet's training data (issue 10, part 4).

TenSet holds out only the batch-1 224x224 (sequence-128) variants of its five test networks; the same
architectures at other input sizes and batch sizes are training data. Our training networks had no grouped
convolution at all and 11 small depthwise tasks, and ResNeXt-50 and MobileNetV2 are the two held-out networks
every model ranks worst. This measures random draws of the variants' tasks (``tlp.workloads.networks``: the three
CNNs at 240x240 and 256x256, the two BERTs at sequence 64) on this machine, leaving out every task that belongs to
a held-out network, so the test split stays as it was.

    .venv/bin/python benchmarks/shape_variants.py --trials-per-task 32

Resumable like ``tlp collect`` (it is ``tlp collect``'s :func:`tlp.dataset.collect.collect`): stop it, run it again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.collect import CollectPlan, collect
    from tlp.dataset.store import Dataset
    from tlp.platform import Platform
    from tlp.workloads import held_out_networks, load_tasks
    from tlp.workloads.networks import TRAINING_VARIANTS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(TRAINING_VARIANTS), help="default: every training variant")
    parser.add_argument("--dataset", default="datasets/tlp-cpu")
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    dataset = Dataset(args.dataset)
    platform = Platform.host()
    held = set(held_out_networks())
    catalogue = dataset.catalogue()
    tasks = load_tasks(args.workloads.split(","), platform.target)
    kept = [t for t in tasks if not held & set(catalogue.get(t.key, {}).get("networks", {}))]
    print(f"{len(tasks)} tasks, {len(tasks) - len(kept)} of them held-out tasks (left out), {len(kept)} to measure",
          flush=True)
    plan = CollectPlan(trials_per_task=args.trials_per_task, random_fraction=1.0, seed=args.seed)
    summary = collect(dataset, kept, platform, plan)
    print(json.dumps({"platform": platform.id, **summary.to_json()}, indent=1))


if __name__ == "__main__":
    main()
