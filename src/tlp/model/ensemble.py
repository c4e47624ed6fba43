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
and ``tlp train --add-heads-to`` (featurizer, heads, predict, fine_tune, fit_head, save; the shared part in
:mod:`tlp.model.composite`); ``TLPModel.load`` returns one when the checkpoint says it holds an ensemble.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from tlp.model import checkpoint
from tlp.model.checkpoint import ENSEMBLE_FORMAT, CheckpointError
from tlp.model.composite import SHARED_META, CompositeModel
from tlp.model.estimator import TLPModel


class TLPEnsemble(CompositeModel):
    """The mean score of ``members`` (``TLPModel``s with the same featurizer and the same heads)."""

    FORMAT = ENSEMBLE_FORMAT

    def __init__(self, members: Sequence[TLPModel], meta: Mapping[str, Any] | None = None) -> None:
        if not members:
            raise CheckpointError("an ensemble needs at least one member")
        first = json.dumps(members[0].featurizer.to_json(), sort_keys=True)
        for number, member in enumerate(members[1:], 2):
            if json.dumps(member.featurizer.to_json(), sort_keys=True) != first:
                raise CheckpointError(f"member {number} featurizes differently from member 1 (another crop, feature "
                                      "config or vocabulary): an ensemble's members read the same features; train "
                                      "them on the same dataset with the same seq_len and trace settings")
            if member.platforms != members[0].platforms:
                raise CheckpointError(f"member {number} has heads {member.platforms}, member 1 "
                                      f"{members[0].platforms}: every member needs the same heads, in the same order")
        for member in members[1:]:  # equal featurizers: one object, so the features are made once
            member.featurizer = members[0].featurizer
        super().__init__(members, meta)

    @property
    def members(self) -> list[TLPModel]:
        return self.parts

    @property
    def featurizer(self) -> Any:
        return self.members[0].featurizer

    @property
    def model_config(self) -> Any:
        return self.members[0].model_config

    @property
    def train_config(self) -> Any:
        return self.members[0].train_config

    def predict_features(self, features: np.ndarray, head: int = 0, threads: int | None = None,
                         precision: str = "auto") -> np.ndarray:
        """The mean of the members' scores of featurized programs by one platform's head."""
        return np.mean([m.predict_features(features, head, threads, precision) for m in self.members], axis=0)

    # ---- persistence ---------------------------------------------------------------------------------------
    def _part_payloads(self) -> dict[str, Any]:
        self.meta["members"] = len(self.members)
        return {"members": [m.payload() for m in self.members]}

    @staticmethod
    def from_payload(payload: Mapping[str, Any], meta: dict[str, Any], path: str | Path) -> "TLPEnsemble":
        members = payload.get("members")
        if not isinstance(members, list) or len(members) != meta.get("members"):
            raise CheckpointError(f"{path}: an ensemble checkpoint whose members are missing or not "
                                  f"{meta.get('members')} as its description says")
        loaded = [checkpoint.from_payload(member, f"{path} (member {number})")
                  for number, member in enumerate(members, 1)]
        if not all(isinstance(m, TLPModel) for m in loaded):
            raise CheckpointError(f"{path}: an ensemble's members are single networks")
        return TLPEnsemble(loaded, {k: v for k, v in meta.items() if k not in ("format", "tlp_version")})

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
        keep = ("dataset", "dataset_hash", "held_out_networks", *SHARED_META)
        meta = {k: members[0].meta[k] for k in keep if k in members[0].meta}
        meta["member_checkpoints"] = [str(p) for p in paths]
        return TLPEnsemble(members, meta)
