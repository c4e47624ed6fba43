"""Stopping on Ctrl-C or ``kill`` (SIGTERM) while TVM's C++ runs, without raising inside it.

Python runs a signal handler at the next bytecode the main thread executes, wherever that is. A handler that
raises (Python's own for Ctrl-C; TLP's turned SIGTERM into KeyboardInterrupt) therefore raised inside whatever
Python code C++ happened to be calling: a cost model's ``predict`` inside the evolutionary search, a search
strategy called by the task scheduler, a deleter run from a C++ destructor. An exception thrown through C++ code
not ready for one ends in ``std::terminate`` ("!!!!!!! Segfault encountered !!!!!!!", exit 139): ``timeout 20
tlp tune dense_64x64x64`` died so in 2 of 4 tries, ``timeout N tlp collect`` on a loaded machine too.

So while TLP measures (``tlp collect``, ``tlp tune``'s search, the measuring of ``tlp adapt``), a signal only
*requests* a stop (:func:`deferred`), and the stop is *taken* by :func:`check` at places where raising is safe:
Python's own loops (collect's batches), and the callbacks MetaSchedule's task scheduler calls directly and expects
errors from (our builder, runner and measure callback). A batch in flight when the stop came is dropped, unless the
stop asked to finish it (the first Ctrl-C of ``tlp tune``) and every program of it built and ran: the signal also
reaches the build and run workers (a terminal's Ctrl-C and ``timeout`` signal the whole process group), so a
failure then may be the stop's doing and must not be stored as the program's.

Levels of a requested stop: ``FINISH`` (store the batch in flight, then stop), ``NOW`` (drop it, stop at the next
check: within a fraction of a second while waiting for workers). A signal after a ``NOW`` stops at once: the
command line exits 130 on the spot (every stored batch is already on disk; the next writer repairs an unsealed
tail), a library caller gets a KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator

from tlp import TLPError

NONE, FINISH, NOW = 0, 1, 2


class TuneInterrupted(TLPError):
    """Ctrl-C or SIGTERM during tuning: the work directory keeps every batch stored (``tlp`` exits 130)."""


_state: dict[str, Any] = {"level": NONE, "active": False, "finish_first": False, "signal": None, "at": 0.0}

# `timeout` sends its SIGTERM twice, to the command and then to the command's whole process group: a second SIGTERM
# this soon after the first is the same stop, not the insistence that stops at once.
SAME_STOP_S = 2.0

# Set by the command line's own process (``tlp ...``, ``python -m tlp``): a third stop may end the process at once.
# In-process callers (tests, notebooks) get a KeyboardInterrupt instead.
HARD_EXIT: dict[str, bool] = {"allowed": False}

# Called before a hard exit (the stores' writer locks are cleared by tlp.dataset.store).
_before_exit: list[Callable[[], None]] = []


def at_hard_exit(function: Callable[[], None]) -> None:
    """Run ``function`` before the process ends at once on a repeated stop."""
    if function not in _before_exit:
        _before_exit.append(function)


def level() -> int:
    """The stop requested so far: ``NONE``, ``FINISH`` or ``NOW``."""
    return int(_state["level"])


def requested() -> bool:
    return level() > NONE


def check(at: int = FINISH) -> None:
    """Take a requested stop of level ``at`` or more here: raise KeyboardInterrupt (only where raising is safe)."""
    if level() >= at:
        raise KeyboardInterrupt


def _handler(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    now = time.monotonic()
    if signum == signal.SIGTERM and _state["signal"] == name and now - _state["at"] < SAME_STOP_S:
        return
    _state["at"] = now
    if level() >= NOW:
        _stop_at_once(name)
    if signum == signal.SIGINT and _state["finish_first"] and level() == NONE:
        _state["level"] = FINISH
        print(f"\ntlp: stopping once the batch in flight is measured and stored; Ctrl-C again to stop now, "
              "dropping it", file=sys.stderr, flush=True)
    else:
        _state["level"] = NOW
    _state["signal"] = name


def _stop_at_once(name: str) -> None:
    if not HARD_EXIT["allowed"]:
        raise KeyboardInterrupt
    for function in _before_exit:
        try:
            function()
        except Exception:  # pylint: disable=broad-except  # exiting anyway
            pass
    print(f"\ntlp: {name} again: stopped at once; every stored batch is kept (re-run the same command to continue)",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(130)  # pylint: disable=protected-access  # no interpreter shutdown: TVM's pools and threads still run


@contextlib.contextmanager
def deferred(finish_batch: bool = False) -> Iterator[None]:
    """Within: SIGINT and SIGTERM request a stop, which :func:`check` takes (see the module doc).

    ``finish_batch``: the first Ctrl-C lets the batch in flight finish and be stored (SIGTERM never does). An error
    raised within after a stop was requested is taken for the stop's doing (a worker killed by the same signal) and
    becomes a KeyboardInterrupt. Off the main thread (signals go to the main thread only) and nested, it does
    nothing of its own.
    """
    if _state["active"] or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _state.update(level=NONE, active=True, finish_first=finish_batch, signal=None, at=0.0)
    try:
        for sig in previous:
            signal.signal(sig, _handler)
        try:
            yield
        except Exception:
            if requested():
                raise KeyboardInterrupt from None
            raise
        # A stop that came after the last check (while sealing, say) still stops the command.
        check()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        _state.update(level=NONE, active=False, finish_first=False)


@contextlib.contextmanager
def process_pool(processes: int) -> Iterator[Any]:
    """A pool of forked worker processes (a spawned one would re-run a caller's unguarded script) that a stop or an
    error ends at once: the workers are killed rather than waited for, whatever they were given."""
    import concurrent.futures  # pylint: disable=import-outside-toplevel
    import multiprocessing  # pylint: disable=import-outside-toplevel

    pool = concurrent.futures.ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"))
    try:
        yield pool
    except BaseException:
        for worker in list((getattr(pool, "_processes", None) or {}).values()):
            worker.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
