"""Ansor schedule steps -> a sequence of step vectors: TLP's original featurization (ASPLOS'23, section 4).

TLP was designed on Ansor/TenSet records, whose program is a list of schedule steps such as
``["SP", 2, 0, 1024, [2, 1, 4], 1]`` (split stage 2's loop 0 of extent 1024 by factors 2, 1, 4). The paper turns
each step into one vector: a one-hot of the step's kind, then its parameters — the integers as numbers, the few
string parameters (pragma names, cache scopes) through a small dictionary — and pads or crops the sequence to a
fixed size: 25 steps x 22 values for CPU records, 40 x 20 for GPU records.

Here the row keeps the paper's size and content in the column layout the TLP network reads
(:class:`AnsorStepConfig.columns`)::

    [kind id | string ids (2) | numbers (width - 3)]

The one-hot of the kind is stored as its vocabulary id, which the network embeds: an embedding lookup is exactly
a linear layer applied to the one-hot, so the network sees the same information without a dozen zero columns.
Numbers are log-scaled (``sign(x) * log2(1 + |x|)``), as in the MetaSchedule trace featurizer: raw split
factors and extents (up to 10^4) next to stage and loop ids (0–30) would leave a linear layer blind to the ids.
A pragma such as ``auto_unroll_max_step$512`` is the string ``auto_unroll_max_step`` and the number 512.
Unknown step kinds and strings map to the out-of-vocabulary id; they never fail.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from tlp.features.vocab import Vocabulary
from tlp.platform import ANSOR_FORMAT

ANSOR_FEATURE_VERSION = 1
ANSOR_FEATURIZER = "ansor-steps"

# The paper's crops: (steps, values per step) for CPU and for GPU records.
PAPER_SHAPE = {"cpu": (25, 22), "gpu": (40, 20)}
_GPU_KINDS = {"cuda", "rocm", "opencl", "vulkan", "metal"}


@dataclass(frozen=True)
class AnsorStepConfig:
    """Shape of the step vectors. Stored in checkpoints; the network reads its ``columns``."""

    seq_len: int = 25
    width: int = 22
    num_strings: int = 2
    version: int = ANSOR_FEATURE_VERSION

    @staticmethod
    def paper(target_kind: str, seq_len: int | None = None) -> "AnsorStepConfig":
        """The paper's crop for records of this target kind (``llvm``: 25 x 22; GPU kinds: 40 x 20)."""
        steps, width = PAPER_SHAPE["gpu" if target_kind in _GPU_KINDS else "cpu"]
        return AnsorStepConfig(seq_len=seq_len or steps, width=width)

    @property
    def num_numbers(self) -> int:
        return self.width - 1 - self.num_strings

    def columns(self) -> dict[str, slice]:
        """Where each part lives in a step vector (the trace featurizer's names; no refs, no post-proc flag)."""
        numbers = 1 + self.num_strings
        return {"kind": slice(0, 1), "strings": slice(1, numbers), "refs": slice(numbers, numbers),
                "numbers": slice(numbers, self.width), "postproc": slice(self.width, self.width)}

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def _log(x: float) -> float:
    return math.copysign(math.log2(1.0 + abs(x)), x)


def step_parameters(step: Sequence[Any]) -> tuple[list[str], list[float]]:
    """One step's parameters after its kind: ``(strings, log-scaled numbers)``, nested lists flattened in order."""
    strings: list[str] = []
    numbers: list[float] = []

    def visit(value: Any) -> None:
        if isinstance(value, bool):
            numbers.append(float(value))
        elif isinstance(value, (int, float)):
            numbers.append(_log(float(value)) if math.isfinite(value) else 0.0)
        elif value is None:
            numbers.append(0.0)  # an unknown extent (SP's): keeps the later parameters in their places
        elif isinstance(value, str):
            name, dollar, argument = value.partition("$")  # "auto_unroll_max_step$512"
            strings.append(name)
            if dollar:
                try:
                    numbers.append(_log(float(argument)))
                except ValueError:
                    strings.append(argument)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    for parameter in step[1:]:
        visit(parameter)
    return strings, numbers


