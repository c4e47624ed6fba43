"""Single-operator workloads over many shapes, written in TE with TOPI and turned into TIR tasks.

Shapes are the ones real networks produce (ResNet/MobileNet convolutions, BERT/ViT matmuls…) plus a few square
GEMMs, so operator data complements network data rather than duplicating it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tlp._tvm import tvm
from tlp.workloads.task import Task

te = tvm.te
topi = tvm.topi


@dataclass(frozen=True)
class OperatorSpec:
    """One operator at one shape. ``family`` groups shapes (``tlp collect --workloads conv2d_nchw``)."""

    family: str
    shape: str
    build: Callable[[], list["te.Tensor"]]

    @property
    def name(self) -> str:
        return f"{self.family}_{self.shape}"

    def task(self) -> Task:
        func = te.create_prim_func(self.build())
        return Task(name=self.name, mod=tvm.IRModule({"main": func}), weight=1, network=f"op:{self.family}")


def _placeholder(shape: tuple[int, ...], name: str, dtype: str = "float32") -> "te.Tensor":
    return te.placeholder(shape, dtype=dtype, name=name)


def _dense(m: int, n: int, k: int) -> list["te.Tensor"]:
    data, weight = _placeholder((m, k), "data"), _placeholder((n, k), "weight")
    return [data, weight, topi.nn.dense(data, weight)]


def _matmul(m: int, n: int, k: int) -> list["te.Tensor"]:
    a, b = _placeholder((m, k), "A"), _placeholder((k, n), "B")
    return [a, b, topi.matmul(a, b)]


def _batch_matmul(b: int, m: int, n: int, k: int) -> list["te.Tensor"]:
    x, y = _placeholder((b, m, k), "X"), _placeholder((b, n, k), "Y")
    return [x, y, topi.nn.batch_matmul(x, y)]


def _conv2d_nchw(n: int, c: int, hw: int, o: int, k: int, stride: int, pad: int, dil: int = 1) -> list["te.Tensor"]:
    data, kernel = _placeholder((n, c, hw, hw), "data"), _placeholder((o, c, k, k), "kernel")
    return [data, kernel, topi.nn.conv2d_nchw(data, kernel, stride, pad, dil)]


def _conv2d_nhwc(n: int, c: int, hw: int, o: int, k: int, stride: int, pad: int, dil: int = 1) -> list["te.Tensor"]:
    data, kernel = _placeholder((n, hw, hw, c), "data"), _placeholder((k, k, c, o), "kernel")
    return [data, kernel, topi.nn.conv2d_nhwc(data, kernel, stride, pad, dil)]


def _conv2d_bias_relu(n: int, c: int, hw: int, o: int, k: int, stride: int, pad: int) -> list["te.Tensor"]:
    """The fused conv + bias + ReLU that dominates CNN task lists."""
    data, kernel = _placeholder((n, c, hw, hw), "data"), _placeholder((o, c, k, k), "kernel")
    bias = _placeholder((1, o, 1, 1), "bias")
    out = topi.nn.relu(topi.add(topi.nn.conv2d_nchw(data, kernel, stride, pad, 1), bias))
    return [data, kernel, bias, out]


def _depthwise_nchw(c: int, hw: int, k: int, stride: int) -> list["te.Tensor"]:
    data, kernel = _placeholder((1, c, hw, hw), "data"), _placeholder((c, 1, k, k), "kernel")
    return [data, kernel, topi.nn.depthwise_conv2d_nchw(data, kernel, stride, k // 2, 1)]


def _depthwise_nhwc(c: int, hw: int, k: int, stride: int) -> list["te.Tensor"]:
    data, kernel = _placeholder((1, hw, hw, c), "data"), _placeholder((k, k, c, 1), "kernel")
    return [data, kernel, topi.nn.depthwise_conv2d_nhwc(data, kernel, stride, k // 2, 1)]


def _group_conv_nchw(c: int, hw: int, o: int, k: int, stride: int, groups: int) -> list["te.Tensor"]:
    data, weight = _placeholder((1, c, hw, hw), "data"), _placeholder((o, c // groups, k, k), "weight")
    return [data, weight, topi.nn.group_conv2d_nchw(data, weight, stride, k // 2, 1, groups)]


def _pool(kind: str, c: int, hw: int, k: int, stride: int) -> list["te.Tensor"]:
    data = _placeholder((1, c, hw, hw), "data")
    pad = k // 2
    return [data, topi.nn.pool2d(data, (k, k), (stride, stride), (1, 1), (pad, pad, pad, pad), kind, layout="NCHW")]


def _global_avg_pool(c: int, hw: int) -> list["te.Tensor"]:
    data = _placeholder((1, c, hw, hw), "data")
    return [data, topi.nn.adaptive_pool(data, (1, 1), "avg", layout="NCHW")]


def _softmax(shape: tuple[int, ...]) -> list["te.Tensor"]:
    data = _placeholder(shape, "data")
    return [data, topi.nn.softmax(data, axis=-1)]


def _layer_norm(rows: int, hidden: int) -> list["te.Tensor"]:
    data, gamma, beta = _placeholder((rows, hidden), "data"), _placeholder((hidden,), "gamma"), _placeholder(
        (hidden,), "beta"
    )
    return [data, gamma, beta, topi.nn.layer_norm(data, gamma, beta, axis=[-1], epsilon=1e-5)]


def _gelu_chain(rows: int, hidden: int) -> list["te.Tensor"]:
    """bias add + tanh-GELU: the element-wise chain after every transformer MLP matmul."""
    data, bias = _placeholder((rows, hidden), "data"), _placeholder((hidden,), "bias")
    x = topi.add(data, bias)
    inner = topi.multiply(topi.add(x, topi.multiply(topi.multiply(topi.multiply(x, x), x), 0.044715)), 0.7978845608)
    return [data, bias, topi.multiply(topi.multiply(x, 0.5), topi.add(topi.tanh(inner), 1.0))]


def _bn_relu6_chain(c: int, hw: int) -> list["te.Tensor"]:
    """Inference batch-norm (scale, shift) + ReLU6: MobileNet's element-wise chain."""
    data = _placeholder((1, c, hw, hw), "data")
    scale, shift = _placeholder((1, c, 1, 1), "scale"), _placeholder((1, c, 1, 1), "shift")
    return [data, scale, shift, topi.clip(topi.add(topi.multiply(data, scale), shift), 0.0, 6.0)]


