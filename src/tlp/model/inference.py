"""Scoring many programs with a trained :class:`~tlp.model.network.TLPNet`, fast and with the same scores.

``TLPNet.forward`` on a whole batch is the reference; scorers here compute the same function (scores equal to
within float rounding, ~1e-6) with less work, which is what a search's cost model needs (it scores hundreds of
candidates per call and thousands per task):

- :class:`ChunkedScorer` (any architecture): programs sorted by trace length and scored in chunks of ``chunk``,
  each padded only to its own longest trace. Padding rows are masked out of attention and of the score sum, so
  cropping them changes nothing; small chunks keep the activations in cache (a 512 x 80 x 256 batch does not).
- :class:`AttentionScorer` (TLP's attention network): additionally computes the per-primitive part before
  attention (embedding, encoder MLP and the attention's query/key/value projections, ~40 % of the multiply-adds)
  once per *distinct* feature row. The candidates of one search share almost all rows (the same sketch's
  instructions; only decision rows differ): on real batches 1-3 % of the rows are distinct.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from tlp.model.network import TLPNet

DEFAULT_CHUNK = 32  # programs per network call: activations stay in L2 (hidden 256, up to 80 primitives)


class ChunkedScorer:
    """Length-sorted chunks through ``net.backbone`` and the heads (every architecture).

    ``workers`` threads score chunks in parallel, each with one PyTorch thread: a chunk is a few small matrix
    products, which PyTorch's intra-op threads split with a barrier after every operation; when another process
    holds a core (a search builds and measures programs next to its cost model) every barrier waits for a
    descheduled thread. Whole chunks handed to whichever worker is free keep both cores busy without barriers.
    """

    def __init__(self, net: TLPNet, chunk: int = DEFAULT_CHUNK, workers: int | None = None) -> None:
        self.net = net
        self.chunk = chunk
        self.workers = workers or torch.get_num_threads()

    def scores(self, features: torch.Tensor, heads: Sequence[int] = (0,)) -> np.ndarray:
        """``[N, len(heads)]`` float32 scores of ``[N, L, width]`` features (higher = faster)."""
        out = torch.empty((len(features), len(heads)), dtype=torch.float32)
        if not len(features):
            return out.numpy()
        self.net.eval()
        device = next(self.net.parameters()).device
        threads = torch.get_num_threads()
        try:
            with torch.inference_mode():
                lengths = (features[..., self.net.embed.kind_col] != 0).sum(dim=1).clamp_min(1)
                order = torch.argsort(lengths, stable=True)  # neighbours have similar lengths: little padding
                rows = self._prepare(features[:, : int(lengths.max())].to(device))
                chunks = [order[start : start + self.chunk] for start in range(0, len(order), self.chunk)]

                def score_chunk(index: torch.Tensor) -> None:
                    with torch.inference_mode():  # per thread: PyTorch's grad mode is thread-local
                        h, padding = self._backbone(rows, index.to(device), int(lengths[index].max()))
                        out[index] = torch.stack([self.net.score(h, padding, head) for head in heads],
                                                 dim=1).float().cpu()

                if self.workers > 1 and len(chunks) > 1 and device.type == "cpu":
                    torch.set_num_threads(1)
                    with ThreadPoolExecutor(self.workers) as pool:
                        list(pool.map(score_chunk, chunks))
                else:
                    for index in chunks:
                        score_chunk(index)
        finally:
            torch.set_num_threads(threads)
        return out.numpy()

    # The hooks a scorer that shares work between programs overrides.
    def _prepare(self, features: torch.Tensor) -> object:
        return features

    def _backbone(self, prepared: object, index: torch.Tensor, longest: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert isinstance(prepared, torch.Tensor)
        return self.net.backbone(prepared[index, :longest])


class _DistinctRows:
    """Per-row work done once per distinct feature row: what ``AttentionScorer`` prepares for its chunks."""

    def __init__(self, padding: torch.Tensor, row_of: torch.Tensor, encoded: torch.Tensor, qkv: torch.Tensor):
        self.padding = padding  # [N, L] padding rows (kind id 0)
        self.row_of = row_of  # [N, L] index of each primitive's distinct row
        self.encoded = encoded  # [R, hidden] embedding + encoder MLP of each distinct row
        self.qkv = qkv  # [R, 3 * hidden] the attention's query, key and value projections of ``encoded``


class AttentionScorer(ChunkedScorer):
    """TLP's attention network with the per-row part before attention computed once per distinct row.

    The same arithmetic as ``TLPNet.backbone`` for ``arch="attention"`` (``nn.MultiheadAttention`` is
    ``softmax(q k^T / sqrt(d)) v`` per head with padded keys masked, then ``out_proj``), written out so that its
    input projection can run on the distinct rows only.
    """

    def __init__(self, net: TLPNet, chunk: int = DEFAULT_CHUNK, workers: int | None = None) -> None:
        if net.config.arch != "attention":
            raise ValueError(f"AttentionScorer scores attention networks, not {net.config.arch!r}")
        super().__init__(net, chunk, workers)

    def _prepare(self, features: torch.Tensor) -> _DistinctRows:
        distinct, row_of = _distinct_rows(features.reshape(-1, features.shape[-1]))
        encoded = self.net.encoder(self.net.embed(distinct))
        attention = self.net.attention
        qkv = F.linear(encoded, attention.in_proj_weight, attention.in_proj_bias)
        padding = features[..., self.net.embed.kind_col] == 0
        return _DistinctRows(padding, row_of.reshape(features.shape[:2]), encoded, qkv)

    def _backbone(self, prepared: object, index: torch.Tensor, longest: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert isinstance(prepared, _DistinctRows)
        attention = self.net.attention
        rows = prepared.row_of[index, :longest]
        padding = prepared.padding[index, :longest]
        batch, hidden, heads = len(index), self.net.config.hidden, attention.num_heads
        h = prepared.encoded[rows]
        q, k, v = (part.reshape(batch, longest, heads, hidden // heads).transpose(1, 2)
                   for part in prepared.qkv[rows].split(hidden, dim=-1))
        # As in TLPNet.backbone: an all-padding program (empty trace) attends to itself rather than to nothing.
        masked = padding & ~padding.all(dim=1, keepdim=True)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=~masked[:, None, None, :])
        attended = attended.transpose(1, 2).reshape(batch, longest, hidden)
        h = h + F.linear(attended, attention.out_proj.weight, attention.out_proj.bias)
        return self.net.blocks(h), padding


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


def scorer_for(net: TLPNet, chunk: int = DEFAULT_CHUNK, workers: int | None = None) -> ChunkedScorer:
    """The fastest scorer that computes ``net``'s scores exactly (up to float rounding); ``workers``: threads
    (default: PyTorch's thread count, the machine's physical cores)."""
    scorer = AttentionScorer if net.config.arch == "attention" else ChunkedScorer
    return scorer(net, chunk, workers)
