"""Where a small-budget `tlp tune` spends its wall time, per stage, as a user runs it (a fresh process per run).

For each model of benchmarks/model_coverage (third-party `transformers` definitions, random weights) and each
variant (a name and `--set KEY=VALUE` settings), runs `tlp tune MODEL.py --trials 16 --top-tasks 1 --json` in a new
work dir and keeps the report's stage seconds, the share outside search and compile, the end-to-end latency and
PyTorch eager / torch.compile beside it. Runs are sequential (the machine's cores are the measurement).

    python benchmarks/tuning_time/small_budgets.py --models convnext,swin \
        --variants "default" "light=prediction.light_share=0.02" --out benchmarks/tuning_time/results/x.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import BENCHMARKS, TLP_CLI, stamp, write_json  # pylint: disable=wrong-import-position

SOURCE = """import sys
sys.path.insert(0, {folder!r})
import torch
torch.manual_seed(0)
from model_coverage import MODELS
model, example_inputs = MODELS[{name!r}][1]()
"""


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``name=KEY=VALUE,KEY=VALUE`` (or just ``name``) -> (name, ``--set`` arguments)."""
    name, _, settings = text.partition("=")
    arguments = []
    for pair in filter(None, settings.split(",")):
        arguments += ["--set", pair]
    return name, arguments


def run(model: str, variant: str, settings: list[str], trials: int, top_tasks: int, work_root: Path,
        seed: int) -> dict[str, Any]:
    source = work_root / f"{model}.py"
    source.write_text(SOURCE.format(folder=str(BENCHMARKS / "model_coverage"), name=model))
    work_dir = work_root / f"{model}-{variant}-seed{seed}"
    command = TLP_CLI + ["tune", str(source), "--trials", str(trials), "--top-tasks", str(top_tasks), "--seed",
                         str(seed), "--work-dir", str(work_dir), "--json", *settings]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"model": model, "variant": variant, "seed": seed, "error": done.stderr.strip().splitlines()[-1:]}
    report = json.loads(done.stdout)
    return {"model": model, "variant": variant, "seed": seed, "settings": settings, "trials": report["trials"],
            "wall_s": report["wall_s"], "stages_s": report["stages_s"]["seconds"],
            "outside_search_and_compile": report["stages_s"]["outside_search_and_compile"],
            "tasks_latency_ms": (report.get("tasks_latency_s") or 0) * 1e3,
            "end_to_end_ms": report["end_to_end_s"] * 1e3, "torch_eager_ms": report["torch_eager_s"] * 1e3,
            "speedup_vs_torch": report["speedup_vs_torch"],
            "torch_compile_ms": (report.get("torch_compile_s") or 0) * 1e3 or None,
            "speedup_vs_torch_compile": report.get("speedup_vs_torch_compile"),
            "numerics_ok": (report.get("numerics") or {}).get("ok"),
            "zero_measurement_tasks": len((report.get("predicted") or {}).get("tasks", []))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="convnext,swin")
    parser.add_argument("--variants", nargs="+", default=["default"])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--top-tasks", type=int, default=1)
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--work-dir", default="runs/bench/small_budgets", help="work dirs kept here, for re-timing")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    rows: list[dict[str, Any]] = json.loads(out.read_text())["rows"] if out.exists() else []
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        for model in args.models.split(","):
            for variant, settings in map(parse_variant, args.variants):  # alternated: drift spreads over all
                row = {**run(model, variant, settings, args.trials, args.top_tasks, work, seed), **stamp()}
                rows.append(row)
                write_json(out, {"rows": rows})
                if "error" in row:
                    print(f"{model} {variant} seed {seed}: {row['error']}", flush=True)
                    continue
                stages = row["stages_s"]
                print(f"{model} {variant} seed {seed}: wall {row['wall_s']:.0f} s, search "
                      f"{stages.get('search', 0):.0f} s, zero-measurement {stages.get('zero_measurement', 0):.0f} s "
                      f"({row['zero_measurement_tasks']} tasks), {row['outside_search_and_compile'] * 100:.0f} % "
                      f"outside; {row['end_to_end_ms']:.3f} ms = {row['speedup_vs_torch']:.2f}x eager, "
                      f"{row['speedup_vs_torch_compile'] or 0:.2f}x torch.compile", flush=True)


if __name__ == "__main__":
    main()
