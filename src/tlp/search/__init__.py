"""TLP inside MetaSchedule's search, grouped as MetaSchedule groups it: ``cost_model/``, ``search_strategy/``,
``task_scheduler/``, ``database/``, and ``presets`` (the one source of search settings)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

from tlp.search.cost_model import DEFAULT_MODEL_PATH, OnlineTuning, PlatformMismatchWarning, TLPCostModel

__all__ = ["DEFAULT_MODEL_PATH", "OnlineTuning", "PlatformMismatchWarning", "TLPCostModel"]

# Modules that moved when search/ was grouped like MetaSchedule: the old names keep working for one release.
MOVED = {
    "tlp.search.blended": "tlp.search.cost_model.blended",
    "tlp.search.first_round": "tlp.search.search_strategy.first_round",
    "tlp.search.diverse": "tlp.search.search_strategy.diverse",
    "tlp.search.transfer": "tlp.search.search_strategy.transfer",
    "tlp.search.library": "tlp.search.search_strategy.library",
    "tlp.search.scheduler": "tlp.search.task_scheduler.scheduler",
    "tlp.search.task_profile": "tlp.search.task_scheduler.task_profile",
    "tlp.search.predicted": "tlp.search.database.predicted",
    "tlp.search.shared_schedules": "tlp.search.database.shared_schedules",
    "tlp.search.tune": "tlp.tune.run",
    "tlp.search.sources": "tlp.tune.sources",
    "tlp.search.compile_check": "tlp.tune.compile_check",
    "tlp.search.report": "tlp.tune.report",
    "tlp.search.numerics": "tlp.tune.numerics",
    "tlp.search.fast_math": "tlp.tune.fast_math",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import tlp.search.tune`` gives ``tlp.tune.run`` itself (same objects), with a DeprecationWarning."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D401 - importlib protocol
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=3)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        """Nothing to run: create_module returned the moved module itself."""


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())
