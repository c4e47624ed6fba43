"""TLP: a learned cost model that ranks TVM MetaSchedule candidates from their schedule-primitive traces."""

__version__ = "0.1.0"


class TLPError(Exception):
    """Base of the errors TLP reports to users as one clear line (bad input, unusable files, unreachable devices)."""


def __getattr__(name: str):  # lazy: ``import tlp`` must not import TVM (slow); ``tlp.TLPCostModel`` does
    if name == "TLPCostModel":
        from tlp.search.cost_model import TLPCostModel  # pylint: disable=import-outside-toplevel

        return TLPCostModel
    raise AttributeError(f"module 'tlp' has no attribute {name!r}")
