"""Which featurizer reads which records: MetaSchedule traces or Ansor steps.

A platform's records say what they hold (:attr:`tlp.platform.Platform.record_format`); ``tlp train`` builds the
matching featurizer from its config, and a checkpoint stores the featurizer's JSON, whose ``kind`` brings back the
same one at load time (checkpoints without a ``kind`` predate Ansor support and hold a trace featurizer).
"""

from __future__ import annotations

from typing import Any, Union

from tlp.features.ansor_steps import ANSOR_FEATURE_VERSION, ANSOR_FEATURIZER, AnsorStepConfig, AnsorStepFeaturizer
from tlp.features.featurizer import FEATURE_VERSION, FeatureConfig, TraceFeaturizer
from tlp.platform import METASCHEDULE_FORMAT

Featurizer = Union[TraceFeaturizer, AnsorStepFeaturizer]
FeaturizerConfig = Union[FeatureConfig, AnsorStepConfig]


def featurizer_for_config(config: FeaturizerConfig) -> Featurizer:
    """An unfitted featurizer of the kind ``config`` describes."""
    if isinstance(config, AnsorStepConfig):
        return AnsorStepFeaturizer(config)
    return TraceFeaturizer(config)


def featurizer_from_json(data: dict[str, Any]) -> Featurizer:
    """The featurizer a checkpoint stored (raises ``ValueError`` on a feature version this TLP cannot read)."""
    if data.get("kind") == ANSOR_FEATURIZER:
        return AnsorStepFeaturizer.from_json(data)
    return TraceFeaturizer.from_json(data)


def feature_version_of(data: dict[str, Any]) -> int:
    """The feature version this TLP writes for the featurizer described by ``data`` (a checkpoint's JSON)."""
    return ANSOR_FEATURE_VERSION if data.get("kind") == ANSOR_FEATURIZER else FEATURE_VERSION


def record_format_of(featurizer: Any) -> str:
    """``"metaschedule"`` or ``"ansor"``: the records ``featurizer`` reads."""
    return str(getattr(featurizer, "record_format", METASCHEDULE_FORMAT))
