"""What a converter sees of one ONNX node: its attributes, its inputs as typed expressions (and
as numpy values where they are constant), and a way to build typed calls of our operators."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from compiler import ops
from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx.shape_values import ShapeValue
from compiler.ir.expr import Call, Constant, Expr, Op, Tuple, TupleGetItem
from compiler.ir.types import TensorType
from compiler.passes.infer_type import infer_expr

# A converter's result: one expression per node output (a single one for one-output nodes).
Converted = Expr | Sequence[Expr]


@dataclass
class NodeContext:
    op_type: str
    name: str
    opset: int
    since: int
    attrs: Mapping[str, object]
    # Per input position: the expression, or None for an omitted optional input ("").
    inputs: Sequence[Expr | None]
    # Per input position: the value when it is known at import time (a constant or an
    # initializer), else None. Shape-like inputs (Reshape's shape, Slice's starts) need it.
    values: Sequence[np.ndarray | None]
    # Per input position: the ONNX value name ("" for an omitted optional input).
    input_names: Sequence[str]
    num_outputs: int
    # Converts a subgraph (an If branch, a Scan body) with its inputs bound to the given
    # expressions into the enclosing function; its outputs' expressions.
    inline_graph: Callable[[onnx.GraphProto, Sequence[Expr]], list[Expr]] | None = None
    # Per input position: what is known element by element of a shape computed from `?` dims
    # (compiler/frontend/onnx/shape_values.py), where the value itself is not known.
    shape_values: Sequence[ShapeValue | None] = field(default_factory=tuple)

    # -- attributes --

    def attr(self, name: str, default: object = None) -> object:
        return self.attrs.get(name, default)

    def int_attr(self, name: str, default: int) -> int:
        return int(self.attrs.get(name, default))  # type: ignore[call-overload]  # ONNX ints

    def ints_attr(self, name: str, default: Sequence[int] | None = None) -> list[int] | None:
        value = self.attrs.get(name)
        if value is None:
            return None if default is None else list(default)
        return [int(v) for v in value]  # type: ignore[union-attr]  # ONNX ints

    def float_attr(self, name: str, default: float) -> float:
        return float(self.attrs.get(name, default))  # type: ignore[arg-type]  # ONNX float

    def str_attr(self, name: str, default: str) -> str:
        return str(self.attrs.get(name, default))

    # -- inputs --

    def has_input(self, index: int) -> bool:
        return index < len(self.input_names) and bool(self.input_names[index])

    def input(self, index: int) -> Expr:
        expr = self.inputs[index] if index < len(self.inputs) else None
        if expr is None:
            raise self.unsupported(f"input {index} is required")
        return expr

    def value(self, index: int) -> np.ndarray | None:
        return self.values[index] if index < len(self.values) else None

    def shape_value(self, index: int) -> ShapeValue | None:
        return self.shape_values[index] if index < len(self.shape_values) else None

    def const_input(self, index: int, what: str) -> np.ndarray:
        """The value of an input that must be known at import time (a shape, axes, pads)."""
        value = self.value(index)
        if value is None:
            raise NeedsConstant(self.unsupported(
                f"{what} (input {index}, {self.input_names[index]!r}) must be a constant or an initializer"
            ).message, self.input_names[index])
        return value

    def type(self, index: int) -> TensorType:
        ty = self.input(index).checked_type
        if not isinstance(ty, TensorType):
            raise self.unsupported(f"input {index} is not a tensor")
        return ty

    def shape(self, index: int) -> tuple[object, ...]:
        return self.type(index).shape

    def static_shape(self, index: int) -> tuple[int, ...]:
        shape = self.shape(index)
        if not all(isinstance(d, int) for d in shape):
            raise self.unsupported(f"input {index} needs a static shape here, got {self.type(index)}")
        return shape  # type: ignore[return-value]  # checked above

    def rank(self, index: int) -> int:
        return len(self.shape(index))

    def dtype(self, index: int) -> str:
        return self.type(index).dtype

    # -- building --

    def op(self, name: str, *args: Expr, **attrs: object) -> Expr:
        """A typed call of our operator `name` (attrs completed by its defaults)."""
        call = Call(Op.get(name), args, ops.get(name).make_attrs(attrs))
        infer_expr(call)
        return call

    def item(self, tup: Expr, index: int) -> Expr:
        node = TupleGetItem(tup, index)
        infer_expr(node)
        return node

    def tuple(self, fields: Sequence[Expr]) -> Expr:
        node = Tuple(tuple(fields))
        infer_expr(node)
        return node

    def const(self, array: object, dtype: str | None = None) -> Constant:
        data = np.asarray(array, dtype=dtype)
        node = Constant(data)
        infer_expr(node)
        return node

    def scalar(self, value: float, dtype: str) -> Constant:
        return self.const(np.array(value, dtype=dtype))

    def unsupported(self, why: str) -> UnsupportedError:
        return UnsupportedError(f"ONNX {self.op_type} node {self.name!r} (opset {self.opset}): {why}")


class NeedsConstant(UnsupportedError):
    """An input our op takes as an attribute is computed at run time (or a graph input)."""

    def __init__(self, message: str, input_name: str):
        super().__init__(message)
        self.input_name = input_name


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis
