"""Training recipes and seed ensembles on a GPU: what moves held-out ranking (issue 10, part 4)?

The 2-core machines train one hidden-128 model in 7-17 minutes, so earlier studies ran three seeds of two
recipes and found that the seed alone moves the held-out TenSet top-1 by 0.09-0.17. This benchmark trains many
recipes x seeds at once on a GPU machine (one process per training, the GPU shared), from featurized programs,
and scores every model and every fixed ensemble (all seeds of a recipe: mean of per-task rank percentiles) on

- TenSet's top-1 / top-5 over the held-out networks' stored programs of one platform (``tlp eval``'s scores), and
- the search-like metrics of ``tlp eval --search-runs`` (all-round top-1, the headline; late top-1; pick regret)
  over the measured programs of tuning runs on that platform, none of them a training record.

Three steps, because the GPU machine has no TVM:

    # here (TVM): featurize the platform's programs and the runs' programs with one fitted featurizer
    .venv/bin/python benchmarks/training_recipe/recipe_sweep.py prepare --platform llvm-znver4-2c-2d80d0a8 --seq-len 25 \\
        --search-runs R/runs/bench/unseen R/runs/bench/realistic R/runs/bench/networks/bert_tiny \\
        R/runs/bench/networks/mobilenet_v2 --bundle .sweep
    # there (no TVM; reads only the bundle): train, keep every model's scores and checkpoint
    python3 benchmarks/training_recipe/recipe_sweep.py train --bundle .sweep --recipes lstm-soft-slowdown --seeds 0,1,2,3 \\
        --workers 12 --out $OUT
    # here: score them with the library's metrics (the runs are re-read and checked against the bundle)
    .venv/bin/python benchmarks/training_recipe/recipe_sweep.py score --bundle .sweep --scores scores.npz --search-runs ... \\
        --out benchmarks/training_recipe/results/recipe_sweep_zen4.json
    # here, for a model worth shipping: record what tlp train would have (platforms, held-out networks, recipe)
    .venv/bin/python benchmarks/training_recipe/recipe_sweep.py export --bundle .sweep --checkpoint $OUT/checkpoints-R.tar \\
        --name R-seed0.pt --out student.pt

Recipes (``RECIPES``) differ from ``tlp train --seq-len 25 --hidden 128 --loss soft-listwise+slowdown`` in one thing
each (the distilled ones in their teachers and transfer programs).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import multiprocessing
import os
import re
import pickle  # the bundle's search set only: a file prepare wrote here
import shutil
import signal
import sys
import tarfile
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))  # the checkout's tlp (GPU machines: no install)

# pylint: disable=wrong-import-position
from tlp.evaluation import rank_percentiles, score_models
from tlp.features.cache import read_cache
from tlp.model.estimator import TLPModel, TrainConfig
from tlp.model.network import ModelConfig

BASE_MODEL = {"hidden": 128}
BASE_TRAIN = {"loss": "soft-listwise+slowdown"}
# name -> (ModelConfig overrides, TrainConfig overrides) on top of the base recipe. The recipes of the shipped model
# and LambdaRank (the paper's loss); the others swept until 2026-11-27 lost to these and left with their losses
# (README.md, "What was learned"; the full table in git history, 312e08d:benchmarks/recipe_sweep.py).
RECIPES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "lambdarank": ({}, {"loss": "lambdarank"}),
    # the cascade's teachers' recipe at 25 rows: two LSTM layers, soft-listwise + the expected slowdown of a pick
    "lstm-soft-slowdown": ({"arch": "lstm"}, {}),
    # distilled from a seed ensemble of those (``train --teachers``), on their ranking of the bundle's unmeasured
    # transfer programs too (``transfer`` step), the measured ranking mixed back in (alpha 0.5); the slowdown term
    # reads the measured latencies only
    "lstm-soft-slowdown-distil-transfer-mixed": ({"arch": "lstm"}, {}),
    # the same student with one LSTM layer: the shipped cascade's first stage (MODEL_CARD.md)
    "lstm1-soft-slowdown-distil-transfer-mixed": ({"arch": "lstm", "layers": 1}, {}),
    "one-epoch": ({}, {"epochs": 1}),  # not a candidate: checks the three steps end to end in a minute
}
# Recipes trained on a teacher ensemble's scores (tlp.model.distil) -> weight of the measured labels in the targets.
DISTILLED = {"lstm-soft-slowdown-distil-transfer-mixed": 0.5, "lstm1-soft-slowdown-distil-transfer-mixed": 0.5}
# Recipes that also train on the bundle's transfer programs:
TRANSFERRED = {"lstm-soft-slowdown-distil-transfer-mixed", "lstm1-soft-slowdown-distil-transfer-mixed"}
# In the train step's --out: the teachers' mean scores of the training programs (then of the transfer programs).
TEACHER_SCORES = "teacher_scores.npy"


# ---- prepare (here, with TVM) ----------------------------------------------------------------------------------
def _search_set(dataset_path: str, platform: str, networks: list[str], run_paths: list[str]) -> Any:
    """The runs' programs pooled as ``tlp eval --search-runs`` pools them (no training record scored)."""
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset
    from tlp.evaluation import search_metrics
    from tlp.features.tensors import load_programs

    train, _ = load_programs(Dataset(dataset_path), platform).split_by_network(set(networks))
    return search_metrics.read_held_out_runs(run_paths, train)


