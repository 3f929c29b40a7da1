"""A small CNN on [1, 3, size, size]: conv 3->32 3x3 stride 2 + relu, conv 32->64 3x3 + relu,
max_pool 2x2, conv 64->128 3x3 + relu, global average pool, dense 128->10, softmax. Every conv
pads by 1 and has a bias."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from bench import flops
from bench.models import numpy_ops as npo
from bench.models.model import Model, RelayWriter, load_weights, seeded

# (name, in channels, out channels, stride) of each conv; each is followed by relu.
CONVS = [("conv1", 3, 32, 2), ("conv2", 32, 64, 1), ("conv3", 64, 128, 1)]
CLASSES = 10


def relay_name(torch_key: str) -> str:
    return torch_key.replace(".", "_")


def relay(size: int) -> str:
    r = RelayWriter("float32")
    h = r.param("x", (1, 3, size, size))
    weights = []
    for name, cin, cout, _ in CONVS:
        weights.append((r.param(f"{name}_weight", (cout, cin, 3, 3)), r.param(f"{name}_bias", (cout,))))
    fc_w, fc_b = r.param("fc_weight", (CLASSES, CONVS[-1][2])), r.param("fc_bias", (CLASSES,))
    for (name, _, cout, stride), (w, b) in zip(CONVS, weights):
        h = r.let(f"nn.conv2d({h}, {w}, strides=[{stride}, {stride}], padding=[1, 1, 1, 1], channels={cout}, "
                  f"kernel_size=[3, 3])")
        h = r.let(f"nn.relu(nn.bias_add({h}, {b}))")
        if name == "conv2":
            h = r.let(f"nn.max_pool2d({h}, pool_size=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0])")
    h = r.let(f"nn.batch_flatten(nn.global_avg_pool2d({h}))")
    h = r.let(f"nn.bias_add(nn.dense({h}, {fc_w}, units={CLASSES}), {fc_b}, axis=-1)")
    return r.text(f"nn.softmax({h}, axis=-1)", f"small CNN on 1x3x{size}x{size}")


def forward(a: Mapping[str, np.ndarray]) -> np.ndarray:
    h = a["x"]
    for name, _, _, stride in CONVS:
        h = npo.relu(npo.bias_nchw(npo.conv2d(h, a[f"{name}_weight"], stride, 1), a[f"{name}_bias"]))
        if name == "conv2":
            h = npo.max_pool2d(h, 2, 2)
    h = npo.global_avg_pool2d(h).reshape(1, -1)
    return npo.softmax(npo.dense(h, a["fc_weight"], a["fc_bias"]))


def work(size: int) -> int:
    total, hw = 0, size
    for name, cin, cout, stride in CONVS:
        hw = flops.conv_out(hw, 3, stride, 1)
        total += flops.conv2d(1, cin, cout, (hw, hw), (3, 3))
        if name == "conv2":
            hw = flops.conv_out(hw, 2, 2, 0)
    return total + flops.dense(1, CONVS[-1][2], CLASSES)


def build(size: int = 224, seed: int = 2) -> Model:
    draw = seeded(seed)
    inputs = {"x": draw(1, 3, size, size)}
    params: dict[str, np.ndarray] = {}
    for name, cin, cout, _ in CONVS:
        params[f"{name}_weight"] = draw(cout, cin, 3, 3, scale=(2.0 / (cin * 9)) ** 0.5)
        params[f"{name}_bias"] = draw(cout, scale=0.1)
    params["fc_weight"] = draw(CLASSES, CONVS[-1][2], scale=CONVS[-1][2] ** -0.5)
    params["fc_bias"] = draw(CLASSES, scale=0.1)

    def make_torch():  # type: ignore[no-untyped-def]  # torch is optional
        import torch
        from torch import nn

        class CNN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                for name, cin, cout, stride in CONVS:
                    setattr(self, name, nn.Conv2d(cin, cout, 3, stride, 1))
                self.fc = nn.Linear(CONVS[-1][2], CLASSES)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                x = torch.relu(self.conv1(x))
                x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2, 2)
                x = torch.relu(self.conv3(x)).mean(dim=(2, 3))
                return torch.softmax(self.fc(x), dim=-1)

        module = CNN()
        load_weights(module, params, relay_name)
        return module

    return Model("cnn", f"small CNN 1x3x{size}x{size}", "float32", relay(size), inputs, params, work(size), forward,
                 make_torch)
