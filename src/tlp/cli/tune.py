"""``tlp tune SOURCE``: tune an operator, a zoo network, a TVMScript/TE/PyTorch ``.py`` or an ``.onnx`` file.

Search internals are :class:`tlp.tune.TuneConfig` fields, reached with ``--set KEY=VALUE``; the preset fills what
is not set, in the library (:func:`tlp.search.presets.resolve`), exactly as for ``tlp.tune.tune`` from Python."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from tlp.cli.common import add_renamed, add_settings, add_target_args, target_of
from tlp.search.presets import COST_MODELS, PRESETS

# Options that became settings (one release of grace): --trials-per-iter 8 is --set trials_per_iter=8.
RENAMED = {"--trials-per-task": "trials_per_task", "--trials-per-iter": "trials_per_iter",
           "--first-round-trials": "first_round_trials", "--first-round-transferred": "first_round_transferred",
           "--transfer-from": "transfer_from", "--transfer-exclude": "transfer_exclude_networks",
           "--task-scheduler": "task_scheduler", "--max-per-structure": "max_per_structure",
           "--population": "population", "--online-steps": "online_steps", "--online-lr": "online_lr",
           "--online-min-task-measurements": "online_min_task_measurements", "--run-timeout": "measure.run_timeout_s",
           "--no-fast-math": "fast_math=false", "--no-predicted-schedules": "predicted_schedules=false"}
# Settings with options of their own.
OWN_OPTIONS = ("trials", "cost_model", "model_path", "preset", "top_tasks", "seed", "dataset")


def tune_config(args: argparse.Namespace) -> Any:
    """The TuneConfig the options and ``--set`` pairs give (the preset is resolved by ``tune`` itself)."""
    # pylint: disable=import-outside-toplevel
    from tlp.settings import apply_settings, parse_pairs
    from tlp.tune import TuneConfig

    config = TuneConfig(trials=args.trials, cost_model=args.cost_model, model_path=args.model, preset=args.preset,
                        top_tasks=args.top_tasks, seed=args.seed, dataset=args.dataset)
    (config,) = apply_settings([config], parse_pairs(args.settings, "tune"), "tune", reserved=OWN_OPTIONS)
    return config


def cmd_tune(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.search.presets import resolve
    from tlp.tune import tune
    from tlp.tune.report import format_report

    target = target_of(args)
    config = resolve(tune_config(args), target)  # settings checked before anything is imported or built
    # MetaSchedule logs to stdout; stdout is for the report alone.
    with contextlib.redirect_stdout(sys.stderr):
        report = tune(args.source, target, args.work_dir, config)
    print(json.dumps(report, indent=1) if args.json else format_report(report))
    if report.get("dataset") and not args.json:
        added = report["dataset"]
        print(f"dataset {added['path']}: {added['imported']} new programs under {added['platform']} "
              f"({added['already_present']} already there)")
    if report.get("numerics") and not report["numerics"]["ok"]:
        failed = [o["name"] for o in report["numerics"]["outputs"] if not o["ok"]]
        print(f"tlp: error: {report['source']}: NUMERICS FAILED: the compiled model's {', '.join(failed) or 'outputs'} "
              "differ from PyTorch eager beyond tolerance (see the report)", file=sys.stderr)
        return 1
    return 0


def register(verbs: Any) -> None:
    parser = verbs.add_parser("tune", help="tune an operator, network, TVMScript/TE/PyTorch .py or .onnx file")
    parser.add_argument("source", help="zoo operator or network (see `tlp workloads list`), FILE.py[:NAME] "
                        "(TVMScript IRModule/PrimFunc, TE workload function, or PyTorch module + example_inputs), "
                        "or FILE.onnx")
    parser.add_argument("--cost-model", default="tlp", choices=COST_MODELS)
    parser.add_argument("--model", help="TLP checkpoint, or a packaged model: tlp-cpu, tlp-cpu-small; default: the "
                        "model `tlp adapt` made for this platform, else tlp-cpu")
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="the search settings not --set: tlp (default with the TLP cost model: small first "
                             "rounds, one place from the dataset's schedule library, batches of 8 spread over "
                             "structures, the headroom task rule, online fine-tuning) or metaschedule (MetaSchedule's "
                             "own search; default with the other cost models)")
    parser.add_argument("--trials", type=int, default=200, help="measured candidates in all (all tasks)")
    parser.add_argument("--top-tasks", type=int, metavar="N",
                        help="tune only the N heaviest tasks (weight x FLOPs); the rest get the TLP model's "
                             "zero-measurement schedules")
    parser.add_argument("--work-dir", help="tuning database and outputs (default runs/tune/SOURCE-MODEL); re-running "
                                           "continues from it")
    parser.add_argument("--dataset", help="append every measured candidate to this dataset, under this machine's "
                                          "platform")
    parser.add_argument("--seed", type=int, default=1)
    add_target_args(parser)
    add_settings(parser, "a tlp.tune.TuneConfig field, e.g. online_lr=1e-3, population=512, transfer_from=none, "
                         "fast_math=false, measure.run_timeout_s=20")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the traceback of an error, not only its line (as `tlp --debug`)")
    add_renamed(parser, RENAMED)
    parser.set_defaults(func=cmd_tune)