SEARCH_SET = "search_set.pkl"


def _bundle_search_set(bundle: Path, dataset_path: str, meta: dict[str, Any]) -> Any:
    """The bundle's search set: pickled by ``prepare`` (reading the runs and excluding the training records reads
    the whole store: 3-10 min), made from the dataset and the runs for a bundle prepared before it was kept."""
    if (bundle / SEARCH_SET).exists():
        return pickle.loads((bundle / SEARCH_SET).read_bytes())
    search = _search_set(dataset_path, meta["platform"], meta["held_out_networks"], meta["search_runs"])
    (bundle / SEARCH_SET).write_bytes(pickle.dumps(search))
    return search


def prepare(args: argparse.Namespace) -> None:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset
    from tlp.features.cache import load_or_featurize
    from tlp.features.featurizer import FeatureConfig
    from tlp.workloads import held_out_networks

    networks = held_out_networks()
    bundle = Path(args.bundle)
    bundle.mkdir(parents=True, exist_ok=True)
    dataset = Dataset(args.dataset)
    train_platforms = (dataset.platform_ids() if args.train_platforms == "all"
                       else (args.train_platforms or args.platform).split(","))
    if args.platform not in train_platforms:
        raise SystemExit(f"--train-platforms must include the scored platform {args.platform}")
    cached = load_or_featurize(dataset, train_platforms, networks, FeatureConfig(seq_len=args.seq_len,
                                                                                    compact=args.compact))
    shutil.copytree(cached.path, bundle / "programs", dirs_exist_ok=True)
    search = _search_set(args.dataset, args.platform, networks, args.search_runs)
    (bundle / SEARCH_SET).write_bytes(pickle.dumps(search))  # for score: reading it again takes minutes
    labeled = search.labeled()
    features = cached.programs.featurizer.transform(labeled.traces, [labeled.extents.get(k) for k in labeled.task_keys])
    np.savez_compressed(bundle / "search.npz", features=features, latencies=search.latencies)
    (bundle / "bundle.json").write_text(json.dumps({
        "platform": args.platform, "train_platforms": cached.programs.platform_ids, "seq_len": args.seq_len,
        "compact": args.compact, "held_out_networks": networks,
        "search_runs": args.search_runs, "search": search.summary(), "programs_cache": str(cached.path)}, indent=1))
    print(f"{bundle}: {len(cached.programs.task_keys)} programs, {len(search.traces)} search programs")


# ---- transfer (here, with TVM): unmeasured programs of new operator shapes for the distilled recipes ---------------
TRANSFER = "transfer.npz"  # in the bundle: features and task keys of the transfer programs (no latency)


