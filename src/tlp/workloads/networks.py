"""Benchmark networks written in plain PyTorch, for extracting tuning workloads.

Each network is a faithful, compact re-implementation of a standard architecture
(torchvision-style CNNs, BERT, a GPT-2-style decoder, ViT-B/16) built from basic
modules only (Conv2d, Linear, BatchNorm2d, LayerNorm, pooling, activations) and
plain tensor ops. Attention is spelled out with ``torch.matmul`` + ``softmax``
rather than ``nn.MultiheadAttention`` / ``F.scaled_dot_product_attention`` so that
``torch.export`` produces a graph of simple ops that downstream converters handle.

Models are built with a fixed random init (no pretrained weights) in inference
configuration (``.eval()``). Dropout layers are omitted: they are identities at
inference and would only add no-op nodes to the exported graph. Activations
are out-of-place (no ``inplace=True``) so the exported graph stays functional.

``NETWORKS`` maps a name to a :class:`NetworkSpec` (builder + batch-1 example
inputs). ``held_out`` marks the networks TenSet/TLP use as their test set.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

# --------------------------------------------------------------------------- #
# Shared helpers
# --------------------------------------------------------------------------- #


def conv_bn(
    in_ch: int,
    out_ch: int,
    kernel: int,
    stride: int = 1,
    groups: int = 1,
    act: type[nn.Module] | None = nn.ReLU,
) -> nn.Sequential:
    """Conv (no bias, 'same'-style padding) -> BatchNorm -> optional activation."""
    layers: list[nn.Module] = [
        nn.Conv2d(in_ch, out_ch, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(out_ch),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------- #
# ResNet / ResNeXt (torchvision layout, stride on the 3x3 conv: "ResNet v1.5")
# --------------------------------------------------------------------------- #


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self, in_ch: int, planes: int, stride: int = 1, groups: int = 1, base_width: int = 64
    ) -> None:
        super().__init__()
        assert groups == 1 and base_width == 64, "BasicBlock has no grouped variant"
        self.conv1 = conv_bn(in_ch, planes, 3, stride)
        self.conv2 = conv_bn(planes, planes, 3, act=None)
        self.downsample = _shortcut(in_ch, planes, stride)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.conv2(self.conv1(x)) + self.downsample(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, in_ch: int, planes: int, stride: int = 1, groups: int = 1, base_width: int = 64
    ) -> None:
        super().__init__()
        # ResNeXt widens the 3x3 conv and splits it into `groups` paths;
        # groups=1, base_width=64 gives the plain ResNet bottleneck.
        width = int(planes * (base_width / 64.0)) * groups
        out_ch = planes * self.expansion
        self.conv1 = conv_bn(in_ch, width, 1)
        self.conv2 = conv_bn(width, width, 3, stride, groups=groups)
        self.conv3 = conv_bn(width, out_ch, 1, act=None)
        self.downsample = _shortcut(in_ch, out_ch, stride)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.conv3(self.conv2(self.conv1(x))) + self.downsample(x))


def _shortcut(in_ch: int, out_ch: int, stride: int) -> nn.Module:
    # Projection (1x1 conv + BN) only when the shape changes, identity otherwise.
    if stride == 1 and in_ch == out_ch:
        return nn.Identity()
    return conv_bn(in_ch, out_ch, 1, stride, act=None)


class ResNet(nn.Module):
    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: tuple[int, int, int, int],
        groups: int = 1,
        width_per_group: int = 64,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 64, 7, stride=2), nn.MaxPool2d(3, 2, 1))
        stages: list[nn.Module] = []
        in_ch = 64
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), layers)):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(block(in_ch, planes, stride, groups, width_per_group))
                in_ch = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.stages(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


# --------------------------------------------------------------------------- #
# MobileNetV2 (width 1.0)
# --------------------------------------------------------------------------- #


class InvertedResidual(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = in_ch * expand_ratio
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(conv_bn(in_ch, hidden, 1, act=nn.ReLU6))  # pointwise expand
        layers += [
            conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),  # depthwise
            conv_bn(hidden, out_ch, 1, act=None),  # linear bottleneck: no activation
        ]
        self.conv = nn.Sequential(*layers)
        self.use_residual = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    # (expand ratio t, output channels c, repeats n, first stride s)
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, 32, 3, stride=2, act=nn.ReLU6)]
        in_ch = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(in_ch, c, s if i == 0 else 1, t))
                in_ch = c
        layers.append(conv_bn(in_ch, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --------------------------------------------------------------------------- #
# VGG-16 (configuration "D", no batch norm)
# --------------------------------------------------------------------------- #


class VGG16(nn.Module):
    CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
           512, 512, 512, "M", 512, 512, 512, "M"]

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(in_ch, int(v), 3, padding=1), nn.ReLU()]
                in_ch = int(v)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(7)  # identity at 224x224, kept for fidelity
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(),
            nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --------------------------------------------------------------------------- #
# DenseNet-121
# --------------------------------------------------------------------------- #


class DenseLayer(nn.Module):
    """BN-ReLU-Conv1x1 (bottleneck) -> BN-ReLU-Conv3x3, producing `growth` channels."""

    def __init__(self, in_ch: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(in_ch), nn.ReLU(),
            nn.Conv2d(in_ch, bn_size * growth, 1, bias=False),
            nn.BatchNorm2d(bn_size * growth), nn.ReLU(),
            nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        # Like torchvision, each layer concatenates all previous feature maps.
        return self.body(torch.cat(features, 1))


class DenseBlock(nn.Module):
    def __init__(self, n_layers: int, in_ch: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DenseLayer(in_ch + i * growth, growth, bn_size) for i in range(n_layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    def __init__(
        self,
        growth: int = 32,
        block_config: tuple[int, ...] = (6, 12, 24, 16),
        init_features: int = 64,
        bn_size: int = 4,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, init_features, 7, 2, 3, bias=False),
            nn.BatchNorm2d(init_features), nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]
        ch = init_features
        for i, n in enumerate(block_config):
            layers.append(DenseBlock(n, ch, growth, bn_size))
            ch += n * growth
            if i != len(block_config) - 1:  # transition: halve channels and resolution
                layers += [nn.BatchNorm2d(ch), nn.ReLU(),
                           nn.Conv2d(ch, ch // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
                ch //= 2
        layers += [nn.BatchNorm2d(ch), nn.ReLU(), nn.AdaptiveAvgPool2d(1)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


# --------------------------------------------------------------------------- #
# SqueezeNet 1.1
# --------------------------------------------------------------------------- #


class Fire(nn.Module):
    def __init__(self, in_ch: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(in_ch, squeeze, 1), nn.ReLU())
        self.expand1x1 = nn.Sequential(nn.Conv2d(squeeze, expand1x1, 1), nn.ReLU())
        self.expand3x3 = nn.Sequential(
            nn.Conv2d(squeeze, expand3x3, 3, padding=1), nn.ReLU()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze(x)
        return torch.cat([self.expand1x1(x), self.expand3x3(x)], 1)


class SqueezeNet11(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()

        def pool() -> nn.Module:
            return nn.MaxPool2d(3, 2, ceil_mode=True)

        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, stride=2), nn.ReLU(), pool(),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256), Fire(512, 64, 256, 256),
        )
        # The classifier is a 1x1 conv followed by global average pooling.
        self.classifier = nn.Sequential(
            nn.Conv2d(512, num_classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


# --------------------------------------------------------------------------- #
# Transformers: shared attention and MLP
# --------------------------------------------------------------------------- #


class SelfAttention(nn.Module):
    """Multi-head self-attention with explicit matmul/softmax.

    ``fused_qkv`` selects one (dim -> 3*dim) projection as in GPT-2 and
    torchvision's ViT, or three separate (dim -> dim) projections as in BERT;
    the math is identical, but the emitted dense workloads differ.
    """

    def __init__(
        self, dim: int, n_heads: int, causal: bool = False, fused_qkv: bool = True,
        max_len: int = 1024,
    ) -> None:
        super().__init__()
        assert dim % n_heads == 0
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.fused_qkv = fused_qkv
        if fused_qkv:
            self.qkv = nn.Linear(dim, 3 * dim)
        else:
            self.query = nn.Linear(dim, dim)
            self.key = nn.Linear(dim, dim)
            self.value = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.causal = causal
        if causal:
            # True above the diagonal: positions a token must not attend to.
            future = torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)
            self.register_buffer("future", future, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        if self.fused_qkv:
            q, k, v = self.qkv(x).split(C, dim=2)
        else:
            q, k, v = self.query(x), self.key(x), self.value(x)
        # (B, T, C) -> (B, heads, T, head_dim)
        q, k, v = (t.reshape(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if self.causal:
            att = att.masked_fill(self.future[:T, :T], float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, gelu_approx: str = "none") -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU(approximate=gelu_approx)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class PreLNBlock(nn.Module):
    """x + attn(LN(x)); x + mlp(LN(x)) -- the GPT-2 / ViT block."""

    def __init__(
        self, dim: int, n_heads: int, mlp_dim: int, causal: bool, eps: float, gelu_approx: str
    ) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=eps)
        self.attn = SelfAttention(dim, n_heads, causal=causal)
        self.ln_2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = MLP(dim, mlp_dim, gelu_approx)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


# --------------------------------------------------------------------------- #
# BERT encoder
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden: int = 768
    n_layers: int = 12
    n_heads: int = 12
    intermediate: int = 3072
    max_position: int = 512
    type_vocab_size: int = 2
    eps: float = 1e-12


class BertLayer(nn.Module):
    """Post-LayerNorm block: LN(x + attn(x)); LN(x + mlp(x))."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attn = SelfAttention(cfg.hidden, cfg.n_heads, fused_qkv=False)
        self.ln_attn = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.mlp = MLP(cfg.hidden, cfg.intermediate)  # BERT uses exact (erf) GELU
        self.ln_out = nn.LayerNorm(cfg.hidden, eps=cfg.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_attn(x + self.attn(x))
        return self.ln_out(x + self.mlp(x))


class Bert(nn.Module):
    """BERT encoder returning the last hidden states (B, T, hidden).

    Batch 1 with no padding, so no attention mask is needed; token types are
    all zero (single segment). The pooler / task heads are not included.
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.hidden)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden)
        self.ln_emb = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.register_buffer("position_ids", torch.arange(cfg.max_position), persistent=False)
        self.register_buffer(
            "token_type_ids", torch.zeros(cfg.max_position, dtype=torch.long), persistent=False
        )
        self.layers = nn.Sequential(*(BertLayer(cfg) for _ in range(cfg.n_layers)))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.shape[1]
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(self.position_ids[:T])
            + self.token_type_embeddings(self.token_type_ids[:T])
        )
        return self.layers(self.ln_emb(x))


# --------------------------------------------------------------------------- #
# GPT-2-style decoder (2 blocks of GPT-2 small)
# --------------------------------------------------------------------------- #


class GPT2(nn.Module):
    """Token + position embeddings, pre-LN causal blocks, final LayerNorm; no LM head."""

    def __init__(
        self, n_layers: int = 2, dim: int = 768, n_heads: int = 12,
        vocab_size: int = 50257, block_size: int = 1024,
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, dim)
        self.wpe = nn.Embedding(block_size, dim)
        self.register_buffer("pos", torch.arange(block_size), persistent=False)
        # GPT-2 uses the tanh approximation of GELU and LayerNorm eps 1e-5.
        self.blocks = nn.Sequential(
            *(PreLNBlock(dim, n_heads, 4 * dim, causal=True, eps=1e-5, gelu_approx="tanh")
              for _ in range(n_layers))
        )
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(self.pos[:T])
        return self.ln_f(self.blocks(x))


# --------------------------------------------------------------------------- #
# Vision Transformer (ViT-B/16)
# --------------------------------------------------------------------------- #


class ViT(nn.Module):
    def __init__(
        self, image_size: int = 224, patch: int = 16, dim: int = 768, n_layers: int = 12,
        n_heads: int = 12, mlp_dim: int = 3072, num_classes: int = 1000,
    ) -> None:
        super().__init__()
        n_patches = (image_size // patch) ** 2
        # Patch embedding as a strided conv == linear projection of flattened patches.
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n_patches + 1, dim) * 0.02)
        self.blocks = nn.Sequential(
            *(PreLNBlock(dim, n_heads, mlp_dim, causal=False, eps=1e-6, gelu_approx="none")
              for _ in range(n_layers))
        )
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, n_patches, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.ln(self.blocks(x))
        return self.head(x[:, 0])  # classify from the class token


# --------------------------------------------------------------------------- #
# Registry
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class NetworkSpec:
    name: str
    build: Callable[[], torch.nn.Module]
    example_inputs: Callable[[], tuple[torch.Tensor, ...]]
    held_out: bool  # part of the TenSet/TLP standard test networks
    description: str


SEED = 0


def _built(factory: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """Wrap a factory so weights are deterministic without touching the global RNG."""

    def build() -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            return factory().eval()

    return build


def _image(size: int = 224) -> Callable[[], tuple[torch.Tensor, ...]]:
    def inputs() -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(SEED)
        return (torch.randn(1, 3, size, size, generator=g),)

    return inputs


def _tokens(vocab_size: int, seq_len: int = 128) -> Callable[[], tuple[torch.Tensor, ...]]:
    def inputs() -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(SEED)
        return (torch.randint(0, vocab_size, (1, seq_len), generator=g, dtype=torch.long),)

    return inputs


BERT_BASE = BertConfig()
BERT_TINY = BertConfig(hidden=128, n_layers=2, n_heads=2, intermediate=512)

_SPECS = [
    NetworkSpec("resnet18", _built(lambda: ResNet(BasicBlock, (2, 2, 2, 2))), _image(), False,
                "ResNet-18 (BasicBlock, [2,2,2,2]), 1x3x224x224 -> 1000 logits"),
    NetworkSpec("resnet50", _built(lambda: ResNet(Bottleneck, (3, 4, 6, 3))), _image(), True,
                "ResNet-50 (Bottleneck, [3,4,6,3]), 1x3x224x224 -> 1000 logits"),
    NetworkSpec("resnext50",
                _built(lambda: ResNet(Bottleneck, (3, 4, 6, 3), groups=32, width_per_group=4)),
                _image(), True, "ResNeXt-50 32x4d, 1x3x224x224 -> 1000 logits"),
    NetworkSpec("mobilenet_v2", _built(MobileNetV2), _image(), True,
                "MobileNetV2 width 1.0 (inverted residuals, ReLU6), 1x3x224x224 -> 1000 logits"),
    NetworkSpec("vgg16", _built(VGG16), _image(), False,
                "VGG-16 (config D, no BN), 1x3x224x224 -> 1000 logits"),
    NetworkSpec("densenet121", _built(DenseNet), _image(), False,
                "DenseNet-121 (growth 32, blocks 6/12/24/16), 1x3x224x224 -> 1000 logits"),
    NetworkSpec("bert_base", _built(lambda: Bert(BERT_BASE)), _tokens(BERT_BASE.vocab_size),
                True, "BERT-base encoder (12x768, 12 heads), ids 1x128 -> 1x128x768"),
    NetworkSpec("bert_tiny", _built(lambda: Bert(BERT_TINY)), _tokens(BERT_TINY.vocab_size),
                True, "BERT-tiny encoder (2x128, 2 heads), ids 1x128 -> 1x128x128"),
    NetworkSpec("gpt2_block", _built(GPT2), _tokens(50257), False,
                "2 GPT-2-small decoder blocks (causal, pre-LN), ids 1x128 -> 1x128x768"),
    NetworkSpec("vit", _built(ViT), _image(), False,
                "ViT-B/16 (12x768, 12 heads), 1x3x224x224 -> 1000 logits"),
    NetworkSpec("resnet34", _built(lambda: ResNet(BasicBlock, (3, 4, 6, 3))), _image(), False,
                "ResNet-34 (BasicBlock, [3,4,6,3]), 1x3x224x224 -> 1000 logits"),
    NetworkSpec("squeezenet", _built(SqueezeNet11), _image(), False,
                "SqueezeNet 1.1, 1x3x224x224 -> 1000 logits"),
]

# TenSet's hold-out protocol: only the batch-1, 224x224 (and sequence-128) variants of the test networks are held
# out; the same architectures at other input sizes are training data (TenSet measures them at 240 and 256, and
# sequences of 64 and 256). These variants give the training set grouped and depthwise convolutions (ResNeXt,
# MobileNetV2), which no other training network has, at shapes the held-out tasks do not use (tasks a variant
# shares with a held-out network, such as the classifier, stay test tasks: the split goes by every network a task
# belongs to).
VARIANT_IMAGE_SIZES = (240, 256)
VARIANT_SEQ_LENS = (64,)
_BERT_CONFIGS = {"bert_base": BERT_BASE, "bert_tiny": BERT_TINY}


def _variant(spec: NetworkSpec, suffix: str, inputs: Callable[[], tuple[torch.Tensor, ...]], shape: str) -> NetworkSpec:
    old_shape = "1x3x224x224" if "1x3x224x224" in spec.description else "1x128"
    return NetworkSpec(f"{spec.name}_{suffix}", spec.build, inputs, False,
                       spec.description.replace(old_shape, shape) + " (training variant of a held-out network)")


_BASE_COUNT = len(_SPECS)
_SPECS += [_variant(spec, str(size), _image(size), f"1x3x{size}x{size}")
           for size in VARIANT_IMAGE_SIZES for spec in list(_SPECS)
           if spec.name in ("resnet50", "resnext50", "mobilenet_v2")]
_SPECS += [_variant(spec, f"s{seq}", _tokens(_BERT_CONFIGS[spec.name].vocab_size, seq), f"1x{seq}")
           for seq in VARIANT_SEQ_LENS for spec in list(_SPECS) if spec.name in _BERT_CONFIGS]

NETWORKS: dict[str, NetworkSpec] = {spec.name: spec for spec in _SPECS}
TRAINING_VARIANTS: list[str] = [spec.name for spec in _SPECS[_BASE_COUNT:]]  # the variants above, in order

__all__ = ["NetworkSpec", "NETWORKS", "TRAINING_VARIANTS", "BertConfig"]
