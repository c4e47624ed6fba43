"""How each stage's time and peak memory grow with the data: every stage as a user runs it (a fresh process),
over a synthetic dataset of N programs (``synthesize.py``).

    .venv/bin/python benchmarks/scale/growth.py /tmp/scale/n100000 --stages import,info,verify,featurize,train,eval,library

Appends one row per stage (N, wall seconds, peak resident memory, the command) to ``--out``; ``plot.py`` draws
them. Stages:

- import: ``tlp dataset import`` of the dataset's platform exported as a MetaSchedule work directory, into a new
  dataset (parse, replay every trace for its program hash, store, seal);
- import_ansor: ``tlp dataset import --format ansor`` of as many synthetic Ansor records (``synthesize.py
  --format ansor``, one file per task as TenSet's) into a new dataset; ``--programs N`` makes N of them whatever
  the dataset holds (TenSet's one CPU platform: ``growth.py /tmp/scale/tenset --stages import_ansor --programs
  8600000``);
- info, verify: ``tlp dataset info --json`` / ``tlp dataset verify``;
- seal: ``PlatformStore.seal`` of the platform's records held in a plain tail (as an import or a collection leaves
  them; copied there before the clock starts): xz segments on every core and the index of each workload's fastest
  programs;
- featurize: the training features into a fresh feature cache (``tlp.features.cache.load_or_featurize``), as
  ``tlp train`` makes them (``--platform all``: of every platform, as the shipped model's ``--platforms all``);
- train: ``tlp train --epochs 1`` from that cache (reading it and one epoch);
- eval: ``tlp eval --baselines none`` of the shipped model on the held-out networks' programs;
- library: the schedule library of the platform (``ScheduleLibrary.from_dataset``), as ``tlp tune`` reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import TLP_CLI, results_dir, stamp, write_json  # pylint: disable=wrong-import-position

FEATURIZE = """
import sys
from pathlib import Path
from tlp.dataset.store import Dataset
from tlp.features.cache import load_or_featurize
from tlp.features.featurizer import FeatureConfig
from tlp.workloads import held_out_networks
dataset = Dataset(sys.argv[1])
platforms = dataset.platform_ids() if sys.argv[2] == "all" else [sys.argv[2]]
result = load_or_featurize(dataset, platforms, held_out_networks(), FeatureConfig(), cache_dir=Path(sys.argv[3]))
print(result.programs.features.shape, result.hit)
"""

SEAL = """
import sys
from tlp.dataset.store import Dataset
dataset = Dataset(sys.argv[1])
store = dataset.store(sys.argv[2])
with store:
    print(len(store.seal()))