def transfer(args: argparse.Namespace) -> None:
    """Random draws of ``--tasks`` new operator shapes on the bundle's platform, featurized with the bundle's
    featurizer: the unmeasured programs a distilled recipe also learns the teachers' ranking of (the library's
    ``tlp.model.distil.with_transfer_set``, as ``tlp train --transfer-shapes`` makes them)."""
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset
    from tlp.model.distil import with_transfer_set

    bundle = Path(args.bundle)
    meta = json.loads((bundle / "bundle.json").read_text())
    programs, _ = read_cache(bundle / "programs")
    target = Dataset(args.dataset).store(meta["platform"]).platform.target
    guide = None
    if args.guide:
        from tlp.search.cost_model import TLPCostModel

        # Not bound to the bundle's target: that machine need not be this one (the guide only scores traces).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            guide = TLPCostModel(TLPModel.load(args.guide))
    grown = with_transfer_set(programs, target, args.tasks, args.per_task, args.seed, guide=guide,
                              guided_per_shape=args.guided_per_task)
    n = len(programs.task_keys)
    keys = grown.task_keys[n:]
    names = {k: grown.catalogue[k]["name"] for k in dict.fromkeys(keys)}
    np.savez_compressed(bundle / TRANSFER, features=grown.features[n:], task_keys=np.array(keys),
                        names=json.dumps(names))
    print(f"{bundle / TRANSFER}: {len(keys)} programs of {len(names)} new tasks", flush=True)


def _with_transfer(train_programs: Any, bundle: str) -> Any:
    """The training programs followed by the bundle's transfer programs (latency NaN: a teacher's ranking only)."""
    with np.load(Path(bundle) / TRANSFER) as npz:
        return train_programs.with_unmeasured(npz["features"], [str(k) for k in npz["task_keys"]],
                                              json.loads(str(npz["names"])))


