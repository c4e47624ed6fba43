"""``TLPModel``: featurizer + network behind a scikit-learn-like fit / predict / save / load.

A checkpoint carries everything needed to featurize and predict (feature config and vocabularies, model config,
platforms, dataset hash, metrics) and loads without executing pickle (``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from tqdm import tqdm

from tlp import __version__
from tlp.features.featurizer import FeatureConfig
from tlp.features.formats import FeaturizerConfig, feature_version_of, featurizer_for_config, featurizer_from_json
from tlp.features.tensors import (FeaturizedPrograms, FeaturizerMismatchError, LabeledPrograms,
                                  MultiPlatformPrograms, feature_lengths, group_rows)
from tlp.model import checkpoint, distributed
from tlp.model.checkpoint import SINGLE_DECODER_FORMAT, SINGLE_FORMAT, CheckpointError
from tlp.model.inference import scorer_for
from tlp.model.losses import LOSSES, MEASURED_TERMS
from tlp.model.network import ARCHS, ModelConfig, TLPNet

# What ``save`` writes (CheckpointError is here too, for the modules that import it from here); the formats and
# which class loads each: tlp.model.checkpoint.
CHECKPOINT_FORMAT = SINGLE_FORMAT

WEIGHTS = ("best", "average")
# Validation programs scored at a time (decoded from the feature cache a block at a time).
VALIDATION_BLOCK = 2048
# TrainConfig fields that are gone, with the value every checkpoint had while their option was off (such a
# checkpoint loads; one that used the option is refused, naming it: tlp.model.checkpoint.config_from_json).
REMOVED_TRAIN_FIELDS = {"task_weighting": ("uniform", "task weighting by network share")}


@dataclass
class TrainConfig:
    epochs: int = 60
    tasks_per_batch: int = 8
    lr: float = 7e-4
    weight_decay: float = 1e-6
    loss: str = "lambdarank"  # a key of tlp.model.losses.LOSSES: lambdarank | soft-listwise+slowdown
    patience: int = 10
    val_fraction: float = 0.15
    seed: int = 0
    device: str = "auto"
    # Which weights training ends with: "best", the best-validation epoch's; "average", the mean of the
    # end-of-epoch weights from the best epoch to the last one run. Validation top-1 (on training tasks) does not
    # predict held-out top-1, so the epoch it picks is partly a draw; the average of the epochs around it is not
    # (benchmarks/README.md, "Weight averages").
    weights: str = "best"
    # At most this many programs of a task per training step (a fresh random subset each epoch; 0: all of them).
    # Why: held-out TenSet tasks are mostly 32 random draws, while search-rich training tasks hold thousands of
    # programs bunched near the best; a subset of a big task is a ranking problem shaped like the held-out ones.
    programs_per_task: int = 0
    # At most this many programs in a step (its memory grows with them, ~0.3 MB each): a step takes fewer than
    # tasks_per_batch tasks when they hold more, and a bigger task is split into random parts of at most this many,
    # each a ranking group of its own; every program is still seen once an epoch. On the shipped dataset's biggest
    # platform, 1 step in 25 held more. 0: no bound.
    max_batch_programs: int = 4096
    # At most this many primitives (programs x their longest trace) in one pass of the network with its graph, whose
    # memory grows with them (~20 KB each): a bigger step is computed a span of programs at a time, exactly (its
    # scores first, then each span's backward). 0: no bound.
    max_batch_primitives: int = 196_608


@dataclass
class TrainHistory:
    epochs: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = -1
    best_val_top1: float = float("nan")
    averaged_epochs: list[int] | None = None  # first and last epoch averaged (TrainConfig.weights = "average")


def _subset(index: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` of ``index`` drawn without replacement (all of it when ``size`` is 0 or not smaller)."""
    return index if not 0 < size < len(index) else np.sort(rng.choice(index, size=size, replace=False))


