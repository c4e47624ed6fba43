"""``TLPCostModel``: the TLP model as a MetaSchedule cost model (``cost_model=`` of ``tune_tir``, ``tune_relax``,
``tune_tasks``).

``predict`` reads each candidate's trace (``candidate.sch.trace``) — no lowering, no feature extraction from IR —
and scores it with the loaded :class:`~tlp.model.estimator.TLPModel`. ``update`` records the measurements of the
running search and, when enabled, fine-tunes the model on them within a budget, so it adapts to a new task or
platform while tuning.

Why scores are mapped before MetaSchedule sees them: EvolutionarySearch clips predictions at 0 and samples
parents with probability proportional to them, and it compares scores across its iterations. A LambdaRank score is
an arbitrary real number (only its order within a task means something), so per task we fix an affine calibration
on the first population the search asks about (its mean and spread) and return ``exp(z)`` of the calibrated score: the
order is kept, scores are positive, comparable across calls of the same task, and the best candidates of a batch
weigh tens of times more than the average one, as MetaSchedule's throughput-regressing XGBoost makes them.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from tlp._tvm import clear_trace_caches, is_index_map_text, ms, structural_hash, trace_json, tvm  # first: see _tvm.py
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tlp import TLPError
from tlp.dataset.store import mean_latency
from tlp.features.featurizer import block_extents
from tlp.model.composite import CompositeModel
from tlp.model.estimator import CheckpointError, TLPModel
from tlp.models import model_path
from tlp.platform import Platform, nearest_platform

DEFAULT_MODEL_PATH = model_path()  # shipped in the package
CALIBRATION_MIN_CANDIDATES = 32  # a task's score calibration is fixed on its first batch of at least this many


class PlatformMismatchWarning(UserWarning):
    """The model was trained on measurements of another platform than the one being tuned."""


class OnlineTuningError(TLPError, ValueError):
    """Online fine-tuning settings that cannot work (the message says which and why)."""


@dataclass
class OnlineTuning:
    """Fine-tuning on the running search's measurements. ``steps=0`` turns it off (the default)."""

    steps: int = 0  # gradient steps per ``update`` (per measured batch)
    lr: float = 1e-4
    max_seconds: float = 10.0  # per update: never let learning stall the search
    max_programs: int = 4096  # most recent measurements kept per task for fine-tuning
    # Measurements one update learns from (``None``: all of them): the updated task's, then other tasks' drawn at
    # random (``learning_sample``). Learning from all made an update's cost grow with the search: the cascade's
    # MobileNetV2 runs took 3x XGBoost's wall time. One update of the cascade on a 2-core Rocket Lake: 3.2-3.6 s
    # with 128, ~6 s with 256, 13 s with all of 1,000.
    max_examples: int | None = 128
    # Learn only from batches of tasks measured at least this often (their data is kept either way). A first round
    # of 2 programs per task says little about the task, and at a high rate its steps move the shared network far
    # enough to spoil the next tasks' first picks (BERT-tiny at lr 1e-3: 2.9-3.4 ms after the first round vs 1.4).
    min_task_measurements: int = 0

    def __post_init__(self) -> None:
        # A zero, negative or NaN rate would silently do nothing, climb the loss or fill the network with NaN.
        if not math.isfinite(self.lr) or self.lr <= 0:
            raise OnlineTuningError(f"the online fine-tuning learning rate must be a positive number, got {self.lr}")
        if self.min_task_measurements < 0:  # would act as 0 and hide a typo
            raise OnlineTuningError("the online fine-tuning's minimum measurements per task must be 0 or more, "
                                    f"got {self.min_task_measurements}")
        if self.max_examples is not None and self.max_examples < 2:  # a ranking needs two programs
            raise OnlineTuningError("online fine-tuning learns from at least 2 measurements per update, got a "
                                    f"limit of {self.max_examples}")


@dataclass
class _TaskState:
    extents: dict[str, list[int]]
    offset: float | None = None  # score calibration, fixed on the first predicted batch
    scale: float = 1.0
    # Measurements of the running search, featurized once when recorded (fine-tuning reuses them every update).
    features: list[np.ndarray] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


