"""Re-time tuned networks end to end, each in several fresh processes, alternating the networks.

A tuned network's end-to-end latency is measured once, in the process that tuned it, at the end of the run. On a
shared 2-core VM that one number can be far off: ResNet-18 tuned by XGBoost to 800 trials (Zen 2) reported 55.4 ms
against PyTorch's 44.2 ms, while the same compiled network re-timed later took 34.4 ms against PyTorch's 38.0 ms.
And some tuned kernels run at two speeds depending on the process (TLP's 3x3 64-channel convolution of that
network: 2.8-3.2 ms in some processes, 5.5-5.6 ms in others, stable within each; see this study's README). So a
claim against PyTorch is made on the median of several processes, each timing the compiled network and PyTorch
eager in alternating rounds (``tlp tune``'s own timing), with the spread reported.

Each run directory is re-timed by re-running ``tlp tune`` with the budget it already spent: nothing is tuned, the
database is compiled and timed again, and its report is rewritten.

    .venv/bin/python benchmarks/whole_networks/retime_networks.py runs/bench/bnfold-znver2/fold/resnet18/{tlp,xgb}-seed1 \
        --processes 3 --out retime_resnet18_znver2.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import TLP_CLI, stamp, write_json  # pylint: disable=wrong-import-position


def _retune_command(run_dir: Path, report: dict, source: str | None = None) -> list[str]:
    """``tlp tune`` with the configuration, target and budget the run already has (its ``report``), so it only
    compiles and times (the search settings as ``--set KEY=VALUE``, TuneConfig's field names). ``source``: the file
    a PyTorch/ONNX run tuned (its report names only the network)."""
    config = report["config"]
    name = report["source"].removesuffix(f"-top{config['top_tasks']}") if config.get("top_tasks") else report["source"]
    command = [*TLP_CLI, "tune", source or name, "--cost-model", config["cost_model"],
               "--trials", str(report["trials"]), "--seed", str(config["seed"]), "--work-dir", str(run_dir), "--json",
               "--target", json.dumps(report["target"])]
    if config.get("top_tasks"):
        command += ["--top-tasks", str(config["top_tasks"])]
    for key in ("trials_per_iter", "population", "online_steps"):
        command += ["--set", f"{key}={config[key]}"]
    if config.get("model_path"):
        command += ["--model", config["model_path"]]
    return command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", type=Path, help="tlp tune work directories of networks")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per run directory")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--source", help="the file (PyTorch .py or .onnx) all run directories tuned, when not a zoo "
                                         "network")
    args = parser.parse_args()

    timings: dict[Path, list[dict]] = {run_dir: [] for run_dir in args.run_dirs}
    # Read before re-timing: each re-timing rewrites report.json, and the rows describe the run as it was tuned.
    reports = {run_dir: json.loads((run_dir / "report.json").read_text()) for run_dir in args.run_dirs}
    for round_index in range(args.processes):
        for run_dir in args.run_dirs:  # alternated: drift of the machine spreads over every network
            done = subprocess.run(_retune_command(run_dir, reports[run_dir], args.source), capture_output=True,
                                  text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{run_dir}: tlp tune failed while re-timing:\n{done.stderr[-2000:]}")
            report = json.loads(done.stdout)
            timing = {"end_to_end_ms": report["end_to_end_s"] * 1e3, "torch_eager_ms": report["torch_eager_s"] * 1e3,
                      "tasks_latency_ms": report["tasks_latency_s"] * 1e3,
                      "numerics_ok": (report.get("numerics") or {}).get("ok")}
            timings[run_dir].append(timing)
            print(f"round {round_index + 1} {run_dir}: {timing['end_to_end_ms']:.2f} ms vs PyTorch "
                  f"{timing['torch_eager_ms']:.2f} ms (tasks {timing['tasks_latency_ms']:.2f} ms)", flush=True)

    rows = []
    for run_dir, runs in timings.items():
        report = reports[run_dir]
        ratios = [r["torch_eager_ms"] / r["end_to_end_ms"] for r in runs]
        rows.append({"run_dir": str(run_dir), "network": report["source"], "model": report["config"]["cost_model"],
                     "online_steps": report["config"]["online_steps"], "seed": report["config"]["seed"],
                     "trials": report["trials"], "processes": runs,
                     "median_end_to_end_ms": statistics.median(r["end_to_end_ms"] for r in runs),
                     "median_torch_eager_ms": statistics.median(r["torch_eager_ms"] for r in runs),
                     "median_speedup_vs_torch": statistics.median(ratios),
                     "speedup_range": [min(ratios), max(ratios)],
                     "numerics_ok": all(r["numerics_ok"] for r in runs)})
    stored = json.loads(args.out.read_text()) if args.out.exists() else {"rows": []}
    keys = {row["run_dir"] for row in rows}
    kept = [row for row in stored["rows"] if row["run_dir"] not in keys]
    write_json(args.out, {**stamp(), "rows": kept + rows})
    for row in rows:
        low, high = row["speedup_range"]
        print(f"{row['run_dir']}: median {row['median_end_to_end_ms']:.2f} ms vs PyTorch "
              f"{row['median_torch_eager_ms']:.2f} ms -> {row['median_speedup_vs_torch']:.2f}x "
              f"(processes: {low:.2f}-{high:.2f}x)")


if __name__ == "__main__":
    main()
