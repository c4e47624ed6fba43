"""One decoding step of a grouped-query-attention decoder (Llama style, small): matrix-vector products against
the weights and a 128-token KV cache, RMS norms, SwiGLU; no zoo network decodes a single token."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class DecoderStep(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 8, kv_heads: int = 2, hidden: int = 688, vocab: int = 2000) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm1, self.norm2, self.norm3 = RMSNorm(dim), RMSNorm(dim), RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)  # x: (1, 1, dim); caches: (1, kv_heads, past, head_dim)
        q = self.q(h).view(1, self.heads, 1, self.head_dim)
        k, v = self.kv(h).view(1, 1, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        k, v = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        group = self.heads // self.kv_heads  # each KV head serves a group of query heads
        k = k[:, :, None].expand(-1, -1, group, -1, -1).reshape(1, self.heads, -1, self.head_dim)
        v = v[:, :, None].expand(-1, -1, group, -1, -1).reshape(1, self.heads, -1, self.head_dim)
        attn = torch.softmax(q @ k.transpose(-1, -2) / self.head_dim ** 0.5, dim=-1) @ v
        x = x + self.o(attn.transpose(1, 2).reshape(1, 1, -1))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        x = x + self.down(nn.functional.silu(gate) * up)
        return self.lm_head(self.norm3(x))


torch.manual_seed(0)
model = DecoderStep().eval()
example_inputs = (torch.randn(1, 1, 256), torch.randn(1, 2, 127, 32), torch.randn(1, 2, 127, 32))