def _residual_add_relu(c: int, hw: int) -> list["te.Tensor"]:
    a, b = _placeholder((1, c, hw, hw), "A"), _placeholder((1, c, hw, hw), "B")
    return [a, b, topi.nn.relu(topi.add(a, b))]


def _take(rows: int, hidden: int, count: int) -> list["te.Tensor"]:
    """Embedding lookup: a gather whose integer input holds indices."""
    table, indices = _placeholder((rows, hidden), "table"), _placeholder((count,), "indices", "int64")
    return [table, indices, topi.take(table, indices, axis=0)]


def _specs() -> list[OperatorSpec]:
    specs: list[OperatorSpec] = []

    def add(family: str, shape: str, build: Callable[[], list["te.Tensor"]]) -> None:
        specs.append(OperatorSpec(family, shape, build))

    for m, n, k in [(1, 1000, 2048), (1, 768, 768), (128, 768, 768), (128, 3072, 768), (128, 768, 3072),
                    (197, 2304, 768), (64, 64, 64), (256, 256, 256), (512, 512, 512)]:
        add("dense", f"{m}x{n}x{k}", lambda m=m, n=n, k=k: _dense(m, n, k))
    for m, n, k in [(128, 128, 128), (512, 512, 512), (96, 1024, 256)]:
        add("matmul", f"{m}x{n}x{k}", lambda m=m, n=n, k=k: _matmul(m, n, k))
    for b, m, n, k in [(12, 128, 128, 64), (12, 128, 64, 128), (2, 128, 128, 64), (12, 197, 197, 64),
                       (16, 64, 64, 64)]:
        add("batch_matmul", f"{b}x{m}x{n}x{k}", lambda b=b, m=m, n=n, k=k: _batch_matmul(b, m, n, k))
    conv_shapes = [  # (batch, in_ch, size, out_ch, kernel, stride, pad, dilation)
        (1, 3, 224, 64, 7, 2, 3, 1), (1, 64, 56, 64, 3, 1, 1, 1), (1, 64, 56, 128, 3, 2, 1, 1),
        (1, 128, 28, 128, 3, 1, 1, 1), (1, 256, 14, 256, 3, 1, 1, 1), (1, 512, 7, 512, 3, 1, 1, 1),
        (1, 256, 56, 64, 1, 1, 0, 1), (1, 64, 56, 256, 1, 1, 0, 1), (1, 1024, 14, 256, 1, 1, 0, 1),
        (1, 256, 28, 256, 3, 1, 2, 2), (1, 128, 28, 128, 3, 1, 4, 4), (4, 64, 28, 64, 3, 1, 1, 1),
    ]
    for n, c, hw, o, k, s, p, d in conv_shapes:
        shape = f"{n}x{c}x{hw}x{hw}_o{o}_k{k}_s{s}_p{p}_d{d}"
        add("conv2d_nchw", shape, lambda n=n, c=c, hw=hw, o=o, k=k, s=s, p=p, d=d: _conv2d_nchw(n, c, hw, o, k, s, p, d))
    for n, c, hw, o, k, s, p, d in conv_shapes[1:9:2] + [(1, 32, 112, 64, 3, 1, 2, 2)]:
        shape = f"{n}x{hw}x{hw}x{c}_o{o}_k{k}_s{s}_p{p}_d{d}"
        add("conv2d_nhwc", shape, lambda n=n, c=c, hw=hw, o=o, k=k, s=s, p=p, d=d: _conv2d_nhwc(n, c, hw, o, k, s, p, d))
    for n, c, hw, o, k, s, p in [(1, 64, 56, 64, 3, 1, 1), (1, 128, 28, 256, 1, 1, 0), (1, 3, 32, 16, 3, 1, 1)]:
        add("conv2d_bias_relu", f"{n}x{c}x{hw}x{hw}_o{o}_k{k}_s{s}",
            lambda n=n, c=c, hw=hw, o=o, k=k, s=s, p=p: _conv2d_bias_relu(n, c, hw, o, k, s, p))
    for c, hw, k, s in [(32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 3, 1), (192, 28, 3, 1), (384, 14, 3, 1),
                        (576, 14, 3, 2), (960, 7, 3, 1), (64, 56, 5, 1)]:
        add("depthwise_conv2d_nchw", f"c{c}_{hw}x{hw}_k{k}_s{s}", lambda c=c, hw=hw, k=k, s=s: _depthwise_nchw(c, hw, k, s))
    for c, hw, k, s in [(32, 112, 3, 1), (144, 56, 3, 2), (384, 14, 3, 1)]:
        add("depthwise_conv2d_nhwc", f"c{c}_{hw}x{hw}_k{k}_s{s}", lambda c=c, hw=hw, k=k, s=s: _depthwise_nhwc(c, hw, k, s))
    for kind, c, hw, k, s in [("max", 64, 112, 3, 2), ("avg", 256, 28, 3, 1), ("max", 128, 56, 2, 2)]:
        add(f"{kind}_pool2d", f"c{c}_{hw}x{hw}_k{k}_s{s}", lambda kind=kind, c=c, hw=hw, k=k, s=s: _pool(kind, c, hw, k, s))
    for c, hw in [(2048, 7), (1280, 7), (512, 14)]:
        add("global_avg_pool2d", f"c{c}_{hw}x{hw}", lambda c=c, hw=hw: _global_avg_pool(c, hw))
    for shape in [(12, 128, 128), (1, 1000), (2, 128, 128), (12, 197, 197)]:
        add("softmax", "x".join(map(str, shape)), lambda shape=shape: _softmax(shape))
    for rows, hidden in [(128, 768), (197, 768), (128, 128), (128, 1024)]:
        add("layer_norm", f"{rows}x{hidden}", lambda rows=rows, hidden=hidden: _layer_norm(rows, hidden))
    for rows, hidden in [(128, 3072), (197, 3072), (128, 512)]:
        add("gelu_chain", f"{rows}x{hidden}", lambda rows=rows, hidden=hidden: _gelu_chain(rows, hidden))
    for c, hw in [(32, 112), (144, 56), (576, 14)]:
        add("bn_relu6_chain", f"c{c}_{hw}x{hw}", lambda c=c, hw=hw: _bn_relu6_chain(c, hw))
    for c, hw in [(64, 56), (256, 56), (512, 28)]:
        add("residual_add_relu", f"c{c}_{hw}x{hw}", lambda c=c, hw=hw: _residual_add_relu(c, hw))
    for rows, hidden, count in [(1000, 128, 128), (30522, 768, 128)]:
        add("take", f"{rows}x{hidden}_n{count}", lambda rows=rows, hidden=hidden, count=count: _take(rows, hidden, count))
    return specs


OPERATORS: dict[str, OperatorSpec] = {spec.name: spec for spec in _specs()}


def operator_families() -> dict[str, list[OperatorSpec]]:
    """Operators grouped by family, in definition order."""
    families: dict[str, list[OperatorSpec]] = {}
    for spec in OPERATORS.values():
        families.setdefault(spec.family, []).append(spec)
    return families


def random_operator_shapes(count: int, seed: int = 0) -> list[OperatorSpec]:
    """``count`` distinct operators at random shapes of the compute-heavy families (dense, batch matmul, conv2d,
    conv2d + bias + ReLU, depthwise and grouped convolutions, in turn), family ``random_<family>``: tasks no
    network or zoo operator defines, for programs that only a teacher ranks (``tlp train --transfer-shapes``)."""
    rng = np.random.default_rng(seed)
    pick = lambda values: int(rng.choice(values))  # noqa: E731
    sizes = [32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072]
    channels = [16, 24, 32, 48, 64, 96, 128, 160, 256, 320, 512, 640, 1024]
    spatial = [7, 14, 28, 56, 112]
    makers: dict[str, Callable[[], tuple[str, Callable[[], list["te.Tensor"]]]]] = {
        "dense": lambda: (f"{(m := pick([1, 16, 64, 128, 197, 256, 512]))}x{(n := pick(sizes))}x{(k := pick(sizes))}",
                          lambda: _dense(m, n, k)),
        "batch_matmul": lambda: (f"{(b := pick([1, 4, 8, 12, 16]))}x{(m := pick([64, 128, 197, 256]))}x"
                                 f"{(n := pick([32, 64, 128, 197, 256]))}x{(k := pick([32, 64, 128]))}",
                                 lambda: _batch_matmul(b, m, n, k)),
        "conv2d_nchw": lambda: (f"{(c := pick(channels))}x{(hw := pick(spatial))}_o{(o := pick(channels))}_k"
                                f"{(k := pick([1, 1, 3, 3, 5, 7]))}_s{(st := pick([1, 1, 2]))}",
                                lambda: _conv2d_nchw(1, c, hw, o, k, st, k // 2)),
        "conv2d_bias_relu": lambda: (f"{(c := pick(channels))}x{(hw := pick(spatial))}_o{(o := pick(channels))}_k"
                                     f"{(k := pick([1, 3]))}_s{(st := pick([1, 2]))}",
                                     lambda: _conv2d_bias_relu(1, c, hw, o, k, st, k // 2)),
        "depthwise_conv2d_nchw": lambda: (f"c{(c := pick(channels))}_{(hw := pick(spatial))}_k{(k := pick([3, 5]))}"
                                          f"_s{(st := pick([1, 2]))}", lambda: _depthwise_nchw(c, hw, k, st)),
        "group_conv2d_nchw": lambda: (f"c{(c := pick([64, 128, 256, 512, 1024]))}x{(hw := pick(spatial[:4]))}_k"
                                      f"{(k := pick([1, 3]))}_s{(st := pick([1, 2]))}_g{(g := pick([4, 8, 32]))}",
                                      lambda: _group_conv_nchw(c, hw, c, k, st, g)),
    }
    families = list(makers)
    specs: list[OperatorSpec] = []
    names: set[str] = set()
    while len(specs) < count:
        family = families[len(specs) % len(families)]
        shape, build = makers[family]()
        if f"{family}_{shape}" not in names:
            names.add(f"{family}_{shape}")
            specs.append(OperatorSpec(f"random_{family}", shape, build))
    return specs
