"""Inputs made up for a run that was given none (`relaycc run --fill-mode`, as `tvmc run` has):
measuring a model needs no .npz file."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.backend.interface_c import TensorInfo
from compiler.diagnostics import InputError

FILL_MODES = ("random", "zeros", "ones")


def fill_inputs(inputs: Sequence[TensorInfo], mode: str, seed: int = 0) -> dict[str, np.ndarray]:
    """An array for every input: uniform in [0, 1) (integers in [0, 10), booleans at random) for
    `random`, else all zeros or all ones. A `?` dim has no size to fill; it needs real inputs."""
    if mode not in FILL_MODES:
        raise InputError(f"unknown fill mode {mode!r}; use one of {', '.join(FILL_MODES)}")
    rng = np.random.default_rng(seed)
    arrays = {}
    for info in inputs:
        if any(not isinstance(d, int) or d < 0 for d in info.shape):
            dims = ", ".join("?" if not isinstance(d, int) or d < 0 else str(d) for d in info.shape)
            raise InputError(f"input {info.name} has a dim known only at run time ({dims}); give --inputs")
        dtype = np.dtype(info.dtype)
        if mode == "zeros":
            arrays[info.name] = np.zeros(info.shape, dtype)
        elif mode == "ones":
            arrays[info.name] = np.ones(info.shape, dtype)
        elif dtype.kind == "b":
            arrays[info.name] = rng.random(info.shape) < 0.5
        elif dtype.kind in "iu":
            arrays[info.name] = rng.integers(0, 10, info.shape).astype(dtype)
        else:
            arrays[info.name] = rng.random(info.shape).astype(dtype)
    return arrays
