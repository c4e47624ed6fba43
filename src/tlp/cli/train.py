"""`tlp train`: a TLP model from a dataset (one head per platform), or no training: ensembles, cascades, heads."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlp import TLPError
from tlp.cli.common import DEFAULT_DATASET, add_renamed, add_settings, train_platforms


RENAMED = {"--arch": "arch", "--loss": "loss", "--patience": "patience", "--weights": "weights", "--hidden": "hidden",
           "--layers": "layers", "--seq-len": "seq_len", "--compact-traces": "compact=true",
           "--min-head-programs": "min_head_programs", "--distil-alpha": "distil_alpha",
           "--transfer-shapes": "transfer_shapes", "--rescore-least": "rescore_least",
           "--no-feature-cache": "feature_cache=false", "--feature-cache-dir": "feature_cache_dir"}
OWN_OPTIONS = ("epochs", "seed", "device")


@dataclass
class TrainSettings:
    """``tlp train --set`` keys beyond ModelConfig's and TrainConfig's fields."""

    seq_len: int | None = None  # rows per program (default: 80 for MetaSchedule traces, the paper's for Ansor steps)
    compact: bool = False  # trace rows without bookkeeping instructions (the shipped model's form)
    min_head_programs: int = 64  # MTL: refuse a platform with fewer valid programs
    distil_alpha: float = 0.0  # with --distil-from: weight of the measured labels beside the teachers' scores
    transfer_shapes: int = 0  # with --distil-from: random programs of N new operator shapes ranked by the teachers
    rescore_least: int = 32  # with --first-stage: programs the ensemble re-ranks per call
    feature_cache: bool = True  # featurized programs cached in $TLP_CACHE_DIR/features
    feature_cache_dir: str | None = None


def settings_of(args: argparse.Namespace) -> tuple[Any, Any, TrainSettings]:
    """ModelConfig, TrainConfig and TrainSettings from the options and ``--set`` pairs."""
    # pylint: disable=import-outside-toplevel
    from tlp.model.estimator import TrainConfig
    from tlp.model.losses import LOSSES
    from tlp.model.network import ARCHS, ModelConfig
    from tlp.settings import apply_settings, check_ranges, parse_pairs

    model, train, opts = ModelConfig(), TrainConfig(epochs=args.epochs, seed=args.seed, device=args.device), \
        TrainSettings()
    model, train, opts = apply_settings([model, train, opts], parse_pairs(args.settings, "train"), "train",
                                        reserved=OWN_OPTIONS)
    if train.patience < 1:
        raise TLPError(f"tlp train: patience must be at least 1 epoch, got {train.patience}")
    # Before the dataset is read: nonsense such as --epochs 0 trained nothing, --set lr=-1 trained backwards.
    check_ranges(train, "tlp train", {"epochs": (1, None), "tasks_per_batch": (1, None), "lr": (1e-12, None),
                                      "weight_decay": (0, None), "val_fraction": (0, 0.9),
                                      "programs_per_task": (0, None)})
    check_ranges(model, "tlp train", {"hidden": (1, None), "heads": (1, None), "residual_blocks": (0, None),
                                      "layers": (0, None), "kind_vocab": (2, None), "string_vocab": (2, None),
                                      "id_embedding": (1, None), "dropout": (0, 0.99)})
    check_ranges(opts, "tlp train", {"seq_len": (1, None), "min_head_programs": (1, None), "distil_alpha": (0, 1),
                                     "transfer_shapes": (0, None), "rescore_least": (1, None)})
    if model.hidden % model.heads:
        raise TLPError(f"tlp train: hidden ({model.hidden}) must be a multiple of heads ({model.heads})")
    if train.device not in ("auto", "cpu") and not str(train.device).startswith("cuda"):
        raise TLPError(f"tlp train: --device {train.device!r}: auto, cpu, cuda or cuda:N")
    if str(train.device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise TLPError(f"tlp train: --device {train.device}: PyTorch sees no CUDA device here (or was built "
                           "without CUDA); use --device cpu or auto")
        index = str(train.device).partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise TLPError(f"tlp train: --device {train.device}: PyTorch sees {torch.cuda.device_count()} CUDA "
                           "device(s)")
    if train.loss not in LOSSES or model.arch not in ARCHS:  # before the dataset is read and featurized
        raise TLPError(f"tlp train: loss {train.loss!r} / arch {model.arch!r}: losses are {', '.join(LOSSES)}; "
                       f"archs {', '.join(ARCHS)}")
    return model, train, opts


def _feature_config(dataset: Any, platform_id: str, record_format: str, seq_len: int | None,
                    compact: bool = False) -> Any:
    """What the dataset's records need: trace rows (default 80 long; ``compact``: bookkeeping instructions left
    out) or the paper's Ansor step rows."""
    # pylint: disable=import-outside-toplevel
    from tlp.features.ansor_steps import AnsorStepConfig
    from tlp.features.featurizer import FeatureConfig

    if record_format == "ansor":
        if compact:
            raise TLPError(f"compact: platform {platform_id} holds Ansor steps, not MetaSchedule traces")
        return AnsorStepConfig.paper(str(dataset.store(platform_id).platform.target.get("kind")), seq_len)
    return FeatureConfig(seq_len=seq_len or 80, compact=compact)


def _check_out(out: Path) -> None:
    """The checkpoint's place must be writable: its folder is made now (OSError: one line naming it)."""
    if out.is_dir():
        raise TLPError(f"--out {out}: a folder; give the checkpoint's file name, e.g. {out / 'model.pt'}")
    out.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(out.parent, os.W_OK):
        raise TLPError(f"--out {out}: cannot write in {out.parent}; choose another place")


def cmd_train(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    import hashlib

    from tlp.dataset.store import Dataset, DatasetError
    from tlp.features.cache import default_cache_dir, load_or_featurize
    from tlp.features.tensors import load_platforms
    from tlp.model import distributed
    from tlp.model.estimator import TLPModel
    from tlp.workloads import held_out_networks

    model_config, train_config, opts = settings_of(args)
    if args.distil_from:
        from tlp.model.distil import check_distillation_loss

        check_distillation_loss(train_config.loss)  # before the dataset is read
    elif opts.distil_alpha or opts.transfer_shapes:
        raise TLPError(f"tlp train: {'distil_alpha' if opts.distil_alpha else 'transfer_shapes'} needs teachers: "
                       "name them with --distil-from")
    if args.first_stage and not args.ensemble_of:
        raise TLPError("tlp train: --first-stage makes a cascade whose second stage is an ensemble: name its "
                       "members with --ensemble-of")
    _check_out(Path(args.out))  # before minutes of training: a place the checkpoint cannot go is one line now
    if args.ensemble_of:
        return _ensemble(args, opts.rescore_least)
    dataset = Dataset(args.dataset)
    if args.add_heads_to:
        return _add_heads(dataset, args)
    platform_ids = train_platforms(dataset, args)
    held_out = args.held_out.split(",") if args.held_out else held_out_networks()
    record_format = dataset.store(platform_ids[0]).platform.record_format
    if opts.transfer_shapes and record_format != "metaschedule":
        raise TLPError(f"tlp train: transfer_shapes draws MetaSchedule programs; {platform_ids[0]} holds "
                       f"{record_format} records")
    feature_config = _feature_config(dataset, platform_ids[0], record_format, opts.seq_len, opts.compact)
    feature_cache: dict[str, Any] = {"used": opts.feature_cache}
    rank, processes = distributed.start()  # several under torchrun (tlp.model.distributed)
    if not opts.feature_cache:
        programs: Any = load_platforms(dataset, platform_ids, opts.min_head_programs)
    else:
        if rank > 0:
            distributed.barrier()  # the first process featurizes into the cache; the others then read it
        cached = load_or_featurize(dataset, platform_ids, held_out, feature_config, opts.min_head_programs,
                                   Path(opts.feature_cache_dir) if opts.feature_cache_dir else default_cache_dir())
        if rank == 0:
            distributed.barrier()
        programs = cached.programs
        feature_cache.update({"path": str(cached.path), "hit": cached.hit})
    train, test = programs.split_by_network(set(held_out))
    if len(set(train.task_keys)) < 2:
        raise DatasetError(f"{args.dataset}: fewer than 2 trainable tasks outside the held-out networks")
    digest = hashlib.sha1()
    for platform_id in platform_ids:
        for _, line in dataset.store(platform_id).records.lines():
            digest.update(line.encode())
    model = TLPModel(feature_config, model_config, train_config)
    platform_info = {p: dataset.store(p).platform.to_json() for p in platform_ids}
    targets = None
    if args.distil_from:
        from tlp.model.distil import distillation_targets, ensemble_scores
        from tlp.models import model_path

        teachers = [TLPModel.load(model_path(path)) for path in args.distil_from]
        if opts.transfer_shapes:
            from tlp.model.distil import with_transfer_set

            train = with_transfer_set(train, dataset.store(platform_ids[0]).platform.target, opts.transfer_shapes,
                                      seed=args.seed)
        targets = distillation_targets(train, ensemble_scores(teachers, train), train_config.loss, opts.distil_alpha)
        model.meta["distilled_from"] = {"teachers": list(args.distil_from), "alpha": opts.distil_alpha,
                                        "transfer_shapes": opts.transfer_shapes}
    history = model.fit(train, progress=not args.quiet and rank == 0, platform_info=platform_info, targets=targets)
    distributed.stop()
    if rank > 0:
        return 0  # the processes hold the same model: the first one saves it
    model.meta.update({**({"processes": processes} if processes > 1 else {}),"dataset": str(args.dataset), "dataset_hash": digest.hexdigest(),
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


def _ensemble(args: argparse.Namespace, rescore_least: int) -> int:
    """``tlp train --ensemble-of M1 M2 ...``: no training; one checkpoint that scores with the mean of the models'
    scores (a seed ensemble: the same recipe, dataset and crop with several --seed values); with ``--first-stage
    M0``, a cascade: M0 ranks every candidate and the ensemble re-ranks M0's top ``rescore_least``."""
    # pylint: disable=import-outside-toplevel
    from tlp.model.ensemble import TLPEnsemble
    from tlp.models import model_path

    model: Any = TLPEnsemble.of_checkpoints([model_path(path) for path in args.ensemble_of])
    members = len(model.members)
    if args.first_stage:
        from tlp.model.cascade import TLPCascade
        from tlp.model.estimator import TLPModel

        first = TLPModel.load(model_path(args.first_stage))
        model = TLPCascade(first, model, least=rescore_least,
                           meta={**model.meta, "first_stage_checkpoint": str(args.first_stage)})
    model.save(args.out)
    print(json.dumps({"out": args.out, "members": members, "heads": model.platforms,
                      **({"first_stage": str(args.first_stage), "rescore_least": rescore_least}
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
    wanted = stored if not (args.platforms or args.platform) else train_platforms(dataset, args)
    added = model.add_platforms({p: dataset.store(p).platform.to_json() for p in wanted})
    model.save(args.out)
    print(json.dumps({"out": args.out, "heads": model.platforms, "added": added}, indent=1))
    return 0


def register(verbs: Any) -> None:
    parser = verbs.add_parser("train", help="train a TLP model on a dataset (held-out networks excluded)")
    parser.add_argument("dataset", nargs="?", default=DEFAULT_DATASET)
    parser.add_argument("--out", required=True, help="checkpoint file to write")
    parser.add_argument("--platform", help="platform id (needed when the dataset has several)")
    parser.add_argument("--platforms", help="MTL-TLP: comma-separated platform ids, or 'all': one shared backbone, "
                                           "one head per platform")
    parser.add_argument("--distil-from", nargs="+", metavar="MODEL",
                        help="train on the mean scores of these models (e.g. the same recipe with several --seed "
                            "values, trained on the same dataset and crop) instead of the measured labels: one "
                            "model that ranks like the ensemble (needs loss=soft-listwise+slowdown: its slowdown term then reads the "
                            "measured latencies only)")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--held-out", metavar="NETWORKS", help="comma-separated networks never trained on (default: "
                                                              "the zoo's held-out networks)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto (GPU when present), cpu or cuda")
    parser.add_argument("--add-heads-to", metavar="MODEL",
                        help="no training: give MODEL (a checkpoint or packaged name) a head for every platform of the "
                            "dataset (or of --platform(s)) it lacks, a copy of the nearest trained platform's head, "
                            "what tlp train gives a platform without training programs; saved to --out")
    parser.add_argument("--ensemble-of", nargs="+", metavar="MODEL",
                        help="no training: save one model that scores with the mean of these models' scores (a seed "
                            "ensemble: the same recipe and crop trained with several --seed values; each needs the "
                            "same heads) to --out")
    parser.add_argument("--first-stage", metavar="MODEL",
                        help="with --ensemble-of: a cascade: MODEL (one cheaper network, the same heads) ranks every "
                            "candidate and the ensemble re-ranks its top rescore_least (32) of each call")
    add_settings(parser, "a tlp.model.network.ModelConfig, tlp.model.estimator.TrainConfig or TrainSettings field, "
                        "e.g. arch=lstm, layers=1, loss=soft-listwise+slowdown, weights=average, compact=true, "
                        "seq_len=56, patience=20, distil_alpha=0.5")
    parser.add_argument("-q", "--quiet", action="store_true")
    add_renamed(parser, RENAMED)
    parser.set_defaults(func=cmd_train)
