"""``tlp collect``: measure programs into a dataset (resumable, ``kill -9`` safe), or re-measure stored ones."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from tlp.cli.common import DEFAULT_DATASET, add_renamed, add_settings, add_target_args, target_of

RENAMED = {"--random-fraction": "random_fraction", "--batch-size": "batch_size", "--repeat": "repeat",
           "--min-repeat-ms": "min_repeat_ms", "--no-cache-flush": "cache_flush=false",
           "--run-timeout": "run_timeout_s", "--fraction": "fraction", "--held-out-fraction": "held_out_fraction",
           "--load-threshold": "load_threshold"}
OWN_OPTIONS = ("trials_per_task", "seed", "max_batches", "rpc")


@dataclass
class RemeasureSettings:
    """``--set`` keys of a re-measurement (``--remeasure-*``)."""

    fraction: float = 1.0  # share of the source platform's tasks re-measured (whole tasks)
    held_out_fraction: float = 1.0  # share of the held-out networks' tasks, measured first
    load_threshold: float = 0.10  # --remeasure-loaded: records taken while other processes used more CPU than this

    def __post_init__(self) -> None:
        from tlp.settings import check_ranges  # pylint: disable=import-outside-toplevel

        check_ranges(self, "collect settings", {"fraction": (0, 1), "held_out_fraction": (0, 1),
                                                "load_threshold": (0, 1)})


def cmd_collect(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.collect import CollectPlan, collect, remeasure
    from tlp.dataset.measure import MeasureConfig, RPCSettings
    from tlp.dataset.store import Dataset
    from tlp.platform import Platform
    from tlp.settings import apply_settings, parse_pairs
    from tlp.workloads import held_out_networks, load_tasks

    plan = CollectPlan(trials_per_task=args.trials_per_task, seed=args.seed, max_batches=args.max_batches)
    config, again = MeasureConfig(), RemeasureSettings()
    plan, config, again = apply_settings([plan, config, again], parse_pairs(args.settings, "collect"), "collect",
                                         reserved=OWN_OPTIONS)
    dataset = Dataset(args.dataset)
    target = target_of(args)
    if args.rpc_tracker:
        config.rpc = RPCSettings.parse(args.rpc_tracker, args.rpc_key)
        platform = Platform.remote(target, args.rpc_key, args.hardware)
    else:
        platform = Platform.host(target)
    if args.remeasure_from or args.remeasure_loaded or args.remeasure_failed:
        source = dataset.store(args.remeasure_from or platform.id)
        summary = remeasure(dataset, source, platform, config,
                            only_loaded_above=again.load_threshold if args.remeasure_loaded else None,
                            retry_failed=args.remeasure_failed, batch_size=plan.batch_size,
                            progress=not args.quiet, max_batches=plan.max_batches, fraction=again.fraction,
                            first_networks=held_out_networks(), first_fraction=again.held_out_fraction)
    else:
        if not args.workloads:
            raise SystemExit("tlp collect: --workloads is required (see `tlp workloads list`)")
        tasks = load_tasks(args.workloads.split(","), target)
        summary = collect(dataset, tasks, platform, plan, config, progress=not args.quiet)
    print(json.dumps({"platform": platform.id, **summary.to_json()}, indent=1))
    return 0


def register(verbs: Any) -> None:
    parser = verbs.add_parser("collect", help="measure programs into a dataset (resumable)")
    parser.add_argument("--workloads", help="comma-separated workload names or groups (ops, networks, train, test, all)")
    parser.add_argument("--dataset", default=DEFAULT_DATASET, help=f"dataset folder (default {DEFAULT_DATASET})")
    add_target_args(parser)
    parser.add_argument("--trials-per-task", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-batches", type=int, help="stop after this many batches")
    parser.add_argument("--rpc-tracker", help="HOST:PORT of a TVM RPC tracker: run on its devices")
    parser.add_argument("--rpc-key", default="tlp", help="device key registered with the tracker")
    parser.add_argument("--hardware", help="description of the RPC devices' hardware (part of the platform id)")
    parser.add_argument("--remeasure-from", metavar="PLATFORM_ID",
                        help="measure the programs another platform holds, here (whole tasks, held-out networks first)")
    parser.add_argument("--remeasure-loaded", action="store_true",
                        help="re-time this platform's records taken while the CPU was busy")
    parser.add_argument("--remeasure-failed", action="store_true",
                        help="retry this platform's failed programs (after fixing the set-up)")
    add_settings(parser, "tlp.dataset.collect.CollectPlan, tlp.dataset.measure.MeasureConfig or RemeasureSettings "
                         "fields, e.g. random_fraction=1.0, batch_size=16, repeat=5, run_timeout_s=20, fraction=0.1")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_renamed(parser, RENAMED)
    parser.set_defaults(func=cmd_collect)
