"""A convolutional decoder (DCGAN generator / U-Net up path, small): transposed convolutions upsampling a latent
map 8x8 -> 64x64; no zoo network has a transposed convolution."""

import torch
from torch import nn


def up(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU())


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(up(128, 64), up(64, 32), up(32, 16))
        self.out = nn.Conv2d(16, 3, 3, padding=1)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.out(self.body(latent)))


torch.manual_seed(0)
model = Decoder().eval()
example_inputs = (torch.randn(1, 128, 8, 8),)
