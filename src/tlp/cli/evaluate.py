"""`tlp eval`: top-k of a model on held-out networks against MetaSchedule's XGBoost and MLP."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tlp import TLPError
from tlp.cli.common import DEFAULT_DATASET, platform_of


def cmd_eval(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset
    from tlp.evaluation import evaluate, format_table, plot
    from tlp.model.estimator import TLPModel
    from tlp.models import model_path
    from tlp.workloads import held_out_networks

    model = TLPModel.load(model_path(args.model))
    dataset = Dataset(args.dataset)
    platform_id = platform_of(dataset, args.platform or (model.meta.get("platforms") or [None])[0])
    ansor = dataset.store(platform_id).platform.record_format == "ansor"
    # MetaSchedule's XGBoost/MLP read MetaSchedule features; Ansor records have none (evaluate() says so if asked).
    baselines = [b for b in (args.baselines or ("random" if ansor else "xgb,mlp")).split(",") if b and b != "none"]
    unknown = sorted(set(baselines) - {"xgb", "mlp", "random"})
    if unknown:
        raise TLPError(f"tlp eval: unknown baseline(s) {', '.join(unknown)} (xgb, mlp, random, or none)")
    if (args.population is not None and args.population < 2) or (args.draws is not None and args.draws < 1):
        raise TLPError("tlp eval: --population must be at least 2 and --draws at least 1")
    if args.bootstrap < 0:
        raise TLPError("tlp eval: --bootstrap must be 0 (no interval) or a number of resamples")
    networks = args.networks.split(",") if args.networks else (
        model.meta.get("held_out_networks") if ansor else None) or held_out_networks()
    results = evaluate(dataset, platform_id, model, baselines + ["random"] * ("random" not in baselines), networks,
                       seed=args.seed, search_runs=args.search_runs, population=args.population, draws=args.draws,
                       bootstrap_draws=args.bootstrap)
    if args.plot:
        plot(results, args.plot)
    print(json.dumps(results, indent=1) if args.json else format_table(results))
    return 0


def register(verbs: Any) -> None:
    evaluate = verbs.add_parser("eval", help="top-k scores on held-out networks vs MetaSchedule's models")
    evaluate.add_argument("--model", help="checkpoint or packaged model name (default: tlp-cpu, the shipped model)")
    evaluate.add_argument("--dataset", default=DEFAULT_DATASET)
    evaluate.add_argument("--platform", help="platform id (default: the model's)")
    evaluate.add_argument("--baselines", help="comma-separated: xgb, mlp, random, none (default xgb,mlp; for Ansor records "
                                              "random only: the MetaSchedule models need MetaSchedule features)")
    evaluate.add_argument("--networks", help="test networks (default: the held-out networks)")
    evaluate.add_argument("--plot", help="write a PNG bar chart of top-1/top-5 per network and model")
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--search-runs", nargs="+", metavar="DIR",
                          help="tuning work directories (tlp tune) or folders holding "
                          "them: also score top-1 among all their programs (the headline then), among their late "
                          "rounds' programs, and the regret of each model's pick in a search population")
    evaluate.add_argument("--population", type=int, help="with --search-runs: programs per population (default 32)")
    evaluate.add_argument("--draws", type=int, help="with --search-runs: populations drawn per run and task when "
                          "its late rounds hold more programs than one population (default 200)")
    evaluate.add_argument("--bootstrap", type=int, default=200, metavar="N",
                          help="resample each held-out task's programs N times for a 90%% interval of TenSet top-1 "
                               "and of TLP's lead over each baseline (0: none)")
    evaluate.add_argument("--json", action="store_true")
    evaluate.set_defaults(func=cmd_eval)
