"""Sorting: sort, argsort and topk along one axis.

TVM sorts each row with a stable sort (`std::stable_sort`, and topk's heap breaks ties by
index), in ascending or descending order, so equal elements keep their input order in both
directions: the lower index comes first. The indices and the order of ties are part of the
result, so the loops and the reference must agree on them exactly.

Loops: one kernel for all three ops. Every element's place in its sorted row is its *rank*: the
number of elements that come before it, i.e. compare strictly before it or are equal and have a
lower index. Counting ranks is quadratic in the row length but needs no data-dependent loop, is
stable by construction and lets topk simply skip the elements ranked k or later. NaN has no
place in such an order (TVM's comparison sort leaves it unspecified too); domains avoid it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, TupleType, Type, flatten_tensor_types
from compiler.ops.common import check_arity, normalize_axis, rows_unless_axis_zero, tensor_arg
from compiler.ops.domain import FLOAT_DTYPES, INT_DTYPES, Domain, Draw
from compiler.ops.kernels.common import buffer_dims, input_buffers, unflatten
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as RuleDim
from compiler.ops.shape_rules import ShapeArg, dims, same_shape_rule
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext, TensorView
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, Store, seq

F32 = "float32"
INDEX_DTYPES = ("int32", "int64")
# Comparisons (rows x length^2) below which the sort runs on one core.
PARALLEL_MIN_WORK = 1 << 15


# --- reference ------------------------------------------------------------------------------------


def stable_order(data: np.ndarray, axis: int, ascend: bool) -> np.ndarray:
    """The indices that sort `data` along `axis`, ties in input order in both directions.

    A descending stable order is the ascending stable order of the reversed row, reversed again
    (no negation, which would overflow the lowest integer and wrap unsigned ones).
    """
    if ascend:
        return np.argsort(data, axis=axis, kind="stable")
    order = np.argsort(np.flip(data, axis), axis=axis, kind="stable")
    return data.shape[axis] - 1 - np.flip(order, axis)


def _sort_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data = a[0]
    axis = normalize_axis(attrs["axis"], data.ndim, "sort")
    return np.take_along_axis(data, stable_order(data, axis, attrs["is_ascend"]), axis)


def _argsort_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data = a[0]
    axis = normalize_axis(attrs["axis"], data.ndim, "argsort")
    return stable_order(data, axis, attrs["is_ascend"]).astype(attrs["dtype"])


def _topk_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray | tuple[np.ndarray, ...]:
    data = a[0]
    axis = normalize_axis(attrs["axis"], data.ndim, "topk")
    k = topk_count(attrs["k"], data.shape[axis])
    order = np.take(stable_order(data, axis, attrs["is_ascend"]), np.arange(k), axis=axis)
    values = np.take_along_axis(data, order, axis)
    indices = order.astype(attrs["dtype"])
    return {"both": (values, indices), "values": values, "indices": indices}[attrs["ret_type"]]


# --- type relations -------------------------------------------------------------------------------


def _sort_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "sort")
    data = tensor_arg(types, 0, "sort")
    normalize_axis(attrs["axis"], data.ndim, "sort")
    return data


def _check_index_dtype(dtype: str, op: str) -> None:
    if dtype in ("", "bool"):
        raise TypeRelationError(f"{op}: dtype {dtype!r} cannot hold indices")


def _argsort_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "argsort")
    data = tensor_arg(types, 0, "argsort")
    normalize_axis(attrs["axis"], data.ndim, "argsort")
    _check_index_dtype(attrs["dtype"], "argsort")
    return TensorType(data.shape, attrs["dtype"])


def topk_count(k: int, length: int) -> int:
    """The number of elements topk keeps: k, or the whole axis when k < 1."""
    return length if k < 1 else k


def _topk_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "topk"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    axis = normalize_axis(attrs["axis"], data.ndim, op)
    _check_index_dtype(attrs["dtype"], op)
    k, length = attrs["k"], data.shape[axis]
    if k >= 1 and length is not ANY and k > length:  # type: ignore[operator]  # an int here
        raise TypeRelationError(f"{op}: k={k} is larger than axis {axis} of {data} ({length} elements)")
    shape: list[Dim] = list(data.shape)
    shape[axis] = length if k < 1 else k
    values, indices = TensorType(tuple(shape), data.dtype), TensorType(tuple(shape), attrs["dtype"])
    ret_type = attrs["ret_type"]
    if ret_type == "both":
        return TupleType((values, indices))
    if ret_type == "values":
        return values
    if ret_type == "indices":
        return indices
    raise TypeRelationError(f'{op}: ret_type must be "both", "values" or "indices", got "{ret_type}"')


def _topk_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """data's dims with `k` along the axis (the whole axis for k < 1), once per result."""
    data = dims(inputs[0], "data")
    axis = normalize_axis(attrs["axis"], len(data), "topk")
    k = int(attrs["k"])
    shape = (*data[:axis], data[axis] if k < 1 else k, *data[axis + 1 :])
    return [shape for _ in flatten_tensor_types(out_type)]


