"""Shape rules: how an operator's result shape follows from its inputs' shapes at run time.

Every op declares one beside its type relation (`OpDef.shape_func`). Where the type relation
works on the dims it knows at compile time, a shape rule works on dims that are only known when
the model runs: it maps each input's dims, given as int64 loop-level expressions (loads from the
shape buffers of the shape function compiler/backend/shape_func.py builds), to the dims of each
result tensor. TVM registers the same thing as a hybrid-script shape function per op.

Rule contract: `rule(inputs, attrs, out_type) -> [dims of each result tensor]`, where each input
is a tuple of int64 PrimExprs (a tensor's dims), a list of those (a tuple-typed argument), or,
for ops declared `shape_data_dependent` (TVM's data-dependent mode: the result shape depends on
values, as with `arange` or `dyn.reshape`), a TensorView of the argument's data. `out_type` is
the call's inferred type, with `?` where the type relation could not know a dim: a rule may
return the static dims of `out_type` as they are and compute only the others. Dims may be
PrimExprs or Python ints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Union

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, TensorType, TupleType, Type, flatten_tensor_types
from compiler.ops.layout import Layout, parse_layout
from compiler.tir import expr as te
from compiler.tir.compute import TensorView

Dim = Union[te.PrimExpr, int]
Dims = tuple[te.PrimExpr, ...]
ShapeValue = Union[Dims, list["ShapeValue"]]
ShapeArg = Union[Dims, list["ShapeValue"], TensorView]
ShapeRule = Callable[[Sequence[ShapeArg], Attrs, Type], Sequence[Sequence[Dim]]]


class ShapeRuleError(Exception):
    """A rule was applied to arguments it cannot describe (a bug in the caller or the rule)."""


def dims(value: ShapeArg, what: str = "argument") -> Dims:
    """The dims of a tensor argument."""
    if not isinstance(value, tuple):
        raise ShapeRuleError(f"the shape rule expects a tensor {what}")
    return value


def fields(value: ShapeArg, what: str = "argument") -> list[Dims]:
    """The dims of each field of a tuple argument."""
    if not isinstance(value, list) or not all(isinstance(f, tuple) for f in value):
        raise ShapeRuleError(f"the shape rule expects a tuple of tensors as {what}")
    return value  # type: ignore[return-value]  # checked above


def int64(value: Dim) -> te.PrimExpr:
    return te.cast("int64", te.as_expr(value))


def known(out_type: Type, index: int = 0) -> tuple[int | None, ...]:
    """The dims of result `index` that the type relation knew (None where it wrote `?`)."""
    ty = flatten_tensor_types(out_type)[index]
    return tuple(None if d is ANY else int(d) for d in ty.shape)  # type: ignore[arg-type]  # ANY checked


def fill(out_type: Type, computed: Sequence[Dim], index: int = 0) -> tuple[Dim, ...]:
    """`computed`, except where the type relation knew the dim: then that constant. The
    constant is as right as the computation and keeps the shape function small."""
    static = known(out_type, index)
    if len(static) != len(computed):
        raise ShapeRuleError(f"the shape rule gave {len(computed)} dims for a result of rank {len(static)}")
    return tuple(c if s is None else s for s, c in zip(static, computed))


def product(values: Sequence[Dim]) -> te.PrimExpr:
    out: te.PrimExpr = te.const(1, "int64")
    for v in values:
        out = out * int64(v)
    return out


def ceil_div(a: Dim, b: Dim) -> te.PrimExpr:
    return (int64(a) + int64(b) - 1) // int64(b)


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def window_count(
    size: Dim, pad_total: Dim, kernel: Dim, stride: int, dilation: int = 1, ceil_mode: bool = False
) -> te.PrimExpr:
    """Window positions along one axis of a convolution or pool (the type relations' formula,
    compiler/ops/window.py): floor((size + pads - span) / stride) + 1, with the division
    rounded up in ceil mode."""
    span = (int64(kernel) - 1) * dilation + 1
    room = int64(size) + int64(pad_total) - span
    if ceil_mode:
        room = room + (stride - 1)
    return room // stride + 1


def layout_dims(shape: Sequence[Dim], src: Layout, dst: Layout) -> tuple[Dim, ...]:
    """`transform_shape` on run-time dims: a split axis counts its blocks times its factor,
    then splits again where `dst` splits it. The relation has checked the factors divide."""
    totals: dict[str, Dim] = {}
    for letter in src.primal:
        outer = shape[src.index(letter)]
        factor = src.factor(letter)
        totals[letter] = outer if factor is None else int64(outer) * factor
    out: list[Dim] = []
    for letter, factor in dst.axes:
        split = dst.factor(letter)
        if factor is not None:
            out.append(factor)
        elif split is None:
            out.append(totals[letter])
        else:
            out.append(int64(totals[letter]) // split)
    return tuple(out)


def relaid_out(
    shape: Sequence[Dim], layout: str, replaced: Mapping[str, Dim], out_layout: str, op: str
) -> tuple[Dim, ...]:
    """`shape`, laid out as `layout`, with the dims of the primal axes named in `replaced`
    (letters such as "H", "W") changed, then laid out as `out_layout` ("" keeps `layout`).
    The axes are located by name, so any permutation or blocked form (NCHW8c) works."""
    src = parse_layout(layout, op)
    out = list(shape)
    for letter, dim in replaced.items():
        out[src.index(letter)] = dim
    dst = parse_layout(out_layout or layout, op)
    return tuple(out) if dst.axes == src.axes else layout_dims(out, src, dst)


def layout_axis(shape: Sequence[Dim], layout: str, letter: str, op: str) -> Dim:
    """The dim of primal axis `letter` in `shape`, laid out as `layout`."""
    return shape[parse_layout(layout, op).index(letter)]


def conv_output_dim(size: Dim, kernel: Dim, pad_before: Dim, pad_after: Dim, stride: int, dilation: int) -> te.PrimExpr:
    """`window_count` with the padding given per side (the form qnn attributes take)."""
    return window_count(size, int64(pad_before) + int64(pad_after), kernel, stride, dilation)


# -- generic rules -----------------------------------------------------------------------------


def broadcast_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[Dims]:
    """numpy broadcasting of every input's dims: along each (right-aligned) axis, a dim of 1
    gives way to the other operand's dim."""
    shapes = [dims(x) for x in inputs]
    return [broadcast_dims(shapes)]


