"""Index construction and index-driven ops: meshgrid, trilu, unravel_index, searchsorted,
sparse_to_dense, matrix_set_diag, adv_index and sliding_window.

Semantics are TVM's (the topi computes), which differ from numpy where noted:
* unravel_index divides and takes floor moduli from the last dim up, so an index past the end
  wraps around in the first coordinate instead of raising.
* searchsorted is TVM's binary search (lower bound, or upper bound with `right`), which on a
  sorted row is numpy's answer; the reference runs the same search so unsorted rows agree too.
* sparse_to_dense lets a later duplicate index win and ignores indices outside the output;
  with 0-D or 1-D sparse_indices only the first output coordinate is compared.
* matrix_set_diag reads a band of diagonals (k1 < k2) with TF's alignment rules; TVM's type
  relation checks almost nothing, ours requires the diagonal shape the compute reads.
* adv_index does not wrap negative indices (numpy does); domains draw indices in range.

Loops: computes over the output index, except searchsorted, whose search is a kernel: a loop
of bit_length(n) halving steps, each guarded by `lo < hi`, replaces TVM's while loop exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, TupleType, Type
from compiler.ops.broadcast import broadcast_index
from compiler.ops.common import (
    broadcast_shapes,
    check_arity,
    dims_equal,
    static_dims,
    tensor_arg,
)
from compiler.ops.domain import FLOAT_DTYPES, INT_DTYPES, Domain, Draw
from compiler.ops.kernels.common import buffer_dims, input_buffers, unflatten
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as RuleDim
from compiler.ops.shape_rules import (
    ShapeArg,
    broadcast_dims,
    ceil_div,
    dims,
    fields,
    fill,
    int64,
    same_shape_rule,
    static_rule,
)
from compiler.ops.transform import tuple_views
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, Index, KernelContext, TensorView
from compiler.tir.expr import Const, PrimExpr, cast, eq, logical_and, select
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, Stmt, Store, seq

F32 = "float32"
VALUE_DTYPES = (F32, *FLOAT_DTYPES, *INT_DTYPES)
INDEX_DTYPES = ("int32", "int64")


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _int_arg(types: Sequence[Type], index: int, op: str, what: str) -> TensorType:
    ty = tensor_arg(types, index, op)
    if not _is_int(ty.dtype):
        raise TypeRelationError(f"{op}: {what} must be an integer tensor, got {ty}")
    return ty


def _as_index(value: PrimExpr) -> PrimExpr:
    """A loaded index value as an int32 loop index."""
    return cast("int32", value)


def _tensor_fields(types: Sequence[Type], op: str) -> tuple[TensorType, ...]:
    check_arity(types, 1, op)
    arg = types[0]
    if not isinstance(arg, TupleType) or not arg.fields:
        raise TypeRelationError(f"{op} expects a non-empty tuple of tensors, got {arg}")
    if not all(isinstance(f, TensorType) for f in arg.fields):
        raise TypeRelationError(f"{op} expects a tuple of tensors, got {arg}")
    return tuple(arg.fields)  # type: ignore[arg-type]  # checked above


# --- meshgrid -------------------------------------------------------------------------------------


def _grid_source(i: int, count: int, indexing: str) -> int:
    """The input whose length is output dim `i` ("xy" swaps the first two)."""
    return 1 - i if indexing == "xy" and count >= 2 and i < 2 else i


def _meshgrid_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "meshgrid"
    fields = _tensor_fields(types, op)
    indexing = attrs["indexing"]
    if indexing not in ("ij", "xy"):
        raise TypeRelationError(f'{op}: indexing must be "ij" or "xy", got "{indexing}"')
    for ty in fields:
        if ty.dtype != fields[0].dtype:
            raise TypeRelationError(f"{op} needs tensors of one dtype, got {types[0]}")
        if ty.ndim > 1:
            raise TypeRelationError(f"{op} needs scalars or 1-D tensors, got {ty}")
    lengths = [ty.shape[0] if ty.ndim else 1 for ty in fields]
    shape = tuple(lengths[_grid_source(i, len(fields), indexing)] for i in range(len(fields)))
    return TupleType(tuple(TensorType(shape, fields[0].dtype) for _ in fields))


def _meshgrid(a: Sequence[object], attrs: Attrs) -> tuple[np.ndarray, ...]:
    fields = [np.asarray(x).reshape(-1) for x in a[0]]  # type: ignore[union-attr]  # a tuple argument
    return tuple(np.meshgrid(*fields, indexing=attrs["indexing"], copy=True))


def _meshgrid_compute(
    idx: Index, inputs: Sequence[object], attrs: Attrs, out_type: Type, *, out_index: int
) -> PrimExpr:
    fields = tuple_views(inputs, "meshgrid")
    view = fields[out_index]
    if view.ndim == 0:
        return view[()]
    return view[idx[_grid_source(out_index, len(fields), attrs["indexing"])]]


def _meshgrid_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """Every grid has one dim per input, its length (1 for a scalar), the first two swapped
    for "xy" indexing."""
    parts = fields(inputs[0], "tensors")
    lengths = [part[0] if part else 1 for part in parts]
    shape = tuple(lengths[_grid_source(i, len(parts), attrs["indexing"])] for i in range(len(parts)))
    return [shape for _ in parts]


def _meshgrid_domain(d: Draw) -> Sample:
    dtype = d.dtype(VALUE_DTYPES)
    count = d.integer(1, 4)
    shapes = [() if d.integer(0, 4) == 0 else (d.integer(1, 4),) for _ in range(count)]
    fields = tuple(TensorType(shape, dtype) for shape in shapes)
    return Sample((TupleType(fields),), {"indexing": d.choice(("ij", "xy"))})


register(
    OpDef(
        name="meshgrid",
        num_inputs=1,
        type_rel=_meshgrid_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_meshgrid,  # type: ignore[arg-type]  # a tuple argument
        shape_func=_meshgrid_shape_rule,
        attrs=(AttrSpec("indexing", "str", "ij"),),
        compute=_meshgrid_compute,
        domain=Domain(draw=_meshgrid_domain),
        samples=(
            Sample((TupleType((TensorType((3,), F32), TensorType((4,), F32))),)),
            Sample((TupleType((TensorType((3,), "int32"), TensorType((2,), "int32"))),), {"indexing": "xy"}),
            Sample(
                (TupleType((TensorType((2,), "int8"), TensorType((), "int8"), TensorType((3,), "int8"))),),
                {"indexing": "xy"},
            ),
            Sample((TupleType((TensorType((5,), "float16"),)),), {"indexing": "xy"}),
        ),
    )
)


# --- trilu ----------------------------------------------------------------------------------------


def _trilu_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "trilu"
    check_arity(types, 2, op)
    data = tensor_arg(types, 0, op)
    k = _int_arg(types, 1, op, "k")
    if k.ndim != 0:
        raise TypeRelationError(f"{op}: k must be a 0-D tensor, got {k}")
    if data.ndim < 2:
        raise TypeRelationError(f"{op} needs a matrix or a batch of matrices, got {data}")
    return data


def _trilu(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, k = a[0], int(a[1])
    return np.triu(data, k) if attrs["upper"] else np.tril(data, k)


def _trilu_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data, k = inputs
    row, col = idx[-2], idx[-1]
    # TVM compares in int32: upper keeps row <= col - k, lower keeps row >= col - k. Written
    # as `col - row` against k: gcc 12 -O3 -march=native miscompiles `row >= col - k`.
    offset, kk = col - row, cast("int32", k[()])
    keep = offset >= kk if attrs["upper"] else offset <= kk
    zero = Const(False, "bool") if data.dtype == "bool" else Const(0, data.dtype)
    return select(keep, data[tuple(idx)], zero)


def _trilu_domain(d: Draw) -> Sample:
    shape = d.shape(2, 4, 1, 5)
    k = np.array(d.choice((0, 1, -1, d.integer(-6, 6))), dtype=d.choice(INDEX_DTYPES))
    return Sample((TensorType(shape, d.dtype(VALUE_DTYPES)), k), {"upper": d.boolean()})


register(
    OpDef(
        name="trilu",
        num_inputs=2,
        type_rel=_trilu_rel,
        pattern=OpPattern.ELEMWISE,
        reference=_trilu,
        shape_func=same_shape_rule,
        attrs=(AttrSpec("upper", "bool", True),),
        compute=_trilu_compute,
        domain=Domain(draw=_trilu_domain),
        samples=(
            Sample((TensorType((4, 5), F32), np.array(0, "int32"))),
            Sample((TensorType((2, 3, 4), "int32"), np.array(1, "int64")), {"upper": False}),
            Sample((TensorType((3, 3), F32), np.array(-1, "int32")), {"upper": True}),
            Sample((TensorType((2, 4, 3), "uint8"), np.array(-2, "int32")), {"upper": False}),
            Sample((TensorType((3, 4), "float64"), np.array(9, "int32"))),
            # Square 5x5 and 6x6 matrices: gcc 12 -O3 -mavx2 miscompiled `row >= col - k` on these.
            Sample((TensorType((5, 5), F32), np.array(1, "int32")), {"upper": False}),
            Sample((TensorType((6, 6), "int32"), np.array(0, "int32")), {"upper": False}),
        ),
    )
)


# --- unravel_index --------------------------------------------------------------------------------


def _unravel_index_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "unravel_index"
    check_arity(types, 2, op)
    indices = _int_arg(types, 0, op, "indices")
    shape = _int_arg(types, 1, op, "shape")
    if indices.ndim > 1:
        raise TypeRelationError(f"{op}: indices must be a scalar or 1-D tensor, got {indices}")
    if shape.ndim != 1:
        raise TypeRelationError(f"{op}: shape must be a 1-D tensor, got {shape}")
    return TensorType((shape.shape[0], *indices.shape), indices.dtype)


def _unravel_index(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    indices, shape = a
    rest = indices.astype(np.int64)
    coords = []
    for extent in reversed(shape.astype(np.int64).tolist()):
        coords.append(rest % extent)
        rest = rest // extent
    if not coords:
        return np.zeros((0, *indices.shape), indices.dtype)
    return np.stack(coords[::-1]).astype(indices.dtype)


def _unravel_index_compute(
    idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type
) -> PrimExpr:
    indices, shape = inputs
    dtype = indices.dtype
    rank = static_dims(shape.shape, "unravel_index")[0]
    rest = indices[(idx[1],)] if indices.ndim else indices[()]
    value: PrimExpr = Const(0, dtype)
    for v in reversed(range(rank)):
        extent = cast(dtype, shape[(Const(v),)])
        value = select(eq(idx[0], v), rest % extent, value)
        rest = rest // extent
    return value


def _unravel_index_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """One row of coordinates per entry of `shape`, one column per index."""
    indices, shape = dims(inputs[0], "indices"), dims(inputs[1], "shape")
    return [fill(out_type, (shape[0], *indices))]


def _unravel_index_domain(d: Draw) -> Sample:
    dims = d.shape(1, 3, 1, 4)
    size = int(np.prod(dims))
    shape = np.array(dims, dtype=d.choice(INDEX_DTYPES))
    indices = TensorType(() if d.integer(0, 3) == 0 else (d.integer(1, 6),), d.choice(INDEX_DTYPES))
    # Now and then an index past the end: TVM wraps it in the first coordinate.
    return Sample((indices, shape), int_high=d.choice((size, size + 3)))


register(
    OpDef(
        name="unravel_index",
        num_inputs=2,
        type_rel=_unravel_index_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_unravel_index,
        shape_func=_unravel_index_shape_rule,
        compute=_unravel_index_compute,
        domain=Domain(draw=_unravel_index_domain),
        samples=(
            Sample((TensorType((5,), "int32"), np.array([3, 4, 2], "int32")), int_high=24),
            Sample((np.array(17, "int64"), np.array([3, 4, 2], "int64"))),
            Sample((np.array([0, 5, 7, 11], "int32"), np.array([2, 3], "int32"))),
        ),
    )
)


# --- searchsorted ---------------------------------------------------------------------------------


def _searchsorted_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "searchsorted"
    check_arity(types, 2, op)
    sequence = tensor_arg(types, 0, op)
    values = tensor_arg(types, 1, op)
    if values.ndim == 0:
        raise TypeRelationError(f"{op}: values must have rank 1 or more, got {values}")
    if sequence.ndim == 0:
        raise TypeRelationError(f"{op}: sorted_sequence must have rank 1 or more, got {sequence}")
    if sequence.dtype != values.dtype:
        raise TypeRelationError(
            f"{op} needs sorted_sequence and values of one dtype, got {sequence} and {values}"
        )
    if sequence.ndim > 1:
        if sequence.ndim != values.ndim:
            raise TypeRelationError(
                f"{op}: a multi-dimensional sorted_sequence {sequence} needs values of the same rank, "
                f"got {values}"
            )
        for k in range(values.ndim - 1):
            if not dims_equal(sequence.shape[k], values.shape[k]):
                raise TypeRelationError(f"{op}: {sequence} and {values} differ in outer dim {k}")
    if attrs["dtype"] in ("", "bool"):
        raise TypeRelationError(f"{op}: dtype {attrs['dtype']!r} cannot hold indices")
    return TensorType(values.shape, attrs["dtype"])


def _searchsorted(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    sequence, values = a
    length = sequence.shape[-1]
    rows = sequence.reshape(-1, length) if sequence.ndim > 1 else sequence.reshape(1, length)
    flat = values.reshape(-1)
    row_of = np.arange(flat.size) // values.shape[-1] if sequence.ndim > 1 else np.zeros(flat.size, np.int64)
    lo = np.zeros(flat.size, np.int64)
    hi = np.full(flat.size, length, np.int64)
    for _ in range(length.bit_length()):  # each step halves hi - lo, as TVM's while loop does
        active = lo < hi
        mid = lo + (hi - lo) // 2
        probe = rows[row_of, np.minimum(mid, max(length - 1, 0))] if length else flat
        go_right = probe <= flat if attrs["right"] else probe < flat
        lo = np.where(active & go_right, mid + 1, lo)
        hi = np.where(active & ~go_right, mid, hi)
    return lo.reshape(values.shape).astype(attrs["dtype"])


def _searchsorted_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    sequence, values = input_buffers(inputs, "searchsorted")
    seq_dims, value_dims = buffer_dims(sequence), buffer_dims(values)
    length, count = seq_dims[-1], int(np.prod(value_dims))
    if count == 0:
        return seq()
    zero = te.const(0)
    i = ctx.var("i")
    at = unflatten(i, value_dims)
    bounds = te.Buffer(ctx.fresh("bounds"), (2,), "int32", scope="local")  # lo, hi
    lo, hi = bounds[zero], bounds[te.const(1)]
    value = values[at]
    step = ctx.var("step")
    mid = lo + (hi - lo) // 2
    probe = sequence[(*at[:-1], mid) if len(seq_dims) > 1 else (mid,)]
    go_right = probe <= value if attrs["right"] else probe < value
    halve = IfThenElse(
        lo < hi,
        IfThenElse(go_right, Store(bounds, (zero,), mid + 1), Store(bounds, (te.const(1),), mid)),
    )
    body = Allocate(bounds, seq(
        Store(bounds, (zero,), zero),
        Store(bounds, (te.const(1),), te.const(length)),
        For(step, zero, te.const(length.bit_length()), halve),
        Store(out, at, cast(out.dtype, epilogue(cast(out.dtype, lo), at))),
    ))
    work = count * max(length.bit_length(), 1)
    kind = ForKind.PARALLEL if ctx.parallel and count > 1 and work >= 1 << 15 else ForKind.SERIAL
    return For(i, zero, te.const(count), body, kind)


def _searchsorted_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """One position per value."""
    return [dims(inputs[1], "values")]


def _sorted_rows(d: Draw, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Rows sorted ascending, with repeated values (half the time not sorted at all)."""
    rng = np.random.default_rng(d.integer(0, 1 << 30))
    rows = rng.integers(-4, 5, shape)
    if dtype.startswith("uint"):
        rows = rows + 4
    return (np.sort(rows, axis=-1) if d.integer(0, 3) else rows).astype(dtype)


