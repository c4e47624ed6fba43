"""Models made of several trained :class:`~tlp.model.estimator.TLPModel` networks, read as one cost model.

What they share is here: every part keeps the same heads (platforms, in the same order), a head added or trained
is added or trained in every part, the platform descriptions stay one, and a checkpoint holds every part's own
payload. The variants say how the parts' scores make one score: :class:`~tlp.model.ensemble.TLPEnsemble` (the
mean of seeds) and :class:`~tlp.model.cascade.TLPCascade` (a cheap model's top re-ranked by an ensemble).
``TLPModel.load`` (:func:`tlp.model.checkpoint.load`) knows each variant by its format; a variant's ``from_payload``
loads its parts through :func:`tlp.model.checkpoint.from_payload` too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from tlp import __version__
from tlp.features.tensors import FeaturizedPrograms, LabeledPrograms, MultiPlatformPrograms
from tlp.model import checkpoint
from tlp.model.checkpoint import CheckpointError
from tlp.model.estimator import TLPModel, TrainHistory

# What a part's own meta must agree on with the whole's: which machine each head is for.
SHARED_META = ("platform_info", "head_sources")


class CompositeModel:
    """The machinery of a model whose networks are ``parts`` (``TLPModel``s with the same heads)."""

    FORMAT = ""

    def __init__(self, parts: Sequence[TLPModel], meta: Mapping[str, Any] | None = None) -> None:
        for number, part in enumerate(parts[1:], 2):
            if part.platforms != parts[0].platforms:
                raise CheckpointError(f"network {number} has heads {part.platforms}, network 1 {parts[0].platforms}: "
                                      "every network needs the same heads, in the same order")
        self.parts = list(parts)
        self.meta: dict[str, Any] = dict(meta or {})
        for key in SHARED_META:
            if key not in self.meta and key in parts[0].meta:
                self.meta[key] = parts[0].meta[key]
        self.meta["platforms"] = parts[0].platforms

    @property
    def platforms(self) -> list[str]:
        return self.parts[0].platforms

    def head_index(self, platform_id: str) -> int:
        return self.parts[0].head_index(platform_id)

    def predict(self, traces: Sequence[Any], extents: Sequence[dict[str, list[int]] | None] | None = None,
                head: int = 0, precision: str = "auto") -> np.ndarray:
        """Scores for MetaSchedule traces (JSON form), featurized once; higher means faster."""
        return self.predict_features(self.featurizer.transform(traces, extents), head, precision=precision)

    @property
    def featurizer(self) -> Any:
        raise NotImplementedError

    def predict_features(self, features: np.ndarray, head: int = 0, threads: int | None = None,
                         precision: str = "auto") -> np.ndarray:
        raise NotImplementedError

    def fine_tune(self, features: np.ndarray, labels: np.ndarray, groups: np.ndarray, steps: int,
                  lr: float = 1e-4, max_seconds: float | None = None, head: int = 0,
                  backbones: int | None = None) -> int:
        """Every network's ``fine_tune`` on the same measurements (``features`` as :attr:`featurizer` makes
        them), sharing ``max_seconds``; the first ``backbones`` networks (a cascade's first stage first; ``None``:
        all) learn whole, the others only head ``head``. Returns the steps taken by all of them together."""
        share = None if max_seconds is None else max_seconds / len(self.parts)
        return sum(part.fine_tune(self._features_for(part, features), labels, groups, steps, lr, share, head,
                                  None if backbones is None else int(number < backbones))
                   for number, part in enumerate(self.parts))

    def _features_for(self, part: TLPModel, features: np.ndarray) -> np.ndarray:
        """``features`` (made by :attr:`featurizer`) as ``part`` reads them."""
        if part.featurizer is self.featurizer:
            return features
        translated = part.featurizer.translate(features, self.featurizer)
        assert translated is not None, "checked when the model was made"
        return translated

    # ---- heads ---------------------------------------------------------------------------------------------
    def _share_meta(self) -> None:
        """Give every network the whole's description of the platforms (a network decides nearest heads by it)."""
        for part in self.parts:
            for key in SHARED_META:
                if key in self.meta:
                    part.meta[key] = dict(self.meta[key])

    def _take_meta(self) -> None:
        for key in SHARED_META:
            if key in self.parts[0].meta:
                self.meta[key] = dict(self.parts[0].meta[key])
        self.meta["platforms"] = self.platforms

    def copy_heads(self, sources: Mapping[str, str]) -> None:
        self._share_meta()
        for part in self.parts:
            part.copy_heads(sources)
        self._take_meta()

    def add_platforms(self, platform_info: Mapping[str, dict[str, Any]]) -> dict[str, str]:
        """Every network's ``add_platforms`` (the same copies in each); returns the copies made."""
        self._share_meta()
        added = [part.add_platforms(platform_info) for part in self.parts]
        self._take_meta()
        return added[0]

    def fit_head(self, programs: LabeledPrograms | FeaturizedPrograms, copy_of: str | None = None,
                 freeze_backbone: bool = True, backbone_lr_scale: float = 0.1, progress: bool = True,
                 soup: int = 1) -> list[TrainHistory]:
        """Every network's head for ``programs.platform_id`` (``TLPModel.fit_head``); programs are featurized once
        per distinct featurizer."""
        self._share_meta()
        featurized: dict[str, FeaturizedPrograms] = {}
        histories = []
        for part in self.parts:
            if isinstance(programs, FeaturizedPrograms):
                if programs.featurizer.to_json() != part.featurizer.to_json():
                    raise CheckpointError("these featurized programs were made for another crop or vocabulary than "
                                          "one of this model's networks reads: pass the traces (LabeledPrograms)")
                data = programs
            else:
                key = json.dumps(part.featurizer.to_json(), sort_keys=True)
                if key not in featurized:
                    featurized[key] = FeaturizedPrograms.of(MultiPlatformPrograms.join([programs]), part.featurizer)
                data = featurized[key]
            histories.append(part.fit_head(data, copy_of, freeze_backbone, backbone_lr_scale, progress, soup))
        self._take_meta()
        platform_id = programs.platform_id
        self.meta.setdefault("adapted", {})[platform_id] = [p.meta["adapted"][platform_id] for p in self.parts]
        return histories

    # ---- persistence ---------------------------------------------------------------------------------------
    def payload(self) -> dict[str, Any]:
        """What a checkpoint holds: the description (JSON text, with the variant's format) and the parts'."""
        self._share_meta()
        parts = self._part_payloads()  # may record how many parts there are
        meta = {**self.meta, "format": self.FORMAT, "tlp_version": __version__}
        return {"meta": json.dumps(meta), **parts}

    def _part_payloads(self) -> dict[str, Any]:
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        checkpoint.write(self.payload(), path)