# --- loops ----------------------------------------------------------------------------------------


def rank_sort_loops(
    ctx: KernelContext,
    data: te.Buffer,
    values: te.Buffer | None,
    indices: te.Buffer | None,
    axis: int,
    ascend: bool,
    k: int,
    epilogue: Epilogue,
) -> Stmt:
    """Store the first `k` elements of every sorted row of `data` (along normalized `axis`) into
    `values` and their positions into `indices` (either may be None)."""
    dims = buffer_dims(data)
    outer_dims, length, inner_dims = dims[:axis], dims[axis], dims[axis + 1 :]
    outer = int(np.prod(outer_dims, dtype=np.int64))
    inner = int(np.prod(inner_dims, dtype=np.int64))
    if outer * inner * length == 0 or k == 0:
        return seq()
    zero = te.const(0)
    t = ctx.var("row")
    row_vars = [ctx.var("i") for _ in outer_dims]
    col_vars = [ctx.var("j") for _ in inner_dims]
    lets = [
        *zip(row_vars, unflatten(t // inner, outer_dims)),
        *zip(col_vars, unflatten(t % inner, inner_dims)),
    ]

    def at(pos: te.PrimExpr) -> tuple[te.PrimExpr, ...]:
        return (*row_vars, pos, *col_vars)

    elem, other = ctx.var("e"), ctx.var("o")
    rank = te.Buffer(ctx.fresh("rank"), (1,), "int32", scope="local")
    mine, theirs = data[at(elem)], data[at(other)]
    strictly = theirs < mine if ascend else theirs > mine
    before = te.logical_or(strictly, te.logical_and(te.eq(theirs, mine), other < elem))
    count = For(other, zero, te.const(length), Store(rank, (zero,), rank[zero] + te.cast("int32", before)))
    place = rank[zero]
    stores: list[Stmt] = []
    if values is not None:
        stores.append(Store(values, at(place), te.cast(values.dtype, epilogue(mine, at(place)))))
    if indices is not None:
        index = te.cast(indices.dtype, elem)
        stores.append(Store(indices, at(place), te.cast(indices.dtype, epilogue(index, at(place)))))
    keep: Stmt = seq(*stores) if k >= length else IfThenElse(place < k, seq(*stores))
    per_elem = Allocate(rank, seq(Store(rank, (zero,), zero), count, keep))
    body: Stmt = For(elem, zero, te.const(length), per_elem)
    for var, value in reversed(lets):
        body = LetStmt(var, value, body)
    rows = outer * inner
    big = rows > 1 and rows * length * length >= PARALLEL_MIN_WORK
    return For(t, zero, te.const(rows), body, ForKind.PARALLEL if ctx.parallel and big else ForKind.SERIAL)


def _kernel_buffers(out: object, count: int, op: str) -> tuple[te.Buffer, ...]:
    buffers = out if isinstance(out, tuple) else (out,)
    if len(buffers) != count or not all(isinstance(b, te.Buffer) for b in buffers):
        raise ValueError(f"{op}: the kernel expects {count} output buffer(s), got {out!r}")
    return buffers  # type: ignore[return-value]  # checked above


def _sort_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    (data,) = input_buffers(inputs, "sort")
    axis = normalize_axis(attrs["axis"], len(data.shape), "sort")
    (values,) = _kernel_buffers(out, 1, "sort")
    length = buffer_dims(data)[axis]
    return rank_sort_loops(ctx, data, values, None, axis, attrs["is_ascend"], length, epilogue)


def _argsort_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    (data,) = input_buffers(inputs, "argsort")
    axis = normalize_axis(attrs["axis"], len(data.shape), "argsort")
    (indices,) = _kernel_buffers(out, 1, "argsort")
    length = buffer_dims(data)[axis]
    return rank_sort_loops(ctx, data, None, indices, axis, attrs["is_ascend"], length, epilogue)


def _topk_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: object, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    (data,) = input_buffers(inputs, "topk")
    axis = normalize_axis(attrs["axis"], len(data.shape), "topk")
    k = topk_count(attrs["k"], buffer_dims(data)[axis])
    ret_type = attrs["ret_type"]
    values = indices = None
    if ret_type == "both":
        values, indices = _kernel_buffers(out, 2, "topk")
    elif ret_type == "values":
        (values,) = _kernel_buffers(out, 1, "topk")
    else:
        (indices,) = _kernel_buffers(out, 1, "topk")
    return rank_sort_loops(ctx, data, values, indices, axis, attrs["is_ascend"], k, epilogue)


# --- domains --------------------------------------------------------------------------------------


def _sortable(d: Draw) -> tuple[TensorType, dict[str, object], Sample]:
    """A tensor to sort, an axis, and value ranges that make ties likely half the time."""
    shape = d.shape(1, 3, 1, 6)
    dtype = d.dtype((F32, *FLOAT_DTYPES, *INT_DTYPES))
    attrs: dict[str, object] = {"axis": d.axis(len(shape)), "is_ascend": d.boolean()}
    # Small integer ranges give many ties; a float range of width 0 makes every element equal.
    ranges = d.choice((Sample(()), Sample((), int_high=2), Sample((), low=0.0, high=0.0)))
    return TensorType(shape, dtype), attrs, ranges


def _with(ranges: Sample, inputs: tuple[object, ...], attrs: dict[str, object]) -> Sample:
    return Sample(inputs, attrs, low=ranges.low, high=ranges.high, int_high=ranges.int_high)


def _sort_domain(d: Draw) -> Sample:
    ty, attrs, ranges = _sortable(d)
    return _with(ranges, (ty,), attrs)


def _argsort_domain(d: Draw) -> Sample:
    ty, attrs, ranges = _sortable(d)
    attrs["dtype"] = d.choice(INDEX_DTYPES)
    return _with(ranges, (ty,), attrs)


def _topk_domain(d: Draw) -> Sample:
    ty, attrs, ranges = _sortable(d)
    length = ty.shape[normalize_axis(attrs["axis"], ty.ndim, "topk")]
    assert isinstance(length, int)
    attrs["k"] = d.choice((1, 0, -1, length, d.integer(1, length)))
    attrs["ret_type"] = d.choice(("both", "values", "indices"))
    attrs["dtype"] = d.choice(INDEX_DTYPES)
    return _with(ranges, (ty,), attrs)


# --- registrations --------------------------------------------------------------------------------

register(
    OpDef(
        name="sort",
        num_inputs=1,
        type_rel=_sort_rel,
        pattern=OpPattern.OPAQUE,
        reference=_sort_reference,
        shape_func=same_shape_rule,
        attrs=(AttrSpec("axis", "int", -1), AttrSpec("is_ascend", "bool", True)),
        kernel=_sort_kernel,
        domain=Domain(draw=_sort_domain),
        samples=(
            Sample((TensorType((3, 5), F32),)),
            Sample((TensorType((4, 3, 2), "int32"),), {"axis": 1, "is_ascend": False}, int_high=3),
            Sample((TensorType((2, 6), "float16"),), {"axis": 0}),
            Sample((TensorType((7,), "uint8"),), {"is_ascend": False}, int_high=2),
            Sample((TensorType((2, 4), "float64"),), {"axis": -1}, low=0.0, high=0.0),
        ),
    )
)

register(
    OpDef(
        name="argsort",
        num_inputs=1,
        type_rel=_argsort_rel,
        pattern=OpPattern.OPAQUE,
        reference=_argsort_reference,
        shape_func=same_shape_rule,
        attrs=(
            AttrSpec("axis", "int", -1),
            AttrSpec("is_ascend", "bool", True),
            AttrSpec("dtype", "dtype", "int32"),
        ),
        kernel=_argsort_kernel,
        domain=Domain(draw=_argsort_domain),
        samples=(
            Sample((TensorType((3, 5), F32),)),
            # Ties in both directions keep the lower index first.
            Sample((TensorType((4, 6), "int8"),), {"is_ascend": False}, int_high=3),
            Sample((TensorType((4, 6), "int64"),), {"axis": 0}, int_high=2),
            Sample((TensorType((2, 3, 4), F32),), {"axis": 1, "dtype": "int64"}),
            Sample((TensorType((5,), F32),), {"is_ascend": False, "dtype": "float32"}, low=1.0, high=1.0),
        ),
    )
)

register(
    OpDef(
        name="topk",
        num_inputs=1,
        type_rel=_topk_rel,
        pattern=OpPattern.OPAQUE,
        reference=_topk_reference,
        shape_func=_topk_shape_rule,
        attrs=(
            AttrSpec("k", "int", 1),
            AttrSpec("axis", "int", -1),
            AttrSpec("ret_type", "str", "both"),
            AttrSpec("is_ascend", "bool", False),
            AttrSpec("dtype", "dtype", "int32"),
        ),
        kernel=_topk_kernel,
        # Rows along axis 0 are sorted apart when the sort runs along another axis.
        extras={"batch_rows": rows_unless_axis_zero},
        domain=Domain(draw=_topk_domain),
        samples=(
            Sample((TensorType((3, 5), F32),), {"k": 2}),
            Sample((TensorType((4, 6), "int32"),), {"k": 3, "is_ascend": True}, int_high=3),
            Sample((TensorType((5, 3), F32),), {"k": 0, "axis": 0, "ret_type": "values"}),
            Sample(
                (TensorType((2, 7), "uint8"),), {"k": 4, "ret_type": "indices", "dtype": "int64"}, int_high=2
            ),
            Sample((TensorType((2, 3, 4), "float16"),), {"k": 3, "axis": 1}),
        ),
    )
)