def _searchsorted_domain(d: Draw) -> Sample:
    dtype = d.dtype(VALUE_DTYPES)
    values = d.shape(1, 3, 1, 4)
    if d.boolean():
        sequence: tuple[int, ...] = (d.integer(0, 6),)
    else:
        sequence = (*values[:-1], d.integer(1, 6))
    attrs = {"right": d.boolean(), "dtype": d.choice(INDEX_DTYPES)}
    return Sample((_sorted_rows(d, sequence, dtype), _sorted_rows(d, values, dtype)), attrs)


register(
    OpDef(
        name="searchsorted",
        num_inputs=2,
        type_rel=_searchsorted_rel,
        pattern=OpPattern.OPAQUE,
        reference=_searchsorted,
        shape_func=_searchsorted_shape_rule,
        attrs=(AttrSpec("right", "bool", False), AttrSpec("dtype", "dtype", "int32")),
        kernel=_searchsorted_kernel,
        domain=Domain(draw=_searchsorted_domain),
        samples=(
            Sample((np.array([1, 2, 2, 2, 5, 7], F32), np.array([[2.0, 0.0, 7.0], [8.0, 3.0, 2.0]], F32))),
            Sample(
                (np.array([1, 2, 2, 2, 5, 7], "int32"), np.array([2, 0, 7, 8, 5], "int32")),
                {"right": True, "dtype": "int64"},
            ),
            Sample(
                (np.array([[0, 1, 1, 4], [2, 2, 3, 3]], "int8"), np.array([[1, 4, -1], [3, 2, 9]], "int8")),
                {"right": True},
            ),
            # Not sorted: the answer is wherever TVM's binary search stops.
            Sample((np.array([5.0, 1.0, 4.0, 2.0, 3.0], "float64"), np.array([2.5, 4.5, 0.0], "float64"))),
        ),
    )
)


