"""``KEY=VALUE`` settings: how a user reaches a stage's internals (``tlp tune --set online_lr=1e-3``) without a flag
per knob. Keys are the field names of the stage's config dataclasses (``TuneConfig``, ``TrainConfig``, ...), so
the command line and the Python API use the same names; values are converted to the field's type, once, here."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from tlp import TLPError

NONE_WORDS = ("none", "null")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


class SettingError(TLPError):
    """A ``--set`` pair that names no setting or whose value does not fit it."""


def parse_pairs(pairs: list[str] | None, verb: str) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; a pair without ``=`` is an error naming it."""
    result: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SettingError(f"tlp {verb}: --set takes KEY=VALUE, got {pair!r}")
        result[key.strip().replace("-", "_")] = value.strip()
    return result


def _convert(text: str, annotation: Any, key: str) -> Any:
    """``text`` as a value of type ``annotation`` (int, float, bool, str, tuple[str, ...], or Optional of those)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        if text.lower() in NONE_WORDS:
            return None
        annotation = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    try:
        if annotation is bool:
            if text.lower() in TRUE_WORDS:
                return True
            if text.lower() in FALSE_WORDS:
                return False
            raise ValueError
        if annotation is int:
            return int(text)
        if annotation is float:
            return float(text)
        if origin is tuple:
            return tuple(part.strip() for part in text.split(",") if part.strip())
        return text
    except ValueError:
        kind = {int: "an integer", float: "a number", bool: "true or false"}.get(annotation, str(annotation))
        raise SettingError(f"--set {key}={text}: not {kind}") from None


def settable_fields(config: Any) -> dict[str, Any]:
    """Field name -> type of a config dataclass instance (nested dataclasses as ``outer.inner``)."""
    hints = typing.get_type_hints(type(config))
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            fields.update({f"{field.name}.{key}": hint for key, hint in settable_fields(value).items()})
        else:
            fields[field.name] = hints[field.name]
    return fields


def _replaced(config: Any, key: str, value: Any) -> Any:
    """A copy of ``config`` with ``key`` (``outer.inner`` for a nested config) set; frozen dataclasses too."""
    name, _, rest = key.partition(".")
    if rest:
        value = _replaced(getattr(config, name), rest, value)
    return dataclasses.replace(config, **{name: value})


def apply_settings(configs: list[Any], settings: dict[str, str], verb: str, reserved: tuple[str, ...] = ()) -> list[Any]:
    """``configs`` (dataclass instances) with each ``key=value`` set on the first that has the field, as new
    instances in the same order; an unknown key or a key in ``reserved`` (a setting that has its own option) is an
    error listing what can be set."""
    configs = list(configs)
    for key, text in settings.items():
        for index, config in enumerate(configs):
            fields = settable_fields(config)
            if key in fields and key not in reserved:
                configs[index] = _replaced(config, key, _convert(text, fields[key], key))
                break
        else:
            known = sorted({k for c in configs for k in settable_fields(c)} - set(reserved))
            raise SettingError(f"tlp {verb}: --set {key}: no such setting (settings: {', '.join(known)})")
    return configs


def check_ranges(config: Any, what: str, rules: dict[str, tuple[float | None, float | None]]) -> None:
    """Refuse a setting outside its range in one line (``rules``: field -> (lowest, highest), ``None``: open; a
    field that is ``None`` is unset and passes): nonsense such as ``batch_size=0`` measured nothing and exited 0."""
    for name, (low, high) in rules.items():
        value = getattr(config, name)
        if value is None:
            continue
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = (f"between {low:g} and {high:g}" if low is not None and high is not None else
                      f"at least {low:g}" if low is not None else f"at most {high:g}")
            raise SettingError(f"{what}: {name} must be {bounds}, not {value}")
