"""The ``tlp`` command line: one module per verb (``tlp <verb> --help`` for each).

    tlp workloads list                       what can be tuned/measured, with task counts
    tlp collect --workloads W --dataset D    measure programs (resumable; --remeasure-* for re-measurement)
    tlp dataset info|compare|import|seal|export|verify   inspect and manage datasets
    tlp features DATASET                     trace lengths, crop coverage and feature collisions of a dataset
    tlp train DATASET --out MODEL            train a TLP model (held-out networks excluded)
    tlp eval --model MODEL --dataset D       top-k on held-out networks vs MetaSchedule XGB/MLP and random
    tlp adapt                                a head for this machine from a small sample measured here
    tlp tune SOURCE --trials N               tune an operator / network / .py / .onnx with the TLP cost model
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import traceback
from typing import Any

from tlp import TLPError
from tlp.interrupt import TuneInterrupted
from tlp.cli import adapt, collect, dataset, evaluate, features, train, tune, workloads

VERBS = (workloads, collect, features, train, evaluate, adapt, tune, dataset)  # in `tlp --help`'s order


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tlp", description="TLP: learned cost models for TVM MetaSchedule")
    parser.add_argument("-v", "--verbose", action="store_true", help="show MetaSchedule's own log lines")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error, not only its line")
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb in VERBS:
        verb.register(verbs)
    return parser


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def os_error_line(error: OSError) -> str:
    """An OSError as one line naming the file, with what to do for the usual causes."""
    import errno  # pylint: disable=import-outside-toplevel

    where = error.filename or "(no file named)"
    what = error.strerror or str(error)
    advice = {errno.ENOSPC: "free some space and re-run the same command (nothing stored before is lost)",
              errno.EDQUOT: "free some space (disk quota) and re-run the same command",
              errno.EACCES: "check the permissions, or choose another path",
              errno.EROFS: "the file system is read-only: choose another path",
              errno.ENOENT: "check the path"}.get(error.errno or 0, "check the path and re-run")
    return f"{where}: {what}; {advice}"


def main(argv: list[str] | None = None) -> int:
    from tlp import interrupt  # pylint: disable=import-outside-toplevel

    # The command's own process (not a caller's, such as the tests'): a repeated stop may end it at once.
    interrupt.HARD_EXIT["allowed"] = argv is None
    args = build_parser().parse_args(argv)
    # `kill PID` stops like Ctrl-C (batch in flight dropped, the rest stored and sealed). A collection started in
    # the background by a script cannot be stopped with SIGINT at all: the shell starts it with SIGINT ignored.
    # Where TLP measures, both only request a stop, taken where raising is safe (tlp.interrupt); elsewhere SIGTERM
    # raises KeyboardInterrupt as Ctrl-C does.
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm) if on_main_thread else None
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not args.verbose:
        # MetaSchedule logs every evolutionary-search step at INFO; that drowns the progress bar.
        logging.getLogger("tvm").setLevel(logging.WARNING)
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)  # its console handler follows this
    try:
        return int(args.func(args) or 0)
    except TuneInterrupted as stopped:  # Ctrl-C or SIGTERM in `tlp tune`: as for every verb, 130
        print(f"tlp: {stopped}", file=sys.stderr)
        return 130
    except TLPError as error:
        if args.debug:
            traceback.print_exception(error)
        print(f"tlp: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tlp: interrupted; everything measured so far is stored (re-run the same command to continue)",
              file=sys.stderr)
        return 130
    except OSError as error:  # a full disk, a folder without write permission: the file and what to do
        if args.debug:
            traceback.print_exception(error)
        print(f"tlp: error: {os_error_line(error)}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:  # in-process callers (tests) get their handler back
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
