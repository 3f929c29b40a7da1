"""ResNet-50 as torchvision defines it (v1.5: the stride sits on the 3x3 conv of a bottleneck),
at batch 1 with random seeded weights, in float32 or float16. The same plan of blocks drives the
Relay text, the numpy forward, the FLOP count and the torch module, whose parameter names are
torchvision's (`layer1.0.conv1.weight` is `%layer1_0_conv1_weight` in Relay)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bench import flops
from bench.models import numpy_ops as npo
from bench.models.model import Model, RelayWriter, load_weights, seeded

EXPANSION = 4
BN_FIELDS = ("weight", "bias", "running_mean", "running_var")
NUMPY_FP16 = ("numpy's float16 matmul has no BLAS kernel (a plain C loop, minutes per ResNet-50); "
              "numpy has no float16 convolution to compare")


@dataclass(frozen=True)
class Block:
    prefix: str  # layer1.0
    inplanes: int
    width: int
    stride: int
    downsample: bool

    @property
    def outplanes(self) -> int:
        return self.width * EXPANSION


def plan(layers: Sequence[int], base: int) -> list[Block]:
    blocks, inplanes = [], base
    for stage, count in enumerate(layers):
        width = base * 2**stage
        for index in range(count):
            stride = 2 if stage > 0 and index == 0 else 1
            blocks.append(Block(f"layer{stage + 1}.{index}", inplanes, width, stride,
                                index == 0 and (stride != 1 or inplanes != width * EXPANSION)))
            inplanes = width * EXPANSION
    return blocks


def relay_name(torch_key: str) -> str:
    return torch_key.replace(".", "_")


def block_convs(b: Block) -> list[tuple[str, str, int, int, int, int]]:
    """(conv name, its batch norm's name, in, out, kernel, stride) of a block's main path."""
    p = b.prefix
    return [(f"{p}.conv1", f"{p}.bn1", b.inplanes, b.width, 1, 1),
            (f"{p}.conv2", f"{p}.bn2", b.width, b.width, 3, b.stride),
            (f"{p}.conv3", f"{p}.bn3", b.width, b.outplanes, 1, 1)]


def relay(blocks: Sequence[Block], base: int, size: int, classes: int, dtype: str) -> str:
    r = RelayWriter(dtype)
    x = r.param("x", (1, 3, size, size))

    def conv_bn(h: str, conv: str, bn: str, cin: int, cout: int, kernel: int, stride: int, relu: bool) -> str:
        w = r.param(relay_name(f"{conv}.weight"), (cout, cin, kernel, kernel))
        norm = [r.param(relay_name(f"{bn}.{f}"), (cout,)) for f in BN_FIELDS]
        pad = kernel // 2
        h = r.let(f"nn.conv2d({h}, {w}, strides=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}], "
                  f"channels={cout}, kernel_size=[{kernel}, {kernel}])")
        h = r.let(f"nn.batch_norm({h}, {', '.join(norm)}, epsilon=1e-05f)")
        h = r.let(f"{h}.0")
        return r.let(f"nn.relu({h})") if relu else h

    h = conv_bn(x, "conv1", "bn1", 3, base, 7, 2, relu=True)
    h = r.let(f"nn.max_pool2d({h}, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])")
    for b in blocks:
        identity = h
        for i, (conv, bn, cin, cout, kernel, stride) in enumerate(block_convs(b)):
            h = conv_bn(h, conv, bn, cin, cout, kernel, stride, relu=i < 2)
        if b.downsample:
            identity = conv_bn(identity, f"{b.prefix}.downsample.0", f"{b.prefix}.downsample.1",
                               b.inplanes, b.outplanes, 1, b.stride, relu=False)
        h = r.let(f"nn.relu(add({h}, {identity}))")
    fc_w, fc_b = r.param("fc_weight", (classes, blocks[-1].outplanes)), r.param("fc_bias", (classes,))
    h = r.let(f"nn.batch_flatten(nn.global_avg_pool2d({h}))")
    return r.text(f"nn.bias_add(nn.dense({h}, {fc_w}, units={classes}), {fc_b}, axis=-1)",
                  f"ResNet-50 (torchvision's architecture) on 1x3x{size}x{size}, {dtype}")


def make_forward(blocks: Sequence[Block]) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
    def forward(a: Mapping[str, np.ndarray]) -> np.ndarray:
        def conv_bn(h: np.ndarray, conv: str, bn: str, kernel: int, stride: int) -> np.ndarray:
            y = npo.conv2d(h, a[relay_name(f"{conv}.weight")], stride, kernel // 2)
            return npo.batch_norm(y, *(a[relay_name(f"{bn}.{f}")] for f in BN_FIELDS))

        h = npo.max_pool2d(npo.relu(conv_bn(a["x"], "conv1", "bn1", 7, 2)), 3, 2, 1)
        for b in blocks:
            identity = h
            for i, (conv, bn, _, _, kernel, stride) in enumerate(block_convs(b)):
                h = conv_bn(h, conv, bn, kernel, stride)
                h = npo.relu(h) if i < 2 else h
            if b.downsample:
                identity = conv_bn(identity, f"{b.prefix}.downsample.0", f"{b.prefix}.downsample.1", 1, b.stride)
            h = npo.relu(h + identity)
        return npo.dense(npo.global_avg_pool2d(h).reshape(1, -1), a["fc_weight"], a["fc_bias"])

    return forward


def work(blocks: Sequence[Block], base: int, size: int, classes: int) -> int:
    hw = flops.conv_out(size, 7, 2, 3)
    total = flops.conv2d(1, 3, base, (hw, hw), (7, 7))
    hw = flops.conv_out(hw, 3, 2, 1)
    for b in blocks:
        current = hw
        for _, _, cin, cout, kernel, stride in block_convs(b):
            current = flops.conv_out(current, kernel, stride, kernel // 2)
            total += flops.conv2d(1, cin, cout, (current, current), (kernel, kernel))
        if b.downsample:
            out = flops.conv_out(hw, 1, b.stride, 0)
            total += flops.conv2d(1, b.inplanes, b.outplanes, (out, out), (1, 1))
        hw = current
    return total + flops.dense(1, blocks[-1].outplanes, classes)


def weights(blocks: Sequence[Block], base: int, classes: int, seed: int) -> dict[str, np.ndarray]:
    """He-initialized convs; batch norms with random statistics near identity, the last of each
    block scaled down (as torchvision's zero_init_residual does, not to zero) so 16 residual
    additions keep activations in float16's range."""
    draw = seeded(seed)
    params: dict[str, np.ndarray] = {}

    def conv(name: str, cin: int, cout: int, kernel: int) -> None:
        params[relay_name(f"{name}.weight")] = draw(cout, cin, kernel, kernel, scale=(2.0 / (cin * kernel**2)) ** 0.5)

    def bn(name: str, channels: int, gain: float) -> None:
        params[relay_name(f"{name}.weight")] = gain * (1.0 + draw(channels, scale=0.1))
        params[relay_name(f"{name}.bias")] = draw(channels, scale=0.05)
        params[relay_name(f"{name}.running_mean")] = draw(channels, scale=0.05)
        params[relay_name(f"{name}.running_var")] = 1.0 + np.abs(draw(channels, scale=0.1))

    conv("conv1", 3, base, 7)
    bn("bn1", base, 1.0)
    for b in blocks:
        for conv_name, bn_name, cin, cout, kernel, _ in block_convs(b):
            conv(conv_name, cin, cout, kernel)
            bn(bn_name, cout, 0.2 if bn_name.endswith("bn3") else 1.0)
        if b.downsample:
            conv(f"{b.prefix}.downsample.0", b.inplanes, b.outplanes, 1)
            bn(f"{b.prefix}.downsample.1", b.outplanes, 1.0)
    params["fc_weight"] = draw(classes, blocks[-1].outplanes, scale=blocks[-1].outplanes ** -0.5)
    params["fc_bias"] = draw(classes, scale=0.1)
    return params


def torch_resnet(blocks: Sequence[Block], base: int, classes: int):  # type: ignore[no-untyped-def]  # torch is optional
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, b: Block) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(b.inplanes, b.width, 1, bias=False), nn.BatchNorm2d(b.width)
            self.conv2 = nn.Conv2d(b.width, b.width, 3, b.stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(b.width)
            self.conv3, self.bn3 = nn.Conv2d(b.width, b.outplanes, 1, bias=False), nn.BatchNorm2d(b.outplanes)
            self.downsample = (nn.Sequential(nn.Conv2d(b.inplanes, b.outplanes, 1, b.stride, bias=False),
                                             nn.BatchNorm2d(b.outplanes)) if b.downsample else None)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.relu(self.bn1(self.conv1(x)))
            out = torch.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return torch.relu(out + (self.downsample(x) if self.downsample is not None else x))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            stages: dict[str, list[nn.Module]] = {}
            for b in blocks:
                stages.setdefault(b.prefix.split(".")[0], []).append(Bottleneck(b))
            for name, layer in stages.items():
                setattr(self, name, nn.Sequential(*layer))
            self.stage_names = list(stages)
            self.fc = nn.Linear(blocks[-1].outplanes, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
            for name in self.stage_names:
                x = getattr(self, name)(x)
            return self.fc(torch.flatten(x.mean(dim=(2, 3), keepdim=True), 1))

    return ResNet()


def build(dtype: str = "float32", layers: Sequence[int] = (3, 4, 6, 3), base: int = 64, size: int = 224,
          classes: int = 1000, seed: int = 4) -> Model:
    blocks = plan(layers, base)
    params = weights(blocks, base, classes, seed)
    inputs = {"x": seeded(seed + 1)(1, 3, size, size)}
    if dtype != "float32":
        params = {k: v.astype(dtype) for k, v in params.items()}
        inputs = {k: v.astype(dtype) for k, v in inputs.items()}

    def make_torch():  # type: ignore[no-untyped-def]  # torch is optional
        import torch

        module = torch_resnet(blocks, base, classes)
        load_weights(module, params, relay_name)
        return module.to(getattr(torch, dtype))

    suffix = "" if dtype == "float32" else "_fp16"
    depth = 2 + 3 * sum(layers)
    title = f"ResNet-{depth} 1x3x{size}x{size}" + (" float16" if dtype == "float16" else "")
    return Model(f"resnet{depth}{suffix}", title, dtype,
                 relay(blocks, base, size, classes, dtype), inputs, params, work(blocks, base, size, classes),
                 make_forward(blocks), make_torch,
                 unsupported={"numpy": NUMPY_FP16} if dtype == "float16" else {})
