"""Small helpers shared by the kernel builders."""

from __future__ import annotations

from collections.abc import Sequence

from compiler.tir import expr as te
from compiler.tir.compute import TensorView


def input_buffers(inputs: Sequence[TensorView], op: str) -> list[te.Buffer]:
    """The buffers behind a kernel's inputs (the lowering materializes every kernel input)."""
    buffers = []
    for i, view in enumerate(inputs):
        if view.buffer is None:
            raise ValueError(f"{op}: kernel input {i} is not materialized in a buffer")
        buffers.append(view.buffer)
    return buffers


def buffer_dims(buffer: te.Buffer) -> tuple[int, ...]:
    dims = buffer.shape
    if not all(isinstance(d, int) for d in dims):
        raise ValueError(f"buffer {buffer.name} has dynamic dims {dims}; kernels need static shapes")
    return tuple(int(d) for d in dims)  # type: ignore[arg-type]  # ints, checked above


def unflatten(flat: te.PrimExpr, dims: Sequence[int]) -> tuple[te.PrimExpr, ...]:
    """The row-major index into `dims` whose flattened position is `flat`."""
    if not dims:
        return ()
    out: list[te.PrimExpr] = []
    rest = flat
    for dim in reversed(dims[1:]):
        out.append(rest % dim)
        rest = rest // dim
    out.append(rest)
    return tuple(reversed(out))


def place(canonical: Sequence[te.PrimExpr], positions: Sequence[int]) -> tuple[te.PrimExpr, ...]:
    """A buffer index from coordinates in canonical order (N, C, H, W or O, I, H, W):
    coordinate k goes to dim `positions[k]` (see compiler.ops.layout.plain_positions)."""
    out: list[te.PrimExpr] = [te.const(0)] * len(canonical)
    for coord, pos in zip(canonical, positions):
        out[pos] = coord
    return tuple(out)


def canonical_dims(dims: Sequence[int], positions: Sequence[int]) -> tuple[int, ...]:
    return tuple(dims[p] for p in positions)
