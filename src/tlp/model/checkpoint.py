"""Checkpoint files: the one place that knows their formats and which class loads each.

A checkpoint is ``torch.save`` of a dict of plain tensors and a JSON text ``meta`` whose ``format`` says what it
holds: one network (:class:`~tlp.model.estimator.TLPModel`), a seed ensemble
(:class:`~tlp.model.ensemble.TLPEnsemble`) or a cascade (:class:`~tlp.model.cascade.TLPCascade`); a model of several
networks holds its parts' own payloads, each with its own format. It loads with ``torch.load(weights_only=True)``:
no pickle runs, whatever the file holds.

:data:`FORMATS` maps each format to its loader by name (``"module:Class"``, imported when a file of that format is
read), so this module imports none of the model classes and they import it: no import circle between the single
network and the models made of several (``tests/test_import_cycles.py``). A loader is a class with
``from_payload(payload, meta, path)``.

Configs stored in a checkpoint outlive the options they hold: :func:`config_from_json` accepts a field this TLP
no longer has at the value every checkpoint had while the option was off, and refuses (one line, naming it) a
checkpoint that needs the removed option.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pickle
from pathlib import Path
from typing import Any, Mapping

import torch

from tlp import TLPError, one_line

SINGLE_FORMAT = "tlp-checkpoint-2"
# Format 1 had one decoder named ``decoder``: it loads as a one-head model (``heads.0``).
SINGLE_DECODER_FORMAT = "tlp-checkpoint-1"
ENSEMBLE_FORMAT = "tlp-ensemble-1"
CASCADE_FORMAT = "tlp-cascade-1"

# format -> "module:Class" whose ``from_payload(payload, meta, path)`` makes the model.
FORMATS: dict[str, str] = {
    SINGLE_FORMAT: "tlp.model.estimator:TLPModel",
    SINGLE_DECODER_FORMAT: "tlp.model.estimator:TLPModel",
    ENSEMBLE_FORMAT: "tlp.model.ensemble:TLPEnsemble",
    CASCADE_FORMAT: "tlp.model.cascade:TLPCascade",
}


class CheckpointError(TLPError, ValueError):
    """A checkpoint that cannot be used by this version of TLP."""


def loader(kind: str, path: str | Path) -> Any:
    """The class that loads checkpoints of format ``kind``."""
    if kind not in FORMATS:
        raise CheckpointError(f"{path}: checkpoint format {kind!r}, expected {SINGLE_FORMAT} (one network), "
                              f"{ENSEMBLE_FORMAT} or {CASCADE_FORMAT}")
    module, _, name = FORMATS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def meta_of(payload: Any, path: str | Path) -> dict[str, Any]:
    """The description a payload carries (its JSON ``meta``)."""
    try:
        meta = json.loads(payload["meta"])
    except Exception as error:  # pylint: disable=broad-except  # any unreadable payload gets the same message
        raise CheckpointError(f"{path}: not a TLP checkpoint ({one_line(error)})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: not a TLP checkpoint (its description is a {type(meta).__name__})")
    return meta


def kind_of(payload: Any, path: str | Path) -> str:
    """The format of a payload: what it holds."""
    return str(meta_of(payload, path).get("format"))


def from_payload(payload: Any, path: str | Path) -> Any:
    """The model a payload holds (a whole checkpoint's, or a part's of a model of several networks), by the class
    its format names; ``path`` names it in errors."""
    if not isinstance(payload, Mapping) or "meta" not in payload:
        raise CheckpointError(f"{path}: missing from the checkpoint")
    meta = meta_of(payload, path)
    return loader(str(meta.get("format")), path).from_payload(payload, meta, path)


def read(path: str | Path) -> dict[str, Any]:
    """A checkpoint file's payload, read without executing pickle (``weights_only=True``)."""
    try:
        payload = torch.load(str(path), map_location="cpu", weights_only=True)
        json.loads(payload["meta"])
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except pickle.UnpicklingError:
        # Not PyTorch's advice (load with weights_only=False): that runs whatever code the file holds.
        raise CheckpointError(f"{path}: not a TLP checkpoint: it holds Python objects that TLP checkpoints never "
                              "hold, and loading them could run code, so it was not loaded (make one with "
                              "tlp train or tlp adapt)") from None
    except Exception as error:  # pylint: disable=broad-except  # any unreadable file gets the same message
        raise CheckpointError(f"{path}: not a TLP checkpoint ({one_line(error)})") from None
    return payload


def load(path: str | Path) -> Any:
    """The model a checkpoint file holds: a ``TLPModel``, a ``TLPEnsemble`` or a ``TLPCascade``, as its format
    says (``tlp.models.model_path`` turns a packaged model's name into its path)."""
    return from_payload(read(path), path)


def write(payload: Mapping[str, Any], path: str | Path) -> None:
    """Save a payload (a model's ``payload()``) as a checkpoint file."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save(dict(payload), str(path))


def config_from_json(cls: Any, data: Mapping[str, Any], path: str | Path,
                     removed: Mapping[str, tuple[Any, str]] | None = None) -> Any:
    """The config dataclass ``cls`` from a checkpoint's JSON ``data``.

    ``removed``: field -> (the value it had when its option was off, what the option was). Such a field is dropped
    when it holds that value (checkpoints written before the option went away); any other value means the model
    needs the option, a :class:`CheckpointError` that names it. A field ``cls`` never had is an error too.
    """
    known = {f.name for f in dataclasses.fields(cls)}
    kept = {}
    for key, value in data.items():
        if key in known:
            kept[key] = value
        elif key in (removed or {}):
            off, option = (removed or {})[key]
            if value != off:
                raise CheckpointError(f"{path}: made with {option} ({key}={value!r}), which this TLP no longer has")
        else:
            raise CheckpointError(f"{path}: {cls.__name__} field {key!r}, which this TLP does not have (a "
                                  "checkpoint of a newer TLP?)")
    return cls(**kept)
