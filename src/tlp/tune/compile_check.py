"""Fail fast: a network must compile with TVM's default schedules before any tuning budget is spent on it.

A model that imports and tunes can still fail in TVM's code generator when it is compiled (GPT-2 and Llama did,
on bool comparisons: ``docs/upstream_bugs.md``). Compiling first with an empty database costs seconds; finding out
after the search costs the whole budget. When compilation fails, each lowered PrimFunc is compiled on its own to
name the one that fails, so the error says what to look at.
"""

from __future__ import annotations

from typing import Any

from tlp import StageError, one_line
from tlp._tvm import ms, tvm
from tlp.search.database.shared_schedules import compile_database
from tlp.tune.sources import Tunable

COMPILE_HINT = ("see docs/upstream_bugs.md for known TVM code-generator bugs; rewrite the op in the model "
                "(or report it with `tlp --debug tune ...`'s output)")


def compile_network(tunable: Tunable, target: Any, database: Any) -> Any:
    """The network compiled into a Relax VM executable, with the schedules in ``database``: a function without a
    record of its own takes the one of the function it shares an anchor block with (its task's,
    :mod:`tlp.search.database.shared_schedules`); TVM's defaults for the rest."""
    return ms.relax_integration.compile_relax(compile_database(database), tunable.relax_mod, target, params=None)


def failing_primfunc(relax_mod: Any, target: Any) -> str | None:
    """The first PrimFunc of the lowered module that does not compile on its own (None when each compiles)."""
    from tvm import relax, tirx  # pylint: disable=import-outside-toplevel

    lowered = relax.get_pipeline("zero")(relax_mod)
    for global_var, func in lowered.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        try:
            tvm.compile(tvm.IRModule({global_var: func}), target=target)
        except Exception:  # pylint: disable=broad-except  # any failure names this function
            return global_var.name_hint
    return None


def compile_error(tunable: Tunable, target: Any, error: BaseException, stage: str, hint: str) -> StageError:
    """A one-line :class:`StageError` for a failed compilation, naming the PrimFunc that fails when one does."""
    try:
        culprit = failing_primfunc(tunable.relax_mod, target)
    except Exception:  # pylint: disable=broad-except  # the diagnosis must never hide the original error
        culprit = None
    where = f"PrimFunc {culprit}: " if culprit else ""
    return StageError(tunable.name, stage, where + one_line(error), hint)


def check_compiles(tunable: Tunable, target_json: dict[str, Any]) -> None:
    """Raise a :class:`StageError` unless the network compiles with default schedules.

    Networks that already compiled and ran while importing (the fast-math check) are not compiled again.
    Single operators are not checked: a kernel that does not build fails each measured candidate visibly, and the
    zoo's 71 operators would cost a compilation each.
    """
    if not tunable.is_network or tunable.compiles_with_defaults:
        return
    target = tvm.target.Target(target_json)
    try:
        compile_network(tunable, target, ms.database.MemoryDatabase())
    except Exception as error:  # pylint: disable=broad-except  # TVM raises many error types here
        raise compile_error(tunable, target, error, "compile with default schedules (before tuning)",
                            COMPILE_HINT) from error