"""

LIBRARY = """
import sys
from tlp.dataset.store import Dataset
from tlp.search.search_strategy.library import ScheduleLibrary
library = ScheduleLibrary.from_dataset(Dataset(sys.argv[1]), sys.argv[2], per_workload=2)
print(len(library.workloads))
"""

STAGES = ("import", "import_ansor", "info", "verify", "seal", "featurize", "train", "eval", "library")


def stage_command(stage: str, dataset: Path, platform_id: str, scratch: Path) -> list[str]:
    python = [sys.executable, "-c"]
    return {
        "import": TLP_CLI + ["dataset", "import", str(scratch / "work_dir"), "--dataset", str(scratch / "imported"),
                             "--hardware", "synthetic", "-q"],
        "import_ansor": TLP_CLI + ["dataset", "import", "--format", "ansor", str(scratch / "ansor_records"),
                                   "--dataset", str(scratch / "imported_ansor"), "--hardware", "synthetic", "-q"],
        "info": TLP_CLI + ["dataset", "info", str(dataset), "--json"],
        "verify": TLP_CLI + ["dataset", "verify", str(dataset)],
        "seal": python + [SEAL, str(scratch / "unsealed"), platform_id],
        "featurize": python + [FEATURIZE, str(dataset), platform_id, str(scratch / "features")],
        "train": TLP_CLI + ["train", str(dataset), "--platform", platform_id, "--epochs", "1", "-q",
                            "--out", str(scratch / "model.pt"), "--set", f"feature_cache_dir={scratch / 'features'}"],
        "eval": TLP_CLI + ["eval", "--dataset", str(dataset), "--platform", platform_id, "--baselines", "none",
                           "--json"],
        "library": python + [LIBRARY, str(dataset), platform_id],
    }[stage]


def prepare(stage: str, dataset: Path, platform_id: str, scratch: Path, programs: int) -> None:
    """What a stage starts from, made before its clock starts."""
    from tlp.dataset.store import Dataset  # pylint: disable=import-outside-toplevel

    if stage == "import":
        shutil.rmtree(scratch / "imported", ignore_errors=True)
        if not (scratch / "work_dir").is_dir():
            Dataset(dataset).store(platform_id).export_database(scratch / "work_dir")
    if stage == "import_ansor":
        shutil.rmtree(scratch / "imported_ansor", ignore_errors=True)
        if not (scratch / "ansor_records").is_dir():
            from synthesize import synthesize_ansor  # pylint: disable=import-outside-toplevel

            synthesize_ansor(scratch / "ansor_records", programs, seed=0)
    if stage == "seal":
        unsealed_copy(Dataset(dataset), platform_id, scratch / "unsealed")
    if stage == "featurize":
        shutil.rmtree(scratch / "features", ignore_errors=True)


def unsealed_copy(source: Any, platform_id: str, out: Path, batch: int = 20_000) -> None:
    """The platform's records appended to a new dataset at ``out`` through the store's API, left in the plain tail."""
    from tlp.dataset.store import Dataset  # pylint: disable=import-outside-toplevel

    shutil.rmtree(out, ignore_errors=True)
    store = source.store(platform_id)
    target = Dataset(out)
    destination = target.store_for(store.platform)
    with destination:
        for key in store.workload_index():
            destination.add_workload(store.workload_json(key))
        programs = []
        for program in store.iter_programs():
            programs.append(program)
            if len(programs) == batch:
                destination.append(programs)
                programs = []
        destination.append(programs)


def programs_of(dataset: Path) -> int:
    """Programs stored (record lines), from the tables' manifests."""
    total = 0
    for manifest in dataset.glob("*/database_tuning_record.json.sha256.json"):
        total += sum(entry["lines"] for entry in json.loads(manifest.read_text())["segments"].values())
    return total


def run_stage(stage: str, dataset: Path, platform_id: str, scratch: Path, programs: int) -> dict:
    prepare(stage, dataset, platform_id, scratch, programs)
    command = stage_command(stage, dataset, platform_id, scratch)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.monotonic() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: KiB, the largest child's so far
    return {"stage": stage, "returncode": done.returncode, "wall_s": round(wall, 1),
            "peak_rss_gb": round(peak_kib / 2**20, 2) if peak_kib > before else None,
            "stdout_tail": done.stdout[-300:], "stderr_tail": done.stderr[-300:] if done.returncode else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", type=Path, help="a synthetic dataset (synthesize.py)")
    parser.add_argument("--platform", default="llvm-emeraldrapids-2c-ecb6fd07", help="all: every platform (featurize)")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--label", default="now", help="what this row is (e.g. the code's state)")
    parser.add_argument("--programs", type=int, help="import_ansor: records to synthesize (default: the dataset's)")
    parser.add_argument("--scratch", type=Path, help="work space (default: DATASET.scratch)")
    parser.add_argument("--out", type=Path, default=results_dir(__file__) / "growth.json")
    args = parser.parse_args()
    scratch = args.scratch or args.dataset.with_name(args.dataset.name + ".scratch")
    scratch.mkdir(parents=True, exist_ok=True)
    programs = args.programs or programs_of(args.dataset)
    for stage in args.stages.split(","):
        if stage not in STAGES:
            raise SystemExit(f"--stages: unknown stage {stage!r}; stages are {', '.join(STAGES)}")
        # A fresh interpreter per stage keeps each peak its own (ru_maxrss of children is the largest so far).
        row = json.loads(subprocess.run(
            [sys.executable, __file__, "--one", stage, str(args.dataset), args.platform, str(scratch), str(programs)],
            stdout=subprocess.PIPE, text=True, check=True).stdout)
        row = {"label": args.label, "programs": programs, **row, "code": os.environ.get("PYTHONPATH") or "this checkout",
               **stamp()}
        rows = json.loads(args.out.read_text())["rows"] if args.out.exists() else []
        write_json(args.out, {"rows": rows + [row]})
        print(json.dumps({k: row[k] for k in ("stage", "programs", "returncode", "wall_s", "peak_rss_gb")}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--one":
        print(json.dumps(run_stage(sys.argv[2], Path(sys.argv[3]), sys.argv[4], Path(sys.argv[5]), int(sys.argv[6]))))
    else:
        main()
