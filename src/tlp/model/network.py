"""The TLP network and its variants, in one readable file.

Input: the featurizer's ``[batch, seq_len, width]`` tensor (see :mod:`tlp.features.featurizer`). Its id columns
(instruction kind, string parameters) go through embeddings, its numeric columns (producer distances, numbers,
post-processing flag) through a linear layer; the two are added to form one vector per primitive. Then:

- ``attention`` (TLP, ASPLOS'23): per-primitive MLP encoder -> multi-head self-attention with a residual ->
  residual MLP blocks -> per-primitive decoder to a scalar, summed over the sequence;
- ``lstm``: the same encoder and decoder around a bidirectional LSTM (the shipped model's).

A pre-norm transformer encoder was tried in their place and ranked worst of the three (git history).

The score ranks programs of one task: higher means faster (it is trained against normalized throughput).
Padding rows (kind id 0) are masked out of attention and out of the sum.

MTL-TLP: everything up to the decoder is the *backbone*, shared by all hardware platforms; the decoder is a
*head*, one per platform (``heads[i]`` scores for the checkpoint's i-th platform). A single-platform model is the
one-head case. Latencies of one program on different machines share the backbone's reading of the schedule and
differ in how the hardware rewards it, which is what a small head learns from a few hundred measurements.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from tlp.features.featurizer import FeatureConfig


ARCHS = ("attention", "lstm")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the network. Stored in checkpoints."""

    arch: str = "attention"  # attention | lstm (ARCHS)
    hidden: int = 256
    heads: int = 8
    residual_blocks: int = 2
    layers: int = 2  # lstm depth
    kind_vocab: int = 64
    string_vocab: int = 4096
    id_embedding: int = 32
    dropout: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


class ResidualBlock(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


class PrimitiveEmbedding(nn.Module):
    """Feature row -> vector: embeddings of the id columns + a projection of the numeric columns."""

    def __init__(self, features: FeatureConfig, config: ModelConfig) -> None:
        super().__init__()
        cols = features.columns()
        self.kind_col = cols["kind"].start
        self.string_cols = cols["strings"]
        self.numeric_start = cols["refs"].start
        numeric_width = features.width - self.numeric_start
        self.kind = nn.Embedding(config.kind_vocab, config.id_embedding, padding_idx=0)
        self.strings = nn.Embedding(config.string_vocab, config.id_embedding, padding_idx=0)
        self.numeric = nn.Linear(numeric_width, config.id_embedding)
        self.out_width = 2 * config.id_embedding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Ids beyond the tables (a checkpoint used with a bigger vocabulary) fall back to OOV (1), never crash.
        kind = x[..., self.kind_col].long()
        kind = torch.where(kind < self.kind.num_embeddings, kind, torch.ones_like(kind))
        strings = x[..., self.string_cols].long()
        strings = torch.where(strings < self.strings.num_embeddings, strings, torch.ones_like(strings))
        ids = self.kind(kind) + self.strings(strings).sum(dim=-2)
        return torch.cat([ids, self.numeric(x[..., self.numeric_start :])], dim=-1)


class TLPNet(nn.Module):
    """Score programs from their primitive sequences. ``forward`` returns ``[batch]`` scores of one head."""

    def __init__(self, features: FeatureConfig, config: ModelConfig, num_heads: int = 1) -> None:
        super().__init__()
        self.features = features
        self.config = config
        hidden = config.hidden
        self.embed = PrimitiveEmbedding(features, config)
        self.encoder = nn.Sequential(
            nn.Linear(self.embed.out_width, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        if config.arch == "attention":
            self.attention = nn.MultiheadAttention(hidden, config.heads, dropout=config.dropout, batch_first=True)
        elif config.arch == "lstm":
            self.lstm = nn.LSTM(hidden, hidden // 2, num_layers=config.layers, batch_first=True, bidirectional=True)
        else:
            raise ValueError(f"unknown architecture {config.arch!r} ({', '.join(ARCHS)})")
        self.blocks = nn.Sequential(*[ResidualBlock(hidden) for _ in range(config.residual_blocks)])
        self.heads = nn.ModuleList([self._new_head() for _ in range(num_heads)])

    def _new_head(self) -> nn.Module:
        hidden = self.config.hidden
        return nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def add_head(self, copy_of: int | None = None) -> int:
        """Append a head (a copy of head ``copy_of``, or freshly initialised); returns its index."""
        head = self._new_head()
        if copy_of is not None:
            head.load_state_dict(self.heads[copy_of].state_dict())
        self.heads.append(head.to(next(self.parameters()).device))
        return len(self.heads) - 1

    def backbone_parameters(self) -> list[nn.Parameter]:
        head_ids = {id(p) for p in self.heads.parameters()}
        return [p for p in self.parameters() if id(p) not in head_ids]

    def forward(self, x: torch.Tensor, head: int = 0) -> torch.Tensor:
        return self.score(*self.backbone(x), head)

    def score(self, h: torch.Tensor, padding: torch.Tensor, head: int = 0) -> torch.Tensor:
        """Backbone output -> ``[batch]`` scores of one head (summed over the primitives)."""
        per_primitive = self.heads[head](h).squeeze(-1)  # [B, L]
        return per_primitive.masked_fill(padding, 0.0).sum(dim=1)

    def backbone(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Shared part: ``[B, L, width]`` features -> (``[B, L, hidden]`` primitive states, ``[B, L]`` padding)."""
        padding = x[..., self.embed.kind_col] == 0  # [B, L]
        h = self.encoder(self.embed(x))
        if self.config.arch == "attention":
            # An all-padding row (empty trace) would make attention NaN; let it attend to itself instead.
            safe = padding & ~padding.all(dim=1, keepdim=True)
            attended, _ = self.attention(h, h, h, key_padding_mask=safe, need_weights=False)
            h = h + attended
        else:  # lstm
            # Packing keeps the backward direction from reading the padding after the trace's end.
            lengths = (~padding).sum(dim=1).clamp_min(1).cpu()
            if bool((lengths == h.shape[1]).all()):
                h = self.lstm(h)[0]  # no padding to skip (scorers batch equal lengths): packing would only cost
            else:
                packed = nn.utils.rnn.pack_padded_sequence(h, lengths, batch_first=True, enforce_sorted=False)
                h, _ = nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True,
                                                        total_length=h.shape[1])
        return self.blocks(h), padding
