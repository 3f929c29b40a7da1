"""Seed 001's MLP: x[batch, 800] -> dense 500 + bias + relu -> dense 10 + bias
(mlp_seed001.relay is the same model at batch 64, as the seed wrote it)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from bench import flops
from bench.models import numpy_ops as npo
from bench.models.model import Model, RelayWriter, load_weights, seeded

TORCH_NAMES = {"fc1.weight": "w1", "fc1.bias": "b1", "fc2.weight": "w2", "fc2.bias": "b2"}


def relay(batch: int, features: int, hidden: int, classes: int, dtype: str = "float32") -> str:
    r = RelayWriter(dtype)
    x = r.param("x", (batch, features))
    w1, b1 = r.param("w1", (hidden, features)), r.param("b1", (hidden,))
    w2, b2 = r.param("w2", (classes, hidden)), r.param("b2", (classes,))
    h = r.let(f"nn.dense({x}, {w1}, units=None)")
    h = r.let(f"nn.relu(nn.bias_add({h}, {b1}, axis=-1))")
    h = r.let(f"nn.dense({h}, {w2}, units=None)")
    return r.text(f"nn.bias_add({h}, {b2}, axis=-1)", f"seed 001's MLP at batch {batch}")


def forward(a: Mapping[str, np.ndarray]) -> np.ndarray:
    return npo.dense(npo.relu(npo.dense(a["x"], a["w1"], a["b1"])), a["w2"], a["b2"])


def build(batch: int = 64, features: int = 800, hidden: int = 500, classes: int = 10, seed: int = 1) -> Model:
    draw = seeded(seed)
    inputs = {"x": draw(batch, features)}
    params = {
        "w1": draw(hidden, features, scale=features**-0.5), "b1": draw(hidden, scale=0.1),
        "w2": draw(classes, hidden, scale=hidden**-0.5), "b2": draw(classes, scale=0.1),
    }

    def make_torch():  # type: ignore[no-untyped-def]  # torch is optional
        import torch

        class MLP(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc1 = torch.nn.Linear(features, hidden)
                self.fc2 = torch.nn.Linear(hidden, classes)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.fc2(torch.relu(self.fc1(x)))

        module = MLP()
        load_weights(module, params, TORCH_NAMES.__getitem__)
        return module

    work = flops.dense(batch, features, hidden) + flops.dense(batch, hidden, classes)
    return Model(f"mlp_b{batch}", f"MLP seed 001, batch {batch}", "float32", relay(batch, features, hidden, classes),
                 inputs, params, work, forward, make_torch)