def _parts(index: np.ndarray, most: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``index`` (one task's programs) split at random into parts of at most ``most`` (sorted, about equal)."""
    if not 0 < most < len(index):
        return [index]
    return [np.sort(part) for part in np.array_split(rng.permutation(index), -(-len(index) // most))]


def _steps(parts: list[tuple[int, np.ndarray]], groups: int, most: int) -> list[list[tuple[int, np.ndarray]]]:
    """Consecutive parts in steps of at most ``groups`` parts and ``most`` programs (0: any number)."""
    steps: list[list[tuple[int, np.ndarray]]] = []
    size = 0
    for part in parts:
        if not steps or len(steps[-1]) == groups or (most and size + len(part[1]) > most):
            steps.append([])
            size = 0
        steps[-1].append(part)
        size += len(part[1])
    return steps


def _spans(lengths: np.ndarray, most: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` rows whose programs, padded to the span's longest, hold at most ``most``
    primitives (a program longer than that alone; 0: one span)."""
    spans, start, longest = [], 0, 0
    for row, length in enumerate(lengths.tolist()):
        longest = max(longest, length)
        if most and row > start and (row + 1 - start) * longest > most:
            spans.append((start, row))
            start, longest = row, length
    spans.append((start, len(lengths)))
    return spans


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_state(device: torch.device, state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def average_states(states: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of state dicts of one module (a head soup: heads trained from the same start)."""
    return {k: torch.stack([s[k] for s in states]).mean(dim=0) for k in states[0]}


def top_k_score(scores: np.ndarray, latencies: np.ndarray, groups: np.ndarray, k: int = 1,
                weights: dict[int, float] | None = None) -> float:
    """TenSet's top-k score over tasks: Σ w·best latency / Σ w·(best latency among the k top-scored programs)."""
    numerator = denominator = 0.0
    for group, index in group_rows(groups):
        chosen = index[np.argsort(-scores[index], kind="stable")[:k]]
        weight = 1.0 if weights is None else weights.get(int(group), 1.0)
        numerator += weight * latencies[index].min()
        denominator += weight * latencies[chosen].min()
    return numerator / denominator if denominator else float("nan")


def mean_task_top_k(scores: np.ndarray, latencies: np.ndarray, groups: np.ndarray, k: int = 1) -> float:
    """Mean over tasks of best latency / best latency among the k top-scored programs (each task counts once).

    Used for early stopping: TenSet's score sums latencies over tasks, so one slow task decides it, and across a
    random set of validation tasks that makes the signal jump between epochs.
    """
    values = []
    for _, index in group_rows(groups):
        chosen = index[np.argsort(-scores[index], kind="stable")[:k]]
        values.append(latencies[index].min() / latencies[chosen].min())
    return float(np.mean(values)) if values else float("nan")


def _stand_in(platform_id: str, trained: list[str], platform_info: Mapping[str, dict[str, Any]] | None,
              data: MultiPlatformPrograms | FeaturizedPrograms | None) -> str:
    """The trained platform whose head an untrained platform's head copies: the nearest by ``platform_info``, else
    (platforms not described) the one with the most programs in ``data``."""
    if platform_info and platform_id in platform_info and all(p in platform_info for p in trained):
        from tlp.platform import Platform, nearest_platform  # pylint: disable=import-outside-toplevel

        return nearest_platform(Platform.from_json(platform_info[platform_id]),
                                {p: platform_info[p] for p in trained})[0]
    if data is None:
        raise CheckpointError(f"no description of platform {platform_id} or of the trained ones: cannot tell which "
                              "head is nearest")
    counts = {p: int((~np.isnan(data.latencies[:, data.platform_ids.index(p)])).sum()) for p in trained}
    return max(trained, key=lambda p: counts[p])


class TLPModel:
    """The TLP cost model: ``fit`` on labeled programs, ``predict`` scores (higher = faster) for traces.

    With programs of several platforms it is MTL-TLP: one shared backbone and one head per platform
    (:attr:`platforms` lists them in head order); ``fit_head`` adds or retrains one platform's head on few data.
    """

    def __init__(self, feature_config: FeaturizerConfig | None = None, model_config: ModelConfig | None = None,
                 train_config: TrainConfig | None = None) -> None:
        # The config's type picks the featurizer: MetaSchedule traces (FeatureConfig) or Ansor steps.
        self.featurizer = featurizer_for_config(feature_config or FeatureConfig())
        self.model_config = model_config or ModelConfig()
        self.train_config = train_config or TrainConfig()
        self.net: TLPNet | None = None
        self.meta: dict[str, Any] = {}

    @property
    def platforms(self) -> list[str]:
        """Platform id of each head, in head order (empty for a model trained on unlabeled-platform data)."""
        return list(self.meta.get("platforms") or [])

    @platforms.setter
    def platforms(self, value: list[str]) -> None:
        self.meta["platforms"] = list(value)

    def head_index(self, platform_id: str) -> int:
        """The head trained for ``platform_id``; a single-head model answers 0 for any platform."""
        if platform_id in self.platforms:
            return self.platforms.index(platform_id)
        if len(self.platforms) <= 1:
            return 0
        raise CheckpointError(f"this model has no head for platform {platform_id} (heads: {', '.join(self.platforms)})")

    # ---- training ------------------------------------------------------------------------------------------
    def _device(self) -> torch.device:
        wanted = self.train_config.device
        if wanted == "auto":
            wanted = "cuda" if torch.cuda.is_available() else "cpu"
        return torch.device(wanted)

    def fit(self, programs: LabeledPrograms | MultiPlatformPrograms | FeaturizedPrograms, progress: bool = True,
            on_epoch: Callable[[dict[str, float]], None] | None = None,
            platform_info: Mapping[str, dict[str, Any]] | None = None,
            targets: np.ndarray | None = None) -> TrainHistory:
        """Train on ``programs`` (one platform, or several: one head each, the sum of their losses).

        A random ``val_fraction`` of the *tasks* is held out for early stopping on the mean per-task top-1 of
        every platform's head. Traces are featurized with vocabularies fitted on them; already featurized
        programs (the feature cache) bring their fitted featurizer, which must have this model's feature config.

        A platform none of whose training tasks has two measured programs (all of them held out, say) gets no
        gradient: its head would stay random. It becomes a copy of the nearest trained platform's head instead
        (``meta["head_sources"]``), nearest by ``platform_info`` (platform id -> ``Platform.to_json()``; see
        :func:`tlp.platform.nearest_platform`), else the platform with the most training programs.

        ``targets``: ``[N, P]`` labels to train on instead of the measured ones (per-task normalized throughput),
        e.g. a seed ensemble's (:mod:`tlp.model.distil`); validation and early stopping still use the latencies. A
        program with a target and no latency (NaN) trains too: unmeasured programs ranked by teachers.
        """
        if isinstance(programs, FeaturizedPrograms):
            data: MultiPlatformPrograms | FeaturizedPrograms = programs
            if programs.featurizer.config != self.featurizer.config:
                raise FeaturizerMismatchError(f"the programs were featurized with {programs.featurizer.config}, the "
                                              f"model asks for {self.featurizer.config}")
            self.featurizer = copy.deepcopy(programs.featurizer)
        else:
            data = programs if isinstance(programs, MultiPlatformPrograms) else MultiPlatformPrograms.join([programs])
            self.featurizer.fit(data.traces)
        seed_everything(self.train_config.seed)
        self.model_config = ModelConfig(**{**asdict(self.model_config), "kind_vocab": len(self.featurizer.kinds),
                                           "string_vocab": len(self.featurizer.strings)})
        self.platforms = [p for p in data.platform_ids if p]
        self.net = TLPNet(self.featurizer.config, self.model_config, num_heads=max(1, len(data.platform_ids)))
        parameters = [{"params": list(self.net.parameters()), "lr": self.train_config.lr}]
        if targets is not None and targets.shape != data.latencies.shape:
            raise ValueError(f"targets of shape {targets.shape} for {data.latencies.shape} programs x platforms")
        history, info = self._train(data, list(range(len(data.platform_ids))), parameters, progress, on_epoch,
                                    targets)
        untrained = [self.platforms[c] for c in info.pop("untrained_columns") if c < len(self.platforms)]
        self.meta.update({"best_epoch": history.best_epoch, "best_val_top1": history.best_val_top1, **info,
                          **({"averaged_epochs": history.averaged_epochs} if history.averaged_epochs else {})})
        if untrained and len(untrained) < len(self.platforms):
            trained = [p for p in self.platforms if p not in untrained]
            self.copy_heads({p: _stand_in(p, trained, platform_info, data) for p in untrained})
        return history

    def copy_heads(self, sources: Mapping[str, str]) -> None:
        """Make the head of each platform in ``sources`` a copy of the head of its value's platform (recorded in
        ``meta["head_sources"]``)."""
        if self.net is None:
            raise RuntimeError("the model is not trained or loaded")
        for platform_id, source in sources.items():
            self.net.heads[self.head_index(platform_id)].load_state_dict(
                self.net.heads[self.head_index(source)].state_dict())
        self.meta["head_sources"] = {**self.meta.get("head_sources", {}), **sources}

    def add_platforms(self, platform_info: Mapping[str, dict[str, Any]]) -> dict[str, str]:
        """A head for each platform of ``platform_info`` (id -> ``Platform.to_json()``) the model lacks: a copy of
        the nearest *trained* platform's head (not of another copy), what :meth:`fit` gives a platform without
        training programs and what ``TLPCostModel`` would fall back to; recorded in ``meta["platform_info"]`` and
        ``meta["head_sources"]``. Returns {new platform: the platform its head copies}."""
        if self.net is None:
            raise RuntimeError("the model is not trained or loaded")
        if not self.platforms:
            raise CheckpointError("this model names no platform for its head; a head per platform needs a model "
                                  "trained with tlp train --platform/--platforms")
        known = {**(self.meta.get("platform_info") or {}), **platform_info}
        trained = [p for p in self.platforms if p not in self.meta.get("head_sources", {})]
        if any(p not in known for p in trained):
            raise CheckpointError(f"the model does not describe its platform(s) "
                                  f"{', '.join(p for p in trained if p not in known)} (meta['platform_info']): no "
                                  "way to tell which head is nearest")
        sources = {}
        for platform_id in platform_info:
            if platform_id in self.platforms:
                continue
            sources[platform_id] = _stand_in(platform_id, trained, known, None)
            self.net.add_head(copy_of=self.head_index(sources[platform_id]))
            self.platforms = self.platforms + [platform_id]
        self.meta["platform_info"] = known
        self.meta["head_sources"] = {**self.meta.get("head_sources", {}), **sources}
        return sources

    def fit_head(self, programs: LabeledPrograms | FeaturizedPrograms, copy_of: str | None = None,
                 freeze_backbone: bool = True, backbone_lr_scale: float = 0.1, progress: bool = True,
                 soup: int = 1) -> TrainHistory:
        """Train the head of ``programs.platform_id`` on its (few) programs, keeping the vocabularies.

        ``programs``: one platform's traces, or its featurized programs made with this model's featurizer.

        A new platform gets a new head, initialised as a copy of ``copy_of``'s head (the nearest platform's) when
        given. ``freeze_backbone``: only the head learns; otherwise the backbone follows at ``backbone_lr_scale``
        times the head's learning rate (light fine-tuning, which moves the other platforms' heads' inputs too).

        ``soup``: train the head that many times from the same start (seeds ``train_config.seed`` + 0, 1, ..., each
        with its own validation split) and keep the mean of their weights. Why: one head's seed moves held-out top-1
        by about ±0.1 on the shipped backbone, and with the backbone frozen every run reads the same inputs, so
        their average is a head of its own; started from another platform's head (what ``tlp adapt`` does for a new
        platform) it ranked above each of its seeds on Zen 3 and Zen 2 (benchmarks/README, "Head soups").
        """
        if self.net is None:
            raise RuntimeError("the model is not trained or loaded")
        if soup < 1:
            raise ValueError(f"soup must be at least 1 (heads to average), got {soup}")
        if soup > 1 and not freeze_backbone:
            raise ValueError("a head soup averages heads trained on the same backbone: it needs freeze_backbone")
        platform_id = programs.platform_id
        if platform_id in self.platforms:
            head = self.platforms.index(platform_id)
        else:
            source = self.platforms.index(copy_of) if copy_of in self.platforms else None
            head = self.net.add_head(copy_of=source)
            self.platforms = self.platforms + [platform_id]
        data = programs if isinstance(programs, FeaturizedPrograms) else MultiPlatformPrograms.join([programs])
        if soup > 1 and not isinstance(data, FeaturizedPrograms):  # featurize once for all the soup's runs
            data = FeaturizedPrograms.of(data, self.featurizer)
        start = {k: v.detach().clone() for k, v in self.net.heads[head].state_dict().items()}
        config, states, val_top1 = self.train_config, [], []
        try:
            for run in range(soup):
                self.train_config = replace(config, seed=config.seed + run)
                self.net.heads[head].load_state_dict(start)
                history, info = self._fit_head_once(data, head, freeze_backbone, backbone_lr_scale, progress)
                states.append({k: v.detach().clone() for k, v in self.net.heads[head].state_dict().items()})
                val_top1.append(history.best_val_top1)
        finally:
            self.train_config = config
        if soup > 1:
            self.net.heads[head].load_state_dict(average_states(states))
        # Too few programs to rank (every task in validation): the head stays as it started; say so.
        info["head_trained"] = not info.pop("untrained_columns")
        self.meta.setdefault("adapted", {})[platform_id] = {
            "freeze_backbone": freeze_backbone, "copy_of": copy_of, "best_val_top1": history.best_val_top1, **info,
            **({"soup": soup, "soup_val_top1": val_top1} if soup > 1 else {})}
        return history

    def _fit_head_once(self, data: MultiPlatformPrograms | FeaturizedPrograms, head: int, freeze_backbone: bool,
                       backbone_lr_scale: float, progress: bool) -> tuple[TrainHistory, dict[str, Any]]:
        assert self.net is not None
        seed_everything(self.train_config.seed)
        self.net.to(self._device())
        for parameter in self.net.backbone_parameters():
            parameter.requires_grad_(not freeze_backbone)
        parameters = [{"params": list(self.net.heads[head].parameters()), "lr": self.train_config.lr}]
        if not freeze_backbone:
            parameters.append({"params": self.net.backbone_parameters(),
                               "lr": self.train_config.lr * backbone_lr_scale})
        try:
            return self._train(data, [head], parameters, progress, None)
        finally:
            for parameter in self.net.parameters():
                parameter.requires_grad_(True)

    def _train(self, data: MultiPlatformPrograms | FeaturizedPrograms, heads: list[int],
               parameters: list[dict[str, Any]], progress: bool, on_epoch: Callable[[dict[str, float]], None] | None,
               targets: np.ndarray | None = None) -> tuple[TrainHistory, dict[str, Any]]:
        """The training loop: column ``p`` of ``data`` trains head ``heads[p]`` on its labels (``targets`` instead,
        when given, except for a loss's measured-only term: ``MEASURED_TERMS``); early stopping on validation."""
        assert self.net is not None
        cfg = self.train_config
        if cfg.weights not in WEIGHTS:
            raise ValueError(f"TrainConfig.weights must be one of {', '.join(WEIGHTS)}, got {cfg.weights!r}")
        if cfg.loss not in LOSSES:
            raise ValueError(f"TrainConfig.loss must be one of {', '.join(LOSSES)}, got {cfg.loss!r}")
        features = data.featurize(self.featurizer)  # coded features (the cache's) are decoded a batch at a time
        measured_labels = torch.from_numpy(data.labels())
        labels = measured_labels if targets is None else torch.from_numpy(targets.astype(np.float32))
        measured = ~np.isnan(data.latencies)  # [N, P]
        # Programs with a target but no measurement (a teacher's ranking of unmeasured programs) train; only measured
        # ones validate, so validation tasks are drawn among the tasks with a measurement.
        trainable = measured if targets is None else measured | ~np.isnan(targets)
        lengths = np.maximum(feature_lengths(features), 1)
        groups = data.group_ids()
        tasks = np.unique(groups)
        labeled_tasks = np.unique(groups[measured.any(axis=1)])
        if not len(labeled_tasks):
            raise ValueError("no measured program to train on")
        rng = np.random.default_rng(cfg.seed)
        val_tasks = set(rng.choice(labeled_tasks, size=max(1, int(round(cfg.val_fraction * len(labeled_tasks)))),
                                   replace=False))
        if len(val_tasks) == len(tasks) and len(tasks) > 1:
            val_tasks.pop()  # keep at least one task to train on
        train_tasks = np.array([t for t in tasks if t not in val_tasks])
        val_mask = np.isin(groups, list(val_tasks))
        device = self._device()
        self.net.to(device)
        backbone_frozen = not any(p.requires_grad for p in self.net.backbone_parameters())
        optimizer = torch.optim.AdamW(parameters, lr=cfg.lr, weight_decay=cfg.weight_decay)
        trained = [p for group in parameters for p in group["params"]]
        distributed.same_start(list(self.net.parameters()))  # under torchrun: one model, whatever each process drew
        processes = distributed.world()[1]
        loss_fn, measured_term = LOSSES[cfg.loss], None
        if targets is not None and cfg.loss in MEASURED_TERMS:
            # Distilling with a loss whose second term needs latencies: the targets feed the listwise part, the
            # measured labels the other (tlp.model.losses.MEASURED_TERMS).
            loss_fn, measured_term = MEASURED_TERMS[cfg.loss]
        history = TrainHistory()
        best_state, since_best = None, 0
        # weights="average": a running sum (float64) restarted at each new best epoch, kept instead of a copy of the
        # best epoch's weights.
        weight_sum: dict[str, torch.Tensor] = {}
        summed_epochs: list[int] = []
        task_index = {t: np.nonzero(groups == t)[0] for t in tasks}
        bar = tqdm(range(cfg.epochs), disable=not progress, desc="train", unit="epoch")
        for epoch in bar:
            self.net.train()
            order = rng.permutation(train_tasks)
            losses = []
            # (ranking group, programs): a task's programs under its task id, or the parts of a big task's, each under
            # an id of its own past the tasks'.
            parts, next_group = [], int(groups.max()) + 1
            for t in order:
                split = _parts(_subset(task_index[t], cfg.programs_per_task, rng), cfg.max_batch_programs, rng)
                if len(split) == 1:
                    parts.append((int(t), split[0]))
                else:
                    parts += [(next_group + number, part) for number, part in enumerate(split)]
                    next_group += len(split)
            for batch in distributed.my_steps(_steps(parts, cfg.tasks_per_batch, cfg.max_batch_programs)):
                index = np.concatenate([part for _, part in batch])
                batch_groups = np.concatenate([np.full(len(part), group, dtype=np.int64) for group, part in batch])
                g = torch.from_numpy(batch_groups).to(device)

                def batch_loss(scores: torch.Tensor) -> torch.Tensor | None:
                    """MTL-TLP's loss: the unweighted sum over platforms of each head's ranking loss on the programs
                    measured on that platform (a program unmeasured somewhere trains only the other heads)."""
                    loss = None
                    for column in range(len(heads)):
                        rows = np.nonzero(trainable[index, column])[0]
                        if len(rows) < 2:
                            continue
                        r = torch.from_numpy(rows).to(device)
                        term = loss_fn(scores[r, column], labels[index[rows], column].to(device), g[r])
                        on = np.nonzero(measured[index[rows], column])[0] if measured_term is not None else rows[:0]
                        if len(on) >= 2:
                            o = torch.from_numpy(on).to(device)
                            term = term + measured_term(scores[r, column][o],
                                                        measured_labels[index[rows[on]], column].to(device), g[r][o])
                        loss = term if loss is None else loss + term
                    return loss

                # A step of more primitives than max_batch_primitives: its scores first, without a graph, then each
                # span of programs' graph again in its own backward (exact: the loss's gradient is the sum over the
                # spans of their scores' gradient through their graph), so its memory is one span's.
                spans = _spans(lengths[index], cfg.max_batch_primitives)
                if len(spans) == 1:
                    scores = self._batch_scores(features, index, lengths, heads, device, backbone_frozen)
                else:
                    states, span_scores = [], []
                    with torch.no_grad():
                        for start, stop in spans:
                            states.append(_rng_state(device))  # dropout draws the same masks again below
                            span_scores.append(self._batch_scores(features, index[start:stop], lengths, heads, device,
                                                                  backbone_frozen))
                    scores = torch.cat(span_scores).requires_grad_()
                loss = batch_loss(scores)
                has_loss = loss is not None and loss.requires_grad
                if not has_loss and processes == 1:
                    continue
                optimizer.zero_grad()
                if has_loss:
                    loss.backward()
                    losses.append(loss.item())
                    if len(spans) > 1:
                        for (start, stop), state in zip(spans, states):
                            _set_rng_state(device, state)
                            self._batch_scores(features, index[start:stop], lengths, heads, device,
                                               backbone_frozen).backward(scores.grad[start:stop])
                distributed.average_gradients(trained)  # under torchrun; every process steps together
                optimizer.step()
            val_top1 = self._validation_top1(features, data.latencies, measured, groups, val_mask, heads, device)
            row = {"epoch": epoch, "train_loss": float(np.mean(losses)) if losses else float("nan"),
                   "val_top1": val_top1}
            history.epochs.append(row)
            bar.set_postfix(loss=f"{row['train_loss']:.4f}", val_top1=f"{val_top1:.4f}")
            if on_epoch:
                on_epoch(row)
            # No validation task (a tiny sample): keep the latest epoch and train to the end.
            if np.isnan(val_top1) or not history.best_epoch >= 0 or val_top1 > history.best_val_top1:
                history.best_epoch, history.best_val_top1 = epoch, val_top1
                since_best, weight_sum, summed_epochs = 0, {}, []
                if cfg.weights == "best":
                    best_state = copy.deepcopy(self.net.state_dict())
            else:
                since_best += 1
            if cfg.weights == "average":
                for key, value in self.net.state_dict().items():
                    weight_sum[key] = weight_sum.get(key, 0) + value.detach().double()
                summed_epochs.append(epoch)
            if since_best >= cfg.patience:
                break
        if summed_epochs:
            best_state = {key: (weight_sum[key] / len(summed_epochs)).to(value.dtype)
                          for key, value in self.net.state_dict().items()}
            history.averaged_epochs = [summed_epochs[0], summed_epochs[-1]]
        if best_state is not None:
            self.net.load_state_dict(best_state)
        self.net.to("cpu").eval()
        # A column trains only where a training task has two programs to rank on it (measured, or with a target).
        untrained = [c for c in range(len(heads))
                     if not any(trainable[task_index[t], c].sum() >= 2 for t in train_tasks)]
        info = {"train_programs": int((~val_mask).sum()), "train_tasks": int(len(train_tasks)),
                "val_tasks": int(len(val_tasks)), "untrained_columns": untrained}
        return history, info

    def _batch_scores(self, features: Any, index: np.ndarray, lengths: np.ndarray, heads: list[int],
                      device: torch.device, backbone_frozen: bool) -> torch.Tensor:
        """``[len(index), len(heads)]`` training scores of programs ``index`` (a graph where grad is enabled)."""
        assert self.net is not None
        # Crop to the longest trace: padding rows cost compute and change nothing.
        x = torch.as_tensor(features[index, : int(lengths[index].max())]).to(device)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not backbone_frozen):
            h, padding = self.net.backbone(x)
        return torch.stack([self.net.score(h, padding, head) for head in heads], dim=1)

    def _validation_top1(self, features: Any, latencies: np.ndarray, measured: np.ndarray,
                         groups: np.ndarray, val_mask: np.ndarray, heads: list[int], device: torch.device) -> float:
        """Mean over platforms (with validation programs) of the mean per-task top-1 of their heads."""
        rows = np.nonzero(val_mask & measured.any(axis=1))[0]
        if not len(rows):
            return float("nan")
        # A block of programs at a time: a big dataset's validation programs need not be decoded all at once.
        scores = np.concatenate([self._scores(torch.as_tensor(features[block]), device, heads)
                                 for block in np.array_split(rows, -(-len(rows) // VALIDATION_BLOCK))])
        values = []
        for column in range(len(heads)):
            on = measured[rows, column]
            if on.any():
                values.append(mean_task_top_k(scores[on, column], latencies[rows[on], column], groups[rows[on]]))
        return float(np.mean(values)) if values else float("nan")

    def fine_tune(self, features: np.ndarray, labels: np.ndarray, groups: np.ndarray, steps: int,
                  lr: float = 1e-4, max_seconds: float | None = None, head: int = 0,
                  backbones: int | None = None) -> int:
        """A few gradient steps on new measurements of one head's platform, keeping the vocabularies (used while
        tuning).

        ``backbones``: how many networks, in a model's order, learn with their backbones (``None``: all); here one
        network, so ``0`` learns only head ``head`` (the backbone's states are computed once, without gradients:
        a small share of a whole step's cost). Returns the number of steps taken: ``max_seconds`` bounds the time
        so fine-tuning never stalls a search.
        """
        if self.net is None:
            raise RuntimeError("the model is not trained or loaded")
        import time  # pylint: disable=import-outside-toplevel

        if len(groups) == 0 or np.bincount(groups).max() < 2:
            return 0  # no task with two valid programs yet: nothing to rank
        device = next(self.net.parameters()).device
        loss_fn = LOSSES[self.train_config.loss]
        whole = backbones is None or backbones > 0
        learnt = self.net.parameters() if whole else self.net.heads[head].parameters()
        optimizer = torch.optim.AdamW(learnt, lr=lr, weight_decay=self.train_config.weight_decay)
        x = torch.from_numpy(features).to(device)
        y = torch.from_numpy(labels.astype(np.float32)).to(device)
        g = torch.from_numpy(groups.astype(np.int64)).to(device)
        start, taken = time.perf_counter(), 0
        states = None
        if whole:
            self.net.train()
        else:
            self.net.eval()
            with torch.no_grad():  # the backbone stays as it is: its states are the same at every step
                states = self.net.backbone(x)
            self.net.heads[head].train()
        for _ in range(steps):
            optimizer.zero_grad()
            loss = loss_fn(self.net(x, head) if states is None else self.net.score(*states, head), y, g)
            loss.backward()
            optimizer.step()
            taken += 1
            if max_seconds is not None and time.perf_counter() - start > max_seconds:
                break
        self.net.eval()
        return taken

    def _scores(self, features: torch.Tensor, device: torch.device, heads: Sequence[int] = (0,),
                threads: int | None = None, precision: str = "fp32") -> np.ndarray:
        """``[N, len(heads)]`` scores: the backbone runs once per program, then each head.

        Through :func:`~tlp.model.inference.scorer_for` (per-row work shared between programs, ``threads``
        workers). ``precision="fp32"`` (training's validation): the same scores as ``self.net(features)`` up to
        float rounding (``tests/test_scoring_speed.py``); ``"auto"``: see :meth:`predict_features`.
        """
        assert self.net is not None
        if next(self.net.parameters()).device != device:  # .to() walks every module: ~1 ms a call on a CPU
            self.net.to(device)
        return scorer_for(self.net, workers=threads, precision=precision).scores(features, heads)

    # ---- inference -----------------------------------------------------------------------------------------
    def predict_features(self, features: np.ndarray, head: int = 0, threads: int | None = None,
                         precision: str = "auto") -> np.ndarray:
        """Scores of featurized programs by one platform's head; ``threads``: CPU threads (default: PyTorch's).

        ``precision``: ``"auto"`` (default): what ``TLP_SCORING_PRECISION`` says, fp32 when unset; its ``auto``
        scores the attention network's residual blocks and heads in bfloat16 on CPUs with native bfloat16
        (AVX512_BF16/AMX; 1.2-1.35x less network time, held-out top-1 unchanged, see ``tlp.model.inference``);
        ``"fp32"`` / ``"bf16"``: that arithmetic.
        """
        if self.net is None:
            raise RuntimeError("the model is not trained or loaded")
        return self._scores(torch.from_numpy(features), next(self.net.parameters()).device, (head,), threads,
                            precision)[:, 0]

    def predict(self, traces: Sequence[Any], extents: Sequence[dict[str, list[int]] | None] | None = None,
                head: int = 0, precision: str = "auto") -> np.ndarray:
        """Scores for MetaSchedule traces (JSON form) by one platform's head; higher means faster."""
        return self.predict_features(self.featurizer.transform(traces, extents), head, precision=precision)

    # ---- persistence ---------------------------------------------------------------------------------------
    def payload(self) -> dict[str, Any]:
        """What a checkpoint holds: the description (JSON text) and the network's weights."""
        if self.net is None:
            raise RuntimeError("nothing to save: the model is not trained")
        meta = {**self.meta, "format": CHECKPOINT_FORMAT, "tlp_version": __version__,
                "feature_version": self.featurizer.config.version, "featurizer": self.featurizer.to_json(),
                "model_config": self.model_config.to_json(), "train_config": asdict(self.train_config)}
        return {"meta": json.dumps(meta), "state": self.net.state_dict()}

    def save(self, path: str | Path) -> None:
        checkpoint.write(self.payload(), path)

    @staticmethod
    def load(path: str | Path) -> Any:
        """The model a checkpoint holds: a ``TLPModel``, or a model of several networks when the checkpoint says
        so (a seed ensemble, a cascade: :mod:`tlp.model.composite`); :func:`tlp.model.checkpoint.load`."""
        return checkpoint.load(path)

    @staticmethod
    def from_payload(payload: Mapping[str, Any], meta: Mapping[str, Any], path: str | Path) -> "TLPModel":
        """A model from what :meth:`payload` gave and its parsed ``meta`` (``path`` names it in errors); the loader
        of formats ``tlp-checkpoint-1`` and ``-2`` in :data:`tlp.model.checkpoint.FORMATS`."""
        if "state" not in payload:
            raise CheckpointError(f"{path}: not a TLP checkpoint (no network weights)")
        state = payload["state"]
        if meta.get("format") == SINGLE_DECODER_FORMAT:
            state = {("heads.0." + k[len("decoder."):] if k.startswith("decoder.") else k): v
                     for k, v in state.items()}
        elif meta.get("format") != SINGLE_FORMAT:
            raise CheckpointError(f"{path}: checkpoint format {meta.get('format')!r}, expected {SINGLE_FORMAT}")
        expected = feature_version_of(meta.get("featurizer") or {})
        if meta.get("feature_version") != expected:
            raise CheckpointError(f"{path}: made with feature version {meta.get('feature_version')}, this TLP "
                                  f"featurizes with version {expected}; retrain or use a matching TLP")
        train_config = checkpoint.config_from_json(TrainConfig, meta.get("train_config", {}), path,
                                                   REMOVED_TRAIN_FIELDS)
        if train_config.loss not in LOSSES:  # online fine-tuning trains with the checkpoint's own loss
            raise CheckpointError(f"{path}: trained with loss {train_config.loss!r}, which this TLP does not have "
                                  f"({', '.join(LOSSES)})")
        model_config = checkpoint.config_from_json(ModelConfig, meta["model_config"], path)
        if model_config.arch not in ARCHS:
            raise CheckpointError(f"{path}: a network of architecture {model_config.arch!r}, which this TLP does not "
                                  f"have ({', '.join(ARCHS)})")
        model = TLPModel(model_config=model_config, train_config=train_config)
        try:
            model.featurizer = featurizer_from_json(meta["featurizer"])
        except ValueError as error:  # a feature option this TLP no longer has
            raise CheckpointError(f"{path}: {error}") from None
        if len(model.featurizer.kinds) != model.model_config.kind_vocab or len(
                model.featurizer.strings) != model.model_config.string_vocab:
            raise CheckpointError(f"{path}: the stored vocabulary does not match the network's embedding tables")
        heads = 1 + max((int(k.split(".")[1]) for k in state if k.startswith("heads.")), default=0)
        if len(meta.get("platforms") or []) not in (0, heads):
            raise CheckpointError(f"{path}: {heads} heads but {len(meta['platforms'])} platforms named")
        model.net = TLPNet(model.featurizer.config, model.model_config, num_heads=heads)
        model.net.load_state_dict(state)
        model.net.eval()
        model.meta = {k: v for k, v in meta.items() if k not in ("featurizer", "model_config", "train_config")}
        return model
