"""MetaSchedule's own cost models as baselines, trained and scored through MetaSchedule's public API.

Each baseline sees exactly the programs TLP sees: the training records are replayed into MetaSchedule
``MeasureCandidate``s (their traces applied to the task's workload) and given to ``CostModel.update`` one task at a
time, as during tuning, so MetaSchedule normalizes each task's costs itself; test programs are scored with
``CostModel.predict``. XGBoost and the MLP both read ``PerStoreFeature`` features.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator, Protocol

import numpy as np
import torch

from tlp._tvm import ms, tvm  # first: it keeps TVM from registering every backend's intrinsics (see _tvm.py)
from tlp._tvm import register_tensor_intrinsics
from tvm.s_tir.meta_schedule.cost_model.mlp_model import MLPModel, extract_features  # not re-exported by MS
from tvm.s_tir.meta_schedule.utils import shash2hex
from tlp.dataset.store import Dataset, DatasetError
from tlp.features.tensors import LabeledPrograms


class Ranker(Protocol):
    name: str

    def fit(self, programs: LabeledPrograms) -> None: ...

    def predict(self, programs: LabeledPrograms) -> np.ndarray: ...


class _TaskReplay:
    """Per task: a TuneContext (for target and features) and the programs' traces replayed as candidates."""

    def __init__(self, dataset: Dataset, platform_id: str) -> None:
        self.store = dataset.store(platform_id)
        self.target = tvm.target.Target(self.store.platform.target)
        self._workloads: dict[str, Any] = {}

    def context(self, key: str) -> Any:
        return replay_context(self._workload(key).mod, self.target, key)

    def _workload(self, key: str) -> Any:
        if key not in self._workloads:
            self._workloads[key] = ms.database.Workload.from_json(self.store.workload_json(key))
        return self._workloads[key]

    def candidates(self, key: str, traces: list[Any]) -> list[Any]:
        return replay_candidates(self._workload(key), traces, self.target)


def replay_context(mod: Any, target: Any, key: str) -> Any:
    """A TuneContext for scoring stored programs of ``mod`` with a MetaSchedule cost model (no search runs in it)."""
    register_tensor_intrinsics(target)
    return ms.TuneContext(mod, target=target, space_generator="post-order-apply", search_strategy="replay-trace",
                          task_name=key, num_threads=1)


def replay_candidates(workload: Any, traces: list[Any], target: Any) -> list[Any]:
    """Stored traces replayed on their ``ms.database.Workload`` as the measure candidates cost models score."""
    target_json = target.export()
    return [ms.database.TuningRecord.from_json([t, None, target_json, []], workload).as_measure_candidate()
            for t in traces]


def _by_task(programs: LabeledPrograms) -> dict[str, np.ndarray]:
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(programs.task_keys):
        groups.setdefault(key, []).append(i)
    return {k: np.array(v) for k, v in groups.items()}


@contextlib.contextmanager
def _step_lr_without_verbose() -> Iterator[None]:
    """MetaSchedule's MLP trainer builds ``StepLR(..., verbose=True)``; PyTorch 2.13 removed ``verbose``."""
    original = torch.optim.lr_scheduler.StepLR

    class StepLR(original):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, verbose: Any = None, **kwargs: Any) -> None:
            del verbose
            super().__init__(*args, **kwargs)

    torch.optim.lr_scheduler.StepLR = StepLR
    try:
        yield
    finally:
        torch.optim.lr_scheduler.StepLR = original


def metaschedule_predict(model: Any, context: Any, candidates: list[Any]) -> np.ndarray:
    """``model.predict(context, candidates)`` as float64, any number of candidates.

    MetaSchedule's MLP predicts in batches of ``trainer.batch_size`` and squeezes a batch of one candidate to a
    0-d array, which its final ``np.concatenate`` refuses (``docs/upstream_bugs.md`` #4): 1, 129, 257...
    candidates crash it. The last candidate is then scored twice and the copy dropped (the MLP's scores depend on
    the batch they come in, but a repeated candidate changes none of them: ``tests/test_evaluation.py``)."""
    batch_size = getattr(getattr(model, "trainer", None), "batch_size", None)
    padded = list(candidates)
    if batch_size and len(padded) % batch_size == 1:
        padded.append(padded[-1])
    return np.asarray(model.predict(context, padded), dtype=np.float64)[:len(candidates)]


class MetaScheduleBaseline:
    """A MetaSchedule ``CostModel`` (``xgb`` or ``mlp``) trained on our records."""

    def __init__(self, name: str, dataset: Dataset, platform_id: str) -> None:
        self.name = name
        self.replay = _TaskReplay(dataset, platform_id)
        if name == "xgb":
            # Not adaptive: MetaSchedule would skip retraining on small updates, and the last update must leave a
            # model trained on all the training programs.
            self.model = ms.cost_model.XGBModel(num_warmup_samples=0, adaptive_training=False)
        elif name == "mlp":
            self.model = MLPModel()
        else:
            raise ValueError(f"unknown baseline {name!r} (xgb, mlp, random)")

    def fit(self, programs: LabeledPrograms) -> None:
        tasks = _by_task(programs)
        if self.name == "mlp" and len(tasks) < 5:
            # Its trainer validates on 20 % of the tasks, rounded down: fewer than 5 leaves none and it crashes.
            raise DatasetError(f"MetaSchedule's MLP needs at least 5 training tasks, got {len(tasks)}")
        for number, (key, index) in enumerate(tasks.items()):
            if self.name == "xgb":
                # Each update retrains XGBoost from scratch on all the data so far and only the last booster is
                # kept: the earlier trainings (one per task, ~an hour on 30k records and 2 cores) are skipped with
                # MetaSchedule's own adaptive-training threshold, and the last update trains on everything.
                last = number == len(tasks) - 1
                self.model.adaptive_training = not last
                self.model.last_train_size = 0 if last else sys.maxsize
            context = self.replay.context(key)
            candidates = self.replay.candidates(key, [programs.traces[i] for i in index])
            results = [ms.runner.RunnerResult([float(programs.latencies[i])], None) for i in index]
            if self.name == "xgb":
                self.model.update(context, candidates, results)
            else:
                # MLPModel.update retrains after every task and needs several tasks to validate on: gather every
                # task's features in its trainer's state first (what update does), then train once.
                trainer = self.model.trainer
                features, costs = extract_features(context, candidates, results, trainer.state.extractor)
                trainer.state.add_to_group(features, costs, shash2hex(context.mod))
        if self.name == "mlp":
            with _step_lr_without_verbose():
                self.model.trainer.train_full()

    def predict(self, programs: LabeledPrograms) -> np.ndarray:
        scores = np.zeros(len(programs.traces), dtype=np.float64)
        for key, index in _by_task(programs).items():
            candidates = self.replay.candidates(key, [programs.traces[i] for i in index])
            scores[index] = metaschedule_predict(self.model, self.replay.context(key), candidates)
        return scores


class RandomRanker:
    """Random order: the floor every model must beat."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def fit(self, programs: LabeledPrograms) -> None:
        del programs

    def predict(self, programs: LabeledPrograms) -> np.ndarray:
        return self.rng.random(len(programs.traces))
