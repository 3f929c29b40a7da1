"""What the importer knows of the small integer tensors a graph computes from shapes when some
dims are `?` (a model exported with a dynamic batch or sequence length): element by element,
either a number or "dim k of ONNX value T".

Exporters write `x.view(n, 2, c // 2, h, w)` as Shape → Gather → Unsqueeze → Concat → Reshape.
With every dim static that chain folds to a constant; with `n` dynamic it does not, and our
reshape takes its target as an attribute. Tracking the chain element-wise lets Reshape state
the target anyway: an element that is the data's own dim at the same position is Relay's 0
(copy that dim), and one element still unknown is -1. Only the ops such chains use are followed
(Shape, Gather, Unsqueeze, Squeeze, Concat, Slice, Cast, Identity, and the four integer
arithmetic ops, whose result on a run-time dim is an element known to be unknown); anything
else ends the trail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DimOf:
    """Dim `axis` of the ONNX value `tensor`, known only at run time."""

    tensor: str
    axis: int


# None: computed from a run-time dim by arithmetic (torch's `bsz * num_heads`); Reshape can
# still infer one such element.
Element = int | DimOf | None


@dataclass(frozen=True)
class ShapeValue:
    """A 0-d or 1-d integer tensor known element by element."""

    elements: tuple[Element, ...]
    rank: int

    def value(self, dtype: str) -> np.ndarray | None:
        """The tensor itself when every element is a number (a static dim picked out of a
        shape with `?` dims: Gather(Shape(x), 1) on x: (?, 16, 4, 4) is 16)."""
        if not all(isinstance(e, int) for e in self.elements):
            return None
        return np.array(self.elements, dtype=dtype).reshape(() if self.rank == 0 else (-1,))


# TensorProto's integer element types (onnx.proto: UINT8 2, INT8 3, ..., UINT64 13).
_INTEGER_TYPES = frozenset({2, 3, 4, 5, 6, 7, 12, 13})

# What a node's input is at import time: a value, a shape value, or nothing known.
Known = np.ndarray | ShapeValue | None


def _elements(known: Known) -> tuple[tuple[Element, ...], int] | None:
    if isinstance(known, ShapeValue):
        return known.elements, known.rank
    if isinstance(known, np.ndarray) and known.ndim <= 1 and known.dtype.kind in "iu":
        return tuple(int(v) for v in known.reshape(-1)), known.ndim
    return None


def _result(elements: Sequence[Element], rank: int) -> ShapeValue:
    return ShapeValue(tuple(elements), rank)


def of_shape(tensor: str, shape: Sequence[object], start: int, end: int) -> ShapeValue | None:
    """The output of Shape(tensor) (start/end already normalized) over a shape with `?` dims."""
    picked = [d if isinstance(d, int) else DimOf(tensor, axis) for axis, d in enumerate(shape)][start:end]
    return _result(picked, 1)


def _arithmetic(op_type: str, a: Element, b: Element) -> Element:
    if not (isinstance(a, int) and isinstance(b, int)):
        return None
    if op_type == "Div":
        if b == 0:
            return None
        quotient = abs(a) // abs(b)  # ONNX's integer Div truncates toward zero
        return quotient if (a < 0) == (b < 0) else -quotient
    return {"Add": a + b, "Sub": a - b, "Mul": a * b}[op_type]


def propagate(op_type: str, attrs: Mapping[str, object], inputs: Sequence[Known]) -> ShapeValue | None:
    """The output of one node on shape values, or None where it is not followed."""
    first = _elements(inputs[0]) if inputs else None
    if op_type in ("Add", "Sub", "Mul", "Div") and len(inputs) == 2:
        second = _elements(inputs[1])
        if first is None or second is None:
            return None
        (xs, rank_x), (ys, rank_y) = first, second
        if len(xs) != len(ys) and 1 not in (len(xs), len(ys)):
            return None
        length = max(len(xs), len(ys))
        xs, ys = (xs * length if len(xs) == 1 else xs), (ys * length if len(ys) == 1 else ys)
        return _result([_arithmetic(op_type, x, y) for x, y in zip(xs, ys)], max(rank_x, rank_y))
    if op_type == "Identity" or op_type == "Cast" and attrs.get("to") in _INTEGER_TYPES:
        # (A cast to float would make the arithmetic after it a float's.)
        return inputs[0] if isinstance(inputs[0], ShapeValue) else None
    if op_type == "Concat":
        joined: list[Element] = []
        for known in inputs:
            got = _elements(known)
            if got is None or got[1] != 1:
                return None
            joined += got[0]
        return _result(joined, 1)
    if first is None:
        return None
    elements, rank = first
    if op_type == "Gather" and rank == 1 and int(attrs.get("axis", 0)) in (0, -1):  # type: ignore[call-overload]
        indices = inputs[1] if len(inputs) > 1 else None
        if not isinstance(indices, np.ndarray) or indices.ndim > 1:
            return None
        picked = [elements[int(i)] for i in indices.reshape(-1)]
        return _result(picked, indices.ndim)
    if op_type == "Unsqueeze" and rank == 0:
        return _result(elements, 1)
    if op_type == "Squeeze" and rank == 1 and len(elements) == 1:
        return _result(elements, 0)
    if op_type == "Slice" and rank == 1 and all(isinstance(k, np.ndarray) for k in inputs[1:]):
        starts, ends = (int(np.asarray(k).reshape(-1)[0]) for k in inputs[1:3])
        step = int(np.asarray(inputs[4]).reshape(-1)[0]) if len(inputs) > 4 else 1
        return _result(elements[slice(starts, ends, step)], 1)
    return None


def reshape_target(target: ShapeValue, data: str, data_shape: Sequence[object]) -> tuple[int, ...] | None:
    """Reshape's newshape (with ONNX's allowzero=0 meaning of 0 and -1, which is Relay's) for a
    target known element by element, or None when more than one element stays unknown."""
    newshape: list[int | None] = []
    for position, element in enumerate(target.elements):
        if isinstance(element, int):
            newshape.append(element)
        elif element == DimOf(data, position) and position < len(data_shape):
            newshape.append(0)
        else:
            newshape.append(None)
    unknown = [k for k, e in enumerate(newshape) if e is None]
    if len(unknown) > 1 or (unknown and -1 in newshape):
        return None
    return tuple(-1 if e is None else e for e in newshape)
