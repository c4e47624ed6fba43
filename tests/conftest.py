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
