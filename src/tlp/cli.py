"""The ``tlp`` command line: one verb per pipeline stage.

    tlp workloads list                       what can be tuned/measured, with task counts
    tlp collect --workloads W --dataset D    measure programs (resumable; --remeasure-* for re-measurement)
    tlp features DATASET                     trace lengths, crop coverage and feature collisions of a dataset
    tlp train DATASET --out MODEL            train a TLP model (held-out networks excluded)
    tlp eval --model MODEL --dataset DATASET top-k on held-out networks vs MetaSchedule XGB/MLP and random
                 [--search-runs DIR...]  and top-1 among tuning runs' programs (headline), late rounds, pick regret
    tlp tune SOURCE --trials N               tune an operator / network / .py / .onnx with the TLP cost model
    tlp dataset info|import|seal|export      inspect and manage datasets
    tlp dataset verify DATASET               find damaged segments (checksums, decompression, JSON)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from tlp import TLPError

DEFAULT_DATASET = "datasets/tlp-cpu"
# The shipped model travels inside the package (see tlp/models/MODEL_CARD.md).


def _add_target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help='JSON target, e.g. \'{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}\' '
                        "(default: this machine)")


def _networks(names: str | None) -> tuple[str, ...]:
    """A comma-separated list of network names; ``held-out`` stands for the standard test networks."""
    from tlp.workloads import held_out_networks  # pylint: disable=import-outside-toplevel

    result: list[str] = []
    for name in filter(None, (n.strip() for n in (names or "").split(","))):
        result += held_out_networks() if name == "held-out" else [name]
    return tuple(result)


def _target(args: argparse.Namespace) -> dict[str, Any]:
    from tlp.platform import host_target, parse_target  # pylint: disable=import-outside-toplevel

    return parse_target(args.target) if args.target else host_target()


def cmd_workloads_list(args: argparse.Namespace) -> int:
    from tlp.workloads import list_workloads, load_tasks  # pylint: disable=import-outside-toplevel

    target = _target(args)
    rows = []
    for info in list_workloads():
        count = "?"
        if info.kind == "operators" or not args.no_count:
            tasks = load_tasks([info.name], target)
            count = f"{len(tasks)}"
            if info.kind == "network":
                count += f" ({len({t.key for t in tasks})} unique)"
        rows.append((info.name, info.kind, "test" if info.held_out else "train", count, info.description))
    if args.json:
        print(json.dumps([dict(zip(("name", "kind", "split", "tasks", "description"), r)) for r in rows], indent=1))
        return 0
    widths = [max(len(str(r[i])) for r in rows + [("name", "kind", "split", "tasks", "")]) for i in range(4)]
    print("  ".join(h.ljust(w) for h, w in zip(("name", "kind", "split", "tasks"), widths)) + "  description")
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4])
    print("\ngroups: ops (all operators), networks, train, test, all")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.collect import CollectPlan, collect, remeasure
    from tlp.dataset.measure import MeasureConfig, RPCSettings
    from tlp.dataset.store import Dataset
    from tlp.platform import Platform
    from tlp.workloads import load_tasks

    dataset = Dataset(args.dataset)
    target = _target(args)
    config = MeasureConfig(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, cache_flush=not args.no_cache_flush,
                           run_timeout_s=args.run_timeout)
    if args.rpc_tracker:
        config.rpc = RPCSettings.parse(args.rpc_tracker, args.rpc_key)
        platform = Platform.remote(target, args.rpc_key, args.hardware)
    else:
        platform = Platform.host(target)
    if args.remeasure_from or args.remeasure_loaded or args.remeasure_failed:
        source = dataset.store(args.remeasure_from or platform.id)
        threshold = args.load_threshold if args.remeasure_loaded else None
        from tlp.workloads import held_out_networks

        summary = remeasure(dataset, source, platform, config, only_loaded_above=threshold,
                            retry_failed=args.remeasure_failed,
                            batch_size=args.batch_size, progress=not args.quiet, max_batches=args.max_batches,
                            fraction=args.fraction, first_networks=held_out_networks(),
                            first_fraction=args.held_out_fraction)
    else:
        if not args.workloads:
            raise SystemExit("tlp collect: --workloads is required (see `tlp workloads list`)")
        tasks = load_tasks(args.workloads.split(","), target)
        plan = CollectPlan(trials_per_task=args.trials_per_task, random_fraction=args.random_fraction,
                           batch_size=args.batch_size, seed=args.seed, max_batches=args.max_batches)
        summary = collect(dataset, tasks, platform, plan, config, progress=not args.quiet)
    print(json.dumps({"platform": platform.id, **summary.to_json()}, indent=1))
    return 0


def cmd_dataset_info(args: argparse.Namespace) -> int:
    from tlp.dataset.info import dataset_info, format_info  # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset, DatasetError  # pylint: disable=import-outside-toplevel

    if not Path(args.path).is_dir():
        raise DatasetError(f"{args.path}: no such dataset folder")
    info = dataset_info(Dataset(args.path, skip_damaged=args.skip_damaged), args.load_threshold)
    print(json.dumps(info, indent=1) if args.json else format_info(info))
    return 0


def cmd_dataset_compare(args: argparse.Namespace) -> int:
    from tlp.dataset.compare import compare_platforms, format_comparison  # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset  # pylint: disable=import-outside-toplevel

    dataset = Dataset(args.path)
    result = compare_platforms(dataset, _train_platforms(dataset, args) if args.platforms else None, args.min_programs)
    print(json.dumps(result, indent=1) if args.json else format_comparison(result))
    return 0


def cmd_dataset_import(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.importer import import_work_dir
    from tlp.dataset.store import Dataset, DatasetError
    from tlp.dataset.tuning import ORIGINS, add_tuning_run
    from tlp.platform import host_fingerprint
    from tlp.search.sources import tuned_tasks

    if args.format == "ansor":
        return _import_ansor(args)
    if len(args.work_dir) != 1 or args.task_weights:
        raise DatasetError("tlp dataset import: one MetaSchedule work directory at a time (several files or folders "
                           "and --task-weights are for --format ansor)")
    dataset, work_dir = Dataset(args.dataset), Path(args.work_dir[0])
    hardware = host_fingerprint() if args.measured_here else {"description": args.hardware or "unknown"}
    # A platform the dataset already has: logs measured there (another session's machine) join its programs.
    platform = dataset.store(args.platform).platform if args.platform else None
    # the tuned workload's task names, networks and weights instead of names guessed from the functions
    tasks = tuned_tasks(args.workload, work_dir, args.top_tasks) if args.workload else None
    if (work_dir / ORIGINS).exists():  # a `tlp tune` run: keep each program's search round and guiding model
        summary = add_tuning_run(dataset, work_dir, platform, tasks, args.network, hardware)
    else:
        summary = import_work_dir(dataset, work_dir, args.network, hardware, platform=platform, tasks=tasks)
    print(json.dumps(summary.__dict__, indent=1))
    return 0


def _import_ansor(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.ansor import import_ansor, load_task_weights
    from tlp.dataset.store import Dataset, DatasetError

    if args.measured_here:
        raise DatasetError("--measured-here: Ansor records come from another TVM; describe their machine with "
                           "--hardware instead")
    weights = load_task_weights(Path(args.task_weights)) if args.task_weights else None
    summary = import_ansor(Dataset(args.dataset), args.work_dir, weights, args.network, args.hardware,
                           progress=not args.quiet)
    print(json.dumps(summary.to_json(), indent=1))
    return 0


def cmd_dataset_seal(args: argparse.Namespace) -> int:
    from tlp.dataset.store import Dataset  # pylint: disable=import-outside-toplevel

    dataset = Dataset(args.path)
    for platform_id in dataset.platform_ids():
        with dataset.store(platform_id) as store:
            for segment in store.seal():
                print(f"sealed {segment}")
    return 0


def cmd_dataset_export(args: argparse.Namespace) -> int:
    from tlp.dataset.store import Dataset, DatasetError  # pylint: disable=import-outside-toplevel

    store = Dataset(args.path).store(args.platform)
    if store.platform.record_format != "metaschedule":
        raise DatasetError(f"{args.platform} holds {store.platform.record_format} records (schedule steps), not "
                           "MetaSchedule traces: there is no MetaSchedule database to export")
    workloads, records = store.export_database(Path(args.out))
    print(f"wrote {workloads} and {records} (open with ms.database.JSONDatabase(work_dir={args.out!r}))")
    return 0


def cmd_dataset_verify(args: argparse.Namespace) -> int:
    from tlp.dataset.store import Dataset, DatasetError  # pylint: disable=import-outside-toplevel
    from tlp.dataset.verify import format_verification, verify_dataset  # pylint: disable=import-outside-toplevel

    if not Path(args.path).is_dir():
        raise DatasetError(f"{args.path}: no such dataset folder")
    result = verify_dataset(Dataset(args.path), record_missing=args.record_missing)
    print(json.dumps(result, indent=1) if args.json else format_verification(result))
    if result["clean"]:
        return 0
    if not args.json:
        print(f"tlp: error: {len(result['problems'])} problems in {args.path}: restore damaged files from git "
              "(`git checkout -- PATH`), or read around them with `tlp dataset info --skip-damaged`", file=sys.stderr)
    return 1  # damage found (2 stays "could not run", as for every TLPError)


def _platform_of(dataset: Any, requested: str | None) -> str:
    """The requested platform, else the dataset's only one."""
    from tlp.dataset.store import DatasetError  # pylint: disable=import-outside-toplevel

    if requested:
        return requested
    platforms = dataset.platform_ids()
    if len(platforms) != 1:
        raise DatasetError(f"{dataset.path}: {len(platforms)} platforms ({', '.join(platforms) or 'none'}); "
                           "choose one with --platform")
    return platforms[0]