# --- sparse_to_dense ------------------------------------------------------------------------------


def _sparse_to_dense_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "sparse_to_dense"
    check_arity(types, 3, op)
    indices = _int_arg(types, 0, op, "sparse_indices")
    values = tensor_arg(types, 1, op)
    default = tensor_arg(types, 2, op)
    shape = attrs["output_shape"]
    if not shape or min(shape) < 0:
        raise TypeRelationError(f"{op}: output_shape must be a non-empty list of sizes, got {list(shape)}")
    if indices.ndim > 2:
        raise TypeRelationError(f"{op}: sparse_indices must be 0-D, 1-D or 2-D, got {indices}")
    if indices.ndim == 2 and not dims_equal(indices.shape[1], len(shape)):
        raise TypeRelationError(
            f"{op}: 2-D sparse_indices {indices} needs one column per output dim ({len(shape)})"
        )
    if values.ndim > 1:
        raise TypeRelationError(f"{op}: sparse_values must be 0-D or 1-D, got {values}")
    count: Dim = indices.shape[0] if indices.ndim else 1
    if values.ndim == 1 and not dims_equal(values.shape[0], count):
        raise TypeRelationError(f"{op}: sparse_values {values} needs one value per index ({count})")
    if default.ndim != 0:
        raise TypeRelationError(f"{op}: default_value must be a scalar, got {default}")
    if default.dtype != values.dtype:
        raise TypeRelationError(
            f"{op}: default_value {default} must have the dtype of sparse_values {values}"
        )
    return TensorType(tuple(shape), values.dtype)


