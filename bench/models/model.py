"""What every benchmark model provides, so that each peer runs the same computation on the same
seeded weights and inputs: Relay text for relaycc (weights are @main parameters, bound as
constants at build time), the arrays, a numpy forward, a torch module and the work in FLOPs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass
class Model:
    name: str
    title: str
    dtype: str
    relay: str
    inputs: dict[str, np.ndarray]
    # Keyed by Relay parameter name; bound as constants (relaycc's --params).
    params: dict[str, np.ndarray]
    flops: int
    # The numpy forward, on arrays named like the Relay parameters; float32 math.
    forward: Callable[[Mapping[str, np.ndarray]], np.ndarray]
    # A torch module with the same weights, in the model's dtype; it takes the inputs in order.
    make_torch: Callable[[], torch.nn.Module]
    # What a peer cannot run, with the reason (float16 on numpy, say).
    unsupported: dict[str, str] = field(default_factory=dict)

    def reference(self) -> np.ndarray:
        """The float32 result every peer is checked against (float16 arrays are widened first,
        so a float16 model's reference is exact math on its rounded weights; integer inputs such
        as token ids stay as they are)."""
        arrays = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in {**self.inputs, **self.params}.items()}
        return np.asarray(self.forward(arrays), dtype=np.float32)


def tensor_type(shape: Sequence[int], dtype: str) -> str:
    # One-dimensional shapes print as (500), as TVM prints them.
    return f"Tensor[({', '.join(str(d) for d in shape)}), {dtype}]"


class RelayWriter:
    """Builds @main one `%n = ...;` binding at a time, declaring parameters as they are used."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.signature: list[str] = []
        self.lines: list[str] = []

    def param(self, name: str, shape: Sequence[int], dtype: str | None = None) -> str:
        self.signature.append(f"%{name}: {tensor_type(shape, dtype or self.dtype)}")
        return f"%{name}"

    def let(self, expr: str) -> str:
        var = f"%{len(self.lines)}"
        self.lines.append(f"  {var} = {expr};")
        return var

    def text(self, result: str, comment: str) -> str:
        body = "\n".join(self.lines)
        params = ",\n          ".join(self.signature)
        return f'#[version = "0.0.5"]\n// {comment}\ndef @main({params}) {{\n{body}\n  {result}\n}}\n'


def seeded(seed: int) -> Callable[..., np.ndarray]:
    """A float32 normal sampler: `draw(*shape, scale=...)`."""
    rng = np.random.default_rng(seed)

    def draw(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return draw


def cast_all(arrays: Mapping[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    return {k: v.astype(dtype) for k, v in arrays.items()}


def load_weights(module: torch.nn.Module, params: Mapping[str, np.ndarray], relay_name: Callable[[str], str]) -> None:
    """Copies the params into the module's state (keys mapped to Relay names by `relay_name`);
    every parameter and buffer must be covered, except BatchNorm's step counter."""
    import torch

    state = module.state_dict()
    missing = [k for k in state if relay_name(k) not in params and not k.endswith("num_batches_tracked")]
    if missing:
        raise KeyError(f"no weights for {missing[:3]}")
    loaded = {k: torch.from_numpy(np.ascontiguousarray(params[relay_name(k)])) for k in state if relay_name(k) in params}
    module.load_state_dict(loaded, strict=False)
