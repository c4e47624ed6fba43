"""Does a tuned kernel run at the same speed in every process? Time the best program of some tasks of tuned
networks in several fresh processes.

Why: TLP's ResNet-18 (folded, 800 trials, Zen 2) took 48-80 ms end to end across processes while the sum of its
kernels' measured latencies was 45 ms, and XGBoost's network stayed at 35-36 ms. Each process here compiles each
run's best program of each task (``compile_tir`` on the run's database), times it (10 runs x 3 repeats, median),
and reports per task whether the program has a block that, under a parallel loop, writes a region of a shared
buffer that does not depend on the parallel loop (every thread writes the same cache lines: a suspect for timings
that depend on how the threads line up in a process).

    .venv/bin/python benchmarks/kernel_process_variance.py resnet18 \
        runs/bench/bnfold-znver2/fold/resnet18/tlp-seed1 runs/bench/bnfold-znver2/fold/resnet18/xgb-seed1 \
        --tasks fused_conv2d1_add2_relu1,fused_conv2d6_add8_relu3 --processes 5 \
        --out benchmarks/results/kernel_process_variance_znver2.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any


def _key(node: Any) -> int:
    """Identity of a TIR variable or buffer (TVM objects hash by address; ``==`` builds an expression)."""
    return hash(node)


def _free_vars(expr: Any) -> set[int]:
    from tvm.tirx.analysis import undefined_vars  # pylint: disable=import-outside-toplevel

    return {_key(var) for var in undefined_vars(expr, [])}


def shared_writes_under_parallel(func: Any) -> list[str]:
    """Blocks that, under a parallel loop, write a region of a buffer allocated outside it (or a parameter) that
    does not depend on the parallel loop variable: every parallel iteration writes the same region."""
    from tvm import s_tir, tirx  # pylint: disable=import-outside-toplevel

    found: list[str] = []

    def visit(stmt: Any, parallel: frozenset, private: frozenset) -> None:
        if isinstance(stmt, tirx.SeqStmt):
            for item in stmt.seq:
                visit(item, parallel, private)
        elif isinstance(stmt, tirx.IfThenElse):
            visit(stmt.then_case, parallel, private)
            visit(stmt.else_case, parallel, private)
        elif isinstance(stmt, tirx.For):
            if stmt.kind == tirx.ForKind.PARALLEL:
                parallel = parallel | {_key(stmt.loop_var)}
            visit(stmt.body, parallel, private)
        elif isinstance(stmt, s_tir.SBlockRealize):
            block = stmt.block
            if parallel:
                private = private | {_key(buffer) for buffer in block.alloc_buffers}  # per parallel iteration
                bound = {_key(iv.var): _free_vars(value) for iv, value in zip(block.iter_vars, stmt.iter_values)}
                for region in block.writes:
                    if _key(region.source) in private:
                        continue
                    depends: set[int] = set()
                    for extent in region.region:
                        for var in _free_vars(extent.min) | _free_vars(extent.extent):
                            depends |= bound.get(var, {var})
                    if not depends & parallel:
                        found.append(block.name_hint)
                        break
            if block.init is not None:
                visit(block.init, parallel, private)
            visit(block.body, parallel, private)
        elif isinstance(getattr(stmt, "body", None), tirx.Stmt):
            visit(stmt.body, parallel, private)

    visit(func.body, frozenset(), frozenset())
    return found


def time_in_this_process(network: str, run_dirs: list[str], task_names: list[str]) -> list[dict]:
    """Compile and time each run's best program of each task here; one row per (run, task)."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    from tlp._tvm import ms, tvm, use_runtime_threads  # pylint: disable=import-outside-toplevel
    from tlp.platform import host_target  # pylint: disable=import-outside-toplevel
    from tlp.search.sources import resolve  # pylint: disable=import-outside-toplevel

    target_json = host_target()
    use_runtime_threads(int(target_json.get("num-cores", 1)))
    target = tvm.target.Target(target_json)
    tasks = {task.name: task for task in resolve(network, target_json).tasks}
    device = tvm.cpu()
    rows = []
    for run_dir in run_dirs:
        database = ms.database.JSONDatabase(work_dir=run_dir)
        for name in task_names:
            schedule = ms.tir_integration.compile_tir(database, tasks[name].mod, target)
            kernel = tvm.compile(schedule.mod, target=target).jit()
            arguments = [tvm.runtime.tensor(np.random.rand(*[int(d) for d in info.shape]).astype(info.dtype), device)
                         for info in ms.arg_info.ArgInfo.from_prim_func(schedule.mod["main"])]
            timer = kernel.time_evaluator("main", device, number=10, repeat=3)
            rows.append({"run_dir": run_dir, "task": name,
                         "ms": float(np.median(timer(*arguments).results)) * 1e3,
                         "shared_writes_under_parallel": shared_writes_under_parallel(schedule.mod["main"])})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("network")
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--tasks", required=True, help="comma-separated task names")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    task_names = args.tasks.split(",")
    if args.child:
        print(json.dumps(time_in_this_process(args.network, args.run_dirs, task_names)))
        return

    by_kernel: dict[tuple[str, str], dict] = {}
    for index in range(args.processes):
        done = subprocess.run([sys.executable, __file__, args.network, *args.run_dirs, "--tasks", args.tasks,
                               "--child"], capture_output=True, text=True, check=True)
        timed = json.loads(done.stdout.strip().splitlines()[-1])
        for row in timed:
            entry = by_kernel.setdefault((row["run_dir"], row["task"]), {
                "run_dir": row["run_dir"], "task": row["task"], "ms_per_process": [],
                "shared_writes_under_parallel": row["shared_writes_under_parallel"]})
            entry["ms_per_process"].append(row["ms"])
        print(f"process {index + 1}: " + " ".join(f"{Path(r['run_dir']).name}/{r['task']}={r['ms']:.2f}"
                                                   for r in timed),
              flush=True)
    rows = list(by_kernel.values())
    for row in rows:
        times = row["ms_per_process"]
        row.update(median_ms=statistics.median(times), min_ms=min(times), max_ms=max(times))
        print(f"{Path(row['run_dir']).name:16s} {row['task']:34s} {row['min_ms']:6.2f}-{row['max_ms']:6.2f} ms "
              f"(median {row['median_ms']:.2f}) shared writes under parallel: "
              f"{','.join(row['shared_writes_under_parallel']) or 'none'}")
    if args.out:
        from tlp.platform import host_fingerprint  # pylint: disable=import-outside-toplevel

        args.out.write_text(json.dumps({"machine": host_fingerprint(), "date": datetime.date.today().isoformat(),
                                        "processes": args.processes, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