# ---- train (there, no TVM) -------------------------------------------------------------------------------------
# Weight averages kept beside each training with ``train --averaged``: name -> the epochs whose end-of-epoch weights
# are averaged, from the epochs run and the best (validation) epoch. Fixed before any was scored. Why: validation
# top-1 does not predict held-out top-1, so the epoch it picks is a draw; an average of nearby epochs is not.
AVERAGES: dict[str, Any] = {
    "avg-tail": lambda run, best: range(best, run),  # the best epoch and the patience window after it
    "avg-half": lambda run, best: range(run // 2, run),  # the second half of the epochs run
}


def _averaged_state(snapshots: list[dict[str, Any]], epochs: range) -> dict[str, Any]:
    chosen = [snapshots[e] for e in epochs]
    return {k: sum(s[k].double() for s in chosen).div(len(chosen)).to(chosen[0][k].dtype) for k in chosen[0]}


def _train_one(job: tuple[str, int, str, str, bool]) -> list[dict[str, Any]]:
    recipe, seed, bundle, out, averaged = job
    import torch  # pylint: disable=import-outside-toplevel

    torch.set_num_threads(1)
    meta = json.loads((Path(bundle) / "bundle.json").read_text())
    programs, _ = read_cache(Path(bundle) / "programs")
    train, _ = programs.split_by_network(set(meta["held_out_networks"]))
    test = test_split(programs, meta)
    search_features = np.load(Path(bundle) / "search.npz")["features"]
    model_overrides, train_overrides = RECIPES[recipe]
    model = TLPModel(programs.featurizer.config, ModelConfig(**{**BASE_MODEL, **model_overrides}),
                     TrainConfig(**{**BASE_TRAIN, **train_overrides, "seed": seed}))
    targets = None
    if recipe in DISTILLED:
        from tlp.model.distil import distillation_targets  # pylint: disable=import-outside-toplevel

        teacher_scores = np.load(Path(out) / TEACHER_SCORES)
        if recipe in TRANSFERRED:
            train = _with_transfer(train, bundle)
        targets = distillation_targets(train, teacher_scores[: len(train.task_keys)], model.train_config.loss,
                                       DISTILLED[recipe])
    snapshots: list[dict[str, Any]] = []
    on_epoch = (lambda _row: snapshots.append({k: v.detach().to("cpu", copy=True)
                                                for k, v in model.net.state_dict().items()})) if averaged else None
    start = time.perf_counter()
    history = model.fit(train, progress=False, on_epoch=on_epoch, targets=targets)
    train_s = time.perf_counter() - start
    row = {"recipe": recipe, "seed": seed, "best_epoch": history.best_epoch, "epochs_run": len(history.epochs),
           "best_val_top1": history.best_val_top1, "train_s": round(train_s, 1), "device": model._device().type,
           "device_name": torch.cuda.get_device_name() if model._device().type == "cuda" else "cpu"}
    rows = [_keep(model, f"{recipe}-seed{seed}", row, test, search_features, meta, out)]
    for average, epochs_of in AVERAGES.items() if averaged else ():
        epochs = epochs_of(len(history.epochs), history.best_epoch)
        model.net.load_state_dict(_averaged_state(snapshots, epochs))
        model.meta["averaged_epochs"] = [epochs.start, epochs.stop - 1]  # the checkpoint says what it holds
        rows.append(_keep(model, f"{recipe}+{average}-seed{seed}", {
            **row, "recipe": f"{recipe}+{average}", "averaged_epochs": model.meta["averaged_epochs"]},
            test, search_features, meta, out))
    return rows


def _keep(model: TLPModel, name: str, row: dict[str, Any], test: Any, search_features: np.ndarray,
          meta: dict[str, Any], out: str) -> dict[str, Any]:
    """Save the model and its fp32 scores of the test and search programs."""
    model.save(Path(out) / "checkpoints" / f"{name}.pt")
    test_scores, search_scores = _model_scores(model, meta, test, search_features)
    np.savez(Path(out) / "checkpoints" / f"{name}.scores.npz", test=test_scores, search=search_scores)
    print(json.dumps(row), flush=True)
    return row


def _model_scores(model: TLPModel, meta: dict[str, Any], test: Any, search_features: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The scored platform's head's fp32 scores of the bundle's test and search programs."""
    head = model.head_index(meta["platform"])
    return (model.predict_features(test.features, head, precision="fp32"),
            model.predict_features(search_features, head, precision="fp32"))


def test_split(programs: Any, meta: dict[str, Any]) -> Any:
    """The scored platform's programs of the held-out networks (one latency column)."""
    _, test = programs.platform(meta["platform"]).split_by_network(set(meta["held_out_networks"]))
    return test


def train(args: argparse.Namespace) -> None:
    out = Path(args.out)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    jobs = [(r, int(s), args.bundle, str(out), args.averaged)
            for s in args.seeds.split(",") for r in args.recipes.split(",")]
    unknown = sorted({r for r, *_ in jobs} - set(RECIPES))
    if unknown:
        raise SystemExit(f"unknown recipe(s) {', '.join(unknown)}; known: {', '.join(RECIPES)}")
    if any(r in DISTILLED for r, *_ in jobs):
        _teacher_scores(args.bundle, args.teachers, out)
    # A plain kill of this process must stop the trainings too: leaving the pool's context terminates them, and
    # SIGTERM otherwise ends Python without leaving it (the workers then train on, holding the cores).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    finished_jobs = 0
    # spawn: CUDA does not survive fork; one process per training shares the GPU. A deadline keeps what finished
    # when a machine's command limit nears (the unfinished trainings are listed, not half-kept).
    with multiprocessing.get_context("spawn").Pool(args.workers, maxtasksperchild=1) as pool:
        finished = pool.imap_unordered(_train_one, jobs, chunksize=1)
        try:
            while finished_jobs < len(jobs):
                left = args.deadline_s - (time.perf_counter() - started)
                rows += finished.next(timeout=max(1.0, left) if np.isfinite(left) else None)
                finished_jobs += 1
        except multiprocessing.TimeoutError:
            pool.terminate()
    done = {(r["recipe"], r["seed"]) for r in rows}
    unfinished = [f"{r}-seed{s}" for r, s, *_ in jobs if (r, s) not in done]
    if unfinished:
        print(f"deadline ({args.deadline_s:.0f} s): unfinished {', '.join(unfinished)}", flush=True)
    scores = {}
    for row in rows:
        name = f"{row['recipe']}-seed{row['seed']}"
        with np.load(out / "checkpoints" / f"{name}.scores.npz") as npz:
            scores[f"{name} test"], scores[f"{name} search"] = npz["test"], npz["search"]
        os.unlink(out / "checkpoints" / f"{name}.scores.npz")
    np.savez_compressed(out / "scores.npz", **scores)
    for recipe in sorted({row["recipe"] for row in rows}):  # one file per recipe: a machine returns <= 16 MiB each
        with tarfile.open(out / f"checkpoints-{recipe}.tar", "w") as tar:
            for row in (r for r in rows if r["recipe"] == recipe):
                name = f"{recipe}-seed{row['seed']}.pt"
                tar.add(out / "checkpoints" / name, arcname=f"checkpoints/{name}")
    shutil.rmtree(out / "checkpoints")
    (out / "rows.json").write_text(json.dumps({"rows": rows, "wall_s": round(time.perf_counter() - started, 1),
                                               "workers": args.workers, "unfinished": unfinished}, indent=1))


def _teacher_scores(bundle: str, teachers: list[str] | None, out: Path) -> None:
    """The mean scores of the ``--teachers`` checkpoints (files, or ``checkpoints-*.tar`` of train steps) of the
    bundle's training programs, written once for the distilled recipes' trainings."""
    from tlp.model.distil import ensemble_scores  # pylint: disable=import-outside-toplevel

    if not teachers:
        raise SystemExit(f"recipes {', '.join(DISTILLED)} need --teachers")
    # The scores depend on the teachers and on the bundle's training and transfer programs only: a train step into
    # the same --out with the same ones reuses them (reading the bundle and scoring every program take minutes).
    made_of = hashlib.sha256()
    for path in [*teachers, *(Path(bundle) / name for name in ("bundle.json", "programs/meta.json", TRANSFER))]:
        if Path(path).exists():
            made_of.update(Path(path).read_bytes())
    stamp = out / (TEACHER_SCORES + ".sha256")
    if (out / TEACHER_SCORES).exists() and stamp.exists() and stamp.read_text() == made_of.hexdigest():
        print(f"teachers: scores of {', '.join(map(str, teachers))} already in {out}", flush=True)
        return
    meta = json.loads((Path(bundle) / "bundle.json").read_text())
    programs, _ = read_cache(Path(bundle) / "programs")
    train_programs, _ = programs.split_by_network(set(meta["held_out_networks"]))
    if (Path(bundle) / TRANSFER).exists():
        train_programs = _with_transfer(train_programs, bundle)
    with tempfile.TemporaryDirectory() as unpacked:
        paths = [p for path in teachers for p in (_unpack([path], unpacked) if ".tar" in Path(path).suffixes
                                                  else [Path(path)])]
        models = [TLPModel.load(p) for p in paths]
    np.save(out / TEACHER_SCORES, ensemble_scores(models, train_programs))
    stamp.write_text(made_of.hexdigest())
    print(f"teachers: {', '.join(p.stem for p in paths)}", flush=True)


def _unpack(tars: list[str], into: str) -> list[Path]:
    """Extract train steps' ``checkpoints-*.tar`` files (compressed or not) into ``into``; their checkpoints."""
    paths: list[Path] = []
    for path in tars:
        with tarfile.open(path) as tar:
            tar.extractall(into, filter="data")
            paths += [Path(into) / m.name for m in tar.getmembers() if m.name.endswith(".pt")]
    return paths


# ---- export (here, with the dataset): a sweep checkpoint as tlp train would have saved it -------------------------
def export(args: argparse.Namespace) -> None:
    """Give one trained checkpoint (a file, or NAME inside a ``checkpoints-*.tar``) what ``tlp train`` records and
    the sweep's train step (no TVM, no dataset there) cannot: its platform's description (which head is nearest,
    for ``tlp adapt`` and ``tlp train --add-heads-to``), the networks it never trained on, its recipe and teachers.
    The weights are not touched."""
    from tlp.dataset.store import Dataset  # pylint: disable=import-outside-toplevel

    meta = json.loads((Path(args.bundle) / "bundle.json").read_text())
    name = args.name or Path(args.checkpoint).name
    with tempfile.TemporaryDirectory() as unpacked:
        path = Path(args.checkpoint)
        if ".tar" in path.suffixes:
            found = [p for p in _unpack([str(path)], unpacked) if p.name == name]
            if not found:
                raise SystemExit(f"{path}: holds no {name}")
            path = found[0]
        model = TLPModel.load(path)
    dataset = Dataset(args.dataset)
    recipe = name.removesuffix(".pt").rsplit("-seed", 1)[0]
    model.meta.update({
        "platform_info": {p: dataset.store(p).platform.to_json() for p in model.platforms},
        "held_out_networks": meta["held_out_networks"], "dataset": args.dataset,
        "trained_by": {"command": "benchmarks/training_recipe/recipe_sweep.py train", "recipe": recipe,
                       "bundle": {k: meta[k] for k in ("platform", "train_platforms", "seq_len", "compact")},
                       **({"teachers": [Path(t).name for t in args.teachers]} if args.teachers else {})}})
    model.save(Path(args.out))
    print(json.dumps({"out": args.out, "platforms": model.platforms, "trained_by": model.meta["trained_by"]}, indent=1))


# ---- rescore (here or there): trained checkpoints on another bundle -----------------------------------------------
def rescore(args: argparse.Namespace) -> None:
    """Scores of a train step's checkpoints (its ``checkpoints-*.tar`` files and ``rows.json``) on ``--bundle``:
    the same models on a test split that has grown since (a bundle prepared later from the same training records,
    whose vocabularies are checked). Rows without a checkpoint in the tars (a weight average whose tar was not
    brought back, say) are left out and counted."""
    out = Path(args.out)
    meta = json.loads((Path(args.bundle) / "bundle.json").read_text())
    programs, _ = read_cache(Path(args.bundle) / "programs")
    test = test_split(programs, meta)
    search_features = np.load(Path(args.bundle) / "search.npz")["features"]
    rows = json.loads(Path(args.rows).read_text())["rows"]
    scores, kept = {}, []
    with tempfile.TemporaryDirectory() as unpacked:
        _unpack(args.checkpoints, unpacked)
        for row in rows:
            name = f"{row['recipe']}-seed{row['seed']}"
            checkpoint = Path(unpacked) / "checkpoints" / f"{name}.pt"
            if not checkpoint.exists():
                continue
            model = TLPModel.load(checkpoint)
            # The same vocabularies mean the same feature ids: the bundle was featurized as the model was trained.
            if (model.featurizer.kinds, model.featurizer.strings) != (programs.featurizer.kinds,
                                                                      programs.featurizer.strings):
                raise SystemExit(f"{name}: its vocabularies are not the bundle's; prepare the bundle from the "
                                 "records the model was trained on")
            scores[f"{name} test"], scores[f"{name} search"] = _model_scores(model, meta, test, search_features)
            kept.append(row)
            print(name, flush=True)
    print(f"{len(kept)} of {len(rows)} trainings rescored (the others have no checkpoint in the tars)", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / "scores.npz", **scores)
    (out / "rows.json").write_text(json.dumps({"rows": kept, "rescored_on": str(args.bundle)}, indent=1))


# ---- score (here) ----------------------------------------------------------------------------------------------
def _metrics(test: Any, test_scores: np.ndarray, search: Any, search_scores: np.ndarray, populations: Any,
             networks: list[str]) -> dict[str, Any]:
    from tlp.evaluation import search_metrics  # pylint: disable=import-outside-toplevel

    tenset = score_models(test, test_scores, networks)
    searched = search_metrics.search_scores(search, search_scores, populations)
    return {"top1": tenset["top1"], "top5": tenset["top5"],
            "per_network_top1": {n: r["top1"] for n, r in tenset["per_network"].items()},
            **{m: searched[m] for m in search_metrics.METRICS}}


def _recipe_json(name: str) -> dict[str, Any]:
    """What a scored recipe is: ``lstm`` or, from ``train --averaged``, ``lstm+avg-tail`` (its weight average)."""
    recipe, _, average = name.partition("+")
    return {"model": {**BASE_MODEL, **RECIPES[recipe][0]}, "train": {**BASE_TRAIN, **RECIPES[recipe][1]},
            **({"weights": average} if average else {})}


def _members(spec: str, trained: dict[str, Any]) -> list[str]:
    """``lstm@12-15+transformer@12-15`` -> the trainings it names (each must have been trained).

    A recipe's name may itself hold a ``+`` (``lstm+avg-tail@0-1``: its weight-averaged models), so the
    spec is cut after each ``@SEEDS``, not at every ``+``."""
    parts = re.findall(r"([^@]+)@(\d+)(?:-(\d+))?(?:\+|$)", spec)
    members = []
    for recipe, low, high in parts:
        members += [f"{recipe}-seed{s}" for s in range(int(low), int(high or low) + 1)]
    if not members:
        raise SystemExit(f"--ensemble {spec}: expected RECIPE@SEEDS[+RECIPE@SEEDS...]")
    missing = [m for m in members if m not in trained]
    if missing:
        raise SystemExit(f"--ensemble {spec}: not trained: {', '.join(missing)}")
    return members


def score(args: argparse.Namespace) -> None:
    from tlp.evaluation import search_metrics  # pylint: disable=import-outside-toplevel

    bundle = Path(args.bundle)
    meta = json.loads((bundle / "bundle.json").read_text())
    networks = meta["held_out_networks"]
    programs, _ = read_cache(bundle / "programs")
    test = test_split(programs, meta)
    test = dataclasses.replace(test, latencies=test.latencies[:, 0])
    search = _bundle_search_set(bundle, args.dataset, meta)
    if not np.array_equal(search.latencies, np.load(bundle / "search.npz")["latencies"]):
        raise SystemExit(f"{bundle}: the runs' programs differ from the ones the bundle featurized; prepare again")
    populations = search_metrics.pick_populations(search)
    scores: dict[str, np.ndarray] = {}
    trained: dict[str, dict[str, Any]] = {}
    for path in args.scores:  # several train steps (more seeds later) score as one sweep
        scores.update(np.load(path))
        rows = json.loads(Path(path).with_name("rows.json").read_text())["rows"]
        trained.update({f"{r['recipe']}-seed{r['seed']}": r for r in rows})
    result: dict[str, Any] = {"platform": meta["platform"], "seq_len": meta["seq_len"], "recipes": {
        name: _recipe_json(name) for name in sorted({r["recipe"] for r in trained.values()})},
        "test_programs": len(test.task_keys), "search": search.summary(), "date": datetime.date.today().isoformat(),
        "rows": [], "ensembles": []}
    for name, row in trained.items():
        metrics = _metrics(test, scores[f"{name} test"], search, scores[f"{name} search"], populations, networks)
        result["rows"].append({**row, **metrics})
        print(name, json.dumps({k: v for k, v in metrics.items() if k != "per_network_top1"}), flush=True)
    test_groups, search_groups = test.group_ids(), search.groups
    by_recipe = {r: [n for n, row in trained.items() if row["recipe"] == r] for r in result["recipes"]}
    declared = {f"{recipe} x{len(members)}": members for recipe, members in by_recipe.items()}
    for spec in args.ensemble or []:
        declared[spec] = _members(spec, trained)
    for recipe, members in declared.items():
        test_mean = sum(rank_percentiles(scores[f"{m} test"], test_groups) for m in members) / len(members)
        search_mean = sum(rank_percentiles(scores[f"{m} search"], search_groups) for m in members) / len(members)
        metrics = _metrics(test, test_mean, search, search_mean, populations, networks)
        result["ensembles"].append({"name": recipe, "members": members, **metrics})
        print(f"ensemble {recipe}", json.dumps(
            {k: v for k, v in metrics.items() if k != "per_network_top1"}), flush=True)
    if args.subsets:
        result["subsets"] = _subset_curve(test, scores, by_recipe, networks, [int(k) for k in args.subsets.split(",")])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


def _subset_curve(test: Any, scores: dict[str, np.ndarray], by_recipe: dict[str, list[str]], networks: list[str],
                  sizes: list[int], draws: int = 30) -> list[dict[str, Any]]:
    """TenSet top-1 of ensembles of ``k`` random members of each recipe (``draws`` subsets): how the ensemble's
    score grows with its size, and how much it depends on which seeds it holds."""
    groups = test.group_ids()
    rng = np.random.default_rng(0)
    out = []
    for recipe, members in by_recipe.items():
        percentiles = {m: rank_percentiles(scores[f"{m} test"], groups) for m in members}
        for k in (k for k in sizes if k < len(members)):
            values = [score_models(test, sum(percentiles[m] for m in subset) / k, networks)["top1"]
                      for subset in (rng.choice(members, k, replace=False) for _ in range(draws))]
            out.append({"recipe": recipe, "members": k, "draws": draws, "median_top1": float(np.median(values)),
                        "p10_top1": float(np.percentile(values, 10)), "p90_top1": float(np.percentile(values, 90))})
            print(f"subsets {recipe} of {k}", json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    p = steps.add_parser("prepare")
    p.add_argument("--dataset", default="datasets/tlp-cpu")
    p.add_argument("--platform", required=True)
    p.add_argument("--train-platforms", help="comma-separated, or all (MTL: a head each); default: --platform")
    p.add_argument("--seq-len", type=int, default=25)
    p.add_argument("--compact", action="store_true", help="compact traces (FeatureConfig.compact)")
    p.add_argument("--search-runs", nargs="+", required=True)
    p.add_argument("--bundle", required=True)
    t = steps.add_parser("train")
    t.add_argument("--bundle", required=True)
    t.add_argument("--recipes", default="lstm1-soft-slowdown-distil-transfer-mixed")
    t.add_argument("--seeds", default="0,1,2")
    t.add_argument("--workers", type=int, default=2)
    t.add_argument("--deadline-s", type=float, default=float("inf"), help="stop waiting after this many seconds")
    t.add_argument("--teachers", nargs="+", help="for the distilled recipes (DISTILLED): the checkpoints (files or "
                   "checkpoints-*.tar) whose mean scores they train on")
    t.add_argument("--averaged", action="store_true", help="also keep each training's weight averages "
                   "(AVERAGES: recipe+avg-tail, recipe+avg-half), scored as recipes of their own")
    t.add_argument("--out", required=True)
    x = steps.add_parser("transfer")
    x.add_argument("--dataset", default="datasets/tlp-cpu")
    x.add_argument("--bundle", required=True)
    x.add_argument("--tasks", type=int, default=180)
    x.add_argument("--per-task", type=int, default=48)
    x.add_argument("--seed", type=int, default=0)
    x.add_argument("--guide", help="a checkpoint: also the programs a search guided by it would measure first")
    x.add_argument("--guided-per-task", type=int, default=0)
    r = steps.add_parser("rescore")
    r.add_argument("--bundle", required=True)
    r.add_argument("--checkpoints", nargs="+", required=True, help="checkpoints-*.tar files of train steps")
    r.add_argument("--rows", required=True, help="the train step's rows.json")
    r.add_argument("--out", required=True)
    s = steps.add_parser("score")
    s.add_argument("--dataset", default="datasets/tlp-cpu")
    s.add_argument("--bundle", required=True)
    s.add_argument("--scores", nargs="+", required=True,
                   help="scores.npz of train steps (rows.json beside each); the same training twice: the last wins")
    s.add_argument("--ensemble", action="append", help="an ensemble besides each recipe's seeds, fixed before "
                   "scoring: RECIPE@SEEDS[+RECIPE@SEEDS...], SEEDS one or FIRST-LAST (repeatable)")
    s.add_argument("--subsets", help="comma-separated ensemble sizes: TenSet top-1 of 30 random member subsets each")
    s.add_argument("--out", required=True)
    e = steps.add_parser("export")
    e.add_argument("--dataset", default="datasets/tlp-cpu")
    e.add_argument("--bundle", required=True)
    e.add_argument("--checkpoint", required=True, help="a checkpoint, or a checkpoints-*.tar of a train step")
    e.add_argument("--name", help="with a tar: the checkpoint's file name in it (RECIPE-seedN.pt)")
    e.add_argument("--teachers", nargs="*", help="the distilled recipes' teachers, recorded by name")
    e.add_argument("--out", required=True)
    args = parser.parse_args()
    steps_run = {"prepare": prepare, "transfer": transfer, "train": train, "rescore": rescore, "score": score,
                 "export": export}
    steps_run[args.step](args)


if __name__ == "__main__":
    main()
