"""``TLPEnsemble``: several TLP networks trained alike, read as one cost model (the mean of their scores).

Why: which seed a recipe draws decides a held-out network's top-1 through a few heavy tasks' first picks. Four
seeds of the 56-row recipe score TenSet top-1 0.669-0.734 on the Zen 4's held-out networks, and the mean of their
scores 0.760 (all-round 0.849, above every member); distilling them into one network lost that at 56 rows
(benchmarks/README.md, "A seed ensemble as the default"). Members are trained on the same dataset with the same
crop, so they share one featurizer: a candidate is featurized once and read by each network.

The ensemble's score is the mean of the members' raw scores. Scored per task, the mean of rank percentiles ranked
about as well (TenSet 0.774, all-round 0.830), but a search scores a task's candidates over many calls and needs
scores that stay comparable between them (``TLPCostModel`` calibrates on a task's first batch), which ranks
within one call are not.

The class answers what :class:`~tlp.model.estimator.TLPModel` answers to the search, ``tlp eval``, ``tlp adapt``
and ``tlp train --add-heads-to`` (featurizer, heads, predict, fine_tune, fit_head, save); ``TLPModel.load`` returns
one when the checkpoint says it holds an ensemble.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from tlp import __version__
from tlp.features.tensors import FeaturizedPrograms, LabeledPrograms, MultiPlatformPrograms
from tlp.model.estimator import CheckpointError, TLPModel, TrainHistory

ENSEMBLE_FORMAT = "tlp-ensemble-1"
# What a member's own meta must agree on with the ensemble's: which machine each head is for.
_SHARED_META = ("platform_info", "head_sources")


class TLPEnsemble:
    """The mean score of ``members`` (``TLPModel``s with the same featurizer and the same heads)."""

    def __init__(self, members: Sequence[TLPModel], meta: Mapping[str, Any] | None = None) -> None:
        if not members:
            raise CheckpointError("an ensemble needs at least one member")
        first = json.dumps(members[0].featurizer.to_json(), sort_keys=True)
        for number, member in enumerate(members[1:], 2):
            if json.dumps(member.featurizer.to_json(), sort_keys=True) != first:
                raise CheckpointError(f"member {number} featurizes differently from member 1 (another crop, feature "
                                      "config or vocabulary): an ensemble's members read the same features; train "
                                      "them on the same dataset with the same --seq-len and trace options")
            if member.platforms != members[0].platforms:
                raise CheckpointError(f"member {number} has heads {member.platforms}, member 1 "
                                      f"{members[0].platforms}: every member needs the same heads, in the same order")
        self.members = list(members)
        self.meta: dict[str, Any] = dict(meta or {})
        for key in _SHARED_META:
            if key not in self.meta and key in members[0].meta:
                self.meta[key] = members[0].meta[key]
        self.meta.setdefault("platforms", members[0].platforms)

    # ---- what the search and the CLI read ------------------------------------------------------------------
    @property
    def featurizer(self) -> Any:
        return self.members[0].featurizer

    @property
    def model_config(self) -> Any:
        return self.members[0].model_config

    @property
    def train_config(self) -> Any:
        return self.members[0].train_config

    @property
    def platforms(self) -> list[str]:
        return self.members[0].platforms

    def head_index(self, platform_id: str) -> int:
        return self.members[0].head_index(platform_id)

    def predict_features(self, features: np.ndarray, head: int = 0, threads: int | None = None,
                         precision: str = "auto") -> np.ndarray:
        """The mean of the members' scores of featurized programs by one platform's head."""
        return np.mean([m.predict_features(features, head, threads, precision) for m in self.members], axis=0)

    def predict(self, traces: Sequence[Any], extents: Sequence[dict[str, list[int]] | None] | None = None,
                head: int = 0, precision: str = "auto") -> np.ndarray:
        """Scores for MetaSchedule traces (JSON form), featurized once; higher means faster."""
        return self.predict_features(self.featurizer.transform(traces, extents), head, precision=precision)

    def fine_tune(self, features: np.ndarray, labels: np.ndarray, groups: np.ndarray, steps: int,
                  lr: float = 1e-4, max_seconds: float | None = None, head: int = 0) -> int:
        """Each member's ``fine_tune`` on the same measurements, sharing ``max_seconds``; returns the steps taken
        by all members together."""
        share = None if max_seconds is None else max_seconds / len(self.members)
        return sum(m.fine_tune(features, labels, groups, steps, lr, share, head) for m in self.members)

    # ---- heads ---------------------------------------------------------------------------------------------
    def _share_meta(self) -> None:
        """Give every member the ensemble's description of the platforms (a member decides nearest heads by it)."""
        for member in self.members:
            for key in _SHARED_META:
                if key in self.meta:
                    member.meta[key] = dict(self.meta[key])

    def _take_meta(self) -> None:
        for key in _SHARED_META:
            if key in self.members[0].meta:
                self.meta[key] = dict(self.members[0].meta[key])
        self.meta["platforms"] = self.platforms

    def copy_heads(self, sources: Mapping[str, str]) -> None:
        self._share_meta()
        for member in self.members:
            member.copy_heads(sources)
        self._take_meta()

    def add_platforms(self, platform_info: Mapping[str, dict[str, Any]]) -> dict[str, str]:
        """Each member's ``add_platforms`` (the same copies in every member); returns the copies made."""
        self._share_meta()
        added = [member.add_platforms(platform_info) for member in self.members]
        self._take_meta()
        return added[0]

    def fit_head(self, programs: LabeledPrograms | FeaturizedPrograms, copy_of: str | None = None,
                 freeze_backbone: bool = True, backbone_lr_scale: float = 0.1, progress: bool = True,
                 soup: int = 1) -> list[TrainHistory]:
        """Each member's head for ``programs.platform_id`` (``TLPModel.fit_head``), on programs featurized once."""
        self._share_meta()
        data = programs if isinstance(programs, FeaturizedPrograms) else FeaturizedPrograms.of(
            MultiPlatformPrograms.join([programs]), self.featurizer)
        histories = [member.fit_head(data, copy_of, freeze_backbone, backbone_lr_scale, progress, soup)
                     for member in self.members]
        self._take_meta()
        platform_id = data.platform_id
        self.meta.setdefault("adapted", {})[platform_id] = [m.meta["adapted"][platform_id] for m in self.members]
        return histories

    # ---- persistence ---------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        self._share_meta()
        meta = {**self.meta, "format": ENSEMBLE_FORMAT, "tlp_version": __version__, "members": len(self.members)}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"meta": json.dumps(meta), "members": [m.payload() for m in self.members]}, str(path))

    @staticmethod
    def from_payload(payload: Mapping[str, Any], meta: dict[str, Any], path: str | Path) -> "TLPEnsemble":
        members = payload.get("members")
        if not isinstance(members, list) or len(members) != meta.get("members"):
            raise CheckpointError(f"{path}: an ensemble checkpoint whose members are missing or not "
                                  f"{meta.get('members')} as its description says")
        loaded = [TLPModel.from_payload(member, f"{path} (member {number})") for number, member in
                  enumerate(members, 1)]
        return TLPEnsemble(loaded, {k: v for k, v in meta.items() if k not in ("format", "members")})

    @staticmethod
    def of_checkpoints(paths: Sequence[str | Path]) -> "TLPEnsemble":
        """The ensemble of saved single models (``tlp train --ensemble-of``), described by their first member's
        training record (dataset, held-out networks) and the checkpoints it was made of."""
        members = []
        for path in paths:
            model = TLPModel.load(path)
            if not isinstance(model, TLPModel):
                raise CheckpointError(f"{path}: already an ensemble; name its members' checkpoints instead")
            members.append(model)
        keep = ("dataset", "dataset_hash", "held_out_networks", *_SHARED_META)
        meta = {k: members[0].meta[k] for k in keep if k in members[0].meta}
        meta["member_checkpoints"] = [str(p) for p in paths]
        return TLPEnsemble(members, meta)
