"""The shipped cost models (package data) and their card ``MODEL_CARD.md``.

- ``tlp-cpu``: the default, MTL-TLP (one backbone, a head per platform of ``datasets/tlp-cpu``), hidden 128,
  25 primitives per trace, trained on the search-produced data of 2026-11-23;
- ``tlp-cpu-small``: the single-platform (Zen 3) small model of 2026-11-22, kept so that the studies which
  compared it can be reproduced (see the card).
"""

from __future__ import annotations

import os
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
PACKAGED = ("tlp-cpu", "tlp-cpu-small")
DEFAULT = "tlp-cpu"


def user_models_dir() -> Path:
    """Where ``tlp adapt`` saves models for this user's machines: ``$TLP_MODELS_DIR``, else
    ``$XDG_DATA_HOME/tlp/models`` (``~/.local/share/tlp/models``)."""
    if os.environ.get("TLP_MODELS_DIR"):
        return Path(os.environ["TLP_MODELS_DIR"])
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "tlp" / "models"


def adapted_model_path(platform_id: str) -> Path:
    """The model ``tlp adapt`` made for ``platform_id`` (the packaged heads plus this platform's)."""
    return user_models_dir() / f"{platform_id}.pt"


def model_path(spec: str | Path | None = None, platform_id: str | None = None) -> Path:
    """A checkpoint path: a packaged name (``tlp-cpu-small``), a file path, or ``None`` for the default: the model
    adapted to ``platform_id`` if ``tlp adapt`` made one, else the packaged default."""
    if spec is None:
        if platform_id and adapted_model_path(platform_id).is_file():
            return adapted_model_path(platform_id)
        spec = DEFAULT
    if str(spec) in PACKAGED:
        return MODELS_DIR / f"{spec}.pt"
    return Path(spec)
