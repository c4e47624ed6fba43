"""A token-mixing MLP network (MLP-Mixer's blocks at a small size): no zoo network has its transposed token MLPs."""

import torch
from torch import nn


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, channels: int, token_hidden: int, channel_hidden: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(channels), nn.LayerNorm(channels)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens))
        self.channel_mlp = nn.Sequential(nn.Linear(channels, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)  # mixes across tokens
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, tokens: int = 64, channels: int = 192, depth: int = 2) -> None:
        super().__init__()
        self.embed = nn.Linear(48, channels)  # 4x4 RGB patches
        self.blocks = nn.Sequential(*[MixerBlock(tokens, channels, 96, 4 * channels) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(channels), nn.Linear(channels, 100)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.embed(patches))).mean(dim=1))


torch.manual_seed(0)
model = Mixer().eval()
example_inputs = (torch.randn(1, 64, 48),)
