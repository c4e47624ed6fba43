"""How close is the TLP model's zero-measurement schedule to measured tuning? (issue 11, part 2)

Per task (the heaviest ``--tasks-per-network`` tasks of each network, weight × FLOPs, as ``tlp tune --top-tasks``
ranks them, plus ``dense_512x512x512``), three programs are timed with the project's ``Measurer`` (the same
builder, runner and cache flushing the search measures with):

- **default**: TVM's unscheduled default (what a task without a record compiled with before);
- **predicted**: the TLP model's top-ranked program of a short search that measures nothing
  (:func:`tlp.search.database.predicted.predict_schedule`, ``tlp tune``'s default settings);
- **tuned**: the best program of a real tuning run of ``--trials-per-task`` measured trials per task (TLP cost
  model), re-measured here next to the other two.

The three are measured together in ``--rounds`` rounds and compared as medians (the machine is shared: each round
puts other jobs' load on all three alike). The searches' own best latencies are not used: a minimum over many noisy
trials is biased low.

End to end: ``--e2e-network`` tuned with ``--top-tasks 2`` (``tlp tune``'s code path, ``--trials-per-task`` × 2
trials), then compiled and timed with and without predicted schedules for its other tasks, alternating
(``--e2e-rounds`` each), with the numerics check vs PyTorch of each compilation.

    .venv/bin/python benchmarks/zero_measurement/zero_measurement.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from tlp._tvm import ms, tvm
from tlp.dataset.measure import MeasureConfig, Measurer
from tlp.dataset.store import mean_latency
from tlp.models import model_path
from tlp.platform import host_target
from tlp.search.cost_model import TLPCostModel
from tlp.search.database.predicted import PredictionConfig, predict_schedule
from tlp.tune import TuneConfig, tune
from tlp.tune.sources import Tunable, resolve

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir, stamp, write_json  # pylint: disable=wrong-import-position

NETWORKS = ("resnet18", "mobilenet_v2", "bert_tiny")
OPERATORS = ("dense_512x512x512",)


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return float(statistics.geometric_mean(values)) if values else None


def _tuned_schedules(name: str, tunable: Tunable, target: dict[str, Any], work_root: Path, trials: int
                     ) -> tuple[Any, float]:
    """A real tuning run of ``trials`` measured trials per task (TLP); its database and wall time."""
    work_dir = work_root / f"tuned-{name}"
    config = TuneConfig(trials=trials * len(tunable.tasks), trials_per_task=trials, population=512,
                        compile=False, predicted_schedules=False)
    started = time.monotonic()
    tune(tunable, target, work_dir, config)
    return ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural"), time.monotonic() - started


def _model(target: dict[str, Any]) -> TLPCostModel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the platform-mismatch warning: the shipped model is what users get
        return TLPCostModel(target=target)


def model_identity(target: dict[str, Any]) -> dict[str, Any]:
    """Which model file and head ranked the candidates (the shipped model changes between runs)."""
    model = _model(target)
    path = Path(model_path(None, model.platform.id))
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16],
            "head": model.head_platform, "platform": model.platform.id}


def kernels(args: argparse.Namespace, target: dict[str, Any], work_root: Path) -> list[dict[str, Any]]:
    tvm_target = tvm.target.Target(target)
    model = _model(target)
    rows: list[dict[str, Any]] = []
    for source in list(args.networks) + list(args.operators):
        tunable = resolve(source, target)
        if tunable.is_network:
            tunable = Tunable(source, tunable.top_tasks(args.tasks_per_network).tasks)
        database, tuning_s = _tuned_schedules(source, tunable, target, work_root, args.trials_per_task)
        programs = []
        for task in tunable.tasks:
            prediction, record = predict_schedule(task, target, model, PredictionConfig())
            predicted = None
            if record is not None:
                schedule = tvm.s_tir.Schedule(task.mod)
                record.trace.apply_to_schedule(schedule, remove_postproc=False)
                predicted = schedule.mod
            tuned = ms.tir_integration.compile_tir(database, task.mod, tvm_target)
            rows.append({"source": source, "task": task.name, "weight": int(task.weight), "flops": task.flops,
                         "prediction_s": prediction.seconds, "prediction_rounds": prediction.rounds,
                         "prediction_error": prediction.error, "tuning_wall_s_all_tasks": round(tuning_s, 1)})
            programs.append({"default": task.mod, "predicted": predicted,
                             "tuned": tuned.mod if tuned is not None else None})
        timings = _measure_rounds(target, programs, args.rounds)
        for row, timing in zip(rows[-len(programs):], timings):
            row.update(timing)
            print(json.dumps(row), flush=True)
    return rows


def _measure_rounds(target: dict[str, Any], programs: list[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """Median latency (over rounds) of each kind of program of each task; kinds measured together per round."""
    measurer = Measurer(target, MeasureConfig(repeat=3, min_repeat_ms=20))
    kinds = ("default", "predicted", "tuned")
    batch = [(i, kind) for i, program in enumerate(programs) for kind in kinds if program[kind] is not None]
    samples: dict[tuple[int, str], list[float]] = {key: [] for key in batch}
    loads = []
    for _ in range(rounds):
        mods = [programs[i][kind] for i, kind in batch]
        # As the search measures candidates: the builder drops the weight-layout preprocessing block (a network
        # does that once, at compile time), and the arguments follow the rewritten layout.
        infos = [ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True) for mod in mods]
        results, stats = measurer.measure(mods, infos)
        loads.append(stats.foreign_load)
        for key, result in zip(batch, results):
            latency = mean_latency(result.run_secs, result.error) if result.run_secs else None
            if latency is not None:
                samples[key].append(latency)
    out = []
    for i in range(len(programs)):
        entry: dict[str, Any] = {}
        for kind in kinds:
            values = samples.get((i, kind), [])
            entry[f"{kind}_s"] = statistics.median(values) if values else None
            entry[f"{kind}_samples"] = len(values)
        default, predicted, tuned = entry["default_s"], entry["predicted_s"], entry["tuned_s"]
        entry["predicted_speedup_vs_default"] = default / predicted if default and predicted else None
        entry["tuned_speedup_vs_default"] = default / tuned if default and tuned else None
        # "How close": the predicted program's speed as a share of the tuned one's (1.0 = as fast as tuning).
        entry["predicted_share_of_tuned"] = tuned / predicted if tuned and predicted else None
        entry["foreign_load_median"] = statistics.median([x for x in loads if x is not None] or [0.0])
        out.append(entry)
    return out


def end_to_end(args: argparse.Namespace, target: dict[str, Any], work_root: Path) -> dict[str, Any]:
    """``tlp tune NETWORK --top-tasks 2``, compiled with and without predicted schedules for the rest."""
    network = resolve(args.e2e_network, target).top_tasks(2)
    work_dir = work_root / f"e2e-{network.name}"
    runs: dict[str, list[dict[str, Any]]] = {"with_predicted": [], "without_predicted": []}
    for round_index in range(args.e2e_rounds):
        for label, predicted in (("with_predicted", True), ("without_predicted", False)):
            # The first call tunes (2 tasks × trials); later ones find the budget spent and only compile and time.
            config = TuneConfig(trials=2 * args.trials_per_task, trials_per_task=args.trials_per_task, population=512,
                                predicted_schedules=predicted)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                report = tune(network, target, work_dir, config)
            entry = {"round": round_index, "end_to_end_s": report["end_to_end_s"],
                     "torch_eager_s": report["torch_eager_s"], "numerics_ok": report["numerics"]["ok"],
                     "max_rel_err": max(o["max_rel_err"] for o in report["numerics"]["outputs"]),
                     "schedules": {kind: sum(t["schedule"] == kind for t in report["tasks"])
                                   for kind in ("measured", "predicted", "default")}}
            if predicted:
                entry["prediction_s"] = report["predicted"]["seconds"]
            runs[label].append(entry)
            print(json.dumps({label: entry}), flush=True)
    summary = {label: {"end_to_end_s_median": statistics.median(e["end_to_end_s"] for e in entries),
                       "torch_eager_s_median": statistics.median(e["torch_eager_s"] for e in entries),
                       "numerics_ok": all(e["numerics_ok"] for e in entries), "schedules": entries[0]["schedules"]}
               for label, entries in runs.items()}
    summary["with_predicted"]["prediction_s"] = runs["with_predicted"][0]["prediction_s"]
    summary["speedup_from_predicted"] = (summary["without_predicted"]["end_to_end_s_median"]
                                         / summary["with_predicted"]["end_to_end_s_median"])
    return {"network": args.e2e_network, "top_tasks": 2, "trials": 2 * args.trials_per_task, "runs": runs,
            "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--networks", nargs="*", default=list(NETWORKS))
    parser.add_argument("--operators", nargs="*", default=list(OPERATORS))
    parser.add_argument("--tasks-per-network", type=int, default=4)
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="measurement rounds of each task's three programs")
    parser.add_argument("--e2e-network", default="bert_tiny")
    parser.add_argument("--e2e-rounds", type=int, default=2)
    parser.add_argument("--work-dir", default="runs/bench/zero_measurement")
    parser.add_argument("--out", default=str(results_dir(__file__) / "zero_measurement.json"))
    args = parser.parse_args()

    target = host_target()
    work_root = Path(args.work_dir)
    started = time.monotonic()
    model = model_identity(target)
    rows = kernels(args, target, work_root)
    e2e = end_to_end(args, target, work_root) if args.e2e_network else None
    summary = {
        "tasks": len(rows),
        "geomean_predicted_speedup_vs_default": _geomean([r["predicted_speedup_vs_default"] for r in rows]),
        "geomean_tuned_speedup_vs_default": _geomean([r["tuned_speedup_vs_default"] for r in rows]),
        "geomean_predicted_share_of_tuned": _geomean([r["predicted_share_of_tuned"] for r in rows]),
        "predicted_slower_than_default": [r["task"] for r in rows if (r["predicted_speedup_vs_default"] or 1) < 1],
        "median_prediction_s": statistics.median(r["prediction_s"] for r in rows),
    }
    result = {**stamp(), "target": target,
              "shared_machine": "other jobs ran on the same 2 cores throughout; medians of alternating rounds",
              "settings": {k: v for k, v in vars(args).items() if k not in ("out", "work_dir")},
              "model": model, "model_after": model_identity(target), "prediction_config": PredictionConfig().__dict__, "wall_s": round(time.monotonic() - started, 1),
              "summary": summary, "tasks": rows, "end_to_end": e2e}
    write_json(args.out, result)
    print(json.dumps({"summary": summary, "end_to_end": e2e and e2e["summary"]}, indent=1))


if __name__ == "__main__":
    main()
