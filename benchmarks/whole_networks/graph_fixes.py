"""What each graph-level fix in the compile path is worth, on BERT-tiny (issue 11, part 1).

1. Fast math: GELU's and softmax's kernels with exact vs fast math (TVM default schedules, one kernel each).
2. Weights bound as constants vs passed at run time: the whole network compiled with the same tuned database.
3. TVM's thread pool: the bound network run in a fresh process with TVM's default thread count vs the target's.

    .venv/bin/python benchmarks/whole_networks/graph_fixes.py --work-dir runs/bench/networks/bert_tiny/tlp-seed1
        (a tuning work dir of bert_tiny, e.g. from networks_vs_pytorch.py)

Every timing is the median of alternating rounds; results go to ``results/graph_fixes.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tlp._tvm import ms, tvm, use_runtime_threads
from tlp.platform import host_target

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir, stamp, write_json  # pylint: disable=wrong-import-position

RESULTS = results_dir(__file__)


def _kernel_ms(func: "tvm.tirx.PrimFunc", target: "tvm.target.Target") -> float:
    library = tvm.compile(tvm.IRModule({"main": func}), target=target)
    arguments = [tvm.runtime.tensor(np.random.default_rng(0).standard_normal([int(d) for d in a.shape])
                                    .astype(a.dtype)) for a in ms.arg_info.ArgInfo.from_prim_func(func)]
    evaluator = library.mod.time_evaluator("main", tvm.cpu(), number=20, repeat=5)
    return float(np.median(evaluator(*arguments).results)) * 1e3


def kernels(target_json: dict) -> dict:
    """GELU on BERT-tiny's 128x512 and softmax on its 2x128x128 attention, exact vs fast, default schedules."""
    from tvm import te, topi  # pylint: disable=import-outside-toplevel

    from tlp.workloads.graph_passes import fast_gelu  # pylint: disable=import-outside-toplevel

    target = tvm.target.Target(target_json)
    x = te.placeholder((1, 128, 512), name="x")
    exact_gelu = x * (0.5 + topi.erf(x * (0.5 ** 0.5)) * 0.5)
    s = te.placeholder((1, 2, 128, 128), name="s")
    pairs = {"gelu 128x512": ([x, exact_gelu], [x, fast_gelu(x)]),
             "softmax 2x128x128": ([s, topi.nn.softmax(s, -1)], [s, topi.nn.fast_softmax(s, -1)])}
    out = {}
    for name, (exact, fast) in pairs.items():
        rounds = [(_kernel_ms(te.create_prim_func(exact), target), _kernel_ms(te.create_prim_func(fast), target))
                  for _ in range(3)]
        out[name] = {"exact_ms": float(np.median([r[0] for r in rounds])),
                     "fast_ms": float(np.median([r[1] for r in rounds]))}
    return out


def _network(work_dir: str, target_json: dict, bound: bool) -> tuple:
    """BERT-tiny compiled with ``work_dir``'s database; weights bound (as ``tlp tune`` does) or run-time inputs."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from tlp.workloads.graph_passes import bind_weights  # pylint: disable=import-outside-toplevel
    from tlp.workloads.networks import NETWORKS  # pylint: disable=import-outside-toplevel
    from tlp.workloads.extract import import_torch  # pylint: disable=import-outside-toplevel
    from tlp.workloads.graph_passes import fast_math  # pylint: disable=import-outside-toplevel

    network = NETWORKS["bert_tiny"]
    example_inputs = network.example_inputs()
    mod, params = relax.frontend.detach_params(import_torch(network.build(), example_inputs).mod)
    params = [p.numpy() for p in params.get("main", [])]
    inputs = [t.detach().numpy() for t in example_inputs]
    mod, _ = fast_math(mod)
    arguments = inputs + params
    if bound:
        mod, arguments = bind_weights(mod, params, len(inputs)), inputs
    database = ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural")
    executable = ms.relax_integration.compile_relax(database, mod, tvm.target.Target(target_json), params=None)
    machine = relax.VirtualMachine(executable, tvm.cpu())
    return machine, [tvm.runtime.tensor(a, tvm.cpu()) for a in arguments]


def _end_to_end_ms(machine: object, arguments: list) -> float:
    evaluator = machine.time_evaluator("main", tvm.cpu(), number=1, repeat=10, min_repeat_ms=100)
    return float(np.median(evaluator(*arguments).results)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", required=True, help="a bert_tiny tuning work dir (its JSONDatabase)")
    parser.add_argument("--out", default=str(RESULTS / "graph_fixes.json"))
    parser.add_argument("--threads-probe", choices=["default", "target"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    target = host_target()
    cores = int(target.get("num-cores", 1))
    if args.threads_probe:  # a fresh process: TVM's thread pool starts once, with the count set before it starts
        threads = use_runtime_threads(cores if args.threads_probe == "target" else 0)
        machine, arguments = _network(args.work_dir, target, bound=True)
        print(json.dumps({"threads": threads, "ms": _end_to_end_ms(machine, arguments)}))
        return
    use_runtime_threads(cores)
    result: dict = {**stamp(), "target": target,
                    "work_dir": args.work_dir, "kernels": kernels(target)}
    unbound, bound = _network(args.work_dir, target, False), _network(args.work_dir, target, True)
    rounds = [(_end_to_end_ms(*unbound), _end_to_end_ms(*bound)) for _ in range(3)]
    result["weights"] = {"runtime_inputs_ms": float(np.median([r[0] for r in rounds])),
                         "bound_ms": float(np.median([r[1] for r in rounds]))}
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    probes = {mode: [] for mode in ("default", "target")}
    for _ in range(3):
        for mode in probes:
            run = subprocess.run([sys.executable, __file__, "--work-dir", args.work_dir, "--threads-probe", mode],
                                 capture_output=True, text=True, env=env, check=True)
            probes[mode].append(json.loads(run.stdout.strip().splitlines()[-1]))
    result["thread_pool"] = {mode: {"threads": runs[0]["threads"], "ms": float(np.median([r["ms"] for r in runs]))}
                             for mode, runs in probes.items()}
    write_json(args.out, result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
