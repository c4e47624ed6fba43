"""Measured datasets: collection on real MetaSchedule builders/runners, storage, import, summaries.

Public entry: :func:`collect` (and :func:`remeasure`) fill a :class:`Dataset`, :func:`add_tuning_run` adds a tuning
run's measurements; :func:`dataset_info` summarizes it.
"""

from tlp.dataset.store import DEFAULT_DATASET, Dataset, DatasetError, MeasuredProgram, PlatformStore
from tlp.dataset.table import DamagedSegment

try:
    from tlp.dataset.collect import CollectPlan, collect, remeasure
    from tlp.dataset.info import dataset_info
    from tlp.dataset.measure import MeasureConfig, RPCSettings
    from tlp.dataset.tuning import add_tuning_run
except ModuleNotFoundError as error:
    # Without TVM a dataset can still be read (``store``, ``table``): training from cached features runs on
    # machines that have no TVM (a GPU machine); collecting, measuring and importing need it.
    if error.name != "tvm":
        raise

__all__ = ["CollectPlan", "collect", "remeasure", "dataset_info", "MeasureConfig", "RPCSettings", "DEFAULT_DATASET", "Dataset",
           "DatasetError", "DamagedSegment", "MeasuredProgram", "PlatformStore", "add_tuning_run"]