class AnsorStepFeaturizer:
    """Fit vocabularies on step lists, then turn them into ``float32 [N, seq_len, width]`` tensors.

    The same interface as :class:`tlp.features.featurizer.TraceFeaturizer` (``fit``, ``transform``,
    ``to_json``/``from_json``, ``kinds``/``strings``, ``config``), so the network, losses, training, evaluation and
    MTL heads work unchanged; ``record_format`` says which dataset records it reads.
    """

    record_format = ANSOR_FORMAT
    name = ANSOR_FEATURIZER

    def __init__(self, config: AnsorStepConfig | None = None, kinds: Vocabulary | None = None,
                 strings: Vocabulary | None = None) -> None:
        self.config = config or AnsorStepConfig()
        self.kinds = kinds or Vocabulary()
        self.strings = strings or Vocabulary()

    def fit(self, traces: Iterable[Any]) -> "AnsorStepFeaturizer":
        """Vocabularies of the step kinds and string parameters seen in the training step lists."""
        kind_counts: Counter = Counter()
        string_counts: Counter = Counter()
        for steps in traces:
            kinds, strings = self.tokens(steps)
            kind_counts.update(kinds)
            string_counts.update(strings)
        return self.fit_counts(kind_counts, string_counts)

    @staticmethod
    def tokens(steps: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The step kinds and string parameters of ``steps`` that the vocabularies count."""
        strings: list[str] = []
        for step in steps:
            strings.extend(step_parameters(step)[0])
        return tuple(str(step[0]) for step in steps), tuple(strings)

    def fit_counts(self, kind_counts: Counter, string_counts: Counter) -> "AnsorStepFeaturizer":
        """The vocabularies from token counts (what :meth:`fit` counts, or a stream's sum of :meth:`tokens`)."""
        self.kinds = Vocabulary.build(kind_counts)
        self.strings = Vocabulary.build(string_counts)
        return self

    def transform_one(self, steps: Sequence[Any], extents: Any = None, out: np.ndarray | None = None,
                      cache: Any = None) -> np.ndarray:
        """One step list -> ``[seq_len, width]``; steps beyond ``seq_len`` are cropped (the end of the list).

        ``extents`` and ``cache`` are the trace featurizer's arguments; steps carry their own sizes, so both are
        unused.
        """
        cfg = self.config
        if out is None:
            out = np.zeros((cfg.seq_len, cfg.width), dtype=np.float32)
        n0 = cfg.columns()["numbers"].start
        for position, step in enumerate(steps[: cfg.seq_len]):
            row = out[position]
            row[0] = self.kinds.id(str(step[0]))
            strings, numbers = step_parameters(step)
            for j, text in enumerate(strings[: cfg.num_strings]):
                row[1 + j] = self.strings.id(text)
            numbers = numbers[: cfg.num_numbers]
            row[n0 : n0 + len(numbers)] = numbers
        return out

    def transform(self, traces: Sequence[Any], extents: Sequence[Any] | None = None, cache: Any = None
                  ) -> np.ndarray:
        """Many step lists -> ``float32 [N, seq_len, width]`` (rows past a list's end are padding, kind id 0)."""
        out = np.zeros((len(traces), self.config.seq_len, self.config.width), dtype=np.float32)
        for i, steps in enumerate(traces):
            self.transform_one(steps, out=out[i])
        return out

    def to_json(self) -> dict[str, Any]:
        return {"kind": ANSOR_FEATURIZER, "config": self.config.to_json(), "kinds": self.kinds.to_json(),
                "strings": self.strings.to_json()}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "AnsorStepFeaturizer":
        config = AnsorStepConfig(**data["config"])
        if config.version != ANSOR_FEATURE_VERSION:
            raise ValueError(f"Ansor step feature version {config.version} does not match this TLP's "
                             f"{ANSOR_FEATURE_VERSION}")
        return AnsorStepFeaturizer(config, Vocabulary.from_json(data["kinds"]), Vocabulary.from_json(data["strings"]))
