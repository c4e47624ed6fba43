"""Cost models for MetaSchedule's search: :class:`TLPCostModel`, the TLP network as a ``PyCostModel``."""

from tlp.search.cost_model.tlp_cost_model import (DEFAULT_MODEL_PATH, OnlineTuning, PlatformMismatchWarning,
                                                  TLPCostModel, learning_sample, ranking_examples)

__all__ = ["DEFAULT_MODEL_PATH", "OnlineTuning", "PlatformMismatchWarning", "TLPCostModel", "learning_sample",
           "ranking_examples"]
