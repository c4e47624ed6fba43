"""What ``tlp tune`` reports: the compiled result, end-to-end latency vs PyTorch eager, and the tuning curve."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from tlp._tvm import ms, tvm, use_runtime_threads
from tlp.tune.compile_check import compile_error, compile_network
from tlp.tune.numerics import compare_outputs, format_numerics, torch_outputs, vm_outputs
from tlp.search.database.shared_schedules import compile_database
from tlp.tune.sources import Tunable
from tlp.tune.stages import Stages, format_stages
from tlp.search.task_scheduler.task_profile import format_dominant_tasks


def _median_seconds(run: Any, repeats: int = 20, min_total_s: float = 1.0) -> float:
    """Median wall time of ``run()`` after one warm-up, over ``repeats`` calls or ``min_total_s`` seconds."""
    run()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - started < min_total_s:
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
        if len(times) >= 10 * repeats:
            break
    return float(np.median(times))


def torch_eager_latency(tunable: Tunable, threads: int, repeats: int = 20, min_total_s: float = 1.0,
                        module: Any = None) -> float | None:
    """PyTorch eager (or ``module``, e.g. its torch.compile) on the same number of CPU threads (networks defined in
    PyTorch only)."""
    if tunable.torch_module is None:
        return None
    import torch  # pylint: disable=import-outside-toplevel

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        module = tunable.torch_module.eval() if module is None else module
        with torch.no_grad():
            return _median_seconds(lambda: module(*tunable.torch_inputs), repeats, min_total_s)
    finally:
        torch.set_num_threads(previous)


def torch_compiled(tunable: Tunable, threads: int) -> tuple[Any, float, str | None]:
    """The network under ``torch.compile`` (Inductor, PyTorch's own compiler for CPUs), compiled and checked against
    eager: ``(callable, compile seconds, None)``, or ``(None, seconds, why not)`` where it cannot compile or its
    outputs differ."""
    import torch  # pylint: disable=import-outside-toplevel

    from tlp import one_line  # pylint: disable=import-outside-toplevel

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    started = time.perf_counter()
    try:
        module = tunable.torch_module.eval()
        compiled = torch.compile(module)
        outputs = torch_outputs(compiled, tunable.torch_inputs)  # the first call compiles
        reference = torch_outputs(module, tunable.torch_inputs)
        names = tunable.output_names or [f"output{i}" for i in range(len(reference))]
        check = compare_outputs(names, outputs, reference)
        if not check["ok"]:
            return None, time.perf_counter() - started, "its outputs differ from eager's"
        return compiled, time.perf_counter() - started, None
    except Exception as error:  # pylint: disable=broad-except  # Inductor raises many error types
        return None, time.perf_counter() - started, one_line(error)[:160]
    finally:
        torch.set_num_threads(previous)


SETTLE_S = 0.3  # pause before timing one side: the other's spinning worker threads go idle


# Rounds whose medians differ more than this (slowest / fastest) mean the machine was busy while timing.
NOISY_ROUNDS = 1.25


def _alternating_latencies(machine: Any, device: Any, arguments: list[Any], tunable: Tunable, threads: int,
                           rounds: int = 5, inductor: Any = None) -> tuple[list[float], list[float], list[float]]:
    """Per-round median end-to-end seconds of the compiled network, of PyTorch eager (empty when the network
    has no PyTorch module) and of ``inductor`` (its torch.compile; empty without), timed in alternating rounds.

    Alternating spreads whatever else the machine is doing over both sides (timing one after the other once gave
    PyTorch 93 ms against 1.7 ms minutes earlier, while another job loaded the cores). Each side starts after a
    pause: the other runtime's worker threads spin for a while after their last kernel (PyTorch timed right after
    TVM's network took 2.4 ms instead of 1.4 ms). The rounds are returned so the report can show their spread.
    """
    evaluator = machine.time_evaluator("main", device, number=1, repeat=4, min_repeat_ms=50)
    compiled: list[float] = []
    eager: list[float] = []
    inductor_rounds: list[float] = []
    for _ in range(rounds):
        time.sleep(SETTLE_S)
        compiled.append(float(np.median(evaluator(*arguments).results)))
        time.sleep(SETTLE_S)
        latency = torch_eager_latency(tunable, threads, repeats=4, min_total_s=0.05)
        if latency is not None:
            eager.append(latency)
        if inductor is not None:
            time.sleep(SETTLE_S)
            inductor_rounds.append(torch_eager_latency(tunable, threads, 4, 0.05, module=inductor))
    return compiled, eager, inductor_rounds


def rounds_spread(rounds: list[float]) -> float:
    """Slowest round's median over the fastest's (1.0: no spread)."""
    return max(rounds) / min(rounds) if rounds else 1.0


def compile_and_time(tunable: Tunable, target_json: dict[str, Any], work_dir: Path, database: Any,
                     torch_compile: bool = False) -> dict[str, Any]:
    """Compile with the tuned database; for networks, also time the whole model and PyTorch eager (and, with
    ``torch_compile``, the network under torch.compile). ``stage_s``: the seconds of each of these stages."""
    stages = Stages()
    with stages.timed("compile"):
        result = _compile(tunable, target_json, work_dir, database)
    if not tunable.is_network:
        return {**result, "stage_s": stages.seconds}
    from tvm import relax  # pylint: disable=import-outside-toplevel

    executable = result.pop("executable")
    threads = int(target_json.get("num-cores", 1))
    runtime_threads = use_runtime_threads(threads)  # before the first kernel runs: see use_runtime_threads
    device = tvm.cpu()
    machine = relax.VirtualMachine(executable, device)
    arguments = [tvm.runtime.tensor(a, device) for a in tunable.inputs + tunable.params]
    numerics = None
    if tunable.torch_module is not None:
        with stages.timed("numerics"):
            compiled = vm_outputs(machine["main"](*arguments))
            reference = torch_outputs(tunable.torch_module, tunable.torch_inputs)
            names = tunable.output_names or [f"output{i}" for i in range(len(reference))]
            numerics = compare_outputs(names, compiled, reference)
    inductor = None
    if torch_compile and tunable.torch_module is not None:
        with stages.timed("torch_compile"):
            inductor, compile_s, why_not = torch_compiled(tunable, threads)
        result["torch_compile"] = {"compile_s": round(compile_s, 1), "skipped": why_not}
    with stages.timed("timing"):
        compiled_rounds, eager_rounds, inductor_rounds = _alternating_latencies(machine, device, arguments, tunable,
                                                                                threads, inductor=inductor)
    latency = float(np.median(compiled_rounds))
    eager = float(np.median(eager_rounds)) if eager_rounds else None
    result.update({"end_to_end_s": latency, "torch_eager_s": eager,
                   "speedup_vs_torch": (eager / latency) if eager else None, "threads": threads,
                   "end_to_end_rounds_s": compiled_rounds, "torch_eager_rounds_s": eager_rounds,
                   "tvm_threads": runtime_threads})
    if inductor_rounds:
        inductor_s = float(np.median(inductor_rounds))
        result["torch_compile"]["rounds_s"] = inductor_rounds
        result.update({"torch_compile_s": inductor_s, "speedup_vs_torch_compile": inductor_s / latency})
    if numerics is not None:
        result["numerics"] = numerics
    return {**result, "stage_s": stages.seconds}


def _compile(tunable: Tunable, target_json: dict[str, Any], work_dir: Path, database: Any) -> dict[str, Any]:
    """Kernels (operators) or the network (``executable``, also exported to ``WORK/compiled.so``)."""
    target = tvm.target.Target(target_json)
    if not tunable.is_network:
        kernels = work_dir / "kernels"
        kernels.mkdir(exist_ok=True)
        written = []
        for task in tunable.tasks:
            schedule = ms.tir_integration.compile_tir(database, task.mod, target)
            if schedule is None:
                continue  # neither a valid measured nor a predicted program for this task
            library = tvm.compile(schedule.mod, target=target)
            path = kernels / f"{task.name}.so"
            library.export_library(str(path))
            written.append(str(path))
        return {"compiled": written}
    shared = compile_database(database)
    try:
        executable = compile_network(tunable, target, shared)
    except Exception as error:  # pylint: disable=broad-except  # TVM raises many error types here
        raise compile_error(tunable, target, error, "compile with the tuned schedules",
                            f"the tuned database in {work_dir} is kept: re-run with --work-dir {work_dir} to reuse it "
                            "(measured trials count against --trials), or compile it yourself with "
                            f"ms.database.JSONDatabase(work_dir='{work_dir}')") from error
    path = work_dir / "compiled.so"
    executable.export_library(str(path))
    return {"compiled": [str(path)], "executable": executable, "shared_schedules": sorted(shared.shared)}


def history_entries(history_path: Path) -> list[tuple[dict[str, Any], float]]:
    """Each batch line of a ``history.jsonl`` with its wall seconds since the search began, over every run that
    resumed it (each run starts its clock at 0 again; lines cut by a kill are skipped)."""
    entries: list[tuple[dict[str, Any], float]] = []
    if not history_path.exists():
        return entries
    wall_offset = last_wall = 0.0
    last_run = None
    for line in history_path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill: the next run appends after it
        run = entry.get("run")
        if run is not None and last_run is not None:
            resumed = run != last_run
        else:  # histories written before 2026-11-30 have no run marks: the clock going back tells
            resumed = entry["wall_s"] < last_wall
        if resumed:
            wall_offset += last_wall  # a resumed run starts its clock at 0 again
        last_wall, last_run = entry["wall_s"], run
        entries.append((entry, wall_offset + entry["wall_s"]))
    return entries


def curve_points(history_path: Path, weights: list[int]) -> list[tuple[int, float, float]]:
    """(trials, wall seconds, Σ weight·best latency) after each batch once every task has a valid program."""
    return [(entry["trials"], wall, float(sum(w * b for w, b in zip(weights, entry["best_s"]))))
            for entry, wall in history_entries(history_path)
            if len(entry["best_s"]) == len(weights) and all(b for b in entry["best_s"])]


def plot_curve(history_path: Path, weights: list[int], out: Path, title: str) -> Path | None:
    points = curve_points(history_path, weights)
    if not points:
        return None
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    trials, _, latency = zip(*points)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.step(trials, np.array(latency) * 1e3, where="post")
    ax.set_xlabel("measured trials")
    ax.set_ylabel("best latency (ms, Σ weight × task)")
    ax.set_title(f"{title}: best latency vs trials")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _schedule_label(task: dict[str, Any]) -> str:
    """What the compiled program runs for a task (reports written before predicted schedules: measured)."""
    kind = task.get("schedule", "measured" if task.get("best_latency_s") else "default")
    label = {"measured": "measured", "predicted": "predicted (0 measurements)", "default": "TVM default"}[kind]
    return label if task.get("tuned", True) else f"{label}, not tuned (--top-tasks)"


def _format_predicted(report: dict[str, Any]) -> list[str]:
    """The zero-measurement schedules' line: how many, how long, and that nothing of them was measured."""
    predicted = report.get("predicted")
    if not predicted or not predicted["tasks"]:
        return []
    made = [t for t in predicted["tasks"] if t["scheduled"] and not t.get("reused")]
    reused = [t for t in predicted["tasks"] if t.get("reused")]
    failed = [t for t in predicted["tasks"] if not t["scheduled"]]
    timed = [t for t in made if t.get("timed_s")]
    how = (f"the fastest of TLP's {max(len(t['timed_s']) for t in timed)} best-ranked programs of an unmeasured "
           f"search, each timed once ({len(timed)} of the tasks; the others have one program)" if timed
           else "TLP's top-ranked program of an unmeasured search")
    from_library = sum(bool(t.get("library")) for t in made)
    if from_library:
        how += (f"; for {from_library} of them TLP's top-ranked of the schedule library's programs of a near "
                "workload, replayed on the task")
    lines = [f"\nzero-measurement schedules: {len(made)} task{'s' if len(made) != 1 else ''} in "
             f"{predicted['seconds']:.1f} s" + (f" ({len(reused)} reused)" if reused else "")
             + f", {how}, {predicted['what']} ({predicted['database']})"]
    for task in failed:
        lines.append(f"  {task['task']}: TVM default kept ({task['error']})")
    return lines


def format_report(report: dict[str, Any]) -> str:
    """The result table ``tlp tune`` prints."""
    searched = report.get("search_wall_s")
    over_runs = f", {searched:.0f} s of search over all runs" if searched and searched > report["wall_s"] else ""
    lines = [f"{report['source']}: {report['trials']} trials in the database ({report['wall_s']:.0f} s in this run"
             f"{over_runs}, cost model {report['config']['cost_model']}"
             + (f", preset {report['preset']}" if report.get("preset") else "") + ")"]
    library = report.get("transfer_library")
    if library:
        of = "this platform" if library.get("exact", True) else f"platform {library['platform']}, the nearest held"
        lines.append(f"schedule library: {library['dataset']} ({library['workloads']} workloads of {of}, "
                     f"read in {library['seconds']:.0f} s): {_places(report)}")
    lines.append("")
    width = max([len(t["name"]) for t in report["tasks"]] + [4])
    lines.append(f"{'task'.ljust(width)}  weight  trials  best (ms)   GFLOPS  schedule")
    for task in report["tasks"]:
        best = f"{task['best_latency_s'] * 1e3:9.4f}" if task["best_latency_s"] else "        -"
        gflops = f"{task['gflops']:8.1f}" if task["gflops"] else "       -"
        lines.append(f"{task['name'].ljust(width)}  {task['weight']:6d}  {task['trials']:6d}  {best}  {gflops}  "
                     f"{_schedule_label(task)}")
    shared = [f"{variant} (as {task['name']})" for task in report["tasks"] for variant in task.get("variants", ())]
    if shared:
        lines.append("with a task's schedule (same anchor block, another epilogue; weight counts them): "
                     + ", ".join(shared))
    lines.extend(_format_predicted(report))
    if "tasks_latency_s" in report:
        lines.append(f"\nΣ weight × task latency: {report['tasks_latency_s'] * 1e3:.3f} ms")
    lines.extend(format_dominant_tasks(report.get("dominant_tasks", [])))
    if "end_to_end_s" in report:
        lines.append(f"end to end (compiled, {report.get('tvm_threads', report['threads'])} threads): "
                     f"{report['end_to_end_s'] * 1e3:.3f} ms")
        if report.get("tvm_threads", report["threads"]) != report["threads"]:
            lines.append(f"  note: TVM's thread pool was already running on {report['tvm_threads']} threads in this "
                         f"process, not the target's {report['threads']}: set TVM_NUM_THREADS={report['threads']}")
        if report.get("torch_eager_s"):
            lines.append(f"PyTorch eager ({report['threads']} threads): {report['torch_eager_s'] * 1e3:.3f} ms "
                         f"-> {report['speedup_vs_torch']:.2f}x")
        inductor = report.get("torch_compile")
        if inductor and inductor.get("skipped"):
            lines.append(f"torch.compile: skipped ({inductor['skipped']})")
        elif report.get("torch_compile_s"):
            lines.append(f"torch.compile, Inductor ({report['threads']} threads, compiled in {inductor['compile_s']:.0f}"
                         f" s): {report['torch_compile_s'] * 1e3:.3f} ms -> {report['speedup_vs_torch_compile']:.2f}x")
        spread = max(rounds_spread(report.get("end_to_end_rounds_s", [])),
                     rounds_spread(report.get("torch_eager_rounds_s", [])),
                     rounds_spread((inductor or {}).get("rounds_s", [])))
        if spread > NOISY_ROUNDS:
            lines.append(f"  warning: the timing rounds differ by up to {(spread - 1) * 100:.0f} % (the machine was "
                         "busy?): run the same `tlp tune` command again to time it again (a spent budget only "
                         "compiles and times)")
    if report.get("numerics"):
        lines.extend(format_numerics(report["numerics"]))
    for note in report.get("import_notes", []):
        lines.append(f"import: {note}")
    head = report.get("cost_model_head")
    if head and head.get("platform"):
        lines.append(f"TLP head: {head['platform']}" + ("" if head["exact"] else
                     f" (nearest to {head['tuning_platform']}; `tlp adapt` makes this machine's own)"))
    if report.get("cost_model_time_s"):
        spent = report["cost_model_time_s"]
        scoring = spent["trace"] + spent["featurize"] + spent["network"]
        lines.append(f"TLP cost model: {report['candidates_scored']} candidates scored in {scoring:.1f} s "
                     f"(traces {spent['trace']:.1f} s, features {spent['featurize']:.1f} s, "
                     f"network {spent['network']:.1f} s)"
                     + (f"; online fine-tuning {spent['fine_tune']:.1f} s" if spent.get("fine_tune") else ""))
    if report.get("stages_s"):
        lines.extend(format_stages(report["stages_s"], report["wall_s"]))
    if report.get("curve_png"):
        lines.append(f"curve: {report['curve_png']}")
    lines.append(f"database: {report['work_dir']} (MetaSchedule JSONDatabase; re-run to continue)")
    return "\n".join(lines)


def _places(report: dict[str, Any]) -> str:
    """How many first-round places per task the library filled, in words."""
    places = (report.get("config") or {}).get("first_round_transferred", 1)
    # A task far from every stored workload keeps one place for the model's own pick (FirstRoundSearch).
    if places == 1:
        return "one first-round place per task"
    return f"{places} first-round places per task (one where it holds no near workload)"