def cmd_features(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset, DatasetError
    from tlp.features.featurizer import FeatureConfig
    from tlp.features.report import feature_report, format_feature_report
    from tlp.features.tensors import load_programs

    dataset = Dataset(args.dataset)
    programs = load_programs(dataset, _platform_of(dataset, args.platform))
    if programs.record_format != "metaschedule":
        raise DatasetError(f"tlp features reports on MetaSchedule traces; this platform holds {programs.record_format} "
                           "records")
    report = feature_report(programs, FeatureConfig(seq_len=args.seq_len, compact=args.compact_traces))
    print(json.dumps(report, indent=1) if args.json else format_feature_report(report))
    return 0


def _train_platforms(dataset: Any, args: argparse.Namespace) -> list[str]:
    """``--platforms A,B`` / ``all``, else ``--platform``, else the dataset's only platform."""
    from tlp.dataset.store import DatasetError  # pylint: disable=import-outside-toplevel

    if not args.platforms:
        return [_platform_of(dataset, args.platform)]
    known = dataset.platform_ids()
    wanted = known if args.platforms == "all" else [p for p in args.platforms.split(",") if p]
    unknown = [p for p in wanted if p not in known]
    if unknown or not wanted:
        raise DatasetError(f"{dataset.path}: no platform {', '.join(unknown) or '(none given)'} "
                           f"(platforms here: {', '.join(known) or 'none'})")
    return wanted


def _feature_config(dataset: Any, platform_id: str, record_format: str, seq_len: int | None,
                    compact: bool = False, canonical_names: bool = False) -> Any:
    """What the dataset's records need: trace rows (default 80 long; ``compact``: bookkeeping instructions left
    out; ``canonical_names``: block names without their numbering) or the paper's Ansor step rows."""
    # pylint: disable=import-outside-toplevel
    from tlp.features.ansor_steps import AnsorStepConfig
    from tlp.features.featurizer import FeatureConfig

    if record_format == "ansor":
        if compact or canonical_names:
            flag = "--compact-traces" if compact else "--canonical-names"
            raise TLPError(f"{flag}: platform {platform_id} holds Ansor steps, not MetaSchedule traces")
        return AnsorStepConfig.paper(str(dataset.store(platform_id).platform.target.get("kind")), seq_len)
    return FeatureConfig(seq_len=seq_len or 80, compact=compact, canonical_names=canonical_names)


def cmd_train(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    import hashlib

    from tlp.dataset.store import Dataset, DatasetError
    from tlp.features.cache import default_cache_dir, load_or_featurize
    from tlp.features.tensors import load_platforms
    from tlp.model.estimator import TLPModel, TrainConfig
    from tlp.model.network import ModelConfig
    from tlp.workloads import held_out_networks

    if args.patience is not None and args.patience < 1:
        raise TLPError(f"tlp train: --patience must be at least 1 epoch, got {args.patience}")
    if args.distil_from:
        from tlp.model.distil import check_distillation_loss

        check_distillation_loss(args.loss)  # before the dataset is read
    elif args.distil_alpha or args.transfer_shapes:
        raise TLPError(f"tlp train: {'--distil-alpha' if args.distil_alpha else '--transfer-shapes'} needs teachers: "
                       "name them with --distil-from")
    if args.first_stage and not args.ensemble_of:
        raise TLPError("tlp train: --first-stage makes a cascade whose second stage is an ensemble: name its "
                       "members with --ensemble-of")
    if args.ensemble_of:
        return _ensemble(args)
    dataset = Dataset(args.dataset)
    if args.add_heads_to:
        return _add_heads(dataset, args)
    platform_ids = _train_platforms(dataset, args)
    held_out = args.held_out.split(",") if args.held_out else held_out_networks()
    record_format = dataset.store(platform_ids[0]).platform.record_format
    if args.transfer_shapes and record_format != "metaschedule":
        raise TLPError(f"tlp train: --transfer-shapes draws MetaSchedule programs; {platform_ids[0]} holds "
                       f"{record_format} records")
    feature_config = _feature_config(dataset, platform_ids[0], record_format, args.seq_len, args.compact_traces,
                                     args.canonical_names)
    feature_cache: dict[str, Any] = {"used": not args.no_feature_cache}
    if args.no_feature_cache:
        programs: Any = load_platforms(dataset, platform_ids, args.min_head_programs)
    else:
        cached = load_or_featurize(dataset, platform_ids, held_out, feature_config, args.min_head_programs,
                                   Path(args.feature_cache_dir) if args.feature_cache_dir else default_cache_dir())
        programs = cached.programs
        feature_cache.update({"path": str(cached.path), "hit": cached.hit})
    train, test = programs.split_by_network(set(held_out))
    if len(set(train.task_keys)) < 2:
        raise DatasetError(f"{args.dataset}: fewer than 2 trainable tasks outside the held-out networks")
    digest = hashlib.sha1()
    for platform_id in platform_ids:
        for _, line in dataset.store(platform_id).records.lines():
            digest.update(line.encode())
    model = TLPModel(feature_config, ModelConfig(arch=args.arch, hidden=args.hidden, layers=args.layers),
                     TrainConfig(epochs=args.epochs, loss=args.loss, seed=args.seed, device=args.device,
                                 weights=args.weights, task_weighting=args.task_weighting,
                                 **({"patience": args.patience} if args.patience is not None else {})))
    platform_info = {p: dataset.store(p).platform.to_json() for p in platform_ids}
    targets = None
    if args.distil_from:
        from tlp.model.distil import distillation_targets, ensemble_scores
        from tlp.models import model_path

        teachers = [TLPModel.load(model_path(path)) for path in args.distil_from]
        if args.transfer_shapes:
            from tlp.model.distil import with_transfer_set

            train = with_transfer_set(train, dataset.store(platform_ids[0]).platform.target, args.transfer_shapes,
                                      seed=args.seed)
        targets = distillation_targets(train, ensemble_scores(teachers, train), args.loss, args.distil_alpha)
        model.meta["distilled_from"] = {"teachers": list(args.distil_from), "alpha": args.distil_alpha,
                                        "transfer_shapes": args.transfer_shapes}
    history = model.fit(train, progress=not args.quiet, platform_info=platform_info, targets=targets)
    model.meta.update({"dataset": str(args.dataset), "dataset_hash": digest.hexdigest(),
                       "platform_info": platform_info,
                       "held_out_networks": held_out, "skipped": dict(programs.skipped),
                       "test_programs_excluded": len(test.task_keys)})
    model.save(args.out)
    print(json.dumps({"out": args.out, "heads": model.platforms, "best_epoch": history.best_epoch,
                      **({"averaged_epochs": history.averaged_epochs} if history.averaged_epochs else {}),
                      "best_val_top1": history.best_val_top1, "train_tasks": model.meta["train_tasks"],
                      "head_sources": model.meta.get("head_sources", {}),
                      "skipped": dict(programs.skipped), "feature_cache": feature_cache}, indent=1))
    return 0


def _ensemble(args: argparse.Namespace) -> int:
    """``tlp train --ensemble-of M1 M2 ...``: no training; one checkpoint that scores with the mean of the models'
    scores (a seed ensemble: the same recipe, dataset and crop with several --seed values); with ``--first-stage
    M0``, a cascade: M0 ranks every candidate and the ensemble re-ranks M0's top ``--rescore-least``."""
    # pylint: disable=import-outside-toplevel
    from tlp.model.ensemble import TLPEnsemble
    from tlp.models import model_path

    model: Any = TLPEnsemble.of_checkpoints([model_path(path) for path in args.ensemble_of])
    members = len(model.members)
    if args.first_stage:
        from tlp.model.cascade import TLPCascade
        from tlp.model.estimator import TLPModel

        first = TLPModel.load(model_path(args.first_stage))
        model = TLPCascade(first, model, least=args.rescore_least,
                           meta={**model.meta, "first_stage_checkpoint": str(args.first_stage)})
    model.save(args.out)
    print(json.dumps({"out": args.out, "members": members, "heads": model.platforms,
                      **({"first_stage": str(args.first_stage), "rescore_least": args.rescore_least}
                         if args.first_stage else {})}, indent=1))
    return 0


def _add_heads(dataset: Any, args: argparse.Namespace) -> int:
    """``tlp train --add-heads-to MODEL``: no training; a head for each dataset platform the model lacks (a copy of
    the nearest trained head), so a model and the dataset it ships with cannot drift apart."""
    # pylint: disable=import-outside-toplevel
    from tlp.model.estimator import TLPModel
    from tlp.models import model_path

    model = TLPModel.load(model_path(args.add_heads_to))
    stored = dataset.platform_ids()
    info = model.meta.setdefault("platform_info", {})
    for platform_id in model.platforms:  # a checkpoint trained outside tlp train may not describe its own heads
        if platform_id not in info and platform_id in stored:
            info[platform_id] = dataset.store(platform_id).platform.to_json()
    wanted = stored if not (args.platforms or args.platform) else _train_platforms(dataset, args)
    added = model.add_platforms({p: dataset.store(p).platform.to_json() for p in wanted})
    model.save(args.out)
    print(json.dumps({"out": args.out, "heads": model.platforms, "added": added}, indent=1))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset
    from tlp.evaluation import evaluate, format_table, plot
    from tlp.model.estimator import TLPModel
    from tlp.models import model_path
    from tlp.workloads import held_out_networks

    model = TLPModel.load(model_path(args.model))
    dataset = Dataset(args.dataset)
    platform_id = _platform_of(dataset, args.platform or (model.meta.get("platforms") or [None])[0])
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


def cmd_adapt(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.measure import MeasureConfig
    from tlp.dataset.store import Dataset, DatasetError
    from tlp.model.adapt import DEFAULT_HELD_OUT_FRACTION, DEFAULT_TRAIN_FRACTION, adapt, format_adapt_report
    from tlp.model.estimator import TLPModel
    from tlp.models import adapted_model_path, model_path
    from tlp.platform import Platform

    if not Path(args.dataset, "tasks.json").is_file():
        raise DatasetError(f"{args.dataset}: no dataset here to take programs from (pass --dataset, e.g. the "
                           f"datasets/tlp-cpu folder of a TLP checkout)")
    dataset = Dataset(args.dataset)
    fraction = DEFAULT_TRAIN_FRACTION if args.fraction is None else args.fraction
    held_out_fraction = DEFAULT_HELD_OUT_FRACTION if args.held_out_fraction is None else args.held_out_fraction
    if args.platform:
        # Another machine's stored programs: this one cannot measure for it, so the head learns from what is stored.
        if args.target or args.fraction or args.held_out_fraction:
            raise TLPError("tlp adapt --platform trains on the programs the dataset already holds for that "
                           "platform: --target, --fraction and --held-out-fraction do not apply")
        if args.platform not in dataset.platform_ids():
            raise DatasetError(f"{args.dataset}: holds no platform {args.platform} (it holds "
                               f"{', '.join(dataset.platform_ids())})")
        platform = dataset.store(args.platform).platform
        fraction = held_out_fraction = 0.0
    else:
        platform = Platform.host(_target(args))
    base = TLPModel.load(model_path(args.model))  # the packaged model, never a previous adaptation
    if platform.id in base.platforms and not args.force:
        print(f"the model already has a head for {platform.id}; nothing to do (--force retrains it)")
        return 0
    out = Path(args.out) if args.out else adapted_model_path(platform.id)
    report = adapt(dataset, base, platform, out, fraction, held_out_fraction,
                   freeze_backbone=args.freeze_backbone, source=args.source,
                   measure_config=MeasureConfig(run_timeout_s=args.run_timeout), progress=not args.quiet,
                   held_out=args.held_out.split(",") if args.held_out else None, head_soup=args.head_soup)
    print(json.dumps(report.to_json(), indent=1) if args.json else format_adapt_report(report))
    return 0


def _apply_tune_preset(args: argparse.Namespace, target: dict[str, Any]) -> str:
    """Fill the search options left out on the command line from the preset (tlp.search.presets); its name."""
    # pylint: disable=import-outside-toplevel
    from tlp.platform import Platform
    from tlp.search.presets import PRESET_OPTIONS, default_preset, library_dataset, preset_settings

    name = args.preset or default_preset(args.cost_model)
    if args.transfer_from == "none":
        library = args.transfer_from = None
    elif args.transfer_from or name != "tlp":
        library = args.transfer_from
    else:
        library = library_dataset(Platform.host(target).id, DEFAULT_DATASET)
    settings = preset_settings(name, library)
    first = settings["first_round_trials"] if args.first_round_trials is None else args.first_round_trials
    batch = args.trials_per_iter or settings["trials_per_iter"]
    if args.first_round_transferred is None and args.transfer_from is None and (
            first is None or first >= batch or first - args.first_round_member_picks < 2):
        # the user's first round has no place for the preset's library beside the model's best: as large as a batch
        # (the search's own batch), or its other places given to member picks
        settings.update(first_round_transferred=0, transfer_from=None)
    for option in PRESET_OPTIONS:
        if getattr(args, option) is None:
            setattr(args, option, settings[option])
    return name


def cmd_tune(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.measure import MeasureConfig
    from tlp.search.report import format_report
    from tlp.search.sources import resolve
    from tlp.search.tune import TuneConfig, tune

    target = _target(args)
    preset = _apply_tune_preset(args, target)
    if args.first_round_trials is not None and args.first_round_trials < 1:
        raise TLPError("tlp tune: --first-round-trials must be at least 1")
    if args.max_per_structure < 0:
        raise TLPError("tlp tune: --max-per-structure must be at least 1 (or 0: off)")
    if args.first_round_per_structure < 0:
        raise TLPError("tlp tune: --first-round-per-structure must be at least 1 (or 0: as --max-per-structure)")
    if args.online_backbones is not None and args.online_backbones < 0:
        raise TLPError("tlp tune: --online-backbones must be 0 or more (0: every network learns only its head)")
    for flag, places in (("--new-structures", args.new_structures), ("--new-decisions", args.new_decisions)):
        if not 0 <= places <= args.trials_per_iter:
            raise TLPError(f"tlp tune: {flag} takes places of a batch: between 0 and --trials-per-iter "
                           f"({args.trials_per_iter}), not {places}")
    if args.first_round_transferred and not (args.first_round_trials or 0) >= args.first_round_transferred > 0:
        raise TLPError("tlp tune: --first-round-transferred K takes K of the first round's places: give "
                       "--first-round-trials at least K (and below --trials-per-iter)")
    if args.first_round_member_picks and not (args.first_round_trials or 0) > args.first_round_member_picks > 0:
        raise TLPError("tlp tune: --first-round-member-picks K takes K of the first round's places after the model's "
                       "best: give --first-round-trials above K (and below --trials-per-iter)")
    if args.first_round_member_picks and args.cost_model != "tlp":
        raise TLPError("tlp tune: --first-round-member-picks picks the TLP model's networks' own first choices: it "
                       f"needs --cost-model tlp, not {args.cost_model}")
    if args.transfer_from and not args.first_round_transferred:
        raise TLPError("tlp tune: --transfer-from fills first-round places with the dataset's schedules: give "
                       "--first-round-transferred K (and --first-round-trials at least K)")
    if args.transfer_exclude and not args.transfer_from:
        raise TLPError("tlp tune: --transfer-exclude leaves networks out of --transfer-from's dataset: give "
                       "--transfer-from DATASET")
    tunable = resolve(args.source, target, fast_math=not args.no_fast_math)
    if args.top_tasks:
        tunable = tunable.top_tasks(args.top_tasks)
    work_dir = args.work_dir or str(Path("runs") / "tune" / f"{Path(tunable.name).name}-{args.cost_model}")
    config = TuneConfig(trials=args.trials, trials_per_task=args.trials_per_task, trials_per_iter=args.trials_per_iter,
                        first_round_trials=args.first_round_trials,
                        first_round_transferred=args.first_round_transferred or 0,
                        first_round_member_picks=args.first_round_member_picks,
                        transfer_from=args.transfer_from, transfer_exclude_networks=_networks(args.transfer_exclude),
                        task_scheduler=args.task_scheduler, max_per_structure=args.max_per_structure,
                        first_round_per_structure=args.first_round_per_structure,
                        new_structures=args.new_structures, new_decisions=args.new_decisions,
                        cost_model=args.cost_model, model_path=args.model, online_steps=args.online_steps,
                        online_lr=args.online_lr, online_min_task_measurements=args.online_min_task_measurements,
                        online_backbones=args.online_backbones, post_optimization=args.post_optimization,
                        post_optimization_trials=args.post_optimization_trials, seed=args.seed, population=args.population,
                        measure=MeasureConfig(run_timeout_s=args.run_timeout), dataset=args.dataset,
                        predicted_schedules=not args.no_predicted_schedules)
    # MetaSchedule logs to stdout (and Droplet prints there); stdout is for the report alone.
    with contextlib.redirect_stdout(sys.stderr):
        report = tune(tunable, target, work_dir, config)
    report["preset"] = preset
    print(json.dumps(report, indent=1) if args.json else format_report(report))
    if report.get("dataset") and not args.json:
        added = report["dataset"]
        print(f"dataset {added['path']}: {added['imported']} new programs under {added['platform']} "
              f"({added['already_present']} already there)")
    if report.get("numerics") and not report["numerics"]["ok"]:
        failed = [o["name"] for o in report["numerics"]["outputs"] if not o["ok"]]
        print(f"tlp: error: {tunable.name}: NUMERICS FAILED: the compiled model's {', '.join(failed) or 'outputs'} "
              "differ from PyTorch eager beyond tolerance (see the report)", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tlp", description="TLP: learned cost models for TVM MetaSchedule")
    parser.add_argument("-v", "--verbose", action="store_true", help="show MetaSchedule's own log lines")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error, not only its line")
    verbs = parser.add_subparsers(dest="verb", required=True)

    workloads = verbs.add_parser("workloads", help="the workload zoo").add_subparsers(dest="action", required=True)
    listing = workloads.add_parser("list", help="list networks and operator families with task counts")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--no-count", action="store_true", help="skip extracting networks (fast)")
    _add_target_args(listing)
    listing.set_defaults(func=cmd_workloads_list)

    collect = verbs.add_parser("collect", help="measure programs into a dataset (resumable)")
    collect.add_argument("--workloads", help="comma-separated workload names or groups (ops, networks, train, test, all)")
    collect.add_argument("--dataset", default=DEFAULT_DATASET, help=f"dataset folder (default {DEFAULT_DATASET})")
    _add_target_args(collect)
    collect.add_argument("--trials-per-task", type=int, default=128)
    collect.add_argument("--random-fraction", type=float, default=0.5, help="share of random (vs evolved) programs")
    collect.add_argument("--batch-size", type=int, default=32)
    collect.add_argument("--seed", type=int, default=0)
    collect.add_argument("--max-batches", type=int, help="stop after this many batches")
    collect.add_argument("--repeat", type=int, default=3, help="timed repeats kept per program")
    collect.add_argument("--min-repeat-ms", type=int, default=20)
    collect.add_argument("--no-cache-flush", action="store_true")
    collect.add_argument("--run-timeout", type=float, default=10.0,
                         help="seconds per program run (all repeats); slower programs are stored as timeouts")
    collect.add_argument("--rpc-tracker", help="HOST:PORT of a TVM RPC tracker: run on its devices")
    collect.add_argument("--rpc-key", default="tlp", help="device key registered with the tracker")
    collect.add_argument("--hardware", help="description of the RPC devices' hardware (part of the platform)")
    collect.add_argument("--remeasure-from", metavar="PLATFORM_ID",
                         help="measure the programs stored for another platform on this one (same traces)")
    collect.add_argument("--fraction", type=float, default=1.0,
                         help="with --remeasure-from: share of the training tasks' programs to measure (whole tasks, "
                              "a fixed pseudo-random order); the held-out networks are measured first")
    collect.add_argument("--held-out-fraction", type=float, default=1.0,
                         help="with --remeasure-from: share of the held-out networks' programs to measure (whole "
                              "tasks); 0 measures training tasks only, so the platform's test set stays as it is")
    collect.add_argument("--remeasure-loaded", action="store_true",
                         help="re-measure this platform's records taken while other processes loaded the CPU")
    collect.add_argument("--remeasure-failed", action="store_true",
                         help="retry this platform's failed programs (e.g. after fixing the measurement set-up)")
    collect.add_argument("--load-threshold", type=float, default=0.10)
    collect.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    collect.set_defaults(func=cmd_collect)

    features = verbs.add_parser("features", help="trace lengths, crop coverage and feature collisions of a dataset")
    features.add_argument("dataset", nargs="?", default=DEFAULT_DATASET)
    features.add_argument("--platform", help="platform id (needed when the dataset has several)")
    features.add_argument("--seq-len", type=int, default=80, help="crop to report besides the paper's 25")
    features.add_argument("--compact-traces", action="store_true",
                          help="count rows as the compact form lays them out (bookkeeping left out; the shipped "
                               "model's form)")
    features.add_argument("--json", action="store_true")
    features.set_defaults(func=cmd_features)

    train = verbs.add_parser("train", help="train a TLP model on a dataset (held-out networks excluded)")
    train.add_argument("dataset", nargs="?", default=DEFAULT_DATASET)
    train.add_argument("--out", required=True, help="checkpoint file to write")
    train.add_argument("--platform", help="platform id (needed when the dataset has several)")
    train.add_argument("--platforms", help="MTL-TLP: comma-separated platform ids, or 'all': one shared backbone, "
                                           "one head per platform")
    train.add_argument("--min-head-programs", type=int, default=64,
                       help="with --platforms: refuse a platform with fewer valid programs than this")
    train.add_argument("--arch", default="attention", choices=["attention", "lstm", "transformer"])
    train.add_argument("--loss", default="lambdarank", choices=["lambdarank", "listwise", "mse", "soft-listwise",
                                                                   "listwise+pairwise", "soft-listwise+slowdown"],
                       help="ranking loss (soft-listwise+slowdown: soft-listwise plus the expected slowdown of the "
                            "first pick, aimed at catastrophic picks)")
    train.add_argument("--task-weighting", default="uniform", choices=["uniform", "network-share"],
                       help="how much each task counts in the loss: uniform, or network-share (the square root of "
                            "its share of its network's time: the heavy tasks that decide a network's TenSet top-1 "
                            "count more)")
    train.add_argument("--distil-from", nargs="+", metavar="MODEL",
                       help="train on the mean scores of these models (e.g. the same recipe with several --seed "
                            "values, trained on the same dataset and crop) instead of the measured labels: one "
                            "model that ranks like the ensemble (needs --loss listwise, soft-listwise or "
                            "soft-listwise+slowdown: its slowdown term then reads the measured latencies only)")
    train.add_argument("--distil-alpha", type=float, default=0.0,
                       help="with --distil-from: weight of the measured labels in the targets (0: the teachers' only)")
    train.add_argument("--transfer-shapes", type=int, default=0, metavar="N",
                       help="with --distil-from: also learn the teachers' ranking of 48 random programs of each of N "
                            "operator shapes no task has (nothing measured; ~0.5 s a shape; 180 helped on the Zen 4)")
    train.add_argument("--epochs", type=int, default=60)
    train.add_argument("--patience", type=int,
                       help="stop after this many epochs without a better validation top-1 (default 10; the best "
                            "epoch is kept)")
    train.add_argument("--weights", default="best", choices=["best", "average"],
                       help="keep the best-validation epoch's weights, or average the end-of-epoch weights from the "
                            "best epoch to the last (steadier held-out ranking across seeds)")
    train.add_argument("--hidden", type=int, default=256)
    train.add_argument("--layers", type=int, default=2,
                       help="LSTM / transformer layers (--arch lstm, distilled on the Zen 4: 1 layer ranked as well as 2, "
                            "in about 2/3 of the network time per candidate)")
    train.add_argument("--seq-len", type=int, help="primitives per program: default 80 for MetaSchedule traces, the "
                                                    "paper's 25 (CPU) / 40 (GPU) for Ansor steps")
    train.add_argument("--compact-traces", action="store_true",
                       help="leave MetaSchedule's bookkeeping instructions (GetLoops, the Split after each sampled "
                            "tiling, post-processing's Unannotate...) out of the rows, so a short crop reaches the "
                            "unroll and post-processing decisions (better search-like ranking, lower TenSet top-1 "
                            "on random draws: benchmarks/README.md, \"Compact traces\")")
    train.add_argument("--canonical-names", action="store_true",
                       help="read block names without the numbering that says where a block came from (lv7_sum, "
                            "lv11_sum and data_sum -> sum; T_add_1 -> T_add), so one block of several networks "
                            "shares one string embedding (off by default: one seed at 56 rows ranked worse, benchmarks/README.md, "
                            "\"Second seeds of the crop\")")
    train.add_argument("--held-out", metavar="NETWORKS", help="comma-separated networks never trained on (default: "
                                                              "the zoo's held-out networks)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="auto", help="auto (GPU when present), cpu or cuda")
    train.add_argument("--no-feature-cache", action="store_true",
                       help="featurize the traces again and leave the feature cache alone (by default featurized "
                            "programs are read from / written to the cache; a changed dataset is never read from it)")
    train.add_argument("--feature-cache-dir", help="where cached features live (default $TLP_CACHE_DIR/features, "
                                                   "i.e. ~/.cache/tlp/features)")
    train.add_argument("--add-heads-to", metavar="MODEL",
                       help="no training: give MODEL (a checkpoint or packaged name) a head for every platform of the "
                            "dataset (or of --platform(s)) it lacks, a copy of the nearest trained platform's head, "
                            "what tlp train gives a platform without training programs; saved to --out")
    train.add_argument("--ensemble-of", nargs="+", metavar="MODEL",
                       help="no training: save one model that scores with the mean of these models' scores (a seed "
                            "ensemble: the same recipe and crop trained with several --seed values; each needs the "
                            "same heads) to --out")
    train.add_argument("--first-stage", metavar="MODEL",
                       help="with --ensemble-of: a cascade: MODEL (one cheaper network, the same heads) ranks every "
                            "candidate and the ensemble re-ranks its top --rescore-least of each call")
    train.add_argument("--rescore-least", type=int, default=32,
                       help="with --first-stage: candidates of each call the ensemble re-ranks (default 32)")
    train.add_argument("-q", "--quiet", action="store_true")
    train.set_defaults(func=cmd_train)

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
                          help="tuning work directories (tlp tune, benchmarks/search_efficiency.py) or folders holding "
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

    adapt_verb = verbs.add_parser("adapt", help="a cost model for this machine: measure a sample of the dataset's "
                                                "programs here and train this platform's head (minutes)")
    adapt_verb.add_argument("--dataset", default=DEFAULT_DATASET, help="where the programs come from and the "
                            f"measurements go (default {DEFAULT_DATASET})")
    adapt_verb.add_argument("--model", help="base model (default: the packaged tlp-cpu)")
    adapt_verb.add_argument("--out", help="where to save (default: the user models folder, $TLP_MODELS_DIR or "
                                          "~/.local/share/tlp/models, where TLPCostModel() and tlp tune find it)")
    adapt_verb.add_argument("--fraction", type=float,
                            help="share of the training tasks' programs to measure here (default: 0.07, what the "
                                 "few-shot experiment found enough; 0 with --held-out-fraction 0: measure nothing, train on "
                                 "the programs the dataset already holds for this machine)")
    adapt_verb.add_argument("--held-out-fraction", type=float,
                            help="share of the held-out networks' programs to measure here, for the score "
                                 "(default 0.07)")
    adapt_verb.add_argument("--freeze-backbone", action="store_true",
                            help="train the head alone, the other heads untouched (default: the shared backbone "
                                 "learns too, at 0.1x the head's rate, which scored as well or better in the few-shot "
                                 "experiment; on the shipped distilled backbone frozen heads ranked better, and they "
                                 "are what it ships with)")
    adapt_verb.add_argument("--head-soup", type=int, metavar="K",
                            help="with --freeze-backbone: train the head K times (seeds) and keep the mean of their "
                                 "weights; one head's seed moved its held-out top-1 by up to 0.17, the mean of 4 "
                                 "ranked above each single head (benchmarks/README.md, \"Head soups\"; default 4 "
                                 "with --freeze-backbone, else 1)")
    adapt_verb.add_argument("--held-out", metavar="NETWORKS",
                            help="comma-separated networks the head never trains on and is scored on (default: the "
                                 "zoo's held-out networks); name the network a search check will tune")
    adapt_verb.add_argument("--source", help="platform whose programs to re-measure (default: the largest)")
    adapt_verb.add_argument("--force", action="store_true", help="retrain a head the model already has")
    adapt_verb.add_argument("--platform", help="a platform id the dataset already holds (another machine's): "
                            "train its head on its stored programs, measuring nothing (see tlp dataset info)")
    adapt_verb.add_argument("--run-timeout", type=float, default=10.0)
    adapt_verb.add_argument("-q", "--quiet", action="store_true")
    adapt_verb.add_argument("--json", action="store_true")
    _add_target_args(adapt_verb)
    adapt_verb.set_defaults(func=cmd_adapt)

    tune_verb = verbs.add_parser("tune", help="tune an operator, network, TVMScript/TE/PyTorch .py or .onnx file")
    tune_verb.add_argument("source", help="zoo operator or network (see `tlp workloads list`), FILE.py[:NAME] "
                           "(TVMScript IRModule/PrimFunc, TE workload function, or PyTorch module + example_inputs), "
                           "or FILE.onnx")
    tune_verb.add_argument("--cost-model", default="tlp", choices=["tlp", "tlp+xgb", "xgb", "mlp", "random"],
                           help="tlp+xgb: TLP's ranking while a task has few measurements, MetaSchedule's XGBoost "
                                "(retrained on the search's own) as they accumulate (tlp.search.blended)")
    tune_verb.add_argument("--model", help="TLP checkpoint, or a packaged model: tlp-cpu, tlp-cpu-small (the older "
                                           "Zen 3 model); default: the model `tlp adapt` made for this platform, else "
                                           "tlp-cpu")
    tune_verb.add_argument("--trials", type=int, default=200, help="measured candidates in all (all tasks)")
    tune_verb.add_argument("--trials-per-task", type=int)
    tune_verb.add_argument("--top-tasks", type=int, metavar="N",
                           help="tune only the N heaviest tasks (weight x FLOPs); the rest get the TLP model's "
                                "zero-measurement schedules")
    tune_verb.add_argument("--no-predicted-schedules", action="store_true",
                           help="tasks without a measured program keep TVM's default schedule instead of the TLP "
                                "model's top-ranked one from a short unmeasured search")
    tune_verb.add_argument("--preset", choices=("tlp", "metaschedule"),
                           help="the search options left out: tlp (default with --cost-model tlp): the setting the "
                                "network benchmarks found best for the TLP model (first rounds of 2, one of them "
                                f"from {DEFAULT_DATASET}'s schedule library when it holds this platform, batches of 8, "
                                "a population of 256, at most 2 of one structure per batch, the headroom task rule, "
                                "online fine-tuning); metaschedule (default with the other cost models): "
                                "MetaSchedule's own search (tlp.search.presets)")
    tune_verb.add_argument("--trials-per-iter", type=int, help="candidates measured per search round (preset)")
    tune_verb.add_argument("--first-round-trials", type=int, metavar="K",
                           help="measure only the cost model's top K of each task in the first round, full batches "
                                "after it (for a trained model such as TLP: the first round over all tasks is most "
                                "of a small budget on a network); preset tlp: 2, metaschedule: a full batch")
    tune_verb.add_argument("--first-round-transferred", type=int, metavar="K",
                           help="of the first round's places per task, K go to other tasks' best measured schedules "
                                "replayed on it (tile sizes refitted), the cost model's best-scored ones: a network's "
                                "tasks repeat one structure at many shapes; preset tlp: 1 with a schedule library)")
    tune_verb.add_argument("--first-round-member-picks", type=int, default=0, metavar="K",
                           help="of the first round's places per task after the model's best, K go to its networks' "
                                "own first choices (an ensemble's members, among the candidates a cascade re-ranks), "
                                "the ones the whole model ranks highest: they hedge its favourite where the members "
                                "disagree (the shipped model is a cascade; default 0: the model's next best; it "
                                "helped BERT-tiny's search, not MobileNetV2's or ResNet-50's: benchmarks/README)")
    tune_verb.add_argument("--transfer-from", metavar="DATASET",
                           help="take --first-round-transferred's schedules from this dataset instead of the run's "
                                "other tasks: the fastest programs (this platform's) of each task's nearest stored "
                                "workloads, replayed on it (preset tlp: the checkout's dataset when it holds this "
                                "platform; 'none': no library)")
    tune_verb.add_argument("--transfer-exclude", metavar="NETWORKS",
                           help="comma-separated networks whose workloads --transfer-from leaves out ('held-out': "
                                "the standard test networks), e.g. to benchmark on a network the dataset holds")
    tune_verb.add_argument("--task-scheduler", choices=["gradient", "headroom", "headroom-margin"],
                           help="which task gets the next batch: MetaSchedule's gradient rule (preset metaschedule), or "
                                "headroom (preset tlp): "
                                "the task whose weighted latency is furthest above what it would run at the best "
                                "throughput (flops/s) any task has reached, per batch it has had; headroom-margin: "
                                "the same with that throughput taken 15%% higher, so the task that reached it can "
                                "still draw batches (on BERT-tiny, 3 seeds, not told apart from headroom: "
                                "benchmarks/README.md)")
    tune_verb.add_argument("--max-per-structure", type=int, metavar="N",
                           help="measure at most N candidates of one structure (unroll depth, compute locations) per "
                                "batch: the cost model's best of 4x the batch, spread over the structures it ranks "
                                "high (preset tlp: 2; metaschedule: 0, the model's top candidates)")
    tune_verb.add_argument("--first-round-per-structure", type=int, default=0, metavar="N",
                           help="measure at most N candidates of one structure in each task's first batch (with "
                                "--first-round-trials 2, N=1 measures the model's best of two structures; default 0: "
                                "as --max-per-structure)")
    tune_verb.add_argument("--new-structures", type=int, default=0, metavar="K",
                           help="give K places of every batch to structures the task has not measured yet: the cost "
                                "model's best of random draws of the design space whose structure is new (default 0)")
    tune_verb.add_argument("--new-decisions", type=int, default=0, metavar="K",
                           help="give up to K places of every batch to the cost model's best candidates (of the "
                                "evolution and of random draws) carrying a decision value the task has not measured "
                                "(an unroll depth, one block's compute location); they end once every value is "
                                "measured (default 0)")
    tune_verb.add_argument("--population", type=int,
                           help="evolutionary search population per round (preset tlp: 256; metaschedule: 2048)")
    tune_verb.add_argument("--online-steps", type=int,
                           help="fine-tune the TLP model on the search's measurements: steps per batch (0 = off; preset "
                                "tlp: 5)")
    tune_verb.add_argument("--online-lr", type=float,
                           help="learning rate of the online fine-tuning steps (preset tlp: 1e-3; metaschedule: 1e-4)")
    tune_verb.add_argument("--online-min-task-measurements", type=int, metavar="N",
                           help="fine-tune only after batches of tasks with at least N measurements (e.g. 3: not on "
                                "a first round of 2, which at a high --online-lr spoils the next tasks' first picks; "
                                "preset tlp: 3)")
    tune_verb.add_argument("--online-backbones", type=int, default=None, metavar="N",
                           help="only the model's first N networks (a cascade's first stage first) fine-tune whole; "
                                "the others fine-tune only this platform's head, at a small share of the cost "
                                "(default: all whole)")
    tune_verb.add_argument("--post-optimization", action="store_true",
                           help="Droplet coordinate descent on each task's best program after the search")
    tune_verb.add_argument("--post-optimization-trials", type=int, default=100, help="Droplet trials per task")
    tune_verb.add_argument("--work-dir", help="tuning database and outputs (default runs/tune/SOURCE-MODEL)")
    tune_verb.add_argument("--dataset", help="append every measured candidate to this dataset, under this machine's "
                                             "platform (origin: search round and cost model; duplicates skipped)")
    tune_verb.add_argument("--no-fast-math", action="store_true",
                           help="keep TVM's exact erf/GELU/exp/tanh (by default networks get fast approximations "
                                "when their outputs still match PyTorch within tolerance)")
    tune_verb.add_argument("--run-timeout", type=float, default=10.0)
    tune_verb.add_argument("--seed", type=int, default=1)
    tune_verb.add_argument("--json", action="store_true")
    tune_verb.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                           help="print the traceback of an error, not only its line (as `tlp --debug`)")
    _add_target_args(tune_verb)
    tune_verb.set_defaults(func=cmd_tune)

    dataset = verbs.add_parser("dataset", help="inspect and manage datasets").add_subparsers(dest="action",
                                                                                              required=True)
    info = dataset.add_parser("info", help="counts and noise of a dataset")
    info.add_argument("path", nargs="?", default=DEFAULT_DATASET)
    info.add_argument("--json", action="store_true")
    info.add_argument("--load-threshold", type=float, default=0.10)
    info.add_argument("--skip-damaged", action="store_true",
                      help="skip damaged segments and report the records lost instead of failing")
    info.set_defaults(func=cmd_dataset_info)
    compare = dataset.add_parser("compare", help="how differently platforms rank the same programs")
    compare.add_argument("path", nargs="?", default=DEFAULT_DATASET)
    compare.add_argument("--platforms", help="comma-separated platform ids (default: all)")
    compare.add_argument("--min-programs", type=int, default=8, help="shared programs a task needs to count")
    compare.add_argument("--json", action="store_true")
    compare.set_defaults(func=cmd_dataset_compare, platform=None)
    imp = dataset.add_parser("import", help="import a MetaSchedule work directory (its JSONDatabase), or Ansor/TenSet "
                                            "record files and folders (--format ansor)")
    imp.add_argument("work_dir", nargs="+", metavar="WORK_DIR|FILE_OR_DIR",
                     help="a MetaSchedule work directory; with --format ansor: record files and/or folders of them "
                          "(TenSet's measure_records/<platform>/)")
    imp.add_argument("--format", choices=["metaschedule", "ansor"], default="metaschedule",
                     help="metaschedule (default) or ansor: Ansor/TenSet measurement records (log v0.2-v0.6)")
    imp.add_argument("--dataset", default=DEFAULT_DATASET)
    imp.add_argument("--network", help="network name for the imported tasks (default: the folder's or file's name)")
    imp.add_argument("--task-weights", metavar="MAPPING.json",
                     help='--format ansor: {"network": {"workload key": weight}}: networks and weights of the tasks '
                          "(TenSet's own network files need old TVM to read); records of other keys are skipped")
    imp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    where = imp.add_mutually_exclusive_group()
    where.add_argument("--measured-here", action="store_true", help="the logs were measured on this machine")
    where.add_argument("--hardware", help="description of the machine that measured the logs")
    where.add_argument("--platform", metavar="PLATFORM_ID",
                       help="a platform the dataset already has: the logs were measured there (its target must be "
                            "the records')")
    imp.add_argument("--workload", metavar="SOURCE",
                     help="the zoo workload (or file) the run tuned, as given to `tlp tune`: tasks are catalogued "
                          "with its names, networks and weights")
    imp.add_argument("--top-tasks", type=int, default=0, metavar="N", help="with --workload: as `tlp tune --top-tasks`")
    imp.set_defaults(func=cmd_dataset_import)
    seal = dataset.add_parser("seal", help="compress appended records into committed segments")
    seal.add_argument("path", nargs="?", default=DEFAULT_DATASET)
    seal.set_defaults(func=cmd_dataset_seal)
    export = dataset.add_parser("export", help="write one platform as plain MetaSchedule JSONDatabase files")
    export.add_argument("path")
    export.add_argument("--platform", required=True)
    export.add_argument("--out", required=True)
    export.set_defaults(func=cmd_dataset_export)
    verify = dataset.add_parser("verify", help="check every segment and tail for damage (exit 1 when found)")
    verify.add_argument("path", nargs="?", default=DEFAULT_DATASET)
    verify.add_argument("--record-missing", action="store_true",
                        help="record checksums of segments that have none and read cleanly (never rewrites them)")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(func=cmd_dataset_verify)
    return parser


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # `kill PID` stops like Ctrl-C (batch in flight dropped, the rest stored and sealed). A collection started in
    # the background by a script cannot be stopped with SIGINT at all: the shell starts it with SIGINT ignored.
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm) if on_main_thread else None
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not args.verbose:
        # MetaSchedule logs every evolutionary-search step at INFO; that drowns the progress bar.
        logging.getLogger("tvm").setLevel(logging.WARNING)
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)  # its console handler follows this
    try:
        return int(args.func(args) or 0)
    except TLPError as error:
        if args.debug:
            traceback.print_exception(error)
        print(f"tlp: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tlp: interrupted; everything measured so far is stored (re-run the same command to continue)",
              file=sys.stderr)
        return 130
    finally:
        if previous is not None:  # in-process callers (tests) get their handler back
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
