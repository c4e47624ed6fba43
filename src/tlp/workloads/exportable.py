"""A PyTorch module as ``torch.export`` can take it: a forward that returns a flat tuple of tensors.

Models from ``transformers`` return a ``ModelOutput`` that may hold a KV cache (``DynamicCache``), which
``torch.export`` refuses (``Found <class 'transformers.cache_utils.DynamicCache'> in output``). TLP compiles one
forward pass at the example input's fixed shape (prefill), for which the cache is not needed: a model whose forward
accepts ``use_cache`` is called with ``use_cache=False``, and any other non-tensor output is dropped. What was
dropped is recorded so the tune report can say it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Exportable:
    """The wrapped module, the names of the tensors it returns, and what was left out of the original outputs."""

    module: Any  # torch.nn.Module returning tuple[Tensor, ...]
    output_names: list[str]
    dropped: list[str] = field(default_factory=list)  # human-readable notes, one per dropped output or option


def _flatten(value: Any, name: str, tensors: list[tuple[str, Any]], others: list[tuple[str, Any]]) -> None:
    """Depth-first (name, leaf) pairs: tensors into ``tensors``, everything else (caches, None, ints) into ``others``."""
    import torch  # pylint: disable=import-outside-toplevel

    if isinstance(value, torch.Tensor):
        tensors.append((name or "output", value))
    elif isinstance(value, Mapping) or (hasattr(value, "keys") and hasattr(value, "__getitem__")
                                        and not isinstance(value, (list, tuple))):
        # dict and transformers' ModelOutput (an OrderedDict that omits the fields left at None)
        for key in value.keys():
            _flatten(value[key], f"{name}.{key}" if name else str(key), tensors, others)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _flatten(item, f"{name}[{index}]" if name else f"output{index}", tensors, others)
    else:
        others.append((name or "output", value))


def flatten_outputs(value: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """A forward's result as (named tensors, named non-tensors), in a fixed depth-first order."""
    tensors: list[tuple[str, Any]] = []
    others: list[tuple[str, Any]] = []
    _flatten(value, "", tensors, others)
    return tensors, others


def _accepts_use_cache(module: Any) -> bool:
    try:
        return "use_cache" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def _describe(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def make_exportable(module: Any, example_inputs: tuple[Any, ...]) -> Exportable:
    """Wrap ``module`` so its forward returns only tensors; runs it once in eager mode to learn its outputs."""
    import torch  # pylint: disable=import-outside-toplevel

    module = module.eval()
    kwargs: dict[str, Any] = {}
    dropped: list[str] = []
    with torch.no_grad():
        tensors, others = flatten_outputs(module(*example_inputs))
        if others and _accepts_use_cache(module):
            kwargs = {"use_cache": False}
            cached = [f"{n} ({_describe(v)})" for n, v in others if "cache" in _describe(v).lower()
                      or "past_key_values" in n]
            if cached:
                dropped.append(f"KV cache {', '.join(cached)}: exported with use_cache=False (prefill only)")
            tensors, others = flatten_outputs(module(*example_inputs, **kwargs))
    dropped.extend(f"output {n} ({_describe(v)}): not a tensor" for n, v in others if v is not None)
    if not tensors:
        from tlp import TLPError  # pylint: disable=import-outside-toplevel

        raise TLPError(f"{type(module).__name__}: its forward returns no tensors "
                       f"({', '.join(f'{n}: {_describe(v)}' for n, v in others)})")
    return Exportable(TensorOutputs(module, kwargs, len(tensors)), [n for n, _ in tensors], dropped)


@functools.lru_cache(maxsize=1)
def _module_class() -> type:
    """Defined on first use so that importing this file does not import torch."""
    import torch  # pylint: disable=import-outside-toplevel

    class _TensorOutputs(torch.nn.Module):
        """``inner(*args, **fixed_kwargs)`` with its tensor outputs flattened into a tuple."""

        def __init__(self, inner: torch.nn.Module, fixed_kwargs: dict[str, Any], count: int) -> None:
            super().__init__()
            self.inner = inner
            self.fixed_kwargs = dict(fixed_kwargs)
            self.count = count

        def forward(self, *args: Any) -> tuple[torch.Tensor, ...]:
            tensors, _ = flatten_outputs(self.inner(*args, **self.fixed_kwargs))
            return tuple(t for _, t in tensors)

    return _TensorOutputs


def TensorOutputs(inner: Any, fixed_kwargs: dict[str, Any], count: int) -> Any:  # pylint: disable=invalid-name
    """A module whose forward is ``inner``'s with only its tensor outputs, as a tuple."""
    return _module_class()(inner, fixed_kwargs, count)
