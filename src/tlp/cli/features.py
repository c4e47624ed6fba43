"""`tlp features DATASET`: trace lengths, crop coverage and feature collisions of a dataset."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tlp.cli.common import DEFAULT_DATASET, platform_of


def cmd_features(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset, DatasetError
    from tlp.features.featurizer import FeatureConfig
    from tlp.features.report import feature_report, format_feature_report
    from tlp.features.tensors import load_programs

    dataset = Dataset(args.dataset)
    programs = load_programs(dataset, platform_of(dataset, args.platform))
    if programs.record_format != "metaschedule":
        raise DatasetError(f"tlp features reports on MetaSchedule traces; this platform holds {programs.record_format} "
                           "records")
    report = feature_report(programs, FeatureConfig(seq_len=args.seq_len, compact=args.compact_traces))
    print(json.dumps(report, indent=1) if args.json else format_feature_report(report))
    return 0


def register(verbs: Any) -> None:
    features = verbs.add_parser("features", help="trace lengths, crop coverage and feature collisions of a dataset")
    features.add_argument("dataset", nargs="?", default=DEFAULT_DATASET)
    features.add_argument("--platform", help="platform id (needed when the dataset has several)")
    features.add_argument("--seq-len", type=int, default=80, help="crop to report besides the paper's 25")
    features.add_argument("--compact-traces", action="store_true",
                          help="count rows as the compact form lays them out (bookkeeping left out; the shipped "
                               "model's form)")
    features.add_argument("--json", action="store_true")
    features.set_defaults(func=cmd_features)