def _sparse_to_dense(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    indices, values, default = a
    shape = tuple(attrs["output_shape"])
    out = np.full(shape, default, dtype=values.dtype)
    grid = np.indices(shape)
    rows = indices.reshape(-1, indices.shape[1] if indices.ndim == 2 else 1)
    for j, row in enumerate(rows):
        hit = np.ones(shape, bool)
        for k, coord in enumerate(row):
            hit &= grid[k] == coord
        out[hit] = values.reshape(-1)[j] if values.ndim else values
    return out


def _sparse_to_dense_compute(
    idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type
) -> PrimExpr:
    indices, values, default = inputs
    dims = static_dims(indices.shape, "sparse_to_dense")
    count = dims[0] if dims else 1
    value = default[()]
    for j in range(count):
        if indices.ndim == 2:
            hit: PrimExpr | None = None
            for k in range(dims[1]):
                same = eq(cast(indices.dtype, idx[k]), indices[(Const(j), Const(k))])
                hit = same if hit is None else logical_and(hit, same)
            assert hit is not None
        else:
            coord = indices[(Const(j),)] if indices.ndim else indices[()]
            hit = eq(cast(indices.dtype, idx[0]), coord)
        chosen = values[(Const(j),)] if values.ndim else values[()]
        value = select(hit, chosen, value)
    return value


def _sparse_to_dense_domain(d: Draw) -> Sample:
    shape = d.shape(1, 3, 1, 5)
    rank = d.choice((0, 1, 2)) if len(shape) == 1 else d.choice((1, 2, 2))
    count = d.integer(0, 5) if rank else 1
    rng = np.random.default_rng(d.integer(0, 1 << 30))
    dtype = d.choice(INDEX_DTYPES)
    if rank == 2:
        # Duplicates and, now and then, an index outside the output (never matched).
        high = np.array(shape) + (1 if d.integer(0, 3) == 0 else 0)
        indices = rng.integers(-1 if d.integer(0, 3) == 0 else 0, high, (count, len(shape))).astype(dtype)
    elif rank == 1:
        indices = rng.integers(0, shape[0] + 1, (count,)).astype(dtype)
    else:
        indices = np.array(d.integer(0, shape[0] - 1), dtype)
    value_dtype = d.dtype(VALUE_DTYPES)
    values = TensorType(() if d.integer(0, 3) == 0 else ((count,) if rank else (1,)), value_dtype)
    return Sample((indices, values, TensorType((), value_dtype)), {"output_shape": list(shape)})


register(
    OpDef(
        name="sparse_to_dense",
        num_inputs=3,
        type_rel=_sparse_to_dense_rel,
        pattern=OpPattern.OPAQUE,
        reference=_sparse_to_dense,
        shape_func=static_rule,
        attrs=(AttrSpec("output_shape", "ints", REQUIRED),),
        compute=_sparse_to_dense_compute,
        domain=Domain(draw=_sparse_to_dense_domain),
        samples=(
            Sample((np.array([[0, 1], [2, 3], [0, 1]], "int32"), TensorType((3,), F32), TensorType((), F32)),
                   {"output_shape": [3, 4]}),
            Sample((np.array([0, 3], "int64"), TensorType((2,), "int32"), TensorType((), "int32")),
                   {"output_shape": [5]}, int_high=9),
            Sample(
                (np.array(2, "int32"), TensorType((), "int8"), TensorType((), "int8")), {"output_shape": [4]}
            ),
            # Rows of a 2-D output set whole by 1-D indices; index 7 is outside and ignored.
            Sample((np.array([1, 7], "int32"), TensorType((2,), F32), TensorType((), F32)),
                   {"output_shape": [3, 2]}),
        ),
    )
)


# --- matrix_set_diag ------------------------------------------------------------------------------


def diagonal_length(rows: int, cols: int, k: int) -> int:
    """The number of elements of diagonal `k` (> 0 above the main one) of a rows x cols matrix."""
    return max(0, min(cols - max(k, 0), rows + min(k, 0)))


def _matrix_set_diag_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "matrix_set_diag"
    check_arity(types, 2, op)
    data = tensor_arg(types, 0, op)
    diagonal = tensor_arg(types, 1, op)
    k1, k2 = attrs["k1"], attrs["k2"]
    if data.ndim < 2:
        raise TypeRelationError(f"{op} needs a matrix or a batch of matrices, got {data}")
    if data.dtype != diagonal.dtype:
        raise TypeRelationError(f"{op} needs input and diagonal of one dtype, got {data} and {diagonal}")
    if k1 > k2:
        raise TypeRelationError(f"{op}: k1={k1} must not exceed k2={k2}")
    rows, cols = data.shape[-2], data.shape[-1]
    outside = (rows is not ANY and rows <= -k1) or (cols is not ANY and cols <= k2)  # type: ignore[operator]
    if outside:
        raise TypeRelationError(
            f"{op}: diagonals {k1}..{k2} lie outside the {rows}x{cols} matrices of {data}"
        )
    band = k1 != k2
    expected: list[Dim] = list(data.shape[:-2]) + ([k2 - k1 + 1] if band else [])
    if rows is ANY or cols is ANY:
        expected.append(ANY)
    else:
        assert isinstance(rows, int) and isinstance(cols, int)
        expected.append(max(diagonal_length(rows, cols, k) for k in range(k1, k2 + 1)))
    if diagonal.ndim != len(expected) or not all(dims_equal(a, b) for a, b in zip(diagonal.shape, expected)):
        shown = "(" + ", ".join(str(d) for d in expected) + ")"
        raise TypeRelationError(
            f"{op}: diagonals {k1}..{k2} of {data} need a diagonal of shape {shown}, got {diagonal}"
        )
    return data


def _diag_offset(k: int, rows: int, cols: int, width: int, attrs: Attrs) -> int:
    """Where diagonal k starts in its row of the diagonal tensor: right-aligned ones are padded
    on the left."""
    right = attrs["super_diag_right_align"] if k >= 0 else attrs["sub_diag_right_align"]
    return width - diagonal_length(rows, cols, k) if right else 0


def _matrix_set_diag(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, diagonal = a
    out = data.copy()
    rows, cols = data.shape[-2:]
    k1, k2 = attrs["k1"], attrs["k2"]
    width = diagonal.shape[-1]
    for k in range(k1, k2 + 1):
        diag = diagonal if k1 == k2 else diagonal[..., k2 - k, :]
        offset = 0 if k1 == k2 else _diag_offset(k, rows, cols, width, attrs)
        for n in range(diagonal_length(rows, cols, k)):
            row, col = (n, n + k) if k >= 0 else (n - k, n)
            out[..., row, col] = diag[..., n + offset]
    return out


def _matrix_set_diag_compute(
    idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type
) -> PrimExpr:
    data, diagonal = inputs
    rows, cols = static_dims(data.shape, "matrix_set_diag")[-2:]
    k1, k2 = attrs["k1"], attrs["k2"]
    width = static_dims(diagonal.shape, "matrix_set_diag")[-1]
    row, col = idx[-2], idx[-1]
    batch = tuple(idx[:-2])
    value = data[tuple(idx)]
    # One select per diagonal: a band is a few diagonals and each reads at a fixed offset.
    for k in range(k1, k2 + 1):
        position = row if k >= 0 else col
        if k1 == k2:
            read = diagonal[(*batch, position)]
        else:
            offset = _diag_offset(k, rows, cols, width, attrs)
            read = diagonal[(*batch, Const(k2 - k), position + offset)]
        value = select(eq(col - row, k), read, value)
    return value


def _matrix_set_diag_domain(d: Draw) -> Sample:
    batch = d.shape(0, 2, 1, 3)
    rows, cols = d.integer(1, 5), d.integer(1, 5)
    k1 = d.choice((0, d.integer(-rows + 1, cols - 1)))
    k2 = d.choice((k1, d.integer(k1, cols - 1)))
    dtype = d.dtype(VALUE_DTYPES)
    width = max(diagonal_length(rows, cols, k) for k in range(k1, k2 + 1))
    diag_shape = (*batch, *([k2 - k1 + 1] if k1 != k2 else []), width)
    attrs = {"k1": k1, "k2": k2, "super_diag_right_align": d.boolean(), "sub_diag_right_align": d.boolean()}
    return Sample((TensorType((*batch, rows, cols), dtype), TensorType(diag_shape, dtype)), attrs)


register(
    OpDef(
        name="matrix_set_diag",
        num_inputs=2,
        type_rel=_matrix_set_diag_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_matrix_set_diag,
        shape_func=same_shape_rule,
        attrs=(
            AttrSpec("k1", "int", REQUIRED),
            AttrSpec("k2", "int", REQUIRED),
            AttrSpec("super_diag_right_align", "bool", True),
            AttrSpec("sub_diag_right_align", "bool", False),
        ),
        compute=_matrix_set_diag_compute,
        domain=Domain(draw=_matrix_set_diag_domain),
        samples=(
            Sample((TensorType((2, 2), F32), TensorType((2,), F32)), {"k1": 0, "k2": 0}),
            Sample((TensorType((4, 3, 3), "int32"), TensorType((4, 3), "int32")), {"k1": 0, "k2": 0}),
            Sample((TensorType((2, 3, 4), F32), TensorType((2, 3), F32)), {"k1": 1, "k2": 1}),
            Sample((TensorType((2, 3, 4), "int32"), TensorType((2, 4, 3), "int32")),
                   {"k1": -1, "k2": 2, "super_diag_right_align": False, "sub_diag_right_align": True}),
            Sample((TensorType((3, 4), "int8"), TensorType((4, 3), "int8")), {"k1": -1, "k2": 2}),
            Sample((TensorType((4, 3), F32), TensorType((2, 3), F32)),
                   {"k1": -2, "k2": -1, "super_diag_right_align": False, "sub_diag_right_align": True}),
        ),
    )
)


# --- adv_index ------------------------------------------------------------------------------------


def _adv_index_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "adv_index"
    fields = _tensor_fields(types, op)
    data, indices = fields[0], fields[1:]
    if not indices:
        raise TypeRelationError(f"{op} needs data and at least one index tensor, got {types[0]}")
    if len(indices) > data.ndim:
        raise TypeRelationError(f"{op}: {len(indices)} index tensors for {data} of rank {data.ndim}")
    shape = indices[0]
    for ty in indices:
        if not _is_int(ty.dtype):
            raise TypeRelationError(f"{op}: index tensors must be integers, got {ty}")
        shape = TensorType(broadcast_shapes(shape, ty, op), ty.dtype)
    return TensorType(tuple(shape.shape) + tuple(data.shape[len(indices) :]), data.dtype)


def _adv_index(a: Sequence[object], attrs: Attrs) -> np.ndarray:
    data, *indices = a[0]  # type: ignore[misc]  # a tuple argument
    return np.asarray(data[tuple(indices)]).copy()


def _adv_index_compute(idx: Index, inputs: Sequence[object], attrs: Attrs, out_type: Type) -> PrimExpr:
    data, *indices = tuple_views(inputs, "adv_index")
    out = out_type
    assert isinstance(out, TensorType)
    lead = out.ndim - (data.ndim - len(indices))
    position = tuple(idx[:lead])
    chosen = [_as_index(ix[broadcast_index(position, ix.shape)]) for ix in indices]
    return data[(*chosen, *idx[lead:])]


def _adv_index_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """The index tensors' broadcast shape, then the data dims they do not index."""
    data, *indices = fields(inputs[0], "tensors")
    return [fill(out_type, (*broadcast_dims(indices), *data[len(indices) :]))]


def _adv_index_domain(d: Draw) -> Sample:
    shape = d.shape(1, 4, 1, 5)
    count = d.integer(1, len(shape))
    rng = np.random.default_rng(d.integer(0, 1 << 30))
    base = d.shape(0, 2, 1, 3)
    dtype = d.choice(INDEX_DTYPES)
    indices = []
    for axis in range(count):
        ishape = d.broadcastable(base) if base else ()
        indices.append(rng.integers(0, shape[axis], ishape).astype(dtype))
    return Sample(((TensorType(shape, d.dtype(VALUE_DTYPES)), *indices),))


register(
    OpDef(
        name="adv_index",
        num_inputs=1,
        type_rel=_adv_index_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_adv_index,  # type: ignore[arg-type]  # a tuple argument
        shape_func=_adv_index_shape_rule,
        compute=_adv_index_compute,
        domain=Domain(draw=_adv_index_domain),
        samples=(
            Sample(((TensorType((4, 5), F32), np.array([3, 0, 1], "int32")),)),
            Sample(
                (
                    (
                        TensorType((4, 5, 2), "int32"),
                        np.array([[0], [3]], "int64"),
                        np.array([1, 4, 2], "int64"),
                    ),
                )
            ),
            Sample(((TensorType((3, 4), "float16"), np.array(2, "int32"), np.array([[0, 3]], "int32")),)),
        ),
    )
)


# --- sliding_window -------------------------------------------------------------------------------


def _window_count(extent: Dim, window: int, stride: int) -> Dim:
    if extent is ANY:
        return ANY
    assert isinstance(extent, int)
    return (extent - (window - 1) + stride - 1) // stride


def _sliding_window_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "sliding_window"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    axis, window, strides = attrs["axis"], attrs["window_shape"], attrs["strides"]
    if not 0 <= axis < data.ndim:
        raise TypeRelationError(f"{op}: axis {axis} must be in [0, {data.ndim}) for {data}")
    slid = data.ndim - axis
    if len(window) != slid or len(strides) != slid:
        raise TypeRelationError(
            f"{op}: window_shape {list(window)} and strides {list(strides)} need {slid} entries "
            f"(one per dim from axis {axis} of {data})"
        )
    if min(window) < 1 or min(strides) < 1:
        raise TypeRelationError(
            f"{op}: window_shape {list(window)} and strides {list(strides)} must be positive"
        )
    for w, extent in zip(window, data.shape[axis:]):
        if extent is not ANY and w > extent:  # type: ignore[operator]  # an int here
            raise TypeRelationError(f"{op}: window {list(window)} does not fit in {data}")
    counts = tuple(_window_count(e, w, s) for e, w, s in zip(data.shape[axis:], window, strides))
    return TensorType((*data.shape[:axis], *counts, *window), data.dtype)


def _sliding_window(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data = a[0]
    axis, window, strides = attrs["axis"], attrs["window_shape"], attrs["strides"]
    axes = tuple(range(axis, data.ndim))
    views = np.lib.stride_tricks.sliding_window_view(data, tuple(window), axis=axes)
    stepped = (slice(None),) * axis + tuple(slice(None, None, s) for s in strides)
    return np.ascontiguousarray(views[stepped])


def _sliding_window_compute(
    idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type
) -> PrimExpr:
    data = inputs[0]
    axis, strides = attrs["axis"], attrs["strides"]
    n = len(strides)
    starts, offsets = idx[axis : axis + n], idx[axis + n :]
    return data[(*idx[:axis], *(s * st + o for s, st, o in zip(starts, strides, offsets)))]


def _sliding_window_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """The dims before `axis`, then the window count along each slid dim, then the window."""
    data = dims(inputs[0], "data")
    axis, window, strides = attrs["axis"], attrs["window_shape"], attrs["strides"]
    counts = [ceil_div(int64(e) - (w - 1), s) for e, w, s in zip(data[axis:], window, strides)]
    return [fill(out_type, (*data[:axis], *counts, *window))]


def _sliding_window_domain(d: Draw) -> Sample:
    shape = d.shape(1, 4, 1, 6)
    axis = d.integer(0, len(shape) - 1)
    window = [d.choice((1, e, d.integer(1, e))) for e in shape[axis:]]
    strides = [d.choice((1, 2, d.integer(1, 4))) for _ in shape[axis:]]
    return Sample((TensorType(shape, d.dtype(VALUE_DTYPES)),),
                  {"axis": axis, "window_shape": window, "strides": strides})


register(
    OpDef(
        name="sliding_window",
        num_inputs=1,
        type_rel=_sliding_window_rel,
        pattern=OpPattern.OPAQUE,
        reference=_sliding_window,
        shape_func=_sliding_window_shape_rule,
        attrs=(
            AttrSpec("axis", "int", REQUIRED),
            AttrSpec("window_shape", "ints", REQUIRED),
            AttrSpec("strides", "ints", REQUIRED),
        ),
        compute=_sliding_window_compute,
        domain=Domain(draw=_sliding_window_domain),
        samples=(
            Sample((TensorType((2, 6), F32),), {"axis": 1, "window_shape": [3], "strides": [2]}),
            Sample(
                (TensorType((2, 5, 4), "int32"),),
                {"axis": 0, "window_shape": [1, 2, 4], "strides": [1, 2, 3]},
            ),
            Sample((TensorType((3, 4, 5), "int8"),), {"axis": 1, "window_shape": [4, 2], "strides": [1, 3]}),
        ),
    )
)
