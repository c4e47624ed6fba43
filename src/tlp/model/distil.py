"""Distillation: one model trained to rank as a seed ensemble ranks.

Why: held-out ranking of a single trained model is a seed lottery (the TenSet top-1 of seven compact LSTMs trained
alike spans 0.27-0.66 on the Zen 4 held-out networks), and the mean of seven seeds' scores ranks better than any of
them (0.710) but costs seven networks per candidate in the search. A student trained on the ensemble's mean scores
costs one (``benchmarks/README.md``, "Distilling the seed ensemble").

The teachers' mean score of each program becomes its target: within a task, the listwise part of the student's
loss (``soft-listwise+slowdown``) pulls softmax(student scores) towards ``alpha`` x softmax(measured labels / T) +
(1 - alpha) x softmax(teacher mean). Written as labels for that listwise part (which compares softmax(labels / T)
with softmax(scores)) that is ``T x log(mixture)``, so the training loop and the losses stay as they are; the
slowdown term reads the measured labels only (``tlp.model.losses.MEASURED_TERMS``), and validation and early
stopping use the measured latencies.

A *transfer set* (:func:`with_transfer_set`) adds random draws of operator shapes no training task has, which only
the teachers rank: on the Zen 4 it lifted the students' held-out TenSet top-1 from 0.632 to 0.663 (median of four
seeds, avg-tail weights), and made every seed beat XGBoost on both held-out metrics.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tlp import TLPError
from tlp.features.tensors import FeaturizedPrograms, MultiPlatformPrograms, group_rows
from tlp.model.losses import LISTWISE_TEMPERATURES


class DistillationError(TLPError, ValueError):
    """Teachers and programs (or a loss) that cannot be distilled together."""


def check_distillation_loss(loss: str) -> None:
    """Refuse a loss the targets do not fit (a pairwise loss reads labels as gains, which a teacher's
    log-probabilities are not)."""
    if loss not in LISTWISE_TEMPERATURES:
        raise DistillationError(f"distillation trains with a listwise loss ({', '.join(LISTWISE_TEMPERATURES)}), "
                                f"not {loss!r}")


def ensemble_scores(teachers: Sequence[Any], programs: FeaturizedPrograms | MultiPlatformPrograms) -> np.ndarray:
    """``[N, P]``: the mean over ``teachers`` (``TLPModel``) of each program's score by the teacher's head for
    platform ``programs.platform_ids[p]``, measured there or not (a teacher ranks unmeasured programs too).

    Featurized programs are scored as they are, which needs teachers made on the same features (the same crop; the
    vocabularies of the same dataset, or of an older state of it: ids are translated, see
    ``TraceFeaturizer.translate``; ``FeaturizerMismatchError`` otherwise); traces are featurized by each teacher.
    Every teacher needs a head of its own for every platform (a copied head would teach another machine's order).
    """
    if not teachers:
        raise DistillationError("no teacher to distil from")
    for number, teacher in enumerate(teachers, 1):
        untrained = {*teacher.meta.get("head_sources", {})}
        lacking = [p for p in programs.platform_ids if p not in teacher.platforms or p in untrained]
        if teacher.platforms and lacking:
            raise DistillationError(f"teacher {number} has no trained head for platform(s) {', '.join(lacking)} "
                                    f"(its heads: {', '.join(p for p in teacher.platforms if p not in untrained)})")
    total = np.zeros(programs.latencies.shape, dtype=np.float64)
    for teacher in teachers:
        if isinstance(programs, FeaturizedPrograms):
            features = programs.featurize(teacher.featurizer)
        else:
            features = teacher.featurizer.transform(programs.traces,
                                                    [programs.extents.get(k) for k in programs.task_keys])
        for column, platform_id in enumerate(programs.platform_ids):
            total[:, column] += teacher.predict_features(features, teacher.head_index(platform_id), precision="fp32")
    return total / len(teachers)


def distillation_targets(programs: FeaturizedPrograms | MultiPlatformPrograms, teacher_scores: np.ndarray,
                         loss: str, alpha: float = 0.0) -> np.ndarray:
    """``[N, P]`` labels for ``TLPModel.fit(targets=...)``: with ``loss``'s temperature T, softmax(labels / T) over
    each task's programs is ``alpha`` x the measured target (softmax of the measured labels / T; nothing for an
    unmeasured program) + (1 - alpha) x softmax(teacher scores). A task with no measurement on a platform gets the
    teachers' ranking alone; with ``alpha`` 1 (no teacher) unmeasured programs get no target (NaN)."""
    check_distillation_loss(loss)
    if not 0.0 <= alpha <= 1.0:
        raise DistillationError(f"alpha (the weight of the measured labels) must be in [0, 1], got {alpha}")
    if teacher_scores.shape != programs.latencies.shape:
        raise DistillationError(f"teacher scores of shape {teacher_scores.shape} for {programs.latencies.shape} "
                                "programs x platforms")
    temperature = LISTWISE_TEMPERATURES[loss]
    labels = programs.labels().astype(np.float64)
    targets = np.full(labels.shape, np.nan)
    tasks = group_rows(programs.group_ids())
    for column in range(labels.shape[1]):
        measured = ~np.isnan(programs.latencies[:, column])
        for _, rows in tasks:
            on = measured[rows]
            if alpha == 1.0:
                rows, on = rows[on], on[on]
            if not len(rows):
                continue
            mixture = (1 - alpha) * _softmax(teacher_scores[rows, column]) if alpha < 1.0 else np.zeros(len(rows))
            if on.any():
                measured_part = np.zeros(len(rows))
                measured_part[on] = _softmax(labels[rows[on], column] / temperature)
                mixture += alpha * measured_part
            else:
                mixture /= mixture.sum()  # the teachers' ranking alone
            targets[rows, column] = temperature * np.log(mixture + 1e-30)
    return targets.astype(np.float32)


def _softmax(values: np.ndarray) -> np.ndarray:
    exp = np.exp(values - values.max())
    return exp / exp.sum()


def with_transfer_set(programs: FeaturizedPrograms | MultiPlatformPrograms, target: dict[str, Any], shapes: int,
                      per_shape: int = 48, seed: int = 0, guide: Any = None, guided_per_shape: int = 0
                      ) -> FeaturizedPrograms | MultiPlatformPrograms:
    """``programs`` followed by ``per_shape`` random draws (on ``target``) of each of ``shapes`` operator shapes
    that no program's task has (:func:`tlp.workloads.operators.random_operator_shapes`), unmeasured (latency NaN on
    every platform): programs for the teachers to rank and the student to learn that ranking of. Featurized
    programs get the draws featurized with their own featurizer. Nothing is measured; ~0.5 s per shape.

    With a ``guide`` (a MetaSchedule cost model, e.g. a ``TLPCostModel`` of one teacher), each shape also gets the
    ``guided_per_shape`` programs an evolutionary search under that model would measure first: the good region a
    search visits, where random draws rarely land and where the held-out search programs live (~5 s per shape on
    2 cores). Measured on the Zen 4 records: no clear change in the students' held-out scores (two seeds;
    ``benchmarks/README.md``, "Guided transfer programs")."""
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.sampler import CandidateSampler, trace_json
    from tlp.dataset.store import trace_id
    from tlp.features.featurizer import block_extents
    from tlp.workloads.operators import random_operator_shapes

    known = set(programs.task_keys)
    traces: list[Any] = []
    keys: list[str] = []
    extents: dict[str, dict[str, list[int]]] = {}
    names: dict[str, str] = {}
    for spec in random_operator_shapes(shapes, seed):
        task = spec.task()
        if task.key in known or task.key in names:
            continue
        sampler = CandidateSampler(task, target)
        drawn = [trace_json(c) for c in sampler.random(per_shape, seed=seed)]
        if guide is not None and guided_per_shape:
            seen = {trace_id(task.key, t) for t in drawn}  # the dataset's identity of a program
            drawn += [t for t in map(trace_json, sampler.guided(guided_per_shape, guide, seed=seed))
                      if trace_id(task.key, t) not in seen]
        if len(drawn) < 2:
            continue  # nothing to rank
        traces += drawn
        keys += [task.key] * len(drawn)
        extents[task.key] = block_extents(task.mod)
        names[task.key] = spec.name
    if not keys:
        raise DistillationError(f"no new operator shape with programs to rank among {shapes} random shapes")
    if isinstance(programs, FeaturizedPrograms):
        return programs.with_unmeasured(programs.featurizer.transform(traces, [extents[k] for k in keys]), keys, names)
    return programs.with_unmeasured(traces, keys, extents, names)
