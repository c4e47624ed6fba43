"""Shared fixtures: real (small) TVM workloads on this machine's real target."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Tests must never write into the user's cache of extracted networks.
os.environ.setdefault("TLP_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".pytest_cache" / "tlp"))

TLP = [sys.executable, "-m", "tlp.cli"]


@pytest.fixture(scope="session")
def host_platform():
    from tlp.platform import Platform

    return Platform.host()


@pytest.fixture(scope="session")
def tiny_tasks(host_platform):
    """Two small operators whose programs build and run in milliseconds."""
    from tlp.workloads import load_tasks

    return load_tasks(["dense_64x64x64", "softmax_1x1000"], host_platform.target)


@pytest.fixture
def fast_measure():
    """Fewer repeats and a short minimum run time: the tests check behaviour, not precise latencies."""
    from tlp.dataset.measure import MeasureConfig

    return MeasureConfig(repeat=3, min_repeat_ms=2)


TINY_TRIALS = 8


@pytest.fixture(scope="session")
def collected(tmp_path_factory, tiny_tasks, host_platform):
    """A real collection: TINY_TRIALS programs (half random, half evolved) of each tiny task on this machine."""
    from tlp.dataset import CollectPlan, Dataset, MeasureConfig, collect

    dataset = Dataset(tmp_path_factory.mktemp("collected"))
    plan = CollectPlan(trials_per_task=TINY_TRIALS, batch_size=4, random_fraction=0.5, seed=1)
    summary = collect(dataset, tiny_tasks, host_platform, plan, MeasureConfig(min_repeat_ms=2), progress=False)
    return dataset, summary
