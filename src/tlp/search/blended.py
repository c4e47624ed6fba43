"""``BlendedCostModel``: TLP's ranking while a task has few measurements, MetaSchedule's XGBoost as they accumulate.

Why: on a whole network at a realistic budget (benchmarks/README.md, "Realistic budgets: MobileNetV2") TLP has a
network latency after a few hundred trials where XGBoost needs its first round of ~1,050, but XGBoost, retrained
from scratch on the search's own measurements after every batch, ends level with or below TLP at 1,500 trials: the
trained prior wins early, the search's own data late. The blend takes both: a candidate's score is

    (1 - w) × TLP's calibrated score + w × XGBoost's (calibrated the same way),   w = n / (n + half_weight_at)

with ``n`` the programs of this task measured so far (0 before its first batch: TLP alone, and XGBoost, which knows
nothing yet, is not even asked; nor before XGBoost has trained: MetaSchedule's answers random numbers until it holds
100 measurements). TLP's score is already a per-task z-score (``TLPCostModel``); XGBoost's is mapped
to one with the mean and spread of the first batch it scores after each update, so that within one round of the
evolutionary search (whose heap compares scores across its iterations) a candidate keeps its score. The result is
``exp`` of the blend, positive as MetaSchedule's sampling needs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tlp._tvm import ms, structural_hash
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tlp.dataset.store import mean_latency
from tlp.search.cost_model import TLPCostModel

# Measured programs of a task at which XGBoost weighs as much as TLP: one first batch of 32 leaves TLP at 2/3.
HALF_WEIGHT_AT = 64


@derived_object
class BlendedCostModel(PyCostModel):
    """TLP (``tlp``, a :class:`TLPCostModel`) blended with MetaSchedule's XGBoost (``xgb``) per task, by how many of
    its programs the search has measured; see the module doc."""

    def __init__(self, tlp: TLPCostModel, xgb: Any = None, half_weight_at: int = HALF_WEIGHT_AT) -> None:
        super().__init__()
        if half_weight_at <= 0:
            raise ValueError(f"half_weight_at must be positive, got {half_weight_at}")
        self.tlp = tlp
        self.xgb = xgb if xgb is not None else ms.cost_model.XGBModel(
            num_tuning_cores=int(tlp.platform.target.get("num-cores") or 1), tree_method="auto")
        self.half_weight_at = half_weight_at
        self._measured: dict[int, int] = {}  # per task: valid programs measured so far
        self._xgb_calibration: dict[int, tuple[float, float]] = {}  # per task, until the next update

    # What tlp tune's report reads from a TLP cost model.
    @property
    def platform(self) -> Any:
        return self.tlp.platform

    @property
    def head_platform(self) -> str | None:
        return self.tlp.head_platform

    @property
    def seconds(self) -> dict[str, float]:
        return self.tlp.seconds

    @property
    def candidates_scored(self) -> int:
        return self.tlp.candidates_scored

    def xgb_weight(self, context: Any, key: str | None = None) -> float:
        """How much XGBoost counts for this task now: 0 until the task's first measurements, and until XGBoost has
        trained at all (MetaSchedule's XGBModel answers random numbers before its ``num_warmup_samples``).
        ``key``: the task's structural hash when the caller has it already."""
        if getattr(self.xgb, "data_size", 1) < getattr(self.xgb, "num_warmup_samples", 0) or (
                hasattr(self.xgb, "booster") and self.xgb.booster is None):
            return 0.0
        measured = self._measured.get(key or structural_hash(context.mod), 0)
        return measured / (measured + self.half_weight_at)

    # ---- MetaSchedule interface ----------------------------------------------------------------------------
    def load(self, path: str) -> None:
        self.tlp.load(path)

    def save(self, path: str) -> None:
        self.tlp.save(path)

    def predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
        tlp_scores = self.tlp.predict(context, candidates)
        key = structural_hash(context.mod)
        weight = self.xgb_weight(context, key)
        if not len(candidates) or weight == 0.0:
            return tlp_scores
        z_tlp = np.log(tlp_scores)  # TLPCostModel returns exp(its calibrated z)
        xgb_scores = np.asarray(self.xgb.predict(context, candidates), dtype="float64")
        if key not in self._xgb_calibration:
            self._xgb_calibration[key] = (float(np.mean(xgb_scores)), float(np.std(xgb_scores)) or 1.0)
        offset, scale = self._xgb_calibration[key]
        z_xgb = (xgb_scores - offset) / scale
        return np.exp(np.clip((1.0 - weight) * z_tlp + weight * z_xgb, -30.0, 30.0)).astype("float64")

    def update(self, context: Any, candidates: list[Any], results: list[Any]) -> None:
        self.tlp.update(context, candidates, results)
        self.xgb.update(context, candidates, results)
        key = structural_hash(context.mod)
        valid = sum(mean_latency(r.run_secs, r.error_msg) is not None for r in results)
        self._measured[key] = self._measured.get(key, 0) + valid
        self._xgb_calibration.clear()  # XGBoost retrained: its scale moves