@derived_object
class TLPCostModel(PyCostModel):
    """TLP as a MetaSchedule ``PyCostModel``.

    Args:
        model: a :class:`TLPModel` (or a model of several networks: :mod:`tlp.model.composite`), a checkpoint
            path, a packaged model's name (``"tlp-cpu-small"``), or ``None`` for the default: the model
            ``tlp adapt`` made for this platform, else the shipped one.
        online: fine-tuning while tuning (off by default).
        target: the target being tuned (a JSON dict); picks the model's head for this platform (MTL-TLP: one
            head per platform; the nearest one, with a warning, when it has none). ``None`` = this machine's
            default target.
    """

    def __init__(self, model: TLPModel | CompositeModel | str | Path | None = None, online: OnlineTuning | None = None,
                 target: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.platform = Platform.host(target)
        self.model = (model if isinstance(model, (TLPModel, CompositeModel))
                      else TLPModel.load(model_path(model, self.platform.id)))
        if getattr(self.model.featurizer, "record_format", "metaschedule") != "metaschedule":
            raise CheckpointError(f"this TLP model reads {self.model.featurizer.record_format} records (Ansor steps); "
                                  "MetaSchedule's search needs a model trained on MetaSchedule traces")
        self.online = online or OnlineTuning()
        self._tasks: dict[int, _TaskState] = {}
        self.fine_tune_steps = 0  # taken so far by online fine-tuning
        self._rng = np.random.default_rng(0)  # which other tasks' measurements an update learns from
        self.candidates_scored = 0
        # Where the cost model's time goes (cumulative seconds): reading traces and featurizing (the candidates
        # scored, and the measurements update records), the network's scoring, and update's fine-tuning.
        self.seconds = {"trace": 0.0, "featurize": 0.0, "network": 0.0, "fine_tune": 0.0}
        self._feature_cache: dict[int, Any] = {}  # featurizer rows per instruction list (see trace_json)
        # The last batch featurized and its rows: a first round asks predict and first_choices of the same pool.
        self._last_batch: tuple[_TaskState, list[Any], np.ndarray] | None = None
        self.head, self.head_platform = self._choose_head()
        self._index_maps_as_text = self._reads_index_maps()
        # The network scores on the cores the target gives this machine (default: its physical cores).
        self._threads = int(self.platform.target.get("num-cores") or 0) or None

    @staticmethod
    def default() -> "TLPCostModel":
        """The default model for this machine: ``tlp adapt``'s for its platform if made, else the shipped one."""
        return TLPCostModel()

    def _choose_head(self) -> tuple[int, str | None]:
        """The head of the platform being tuned; else the nearest platform's, with a warning."""
        heads = self.model.platforms
        if not heads:
            return 0, None
        info = self.model.meta.get("platform_info") or {}
        chosen, exact = nearest_platform(self.platform, {pid: info.get(pid, {}) for pid in heads})
        kind = self.platform.target.get("kind")
        chosen_kind = ((info.get(chosen) or {}).get("target", {}).get("kind")
                       or chosen.removeprefix("ansor-").split("-")[0])
        if not exact and chosen_kind != kind:
            # e.g. a CUDA search with the CPU model: its heads never saw a GPU program's cost
            warnings.warn(f"this TLP model has no head for a {kind} platform (heads: {', '.join(heads)}): the "
                          f"{chosen_kind} head {chosen} scores {kind} programs, whose costs it never learned, so "
                          f"its ranking is little better than chance. Collect {kind} data here (tlp collect "
                          "--target ...) and train a head for it (tlp adapt / tlp train), or tune with "
                          "--cost-model xgb.", PlatformMismatchWarning, stacklevel=3)
        elif not exact:
            warnings.warn(f"this TLP model has no head for platform {self.platform.id} (heads: {', '.join(heads)}); "
                          f"scoring with the nearest, {chosen}. Its ranking may be off: run `tlp adapt` on this "
                          "machine (minutes) or enable online fine-tuning (OnlineTuning(steps=...) / tlp tune "
                          "--set online_steps=5).", PlatformMismatchWarning, stacklevel=3)
        return heads.index(chosen), chosen

    def _reads_index_maps(self) -> bool:
        """Whether the text of an IndexMap can change this model's features: only if its string vocabulary holds
        one; otherwise every index map is out-of-vocabulary, and ``trace_json`` may skip writing them out."""
        tokens = getattr(self.model.featurizer.strings, "tokens", [])
        return any(is_index_map_text(token) for token in tokens)

    # ---- MetaSchedule interface ----------------------------------------------------------------------------
    def load(self, path: str) -> None:
        self.model = TLPModel.load(path)
        self.head, self.head_platform = self._choose_head()
        self._index_maps_as_text = self._reads_index_maps()
        self._tasks.clear()
        self._feature_cache.clear()
        self._last_batch = None

    def save(self, path: str) -> None:
        self.model.save(path)

    def predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
        if not candidates:
            return np.zeros(0, dtype="float64")
        state = self._task(context)
        self.candidates_scored += len(candidates)
        features = self._features(state, candidates)
        featurized = time.perf_counter()
        # precision "auto": fp32 unless TLP_SCORING_PRECISION opts into bfloat16 on CPUs with native bfloat16
        # (AVX512_BF16/AMX, e.g. Zen 4): 1.2-1.35x less network time, held-out top-1 unchanged on every head, but
        # no measurable end-to-end gain and not checked in a search (tlp.model.inference).
        scores = self.model.predict_features(features, self.head, self._threads, precision="auto").astype("float64")
        self.seconds["network"] += time.perf_counter() - featurized
        offset, scale = state.offset, state.scale
        if offset is None:
            offset, scale = float(np.mean(scores)), float(np.std(scores)) or 1.0
            # Fixed on a population, not on a few picks (a first round's library programs, all alike and good):
            # their spread would make the evolution's parent draws all-or-nothing.
            if len(scores) >= CALIBRATION_MIN_CANDIDATES:
                state.offset, state.scale = offset, scale
        z = np.clip((scores - offset) / scale, -30.0, 30.0)
        return np.exp(z).astype("float64")

    def update(self, context: Any, candidates: list[Any], results: list[Any]) -> None:
        if self.online.steps <= 0:
            return
        state = self._task(context)
        measured = [(candidate, latency) for candidate, latency in
                    ((c, mean_latency(r.run_secs, r.error_msg)) for c, r in zip(candidates, results))
                    if latency is not None]  # failures carry no latency
        if measured:
            state.features.extend(self._features(state, [candidate for candidate, _ in measured]))
            state.latencies.extend(latency for _, latency in measured)
            del state.features[: -self.online.max_programs]
            del state.latencies[: -self.online.max_programs]
        if len(state.latencies) >= self.online.min_task_measurements:
            self._fine_tune(state)

    def clear_caches(self) -> None:
        """Forget cached trace conversions and feature rows (a cold start; results do not change)."""
        clear_trace_caches()
        self._feature_cache.clear()
        self._last_batch = None

    # ---- internals -----------------------------------------------------------------------------------------
    def _features(self, state: _TaskState, candidates: list[Any]) -> np.ndarray:
        """The model's feature rows of ``candidates`` (a task's), timed as reading traces and featurizing."""
        # The same task and candidate objects as the last call (compared as TVM objects: a call through the FFI
        # wraps them anew; held there, so no other object can take their place): the same rows.
        if self._last_batch is not None:
            last_state, last_candidates, last_features = self._last_batch
            if (last_state is state and len(last_candidates) == len(candidates)
                    and all(a.same_as(b) for a, b in zip(last_candidates, candidates))):
                return last_features
        started = time.perf_counter()
        traces = [trace_json(c.sch.trace, self._index_maps_as_text) for c in candidates]
        traced = time.perf_counter()
        if len(self._feature_cache) > 65536:  # lists and rows (~1 KB each) of the recent tasks
            self._feature_cache.clear()
        features = self.model.featurizer.transform(traces, [state.extents] * len(traces), self._feature_cache)
        self.seconds["trace"] += traced - started
        self.seconds["featurize"] += time.perf_counter() - traced
        self._last_batch = (state, list(candidates), features)
        return features

    def _task(self, context: Any) -> _TaskState:
        key = structural_hash(context.mod)
        if key not in self._tasks:
            self._tasks[key] = _TaskState(block_extents(context.mod))
        return self._tasks[key]

    def _fine_tune(self, updated: _TaskState) -> None:
        states = list(self._tasks.values())
        tasks = [(state.features, state.latencies) for state in states]
        index = next(i for i, state in enumerate(states) if state is updated)  # dataclass == compares arrays
        examples = ranking_examples(learning_sample(tasks, index, self.online.max_examples, self._rng))
        if examples is None:
            return
        started = time.perf_counter()
        self.fine_tune_steps += self.model.fine_tune(*examples, self.online.steps, self.online.lr,
                                                     self.online.max_seconds, self.head)
        self.seconds["fine_tune"] += time.perf_counter() - started


def learning_sample(tasks: Sequence[tuple[Sequence[np.ndarray], Sequence[float]]], updated: int,
                    limit: int | None, rng: np.random.Generator) -> list[tuple[Sequence[np.ndarray], Sequence[float]]]:
    """What one update learns from: at most ``limit`` of the ``(feature rows, latencies)`` of ``tasks`` (all of
    them if ``None``). Task ``updated``'s most recent measurements first (the task just measured); then the other
    tasks measured at least twice, in a random order, each whole while it fits, the last one a random part of it
    (at least 2 programs: a ranking needs two). Whole tasks keep each group's ranking complete; the random order
    lets every task's measurements be learnt from again over the updates, keeping the network from forgetting
    them."""
    if limit is None:
        return list(tasks)
    rows, measured = tasks[updated]
    chosen = [(list(rows[-limit:]), list(measured[-limit:]))]
    room = limit - len(chosen[0][1])
    for other in rng.permutation(len(tasks)):
        rows, measured = tasks[other]
        if room < 2:
            break
        if other == updated or len(measured) < 2:
            continue
        if len(measured) <= room:
            chosen.append((rows, measured))
            room -= len(measured)
        else:
            part = np.sort(rng.choice(len(measured), room, replace=False))
            chosen.append(([rows[i] for i in part], [measured[i] for i in part]))
            room = 0
    return chosen


def ranking_examples(tasks: Iterable[tuple[Sequence[np.ndarray], Sequence[float]]]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """What online fine-tuning learns from: the feature rows, labels (the task's best latency / latency) and task
    groups of the ``(feature rows, latencies)`` of each task measured at least twice; ``None`` if there is none."""
    features, labels, groups = [], [], []
    for group, (rows, measured) in enumerate(tasks):
        if len(measured) < 2:
            continue
        latencies = np.asarray(measured, dtype="float64")
        features.append(np.stack(rows))
        labels.append(latencies.min() / latencies)
        groups.append(np.full(len(latencies), group))
    if not features:
        return None
    return np.concatenate(features), np.concatenate(labels), np.concatenate(groups)
