"""TLP: a learned cost model that ranks TVM MetaSchedule candidates from their schedule-primitive traces."""

__version__ = "0.1.0"


class TLPError(Exception):
    """Base of the errors TLP reports to users as one clear line (bad input, unusable files, unreachable devices)."""
