"""MetaSchedule trace -> a sequence of primitive vectors: TLP's featurization, for MetaSchedule instead of Ansor.

A trace is MetaSchedule's record of how a candidate was built: instructions ``[kind, inputs, attrs, outputs]``
plus the decisions of its sampling instructions. TLP reads it as a sentence; each instruction becomes one vector:

    [kind id | string ids (S) | producer distances (R) | numbers (P) | after-postproc flag]

- *kind id*: vocabulary over instruction kinds (``Split``, ``SamplePerfectTile``, ``Annotate`` …), OOV-safe.
- *string ids*: string parameters — block names, annotation keys, storage scopes, string literals — through a
  second vocabulary.
- *producer distances*: for each input that is an earlier result (a block, loop or sampled variable), how many
  instructions back it was produced, plus ``output index / 32`` (which of the producer's results it is); this
  keeps the data-flow structure of the trace (which split uses which sampled factors, which loop is parallelised).
- *numbers*: decisions (tile factors, the chosen unroll step), numeric attributes and literal inputs, and for
  ``GetSBlock`` the extents of the block's iteration domain in the workload — the trace alone does not say how
  large the loops are. Numbers are log-scaled: ``sign(x) * log2(1 + |x|)``.

Ids are stored as floats in the same tensor so one ``[N, seq_len, width]`` array carries everything; the model
splits the columns again (see :class:`FeatureConfig`).

*Compact* traces (``FeatureConfig.compact``): a MetaSchedule trace spends about a third of its instructions on
bookkeeping that carries nothing the links do not already say — ``GetLoops`` (a loop's position survives in the
link's output index), the ``Split`` after each ``SamplePerfectTile``, ``EnterPostproc`` (the post-processing flag
says it), the ``Unannotate`` / ``GetChildBlocks`` that open post-processing. A crop of 25 then cuts the unroll
decision off a quarter of the programs and post-processing off most. The compact form leaves those rows out (links
still measure distances in the whole trace) and adds to ``Fuse`` and ``Reorder`` rows how many loops they take,
which the four link columns cannot hold (the parallel loop is a fusion of up to seven).

*Canonical block names* (block names without the numbering that says where a block came from, ``lv7_sum`` ->
``sum``) were tried and ranked worse (one seed, 56 rows); gone, with ``FeatureConfig.canonical_names`` (a stored
config's ``canonical_names: false`` still reads, see ``REMOVED_CONFIG_FIELDS``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Iterable, Sequence

import numpy as np

from tlp.features.vocab import OOV, PAD, Vocabulary

FEATURE_VERSION = 2
# Instructions whose rows the compact form leaves out (see the module docstring).
BOOKKEEPING_KINDS = frozenset({"GetLoops", "Split", "EnterPostproc", "Unannotate", "GetChildBlocks"})
# Instructions whose number of loop inputs the compact form records.
COUNTED_KINDS = frozenset({"Fuse", "Reorder"})


@dataclass(frozen=True)
class FeatureConfig:
    """Shape of the primitive vectors. Stored in checkpoints; a mismatch at load time is an error."""

    seq_len: int = 80  # the longest trace of the first 6.5k CPU programs has 78 instructions
    num_strings: int = 4
    num_refs: int = 4
    num_numbers: int = 12
    version: int = FEATURE_VERSION
    compact: bool = False  # leave bookkeeping instructions out; False for checkpoints that predate it

    @property
    def width(self) -> int:
        return 1 + self.num_strings + self.num_refs + self.num_numbers + 1

    def columns(self) -> dict[str, slice]:
        """Where each part lives in a primitive vector."""
        s, r, p = self.num_strings, self.num_refs, self.num_numbers
        return {
            "kind": slice(0, 1),
            "strings": slice(1, 1 + s),
            "refs": slice(1 + s, 1 + s + r),
            "numbers": slice(1 + s + r, 1 + s + r + p),
            "postproc": slice(1 + s + r + p, 2 + s + r + p),
        }

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> "FeatureConfig":
        """A stored config; raises ``ValueError`` (naming it) for a removed option the config uses, and for a field
        this TLP does not know."""
        kept = dict(data)
        for key, (off, option) in REMOVED_CONFIG_FIELDS.items():
            if key in kept and kept.pop(key) != off:
                raise ValueError(f"made with {option} ({key}={data[key]!r}), which this TLP no longer has")
        unknown = sorted(set(kept) - {f.name for f in fields(FeatureConfig)})
        if unknown:
            raise ValueError(f"FeatureConfig field(s) {', '.join(unknown)}, which this TLP does not have")
        return FeatureConfig(**kept)


# FeatureConfig fields that are gone -> (the value every config had while the option was off, what it was).
REMOVED_CONFIG_FIELDS = {"canonical_names": (False, "canonical block names")}


def _log(x: float) -> float:
    return math.copysign(math.log2(1.0 + abs(x)), x)


def _numbers(value: Any, out: list[float]) -> None:
    """Flatten numeric content (ints, floats, bools, nested lists) into ``out``."""
    if isinstance(value, bool):
        out.append(float(value))
    elif isinstance(value, (int, float)):
        if math.isfinite(value):
            out.append(_log(float(value)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _numbers(item, out)


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value.strip('"'))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _strings(item, out)


def block_extents(mod: Any) -> dict[str, list[int]]:
    """Iteration-domain extents of every block in a task's workload, by block name (computed once per task)."""
    extents: dict[str, list[int]] = {}

    def visit(node: Any) -> None:
        if node is None:
            return
        if hasattr(node, "iter_vars") and hasattr(node, "name_hint"):
            extents[str(node.name_hint)] = [
                int(iv.dom.extent.value) if hasattr(iv.dom.extent, "value") else -1 for iv in node.iter_vars
            ]
        # TIR statements nest through these fields (For/Block bodies, SeqStmt, If branches, block realize).
        for field in ("body", "block", "init", "then_case", "else_case"):
            visit(getattr(node, field, None))
        for child in getattr(node, "seq", None) or []:
            visit(child)

    for _, func in mod.functions_items():
        visit(getattr(func, "body", None))
    return extents


