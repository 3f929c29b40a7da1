"""The benchmark's models by name: full size for `python -m bench`, tiny for the tests."""

from __future__ import annotations

from collections.abc import Callable

from bench.models import cnn, gpt2, mlp, resnet, transformer
from bench.models.model import Model

MODELS: dict[str, Callable[[], Model]] = {
    "mlp_b64": lambda: mlp.build(batch=64),
    "mlp_b1": lambda: mlp.build(batch=1),
    "cnn": cnn.build,
    "transformer": transformer.build,
    "resnet50": lambda: resnet.build("float32"),
    "resnet50_fp16": lambda: resnet.build("float16"),
    "gpt2": gpt2.build,
}

# The same architectures on shapes that build and run in a second or two.
TINY: dict[str, Callable[[], Model]] = {
    "mlp_b64": lambda: mlp.build(batch=4, features=16, hidden=8, classes=3),
    "mlp_b1": lambda: mlp.build(batch=1, features=16, hidden=8, classes=3),
    "cnn": lambda: cnn.build(size=16),
    "transformer": lambda: transformer.build(seq=8, dim=16, heads=2, ff=32),
    "resnet50": lambda: resnet.build("float32", layers=(1, 1, 1, 1), base=4, size=32, classes=10),
    "resnet50_fp16": lambda: resnet.build("float16", layers=(1, 1, 1, 1), base=4, size=32, classes=10),
    "gpt2": lambda: gpt2.build(seq=4, dim=16, heads=2, ff=32, layers=2, vocab=50, positions=8),
}


def get(name: str, tiny: bool = False) -> Model:
    table = TINY if tiny else MODELS
    if name not in table:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(table)}")
    return table[name]()
