"""What the benchmark scripts share: where a study's results go, the stamp every results file carries, writing
JSON, and the ``tlp`` command line as a subprocess.

Scripts run as ``python benchmarks/<study>/<script>.py`` and put this folder on the path in one line, after their
own folder (so a script's own neighbours win) and before site-packages:

    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py

A script that imports another study's script adds that study the same way (:func:`add_study`).
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
REPOSITORY = BENCHMARKS.parent

# ``tlp`` in a fresh process of this interpreter, without relying on an installed entry point or on
# ``python -m tlp.cli`` (the command line is a package whose entry point is ``tlp.cli.main``).
TLP_CLI = [sys.executable, "-c", "import sys; from tlp.cli import main; sys.exit(main())"]


def results_dir(script: str | Path) -> Path:
    """``benchmarks/<study>/results`` of the script at ``script`` (pass ``__file__``)."""
    return Path(script).resolve().parent / "results"


def add_study(name: str) -> Path:
    """Put ``benchmarks/<name>`` on the path (after the running script's folder), to import one of its scripts."""
    folder = BENCHMARKS / name
    if str(folder) not in sys.path:
        sys.path.insert(1, str(folder))
    return folder


def stamp(timespec: str = "date") -> dict[str, Any]:
    """``{"date": ..., "machine": ...}``: when and where a result was measured (``timespec``: ``date``, or a
    ``datetime.isoformat`` timespec such as ``minutes`` for a local time)."""
    from tlp.platform import host_fingerprint  # pylint: disable=import-outside-toplevel  (TVM-free scripts too)

    now = datetime.date.today().isoformat() if timespec == "date" else \
        datetime.datetime.now().isoformat(timespec=timespec)
    return {"date": now, "machine": host_fingerprint()}


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON (its folder created), ending with a newline."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path
