"""TLP: a learned cost model that ranks TVM MetaSchedule candidates from their schedule-primitive traces."""

__version__ = "0.1.0"
