"""Where TLP keeps its caches: ``$TLP_CACHE_DIR`` (default ``~/.cache/tlp``), one folder per kind (extracted tasks,
featurized programs, schedule libraries). A cache is only ever a saved computation: deleting it costs time."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("TLP_CACHE_DIR", Path.home() / ".cache" / "tlp"))
