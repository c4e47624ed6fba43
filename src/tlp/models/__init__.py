"""The shipped cost models (package data) and their card ``MODEL_CARD.md``.

- ``tlp-cpu``: the default (hidden 256, 80 primitives per trace);
- ``tlp-cpu-small``: hidden 128, 25 primitives per trace: ~6x cheaper network, same held-out top-1, weaker
  in search (see the card).
"""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
PACKAGED = ("tlp-cpu", "tlp-cpu-small")
DEFAULT = "tlp-cpu"


def model_path(spec: str | Path | None = None) -> Path:
    """A checkpoint path: ``None`` = the default model, a packaged name (``tlp-cpu-small``), or a file path."""
    if spec is None:
        spec = DEFAULT
    if str(spec) in PACKAGED:
        return MODELS_DIR / f"{spec}.pt"
    return Path(spec)
