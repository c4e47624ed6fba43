"""Scoring many programs with a trained :class:`~tlp.model.network.TLPNet`, fast.

``TLPNet.forward`` on a whole batch is the reference; scorers here compute the same function with less work,
which is what a search's cost model needs (it scores hundreds of candidates per call and thousands per task):

- :class:`ChunkedScorer` (any architecture): programs with the same features once, sorted by trace length and
  scored in chunks of ``chunk``, each padded only to its own longest trace (LSTM: chunks of one length, no
  padding). Padding rows are masked out of attention and of the score sum, so cropping them changes nothing;
  small chunks keep the activations in cache (a 512 x 80 x 256 batch does not).
- :class:`LSTMScorer` (the default model's LSTM): the part before the recurrence (with the first layer's input
  projection) once per distinct feature row of the batch, both directions of the recurrence in one product per
  step, every gate through ``sigmoid``.
- :class:`AttentionScorer` (TLP's attention network): every piece of work once: the per-row part before
  attention once per *distinct* feature row of the batch (the candidates of one search share almost all rows:
  1-3 % are distinct), attention and everything after it once per distinct row *of each program*, on real rows
  only (no padding), and programs with the same rows once.

All compute ``TLPNet.forward``'s scores within float rounding (~1e-5 on scores of O(10-100)) in ``fp32``.
``precision="auto"`` (what ``TLPModel.predict_features``, ``TLPCostModel`` and ``tlp eval`` ask for) is what the
environment's ``TLP_SCORING_PRECISION`` says, ``fp32`` when it is unset. ``TLP_SCORING_PRECISION=auto`` runs the
residual blocks and the heads' hidden layer, ~65 % of the arithmetic, in bfloat16 on CPUs that multiply
bfloat16 natively (AVX512_BF16 or AMX: Zen 4, Sapphire Rapids and later), ``fp32`` elsewhere. Measured on the
attention model that was the default then: held-out top-1 unchanged on every head, Kendall tau of a search batch's scores against fp32 >= 0.99,
network time 1.2-1.35x lower but end-to-end scoring within one run's noise (``benchmarks/README.md``, "Scoring
speed"). Why it is not the default: that gain is not measurable end to end, no search was run with it, and it
would make the same search rank differently on a Zen 4 and a Zen 3.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tlp.model.network import TLPNet

DEFAULT_CHUNK = 32  # programs per network call: activations stay in L2 (hidden 256, up to 80 primitives)
LSTM_CHUNK = 128  # LSTMScorer: a step's dozen small operations cost Python overhead that 32 programs do not amortize


class ChunkedScorer:
    """Length-sorted chunks through ``net.backbone`` and the heads (every architecture).

    ``workers`` threads score chunks in parallel, each with one PyTorch thread: a chunk is a few small matrix
    products, which PyTorch's intra-op threads split with a barrier after every operation; when another process
    holds a core (a search builds and measures programs next to its cost model) every barrier waits for a
    descheduled thread. Whole chunks handed to whichever worker is free keep both cores busy without barriers.

    ``precision``: ``"fp32"`` keeps the network's arithmetic; ``"bf16"`` (the scorers below, whose
    ``scores_bf16`` is set) runs the residual blocks and the heads' hidden layer in bfloat16 (see :func:`scorer_for`).
    """

    scores_bf16 = False
    arch: str | None = None  # the one architecture a subclass computes (None: any)

    def __init__(self, net: TLPNet, chunk: int = DEFAULT_CHUNK, workers: int | None = None,
                 precision: str = "fp32") -> None:
        if self.arch is not None and net.config.arch != self.arch:
            raise ValueError(f"{type(self).__name__} scores {self.arch} networks, not {net.config.arch!r}")
        if precision not in ("fp32", "bf16") or (precision == "bf16" and not self.scores_bf16):
            raise ValueError(f"precision {precision!r}: {type(self).__name__} scores in "
                             f"{'fp32 or bf16' if self.scores_bf16 else 'fp32'}")
        self.net = net
        self.chunk = chunk
        self.workers = workers or torch.get_num_threads()
        self.precision = precision
        self._low: tuple[list[tuple[torch.Tensor, ...]], list[tuple[torch.Tensor, ...]]] | None = None

    def scores(self, features: torch.Tensor, heads: Sequence[int] = (0,)) -> np.ndarray:
        """``[N, len(heads)]`` float32 scores of ``[N, L, width]`` features (higher = faster)."""
        if not len(features):
            return np.empty((0, len(heads)), dtype=np.float32)
        self.net.eval()
        device = next(self.net.parameters()).device
        with torch.inference_mode():
            # Programs with the same features (a crop of the trace often hides what tells candidates apart) once.
            distinct, program_of = _distinct_rows(features.reshape(len(features), -1))
            features = distinct.reshape(len(distinct), *features.shape[1:])
            out = torch.empty((len(features), len(heads)), dtype=torch.float32)
            lengths = (features[..., self.net.embed.kind_col] != 0).sum(dim=1).clamp_min(1)
            rows = features[:, : int(lengths.max())].to(device)
            # LSTM: chunks of one length, so that it runs on unpadded sequences, without packing them.
            chunks = _length_chunks(lengths, self.chunk, one_length=self.net.config.arch == "lstm")

            def score_chunk(index: torch.Tensor) -> None:
                with torch.inference_mode():  # per thread: PyTorch's grad mode is thread-local
                    h, padding = self.net.backbone(rows[index.to(device), : int(lengths[index].max())])
                    out[index] = torch.stack([self.net.score(h, padding, head) for head in heads],
                                             dim=1).float().cpu()

            self._run(chunks, score_chunk, device)
        return out[program_of].numpy()

    def _run(self, chunks: list[Any], score_chunk: Callable[[Any], None], device: torch.device) -> None:
        """``score_chunk`` on every chunk: on ``workers`` threads of one PyTorch thread each (CPU), else in turn."""
        if self.workers > 1 and len(chunks) > 1 and device.type == "cpu":
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                with ThreadPoolExecutor(self.workers) as pool:
                    list(pool.map(score_chunk, chunks))
            finally:
                torch.set_num_threads(threads)
        else:
            for chunk in chunks:
                score_chunk(chunk)

    def _blocks_and_heads(self, h: torch.Tensor, heads: Sequence[int],
                          low: tuple[list[tuple[torch.Tensor, ...]], list[tuple[torch.Tensor, ...]]] | None
                          ) -> torch.Tensor:
        net = self.net
        if low is None:
            h = net.blocks(h)
            return torch.stack([net.heads[head](h).squeeze(-1) for head in heads], dim=1)
        blocks, head_layers = low
        h = h.to(torch.bfloat16)
        for w1, b1, w2, b2 in blocks:
            h = h + F.relu(F.linear(F.relu(F.linear(h, w1, b1)), w2, b2))
        columns = []
        for head in heads:
            w1, b1 = head_layers[head]
            last = net.heads[head][2]  # hidden -> 1, in fp32 on the bfloat16 activations
            columns.append(F.linear(F.relu(F.linear(h, w1, b1)).float(), last.weight, last.bias).squeeze(-1))
        return torch.stack(columns, dim=1)

    def _low_precision_weights(self) -> tuple[list[tuple[torch.Tensor, ...]], list[tuple[torch.Tensor, ...]]]:
        """bfloat16 copies of the residual blocks' and the heads' hidden layers (made once per scorer)."""
        if self._low is None:
            def bf16(layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
                return layer.weight.detach().to(torch.bfloat16), layer.bias.detach().to(torch.bfloat16)

            blocks = [(*bf16(block.net[0]), *bf16(block.net[2])) for block in self.net.blocks]
            self._low = blocks, [bf16(head[0]) for head in self.net.heads]
        return self._low


class LSTMScorer(ChunkedScorer):
    """The LSTM network (``arch="lstm"``, the default model's), with the per-row work once per distinct row.

    The same function as ``TLPNet.backbone`` + heads, computed so that:

    - the embedding, the encoder MLP and the first LSTM layer's input projection (``W_ih x + b``, two thirds of
      ``nn.LSTM``'s arithmetic at this size) run once per *distinct feature row* of the batch (1-3 % of a search
      batch's rows), not once per row of every program;
    - the recurrence runs both directions in one batched product per step, and every gate through ``sigmoid``:
      ``tanh(x) = 2 sigmoid(2x) - 1``, with the cell-input rows of the weights doubled once, because PyTorch's
      CPU ``tanh`` costs ~5x its ``sigmoid``;
    - as in :class:`ChunkedScorer`, programs with the same features once, in length-sorted chunks; each program's
      backward pass starts at its own last row (as packed sequences), so a chunk may mix lengths exactly: a
      cascade's second stage scores a few dozen programs of many lengths, which chunks of one length would split
      into a recurrence each; deeper layers and everything after the LSTM as in the network.

    Chunks are larger than :class:`ChunkedScorer`'s (``LSTM_CHUNK``): each step of the recurrence is a few small
    operations whose Python overhead a chunk of 32 programs does not pay for. In ``fp32`` the scores equal
    ``TLPNet.forward``'s within float rounding (~1e-6 on the LSTM's states).
    """

    scores_bf16 = True
    arch = "lstm"

    def __init__(self, net: TLPNet, chunk: int = LSTM_CHUNK, workers: int | None = None,
                 precision: str = "fp32") -> None:
        super().__init__(net, chunk, workers, precision)
        self._layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None

    def scores(self, features: torch.Tensor, heads: Sequence[int] = (0,)) -> np.ndarray:
        if not len(features):
            return np.empty((0, len(heads)), dtype=np.float32)
        net = self.net.eval()
        device = next(net.parameters()).device
        layers = self._layer_weights()
        low = self._low_precision_weights() if self.precision == "bf16" and device.type == "cpu" else None
        with torch.inference_mode():
            programs, program_of = _distinct_rows(features.reshape(len(features), -1))
            programs = programs.reshape(len(programs), *features.shape[1:]).to(device)
            padding = programs[..., net.embed.kind_col] == 0
            lengths = (~padding).sum(dim=1).clamp_min(1)
            table, row_of = _distinct_rows(programs.reshape(-1, programs.shape[-1]))
            row_of = row_of.reshape(programs.shape[:2])
            w_ih, _, bias = layers[0]
            gates = torch.einsum("rk,dgk->drg", net.encoder(net.embed(table)), w_ih) + bias[:, None, :]
            gates = gates.reshape(2 * len(table), -1)  # [2R, 4H]: the forward direction's rows, then the backward's
            out = torch.empty((len(programs), len(heads)), dtype=torch.float32)

            def score_chunk(index: torch.Tensor) -> None:
                with torch.inference_mode():  # per thread: PyTorch's grad mode is thread-local
                    index = index.to(device)
                    own = lengths[index]  # [B]: the chunk's programs may differ in length
                    length = int(own.max())
                    ids = row_of[index, :length].T  # [L, B]
                    # Step t reads the forward direction's row t and the backward direction's row len-1-t of each
                    # program: the backward pass starts at the program's own last row, as packed sequences do in
                    # TLPNet.forward. Steps past a program's end read padding; their outputs are masked below.
                    back = (own[None, :] - 1 - torch.arange(length, device=device)[:, None]).clamp_min(0)  # [L, B]
                    steps = torch.cat((ids, ids.gather(0, back) + len(table)), dim=1)  # [L, 2B]
                    h = self._recurrence(lambda t: gates.index_select(0, steps[t]), length, len(index), layers[0][1],
                                         back)
                    for w_ih, w_hh_t, bias in layers[1:]:
                        dense = torch.einsum("blk,dgk->ldbg", h, w_ih) + bias[None, :, None, :]  # [L, 2, B, 4H]
                        dense[:, 1] = dense[:, 1].gather(0, back[:, :, None].expand(-1, -1, dense.shape[-1]))
                        h = self._recurrence(lambda t: dense[t], length, len(index), w_hh_t, back)
                    per_row = self._blocks_and_heads(h.reshape(-1, h.shape[-1]), heads, low).float()
                    per_row = per_row.reshape(len(index), length, len(heads))
                    per_row = per_row.masked_fill(padding[index, :length, None], 0.0)
                    out[index.cpu()] = per_row.sum(dim=1).cpu()

            self._run(_length_chunks(lengths.cpu(), self.chunk, one_length=False), score_chunk, device)
        return out[program_of.cpu()].numpy()

    @staticmethod
    def _recurrence(step_gates: Callable[[int], torch.Tensor], length: int, batch: int,
                    w_hh_t: torch.Tensor, back: torch.Tensor) -> torch.Tensor:
        """Both directions of one layer: ``step_gates(t)`` = ``[2, B, 4H]`` input gates (forward at t, backward at
        ``back[t]``, a program's row len-1-t; cell-input rows doubled) -> ``[B, L, 2H]`` states, forward then
        backward, as ``nn.LSTM`` returns them per program (rows past a program's end: any finite value)."""
        hidden = w_hh_t.shape[1]
        h = w_hh_t.new_zeros((2, batch, hidden))
        c = w_hh_t.new_zeros((2, batch, hidden))
        states = []
        for t in range(length):
            gate = torch.baddbmm(step_gates(t).view(2, batch, -1), h, w_hh_t).sigmoid_()
            i, f, g, o = gate.chunk(4, dim=-1)
            c = torch.addcmul(f * c, i, g * 2 - 1)  # g: sigmoid(2x) * 2 - 1 = tanh(x)
            h = o * (torch.sigmoid(c * 2) * 2 - 1)
            states.append(h)
        stacked = torch.stack(states)  # [L, 2, B, H]
        # Row p's backward state was made at step len-1-p, which ``back`` also maps p to (the map is its own inverse).
        backward = stacked[:, 1].gather(0, back[:, :, None].expand(-1, -1, hidden))
        return torch.cat((stacked[:, 0], backward), dim=-1).transpose(0, 1)

    def _layer_weights(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per layer ``(W_ih [2, 4H, in], W_hh^T [2, H, 4H], b_ih + b_hh [2, 4H])``, both directions stacked, the
        cell-input (g) gate's rows doubled so that one ``sigmoid`` serves every gate (made once per scorer)."""
        if self._layers is None:
            lstm = self.net.lstm
            hidden = lstm.hidden_size
            scale = torch.ones(4 * hidden, device=lstm.weight_hh_l0.device)
            scale[2 * hidden : 3 * hidden] = 2.0  # PyTorch's gate order: input, forget, cell (g), output
            layers = []
            for layer in range(lstm.num_layers):
                pair = [f"_l{layer}", f"_l{layer}_reverse"]
                w_ih = torch.stack([getattr(lstm, "weight_ih" + s) for s in pair]).detach() * scale[None, :, None]
                w_hh_t = (torch.stack([getattr(lstm, "weight_hh" + s) for s in pair]).detach()
                          * scale[None, :, None]).transpose(1, 2).contiguous()
                bias = torch.stack([getattr(lstm, "bias_ih" + s) + getattr(lstm, "bias_hh" + s) for s in pair])
                layers.append((w_ih, w_hh_t, bias.detach() * scale[None, :]))
            self._layers = layers
        return self._layers


class AttentionScorer(ChunkedScorer):
    """TLP's attention network, computing each distinct piece of work once.

    The same function as ``TLPNet.backbone`` + heads for ``arch="attention"`` (``nn.MultiheadAttention`` is
    ``softmax(q k^T / sqrt(d)) v`` per head with padded keys masked, then ``out_proj``), written out so that:

    - the per-row part before attention (embedding, encoder MLP, the query/key/value projections) runs once per
      *distinct feature row* of the batch (1-3 % of a search batch's rows: candidates share their sketch's rows);
    - within a program, positions holding the same feature row have the same query and see the same keys, so
      they get the same attention output, state and per-primitive score: each distinct row of a program is
      computed once and its score counted ``m`` times (4-19 % fewer rows on real batches). As a key, a row held
      ``m`` times enters the softmax as one key with ``log m`` added to its logit (``m e^x = e^(x + log m)``);
    - after attention only real rows go through ``out_proj``, the residual blocks and the heads (a flat matrix,
      no padding); those products are ~85 % of the arithmetic, so this is where the time goes;
    - programs with the same multiset of rows (the same features up to order; attention has no positions) are
      scored once.

    In ``fp32`` the scores equal ``TLPNet.forward``'s within float rounding (~1e-5).
    """

    scores_bf16 = True
    arch = "attention"

    def scores(self, features: torch.Tensor, heads: Sequence[int] = (0,)) -> np.ndarray:
        out = torch.zeros((len(features), len(heads)), dtype=torch.float32)
        if not len(features):
            return out.numpy()
        net = self.net.eval()
        device = next(net.parameters()).device
        attention = net.attention
        hidden, num_heads = net.config.hidden, attention.num_heads
        low = self._low_precision_weights() if self.precision == "bf16" and device.type == "cpu" else None
        with torch.inference_mode():
            pairs = _ProgramRows.of(features)
            if not len(pairs.rows):
                return out.numpy()  # only empty traces: every score is the empty sum
            encoded = net.encoder(net.embed(pairs.distinct.to(device)))
            qkv = F.linear(encoded, attention.in_proj_weight, attention.in_proj_bias)
            # One program of each multiset of rows, smallest first (chunks of similar size: little padding).
            order = pairs.representatives[np.argsort(pairs.count[pairs.representatives], kind="stable")]
            chunks = [order[start : start + self.chunk] for start in range(0, len(order), self.chunk)]
            log_m = torch.from_numpy(np.log(pairs.multiplicity).astype(np.float32)).to(device)
            multiplicity = torch.from_numpy(pairs.multiplicity.astype(np.float32)).to(device)

            def score_chunk(programs: np.ndarray) -> None:
                with torch.inference_mode():  # per thread: PyTorch's grad mode is thread-local
                    batch, width = len(programs), int(pairs.count[programs].max())
                    slot = np.arange(width)[None, :]
                    real = slot < pairs.count[programs][:, None]  # [B, U]: which slots hold a row
                    first = pairs.start[programs][:, None]
                    pair = torch.from_numpy(np.where(real, first + slot, first)).to(device)  # [B, U] pair index
                    real_t = torch.from_numpy(real).to(device)
                    rows = torch.from_numpy(pairs.rows).to(device)[pair]  # [B, U] distinct row of each slot
                    q, k, v = (part.reshape(batch, width, num_heads, hidden // num_heads).transpose(1, 2)
                               for part in qkv[rows].split(hidden, dim=-1))
                    # Keys: each distinct row once, weighted by its multiplicity; empty slots masked.
                    bias = torch.where(real_t, log_m[pair], torch.full_like(log_m[pair], float("-inf")))
                    attended = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[:, None, None, :])
                    attended = attended.transpose(1, 2).reshape(batch, width, hidden)[real_t]  # real rows only
                    flat = rows[real_t]
                    h = encoded[flat] + F.linear(attended, attention.out_proj.weight, attention.out_proj.bias)
                    per_row = self._blocks_and_heads(h, heads, low)  # [P, len(heads)]
                    owner = torch.from_numpy(np.nonzero(real)[0]).to(device)
                    weighted = per_row * multiplicity[pair[real_t]][:, None]
                    out[torch.from_numpy(programs)] = torch.zeros((batch, len(heads)), dtype=weighted.dtype,
                                                                  device=device).index_add_(0, owner, weighted).cpu()

            self._run(chunks, score_chunk, device)
        same = pairs.representative_of  # programs with the same rows: the score of their representative
        return out[torch.from_numpy(same)].numpy()

class _ProgramRows:
    """Each program as its distinct feature rows with multiplicities (``pairs``), sorted by program then row."""

    def __init__(self, distinct: torch.Tensor, rows: np.ndarray, multiplicity: np.ndarray, count: np.ndarray,
                 representative_of: np.ndarray) -> None:
        self.distinct = distinct  # [R, width] the batch's distinct (non-padding) feature rows
        self.rows = rows  # [P] distinct row of each pair
        self.multiplicity = multiplicity  # [P] how many positions of its program hold that row
        self.count = count  # [N] pairs per program (0: an empty trace)
        self.start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)  # [N] its first pair
        self.representative_of = representative_of  # [N] the first program with the same pairs
        self.representatives = np.unique(representative_of[count > 0])

    @staticmethod
    def of(features: torch.Tensor) -> "_ProgramRows":
        values = features.cpu().numpy()
        real = values[..., 0] != 0  # kind id 0: padding
        program = np.broadcast_to(np.arange(len(values))[:, None], real.shape)[real]
        distinct, row_of = _distinct_rows(torch.from_numpy(values[real]))
        keys, multiplicity = np.unique(program.astype(np.int64) * max(len(distinct), 1) + row_of.numpy(),
                                       return_counts=True)
        rows = keys % max(len(distinct), 1)
        count = np.bincount(keys // max(len(distinct), 1), minlength=len(values))
        representative_of = np.arange(len(values))
        seen: dict[bytes, int] = {}
        start = 0
        for index, n in enumerate(count.tolist()):
            key = rows[start : start + n].tobytes() + multiplicity[start : start + n].tobytes()
            representative_of[index] = seen.setdefault(key, index)
            start += n
        return _ProgramRows(distinct, rows, multiplicity, count, representative_of)


def _length_chunks(lengths: torch.Tensor, chunk: int, one_length: bool) -> list[torch.Tensor]:
    """Indices of programs sorted by trace length (neighbours need little padding), in chunks of at most ``chunk``;
    ``one_length``: no chunk mixes two lengths."""
    order = torch.argsort(lengths, stable=True)
    runs = [order]
    if one_length:
        ordered = lengths[order]
        runs = list(torch.tensor_split(order, torch.nonzero(ordered[1:] != ordered[:-1]).flatten() + 1))
    return [run[start : start + chunk] for run in runs for start in range(0, len(run), chunk)]


def _distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(distinct, row_of)`` with ``rows == distinct[row_of]``: rows compared by their bytes, sorted in C.

    ``torch.unique(dim=0)`` does the same ~25x slower (one tensor per row). Byte equality is stricter than float
    equality (-0.0 and 0.0 stay apart), which only costs a duplicate row, never a wrong one.
    """
    values = np.ascontiguousarray(rows.cpu().numpy())
    keys = values.view(np.dtype((np.void, values.dtype.itemsize * values.shape[1]))).ravel()
    _, first, row_of = np.unique(keys, return_index=True, return_inverse=True)
    index = torch.from_numpy(first).to(rows.device)
    return rows[index], torch.from_numpy(row_of.reshape(-1)).to(rows.device)


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512_BF16 or AMX-BF16) and PyTorch's oneDNN uses it.

    Without it (AVX2 CPUs such as Zen 3) oneDNN would convert every product to fp32 and be slower than fp32:
    ``TLP_SCORING_PRECISION=auto`` then stays fp32.
    """
    global _NATIVE_BF16  # pylint: disable=global-statement
    if _NATIVE_BF16 is None:
        flags: set[str] = set()
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
                for line in cpuinfo:
                    if line.startswith("flags"):
                        flags = set(line.partition(":")[2].split())
                        break
        except OSError:
            pass
        try:
            onednn = bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            onednn = False
        _NATIVE_BF16 = onednn and bool(flags & {"avx512_bf16", "amx_bf16"})
    return _NATIVE_BF16


_NATIVE_BF16: bool | None = None


def resolve_precision(precision: str, net: TLPNet) -> str:
    """``auto`` -> the environment's ``TLP_SCORING_PRECISION`` (default ``fp32``); its ``auto`` -> ``bf16`` for an
    attention or LSTM network on a CPU with native bfloat16, else ``fp32``; ``fp32`` / ``bf16`` stay as asked."""
    if precision == "auto":
        precision = os.environ.get("TLP_SCORING_PRECISION", "fp32")
    if precision not in ("auto", "fp32", "bf16"):
        raise ValueError(f"scoring precision {precision!r}: auto, fp32 or bf16")
    if precision == "auto":
        on_cpu = next(net.parameters()).device.type == "cpu"
        return "bf16" if net.config.arch in ("attention", "lstm") and on_cpu and native_bf16() else "fp32"
    return precision


def scorer_for(net: TLPNet, chunk: int | None = None, workers: int | None = None,
               precision: str = "fp32") -> ChunkedScorer:
    """The fastest scorer of ``net``: ``workers`` threads (default: PyTorch's thread count, the machine's physical
    cores); ``precision``: ``fp32`` (``net``'s scores within float rounding), ``bf16`` (attention and LSTM
    networks) or ``auto`` (see :func:`resolve_precision`)."""
    precision = resolve_precision(precision, net)
    if net.config.arch == "attention":
        return AttentionScorer(net, chunk or DEFAULT_CHUNK, workers, precision)
    if net.config.arch == "lstm":
        return LSTMScorer(net, chunk or LSTM_CHUNK, workers, precision)
    return ChunkedScorer(net, chunk or DEFAULT_CHUNK, workers, precision)
