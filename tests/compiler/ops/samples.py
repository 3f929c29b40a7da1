"""Input values for an operator's samples, shared by the generic op tests.

Every test that runs a sample draws the same inputs: the generator is seeded from the op's name
and the sample's position, so a failure reproduces and the reference and the compiled code see
identical arrays.
"""

from __future__ import annotations

import zlib

import numpy as np

from compiler.ir.types import TensorType, TupleType, Type, dtype_of
from compiler.ops.registry import OpDef, Sample


def sample_rng(op: OpDef, index: int) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{op.name}-{index}".encode()))


def random_tensor(ty: TensorType, sample: Sample, rng: np.random.Generator) -> np.ndarray:
    assert not ty.is_dynamic, f"sample input {ty} needs static dims to be generated"
    shape = tuple(d for d in ty.shape if isinstance(d, int))
    if ty.dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if np.dtype(ty.dtype).kind == "f":
        return np.asarray(rng.uniform(sample.low, sample.high, shape)).astype(ty.dtype)
    return np.asarray(rng.integers(0, sample.int_high, shape)).astype(ty.dtype)


def materialize(entry: object, sample: Sample, rng: np.random.Generator) -> tuple[object, Type]:
    """An input value and its type: arrays are used as given, types are filled randomly."""
    if isinstance(entry, np.ndarray):
        return entry, TensorType(entry.shape, dtype_of(entry))
    if isinstance(entry, TensorType):
        return random_tensor(entry, sample, rng), entry
    if isinstance(entry, (TupleType, tuple)):
        fields = entry.fields if isinstance(entry, TupleType) else entry
        parts = [materialize(f, sample, rng) for f in fields]
        return tuple(value for value, _ in parts), TupleType(tuple(ty for _, ty in parts))
    raise AssertionError(f"sample input {entry!r} is neither a type, a tuple nor an array")


def sample_inputs(op: OpDef, index: int) -> tuple[list[object], list[Type]]:
    """The values and types of sample `index` of `op`, drawn as every generic test draws them."""
    sample = op.samples[index]
    rng = sample_rng(op, index)
    parts = [materialize(entry, sample, rng) for entry in sample.inputs]
    return [value for value, _ in parts], [ty for _, ty in parts]
