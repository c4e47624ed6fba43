"""`tlp adapt`: a head for this machine from a small sample of the dataset's programs measured here."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from dataclasses import dataclass
from typing import Any

from tlp import TLPError
from tlp.cli.common import DEFAULT_DATASET, add_renamed, add_settings, add_target_args, target_of


RENAMED = {"--fraction": "fraction", "--held-out-fraction": "held_out_fraction", "--head-soup": "head_soup",
           "--run-timeout": "run_timeout_s"}


@dataclass
class AdaptSettings:
    """``tlp adapt --set`` keys."""

    fraction: float  # share of the training tasks' programs measured here
    held_out_fraction: float  # share of the held-out networks' programs measured here, for the score
    head_soup: int | None = None  # heads trained with K seeds, weights averaged (None: 4 with --freeze-backbone)
    run_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        from tlp.settings import check_ranges  # pylint: disable=import-outside-toplevel

        check_ranges(self, "adapt settings", {"fraction": (0, 1), "held_out_fraction": (0, 1), "head_soup": (1, None),
                                              "run_timeout_s": (1e-3, None)})


def cmd_adapt(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.measure import MeasureConfig
    from tlp.dataset.store import Dataset, DatasetError
    from tlp.model.adapt import DEFAULT_HELD_OUT_FRACTION, DEFAULT_TRAIN_FRACTION, adapt, format_adapt_report
    from tlp.model.estimator import TLPModel
    from tlp.models import adapted_model_path, model_path
    from tlp.platform import Platform
    from tlp.settings import apply_settings, parse_pairs

    pairs = parse_pairs(args.settings, "adapt")
    settings = AdaptSettings(DEFAULT_TRAIN_FRACTION, DEFAULT_HELD_OUT_FRACTION)
    (settings,) = apply_settings([settings], pairs, "adapt")  # checked before anything is read
    if not Path(args.dataset, "tasks.json").is_file():
        raise DatasetError(f"{args.dataset}: no dataset here to take programs from (pass --dataset, e.g. the "
                           f"datasets/tlp-cpu folder of a TLP checkout)")
    dataset = Dataset(args.dataset)
    fraction, held_out_fraction = settings.fraction, settings.held_out_fraction
    if args.platform:
        # Another machine's stored programs: this one cannot measure for it, so the head learns from what is stored.
        if args.target or "fraction" in pairs or "held_out_fraction" in pairs:
            raise TLPError("tlp adapt --platform trains on the programs the dataset already holds for that "
                           "platform: --target, fraction and held_out_fraction do not apply")
        if args.platform not in dataset.platform_ids():
            raise DatasetError(f"{args.dataset}: holds no platform {args.platform} (it holds "
                               f"{', '.join(dataset.platform_ids())})")
        platform = dataset.store(args.platform).platform
        fraction = held_out_fraction = 0.0
    else:
        platform = Platform.host(target_of(args))
    base = TLPModel.load(model_path(args.model))  # the packaged model, never a previous adaptation
    if platform.id in base.platforms and not args.force:
        print(f"the model already has a head for {platform.id}; nothing to do (--force retrains it)")
        return 0
    out = Path(args.out) if args.out else adapted_model_path(platform.id)
    report = adapt(dataset, base, platform, out, fraction, held_out_fraction,
                   freeze_backbone=args.freeze_backbone, source=args.source,
                   measure_config=MeasureConfig(run_timeout_s=settings.run_timeout_s), progress=not args.quiet,
                   held_out=args.held_out.split(",") if args.held_out else None, head_soup=settings.head_soup)
    print(json.dumps(report.to_json(), indent=1) if args.json else format_adapt_report(report))
    return 0


def register(verbs: Any) -> None:
    parser = verbs.add_parser("adapt", help="a cost model for this machine: measure a sample of the dataset's "
                                                "programs here and train this platform's head (minutes)")
    parser.add_argument("--dataset", default=DEFAULT_DATASET, help="where the programs come from and the "
                            f"measurements go (default {DEFAULT_DATASET})")
    parser.add_argument("--model", help="base model (default: the packaged tlp-cpu)")
    parser.add_argument("--out", help="where to save (default: the user models folder, $TLP_MODELS_DIR or "
                                          "~/.local/share/tlp/models, where TLPCostModel() and tlp tune find it)")
    parser.add_argument("--freeze-backbone", action="store_true",
                            help="train the head alone, the other heads untouched (default: the shared backbone "
                                 "learns too, at 0.1x the head's rate, which scored as well or better in the few-shot "
                                 "experiment; on the shipped distilled backbone frozen heads ranked better, and they "
                                 "are what it ships with)")
    parser.add_argument("--held-out", metavar="NETWORKS",
                            help="comma-separated networks the head never trains on and is scored on (default: the "
                                 "zoo's held-out networks); name the network a search check will tune")
    parser.add_argument("--source", help="platform whose programs to re-measure (default: the largest)")
    parser.add_argument("--force", action="store_true", help="retrain a head the model already has")
    parser.add_argument("--platform", help="a platform id the dataset already holds (another machine's): "
                            "train its head on its stored programs, measuring nothing (see tlp dataset info)")
    add_settings(parser, "fraction (of the training tasks' programs measured here, default 0.07), "
                             "held_out_fraction (of the held-out networks', for the score, default 0.07), head_soup "
                             "(with --freeze-backbone: heads trained with K seeds and averaged, default 4), "
                             "run_timeout_s")
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("--json", action="store_true")
    add_target_args(parser)
    add_renamed(parser, RENAMED)
    parser.set_defaults(func=cmd_adapt)