def _is_one(d: te.PrimExpr) -> bool:
    return isinstance(d, te.Const) and d.value == 1


def _same(a: te.PrimExpr, b: te.PrimExpr) -> bool:
    return a is b or (isinstance(a, te.Const) and isinstance(b, te.Const) and a.value == b.value)


def broadcast_dims(shapes: Sequence[Sequence[Dim]]) -> Dims:
    rank = max((len(s) for s in shapes), default=0)
    out: list[te.PrimExpr] = []
    for axis in range(rank):
        along = [int64(s[len(s) - rank + axis]) for s in shapes if len(s) - rank + axis >= 0]
        dim = along[0]
        for other in along[1:]:
            # A dim meeting 1 is itself: kept plain, a `?` batch broadcast against a bias stays
            # the batch's variable, which the kernels' shapes compare structurally (a select
            # here had kept a residual add out of its convolution's store).
            if _is_one(other) or _same(dim, other):
                continue
            dim = other if _is_one(dim) else te.select(te.eq(dim, 1), other, dim)
        out.append(dim)
    return tuple(out)


def same_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[Dims]:
    """The result has the first input's shape."""
    return [dims(inputs[0])]


def static_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """The result shape follows from the attributes alone, so the type relation always knows
    it (creation ops such as `zeros` with a `shape` attribute)."""
    out: list[tuple[Dim, ...]] = []
    for i, ty in enumerate(flatten_tensor_types(out_type)):
        static = known(out_type, i)
        if any(d is None for d in static):
            raise ShapeRuleError(f"a static-shape rule met the result type {ty}")
        out.append(tuple(d for d in static if d is not None))
    return out


def tuple_result(out_type: Type) -> bool:
    return isinstance(out_type, TupleType)


def tensor_type(out_type: Type) -> TensorType:
    if not isinstance(out_type, TensorType):
        raise ShapeRuleError(f"the shape rule expects a tensor result, got {out_type}")
    return out_type
