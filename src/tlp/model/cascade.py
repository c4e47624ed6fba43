"""``TLPCascade``: a cheap model ranks every candidate, a costlier one re-ranks its top.

Why: the mean of four 56-row LSTMs ranks the Zen 4's held-out networks best (TenSet top-1 0.760 against 0.702
for the shipped 25-row student), but scoring with it costs about six times the student's network per candidate,
and scoring speed is what lets a search read many candidates per measurement (issue 11 part 4: at least 5x
MetaSchedule's XGBoost). Which candidate comes first is all a search's pick needs from the costly model, and the
student's top few contain it: re-ranking the student's top ``least`` (or top ``fraction``) candidates of each call
keeps the ensemble's held-out ranking (benchmarks/README.md, "A seed ensemble, and a cascade that keeps the speed")
for a small share of its cost.

Re-ranked candidates keep the first stage's score values, handed out in the second stage's order, so the scale
of a call's scores stays the first stage's (``TLPCostModel`` calibrates per task on its first call) and the rest of
the call keeps the first stage's order. Features are made once, by the second stage's featurizer (the longer
crop); the first stage reads their first rows with its own vocabulary ids (``TraceFeaturizer.translate``, exact).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from tlp.model import checkpoint
from tlp.model.checkpoint import CASCADE_FORMAT, CheckpointError
from tlp.model.composite import SHARED_META, CompositeModel
from tlp.model.estimator import TLPModel

DEFAULT_LEAST = 32  # candidates of every call the second stage re-ranks (all of them in smaller calls)
DEFAULT_FRACTION = 0.0  # ... or this share of the call, when larger


def rescored_count(candidates: int, least: int, fraction: float) -> int:
    """How many of a call's ``candidates`` the second stage re-ranks: the top ``fraction``, at least ``least``."""
    return min(candidates, max(least, math.ceil(fraction * candidates)))


def rerank_top(scores: np.ndarray, count: int, second: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``scores`` (float64, changed in place) with their top ``count`` reordered by ``second(indices of the top)``:
    the top keeps its score values, handed out in the second stage's order; the rest is left as it is."""
    if len(scores) < 2:
        return scores
    top = np.argsort(-scores, kind="stable")[:count]
    order = np.asarray(second(top))
    scores[top[np.argsort(-order, kind="stable")]] = np.sort(scores[top])[::-1]
    return scores


class TLPCascade(CompositeModel):
    """``second`` (a ``TLPEnsemble`` or a ``TLPModel``) re-ranks the top of ``first``'s ranking."""

    FORMAT = CASCADE_FORMAT

    def __init__(self, first: TLPModel, second: Any, least: int = DEFAULT_LEAST, fraction: float = DEFAULT_FRACTION,
                 meta: Mapping[str, Any] | None = None) -> None:
        if not isinstance(first, TLPModel):
            raise CheckpointError("a cascade's first stage is one network (a TLPModel)")
        if least < 1 or not 0.0 <= fraction <= 1.0:
            raise CheckpointError(f"a cascade re-ranks at least 1 candidate and a fraction in [0, 1] of them, got "
                                  f"least {least}, fraction {fraction}")
        if first.featurizer.translate(np.zeros((1, second.featurizer.config.seq_len,
                                                second.featurizer.config.width), dtype=np.float32),
                                      second.featurizer) is None:
            raise CheckpointError("the first stage cannot read the second stage's features: it needs the same "
                                  "feature options, a crop no longer than the second's, and no token the second "
                                  "stage's vocabularies lack (train both on the same dataset)")
        self.first, self.second = first, second
        self.least, self.fraction = least, fraction
        super().__init__([first, *getattr(second, "parts", [second])], meta)
        self.meta.update({"least": least, "fraction": fraction})

    @property
    def featurizer(self) -> Any:
        return self.second.featurizer

    @property
    def model_config(self) -> Any:
        return self.first.model_config

    @property
    def train_config(self) -> Any:
        return self.first.train_config

    def predict_features(self, features: np.ndarray, head: int = 0, threads: int | None = None,
                         precision: str = "auto") -> np.ndarray:
        """The first stage's scores, its top :func:`rescored_count` candidates reordered by the second stage."""
        scores = np.asarray(self.first.predict_features(self._features_for(self.first, features), head, threads,
                                                        precision), dtype=np.float64)
        return rerank_top(scores, rescored_count(len(scores), self.least, self.fraction),
                          lambda top: self.second.predict_features(features[top], head, threads, precision))

    # ---- persistence ---------------------------------------------------------------------------------------
    def _part_payloads(self) -> dict[str, Any]:
        if isinstance(self.second, CompositeModel):  # heads added through the cascade: the second stage says so too
            for key in SHARED_META:
                if key in self.meta:
                    self.second.meta[key] = dict(self.meta[key])
            self.second.meta["platforms"] = self.platforms
        return {"first": self.first.payload(), "second": self.second.payload()}

    @staticmethod
    def from_payload(payload: Mapping[str, Any], meta: dict[str, Any], path: str | Path) -> "TLPCascade":
        first = checkpoint.from_payload(payload.get("first"), f"{path} (first stage)")
        second = checkpoint.from_payload(payload.get("second"), f"{path} (second stage)")
        if not isinstance(first, TLPModel):
            raise CheckpointError(f"{path}: a cascade's first stage is one network")
        return TLPCascade(first, second, int(meta.get("least", DEFAULT_LEAST)),
                          float(meta.get("fraction", DEFAULT_FRACTION)),
                          {k: v for k, v in meta.items() if k not in ("format", "tlp_version")})