class TraceFeaturizer:
    """Fit vocabularies on traces, then turn traces into ``float32 [N, seq_len, width]`` tensors."""

    def __init__(self, config: FeatureConfig | None = None, kinds: Vocabulary | None = None,
                 strings: Vocabulary | None = None) -> None:
        self.config = config or FeatureConfig()
        self.kinds = kinds or Vocabulary()
        self.strings = strings or Vocabulary()

    # ---- vocabulary ----------------------------------------------------------------------------------------
    def fit(self, traces: Iterable[Any], min_string_count: int = 2, max_strings: int = 4096) -> "TraceFeaturizer":
        """Build the vocabularies from training traces (kinds: all seen; strings: those seen twice or more)."""
        kind_counts: Counter = Counter()
        string_counts: Counter = Counter()
        for trace in traces:
            kinds, strings = self.tokens(trace)
            kind_counts.update(kinds)
            string_counts.update(strings)
        return self.fit_counts(kind_counts, string_counts, min_string_count, max_strings)

    @staticmethod
    def tokens(trace: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The instruction kinds and string parameters of ``trace`` that the vocabularies count."""
        kinds: list[str] = []
        strings: list[str] = []
        for kind, inputs, attrs, _outputs in trace[0]:
            kinds.append(kind)
            _strings(attrs, strings)
            _strings([i for i in inputs if isinstance(i, str) and i.startswith('"')], strings)
        return tuple(kinds), tuple(strings)

    def fit_counts(self, kind_counts: Counter, string_counts: Counter, min_string_count: int = 2,
                   max_strings: int = 4096) -> "TraceFeaturizer":
        """The vocabularies from token counts (what :meth:`fit` counts, or a stream's sum of :meth:`tokens`)."""
        self.kinds = Vocabulary.build(kind_counts)
        self.strings = Vocabulary.build(string_counts, min_count=min_string_count, max_size=max_strings)
        return self

    # ---- featurization -------------------------------------------------------------------------------------
    def _decision_numbers(self, kind: str, attrs: Any, decision: Any) -> list[float]:
        numbers: list[float] = []
        if kind == "SampleCategorical" and isinstance(decision, int) and attrs and decision < len(attrs[0]):
            numbers.append(_log(float(attrs[0][decision])))  # the chosen value, not its index
        else:
            _numbers(decision, numbers)
        return numbers

    def _static_rows(self, insts: Sequence[Any], extents: dict[str, list[int]] | None,
                     row_cache: dict[Any, Any] | None = None
                     ) -> tuple[np.ndarray, list[list[float]], dict[int, int]]:
        """Everything but the decisions: ``[seq_len, width]`` rows, each row's numbers (decisions go first), and
        which row each kept instruction became (instruction index -> row; the compact form skips some).

        The candidates of one search share a few instruction lists (one per sketch and post-processing outcome)
        and differ in their decisions, so the cost model caches this per instruction list (see ``transform``).
        Lists that differ in a few instructions still share most rows: ``row_cache`` keeps each row by the
        identity of its instruction (and extents) and everything else it depends on — the distances to the
        producers of its inputs and the post-processing flag — so a new list re-reads only its new instructions.
        """
        cfg = self.config
        rows = np.zeros((cfg.seq_len, cfg.width), dtype=np.float32)
        row_numbers: list[list[float]] = []
        row_of: dict[int, int] = {}
        producer: dict[str, tuple[int, int]] = {}
        postproc = 0.0
        for position, inst in enumerate(insts):
            kind, inputs, _attrs, outputs = inst
            if kind == "EnterPostproc":
                postproc = 1.0
            row_index = len(row_numbers)
            if row_index < cfg.seq_len and not (cfg.compact and kind in BOOKKEEPING_KINDS):
                # Which output of the producer matters too (RFactor on the 2nd vs 3rd loop of one Split).
                links = tuple(_log(position - producer[item][0] + producer[item][1] / 32.0)
                              if isinstance(item, str) and item in producer else None for item in inputs)
                key = (id(inst), id(extents), links, postproc)
                entry = row_cache.get(key) if row_cache is not None else None
                if entry is None or entry[0] is not inst or entry[1] is not extents:
                    entry = (inst, extents, *self._row(inst, links, postproc, extents))
                    if row_cache is not None:
                        row_cache[key] = entry
                rows[row_index] = entry[2]
                row_numbers.append(entry[3])
                row_of[position] = row_index
            for output_index, name in enumerate(outputs):
                producer[name] = (position, output_index)
        return rows, row_numbers, row_of

    def row_span(self, trace: Any) -> tuple[int, int | None]:
        """(rows ``trace`` takes uncropped, the row its post-processing starts at, None without one): what a crop of
        ``seq_len`` rows reads of it. Counts rows as ``transform_one`` lays them out (compact or not)."""
        rows, postproc_row = 0, None
        for kind, _inputs, _attrs, _outputs in trace[0]:
            if kind == "EnterPostproc" and postproc_row is None:
                postproc_row = rows
            if not (self.config.compact and kind in BOOKKEEPING_KINDS):
                rows += 1
        return rows, postproc_row

    def _row(self, inst: Any, links: tuple[float | None, ...], postproc: float,
             extents: dict[str, list[int]] | None) -> tuple[np.ndarray, list[float]]:
        """One instruction's row (decisions not included) and its numbers; ``links[i]``: the producer distance of
        input ``i`` when it is an earlier result, else None."""
        cfg = self.config
        cols = cfg.columns()
        kind, inputs, attrs, _outputs = inst
        row = np.zeros(cfg.width, dtype=np.float32)
        row[0] = self.kinds.id(kind)
        strings: list[str] = []
        numbers: list[float] = []
        refs: list[float] = []
        for item, link in zip(inputs, links):
            if link is not None:
                refs.append(link)
            elif isinstance(item, str):
                strings.append(item.strip('"'))
            else:
                _numbers(item, numbers)
        _strings(attrs, strings)
        _numbers(attrs, numbers)
        if kind == "GetSBlock" and extents and attrs:
            _numbers(extents.get(str(attrs[0]), []), numbers)
        if cfg.compact and kind in COUNTED_KINDS:
            numbers.append(_log(float(len(refs))))
        s0, r0, n0 = cols["strings"].start, cols["refs"].start, cols["numbers"].start
        for j, text in enumerate(strings[: cfg.num_strings]):
            row[s0 + j] = self.strings.id(text)
        row[r0 : r0 + min(len(refs), cfg.num_refs)] = refs[: cfg.num_refs]
        row[n0 : n0 + min(len(numbers), cfg.num_numbers)] = numbers[: cfg.num_numbers]
        row[cols["postproc"].start] = postproc
        return row, numbers

    def transform_one(self, trace: Any, extents: dict[str, list[int]] | None = None,
                      out: np.ndarray | None = None, cache: dict[Any, Any] | None = None) -> np.ndarray:
        """One trace -> ``[seq_len, width]``. Instructions beyond ``seq_len`` are cropped (the end of the trace).

        ``cache`` (id of the instruction list -> its static rows; instruction identity and context -> its row,
        see ``_static_rows``) skips re-reading instructions seen before; an entry is used only for the very same
        list (instruction) and extents objects, so results never change.
        """
        cfg = self.config
        if out is None:
            out = np.zeros((cfg.seq_len, cfg.width), dtype=np.float32)
        insts, decisions = trace
        entry = cache.get(id(insts)) if cache is not None else None
        if entry is None or entry[0] is not insts or entry[1] is not extents:
            entry = (insts, extents, *self._static_rows(insts, extents, cache))
            if cache is not None:
                cache[id(insts)] = entry
        rows, row_numbers, row_of = entry[2], entry[3], entry[4]
        out[:] = rows
        n0, width = cfg.columns()["numbers"].start, cfg.num_numbers
        for index, decision in decisions:
            position = int(index)
            row = row_of.get(position)
            if row is None:  # cropped (or, in the compact form, a bookkeeping instruction: they decide nothing)
                continue
            kind, _inputs, attrs, _outputs = insts[position]
            numbers = (self._decision_numbers(kind, attrs, decision) + row_numbers[row])[:width]
            out[row, n0 : n0 + width] = 0.0
            out[row, n0 : n0 + len(numbers)] = numbers
        return out

    def transform(self, traces: Sequence[Any], extents: Sequence[dict[str, list[int]] | None] | None = None,
                  cache: dict[Any, Any] | None = None) -> np.ndarray:
        """Many traces -> ``float32 [N, seq_len, width]`` (rows past a trace's end are padding, kind id 0)."""
        out = np.zeros((len(traces), self.config.seq_len, self.config.width), dtype=np.float32)
        for i, trace in enumerate(traces):
            self.transform_one(trace, extents[i] if extents is not None else None, out[i], cache)
        assert PAD == 0  # padding rows are all-zero, kind id 0
        return out

    def translate(self, features: np.ndarray, source: "TraceFeaturizer") -> np.ndarray | None:
        """``features`` made by ``source`` as this featurizer makes them from the same traces, or None when that
        cannot be exact (another feature config, or a token of this featurizer's vocabularies that ``source``
        did not know: its programs hold OOV there). Ids are the only vocabulary-dependent values (the kind
        column and the string columns), so a grown dataset's features serve models fitted on an older one.
        A ``source`` that reads more primitives (a longer crop, the rest of the config equal) gives its first
        ``seq_len`` rows: a crop keeps a trace's first rows."""
        if replace(source.config, seq_len=self.config.seq_len) != self.config or \
                source.config.seq_len < self.config.seq_len:
            return None
        features = features[..., : self.config.seq_len, :]
        out = features.copy()
        cols = self.config.columns()
        for vocab, source_vocab, columns in ((self.kinds, source.kinds, cols["kind"]),
                                             (self.strings, source.strings, cols["strings"])):
            if not set(vocab.tokens) <= set(source_vocab.tokens):
                return None
            table = np.array([PAD, OOV] + [vocab.id(t) for t in source_vocab.tokens], dtype=np.float32)
            out[..., columns] = table[features[..., columns].astype(np.int64)]
        return out

    # ---- persistence ---------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"config": self.config.to_json(), "kinds": self.kinds.to_json(), "strings": self.strings.to_json()}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "TraceFeaturizer":
        config = FeatureConfig.from_json(data["config"])  # a config without ``compact`` predates it: the full form
        if config.version != FEATURE_VERSION:
            raise ValueError(f"feature version {config.version} does not match this TLP's {FEATURE_VERSION}")
        return TraceFeaturizer(config, Vocabulary.from_json(data["kinds"]), Vocabulary.from_json(data["strings"]))
