"""TLP inside MetaSchedule's search: the cost model and ``tlp tune``."""

from tlp.search.cost_model import DEFAULT_MODEL_PATH, OnlineTuning, PlatformMismatchWarning, TLPCostModel

__all__ = ["DEFAULT_MODEL_PATH", "OnlineTuning", "PlatformMismatchWarning", "TLPCostModel"]
