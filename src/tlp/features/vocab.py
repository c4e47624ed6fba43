"""Vocabularies over instruction kinds and string parameters, with reserved padding and out-of-vocabulary ids.

An unknown instruction kind or string maps to the OOV id: it never crashes featurization and never shifts the ids
of known entries (ids are assigned once, when the vocabulary is built, and stored in checkpoints).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

PAD, OOV = 0, 1


@dataclass
class Vocabulary:
    """token -> id; ids 0 and 1 are padding and out-of-vocabulary."""

    tokens: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._ids = {token: i + 2 for i, token in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens) + 2

    def id(self, token: str) -> int:
        return self._ids.get(token, OOV)

    @staticmethod
    def build(counts: Counter, min_count: int = 1, max_size: int | None = None) -> "Vocabulary":
        """Most frequent first (ties by name, so the same data always gives the same ids)."""
        ranked = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
        return Vocabulary(ranked[:max_size] if max_size else ranked)

    def to_json(self) -> list[str]:
        return list(self.tokens)

    @staticmethod
    def from_json(tokens: Iterable[Any]) -> "Vocabulary":
        return Vocabulary([str(t) for t in tokens])
