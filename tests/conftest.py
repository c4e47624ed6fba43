"""Shared fixtures: real (small) TVM workloads on this machine's real target."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Tests must never write into the user's cache of extracted networks.
os.environ.setdefault("TLP_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".pytest_cache" / "tlp"))

TLP = [sys.executable, "-m", "tlp.cli"]


def tlp_cli(args: list[str], check: bool = False) -> subprocess.CompletedProcess:
    """``tlp *args`` run inside this process: the command's exit code and what it prints (Python's stdout and
    stderr), as ``subprocess.run(TLP + args, capture_output=True, text=True)`` returns them.

    Why not a new process each time: one spends ~5 s importing TVM and torch before it does anything, and the suite
    runs the command line dozens of times. Tests that need a real process (a kill, a Ctrl-C, the entry point
    itself) run ``TLP`` with subprocess."""
    from tlp.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
    result = subprocess.CompletedProcess(["tlp", *args], code, out.getvalue(), err.getvalue())
    if check:
        result.check_returncode()
    return result


def tune_context(task, target, strategy="evolutionary", rand_state: int = -1):
    """A MetaSchedule tuning context of ``task`` on ``target`` (one thread; an 8-program evolutionary population
    unless ``strategy`` names another; ``rand_state`` -1: seeded from the clock), the way the search builds one."""
    from tlp._tvm import ms, tvm

    if strategy == "evolutionary":
        strategy = ms.search_strategy.EvolutionarySearch(population_size=8)
    return ms.TuneContext(mod=task.mod, target=tvm.target.Target(target), space_generator="post-order-apply",
                          search_strategy=strategy, task_name=task.name, rand_state=rand_state, num_threads=1)


def trace_decisions(trace) -> list:
    """A trace's sampled decisions in order (tile sizes, unroll, compute locations): what makes one program."""
    return [(inst.kind.name, str(decision)) for inst, decision in trace.decisions.items()]


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


@pytest.fixture(scope="session")
def tiny_checkpoint(collected, host_platform, tmp_path_factory):
    """A small TLP model trained on the tiny collection, saved as a checkpoint (path)."""
    from tlp.features.tensors import load_programs
    from tlp.model.estimator import TLPModel, TrainConfig
    from tlp.model.network import ModelConfig

    dataset, _ = collected
    model = TLPModel(model_config=ModelConfig(hidden=32, heads=4),
                     train_config=TrainConfig(epochs=3, val_fraction=0.5, seed=3))
    model.fit(load_programs(dataset, host_platform.id), progress=False)
    path = tmp_path_factory.mktemp("model") / "tiny.pt"
    model.save(path)
    return path


# `tlp ARGS` in a process of its own that sends itself SIGTERM the way `timeout` does (to its whole process group,
# build and run workers included) at one point of its work: argv[1] is the point, argv[2] the call of it that fires.
SIGTERM_AT = r'''
import os, signal, sys, threading
point, nth = sys.argv[1], int(sys.argv[2])
sys.argv = ["tlp", *sys.argv[3:]]
calls = {"n": 0}

def stop():
    os.killpg(os.getpgid(0), signal.SIGTERM)

def hook(owner, name, delay):
    original = getattr(owner, name)
    def patched(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == nth:
            if delay:
                threading.Timer(delay, stop).start()
            else:
                stop()
        return original(*args, **kwargs)
    setattr(owner, name, patched)

from tlp._tvm import ms
from tlp.dataset import measure, table
if point == "build":  # half a second into building a batch
    hook(measure.PersistentBuilder._cls, "build", 0.5)
elif point == "run":  # as a program starts to run
    hook(ms.runner.LocalRunner._cls, "run", 0)
elif point == "seal":  # as the first table is sealed
    hook(table.Table, "seal", 0)
elif point == "import":  # while the network is exported and its tasks extracted
    from tlp.tune import run
    hook(run, "resolve_source", 0.5)
elif point == "predict":  # during a zero-measurement search, while MetaSchedule's C++ calls the cost model
    from tlp.search.database import predicted
    hook(predicted, "_ranked_candidates", 0.3)
from tlp.cli import main
sys.exit(main())
'''


def tlp_stopped_at(point: str, nth: int, args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """``tlp *args`` stopped by SIGTERM to its process group at the ``nth`` call of ``point`` (build, run, seal,
    import, predict)."""
    return subprocess.run([sys.executable, "-c", SIGTERM_AT, point, str(nth), *args], capture_output=True, text=True,
                          timeout=timeout, start_new_session=True)


def assert_clean_stop(result: subprocess.CompletedProcess) -> None:
    """Exit 130 with the one-line message: no traceback, no C++ terminate or segfault dump."""
    assert result.returncode == 130, result.stderr[-3000:]
    assert "interrupted" in result.stderr
    for crash in ("Traceback", "Segfault", "terminate called", "std::terminate", "Exception ignored"):
        assert crash not in result.stderr, result.stderr[-3000:]


def assert_store_sealed_and_unlocked(store) -> None:
    """Every tail sealed (empty), the writer lock released and empty, nothing damaged."""
    for table in store.tables():
        assert not table.tail.exists() or table.tail.stat().st_size == 0, table.tail
        assert all(check.status != "damaged" for check in table.check())
    lock = store.path / ".lock"
    assert not lock.exists() or lock.read_text() == ""
