"""Inverted-residual blocks with squeeze-excite (MobileNetV3 / EfficientNet style) at a small size: the zoo's
MobileNetV2 has no squeeze-excite, no hard-swish and no 5x5 depthwise convolutions."""

import torch
from torch import nn


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(channels, reduced, 1), nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = nn.functional.hardsigmoid(self.expand(nn.functional.relu(self.reduce(x.mean((2, 3), keepdim=True)))))
        return x * scale


class InvertedResidualSE(nn.Module):
    def __init__(self, channels: int, expand: int, kernel: int) -> None:
        super().__init__()
        hidden = channels * expand
        self.block = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.Hardswish(),
            nn.Conv2d(hidden, hidden, kernel, padding=kernel // 2, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
            nn.Hardswish(), SqueezeExcite(hidden, hidden // 4),
            nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class SENet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 24, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(24),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(InvertedResidualSE(24, 4, 3), InvertedResidualSE(24, 4, 5))
        self.head = nn.Linear(24, 100)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(image)).mean((2, 3)))


torch.manual_seed(0)
model = SENet().eval()
example_inputs = (torch.randn(1, 3, 112, 112),)
