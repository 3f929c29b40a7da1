"""Gathering and scattering by index tensors: gather, gather_nd, scatter_elements, scatter_nd
and one_hot.

Attribute names and defaults are TVM's (`include/tvm/relay/attrs/transform.h`). Index semantics
follow TVM's topi kernels, which do not check bounds:

* gather and gather_nd read `data` at the index values as given: an index outside [0, extent)
  (negative ones included) is undefined, as in TVM. Float indices of gather_nd are truncated
  to integers (topi casts them). index_rank only matters to TVM for dynamic index tensors and is
  accepted and ignored.
* scatter_elements shifts a negative index once by the axis extent (topi's `k + (k < 0) * n`);
  scatter_nd uses its indices as given. Both copy `data` to the output, then apply the updates
  one at a time in row-major order of the indices, so with repeated indices "update" keeps the
  last update and the reductions combine in that order. "mean" replaces the element by the
  average of it and the update, `(out + update) / 2`, truncated for integers.
  TVM's scatter_elements kernel flattens the non-axis dims of `indices`, which is only right when
  they equal the data's; we accept indices smaller than data in those dims too (as ONNX does)
  and scatter each update at its own coordinates.
* one_hot compares each index with the position along the new axis: an index outside
  [0, depth) (negative ones included) gives a row of off_value. on_value and off_value are
  0-d tensors cast to `dtype`.

Patterns are TVM's: gather and gather_nd INJECTIVE, the scatters OPAQUE, one_hot
OUT_ELEMWISE_FUSABLE. Loops: gather, gather_nd and one_hot are computes; the scatters are
kernels (a copy loop, then one serial loop nest over the updates).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type, is_valid_dtype
from compiler.ops.common import check_arity, dims_equal, normalize_axis, static_dims, tensor_arg
from compiler.ops.domain import Domain, Draw
from compiler.ops.kernels.common import input_buffers
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as RuleDim
from compiler.ops.shape_rules import ShapeArg, dims, fill, same_shape_rule, tensor_type
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, Index, KernelContext, TensorView
from compiler.tir.expr import PrimExpr, cast, eq, select
from compiler.tir.stmt import Stmt, Store, loop_nest, seq

F32 = "float32"
DATA_DTYPES = ("float32", "float32", "int32", "float16", "float64", "int8", "int64", "uint8")
INDEX_DTYPES = ("int32", "int64")


def _show(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _index(value: PrimExpr) -> PrimExpr:
    """An index value as an int32 loop index (floats truncate, as topi's cast does)."""
    return cast("int32", value)


# --- gather ---------------------------------------------------------------------------------------


def _gather_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "gather"
    check_arity(types, 2, op)
    data, indices = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if not _is_int(indices.dtype):
        raise TypeRelationError(f"{op}: indices must be integers, got {indices}")
    if data.ndim == 0 or data.ndim != indices.ndim:
        raise TypeRelationError(f"{op}: data {data} and indices {indices} must have one rank, at least 1")
    axis = normalize_axis(attrs["axis"], data.ndim, op)
    for k, (d, i) in enumerate(zip(data.shape, indices.shape)):
        if k == axis:
            if i is not ANY and i < 1:
                raise TypeRelationError(f"{op}: indices {indices} need at least one entry along axis {axis}")
        elif not dims_equal(d, i):
            raise TypeRelationError(f"{op}: data {data} and indices {indices} differ in dim {k}")
    return TensorType(indices.shape, data.dtype)


def _gather(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, indices = a
    axis = normalize_axis(attrs["axis"], data.ndim, "gather")
    return np.take_along_axis(data, indices.astype(np.int64), axis=axis)


def _gather_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data, indices = inputs
    axis = normalize_axis(attrs["axis"], data.ndim, "gather")
    chosen = _index(indices[tuple(idx)])
    return data[tuple(chosen if k == axis else i for k, i in enumerate(idx))]


def _gather_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """The result has the indices' shape."""
    return [dims(inputs[1], "indices")]


def _gather_domain(d: Draw) -> Sample:
    shape = d.shape(1, 4, 1, 4)
    axis = d.axis(len(shape))
    ind_shape = list(shape)
    ind_shape[axis] = d.integer(1, 5)
    extent = shape[axis]
    values = [d.choice((0, extent - 1, d.integer(0, extent - 1))) for _ in range(int(np.prod(ind_shape)))]
    indices = np.array(values).reshape(ind_shape).astype(d.dtype(INDEX_DTYPES))
    return Sample((TensorType(shape, d.dtype(DATA_DTYPES)), indices), {"axis": axis})


register(
    OpDef(
        name="gather",
        num_inputs=2,
        type_rel=_gather_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_gather,
        shape_func=_gather_shape_rule,
        attrs=(AttrSpec("axis", "int", REQUIRED),),
        compute=_gather_compute,
        domain=Domain(_gather_domain),
        samples=(
            Sample((TensorType((3, 4), F32), np.array([[0, 2, 2, 1]], dtype="int32")), {"axis": 0}),
            Sample(
                (TensorType((2, 3), "int8"), np.array([[2, 0, 1, 1], [0, 0, 2, 1]], dtype="int64")),
                {"axis": -1},
            ),
            Sample(
                (TensorType((2, 3, 2), "float16"), np.array([[[1, 0]], [[0, 0]]], dtype="int32")), {"axis": 1}
            ),
        ),
    )
)


# --- gather_nd ------------------------------------------------------------------------------------


def _gather_nd_layout(data: TensorType, indices: TensorType, attrs: Attrs) -> tuple[int, int]:
    """(M, B): the length of an index tuple and the number of batch dims, checked."""
    op = "gather_nd"
    if indices.ndim < 1:
        raise TypeRelationError(f"{op}: indices {indices} must have at least one dim (the index tuple)")
    m = indices.shape[0]
    if m is ANY:
        raise TypeRelationError(f"{op} needs a static first dim of indices, got {indices}")
    assert isinstance(m, int)
    b = attrs["batch_dims"]
    if b < 0 or b >= indices.ndim:
        raise TypeRelationError(f"{op}: batch_dims={b} must lie in [0, {indices.ndim - 1}] for {indices}")
    if m < 1 or m + b > data.ndim:
        raise TypeRelationError(
            f"{op}: index tuples of length {m} with batch_dims={b} do not fit data {data} (need 1 <= M <= "
            f"{data.ndim - b})"
        )
    for k in range(b):
        if not dims_equal(data.shape[k], indices.shape[k + 1]):
            raise TypeRelationError(f"{op}: batch dim {k} differs between data {data} and indices {indices}")
    return m, b


def _gather_nd_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "gather_nd"
    check_arity(types, 2, op)
    data, indices = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if indices.dtype == "bool":
        raise TypeRelationError(f"{op}: indices must be numbers, got {indices}")
    m, b = _gather_nd_layout(data, indices, attrs)
    return TensorType(indices.shape[1:] + data.shape[m + b :], data.dtype)


def _gather_nd(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, indices = a
    data_type = TensorType(data.shape, str(data.dtype))
    m, b = _gather_nd_layout(data_type, TensorType(indices.shape, str(indices.dtype)), attrs)
    idx = indices.astype(np.int64)
    grids = np.indices(indices.shape[1:], dtype=np.int64)
    key = tuple(grids[k] for k in range(b)) + tuple(idx[k] for k in range(m))
    return np.asarray(data[key])


def _gather_nd_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data, indices = inputs
    m, b = static_dims(indices.shape, "gather_nd")[0], attrs["batch_dims"]
    k = indices.ndim - 1
    position = tuple(idx[:k])
    chosen = tuple(_index(indices[(te.const(j),) + position]) for j in range(m))
    return data[tuple(idx[:b]) + chosen + tuple(idx[k:])]


def _gather_nd_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """indices.shape[1:] + data.shape[M + B:]. M (indices' first dim) is static, as the
    relation requires, so it follows from the ranks: the result keeps data.ndim - M - B dims."""
    data, indices = dims(inputs[0], "data"), dims(inputs[1], "indices")
    rank = len(tensor_type(out_type).shape)
    kept = rank - (len(indices) - 1)
    return [fill(out_type, (*indices[1:], *data[len(data) - kept :]))]


def _gather_nd_domain(d: Draw) -> Sample:
    shape = d.shape(1, 4, 1, 4)
    b = d.integer(0, len(shape) - 1)
    m = d.integer(1, len(shape) - b)
    ys = shape[:b] + d.shape(0, 2, 1, 3)
    count = int(np.prod(ys))
    values = np.array([[d.integer(0, shape[b + j] - 1) for _ in range(count)] for j in range(m)])
    indices = values.reshape((m,) + tuple(ys)).astype(d.dtype(INDEX_DTYPES))
    return Sample((TensorType(shape, d.dtype(DATA_DTYPES)), indices), {"batch_dims": b})


register(
    OpDef(
        name="gather_nd",
        num_inputs=2,
        type_rel=_gather_nd_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_gather_nd,
        shape_func=_gather_nd_shape_rule,
        attrs=(AttrSpec("batch_dims", "int", 0), AttrSpec("index_rank", "int", None, optional=True)),
        compute=_gather_nd_compute,
        domain=Domain(_gather_nd_domain),
        samples=(
            Sample((TensorType((3, 4), F32), np.array([[0, 2, 1], [3, 0, 1]], dtype="int32"))),  # full tuples
            Sample((TensorType((3, 4, 2), "int32"), np.array([[2, 0]], dtype="int64"))),  # slices
            Sample(
                (TensorType((2, 3, 4), "float16"), np.array([[[2, 0], [1, 1]]], dtype="int32")),
                {"batch_dims": 1},
            ),
            Sample((TensorType((2, 3), "float64"), np.array([[1.0, 0.0], [2.9, 0.2]], dtype=F32))),
        ),
    )
)


# --- scatter_elements / scatter_nd ----------------------------------------------------------------

SCATTER_ELEMENTS_REDUCTIONS = ("update", "add", "mul", "mean", "min", "max")
SCATTER_ND_MODES = ("update", "add", "mul", "min", "max")


def _check_mode(op: str, key: str, value: str, modes: Sequence[str]) -> None:
    if value not in modes:
        raise TypeRelationError(f"{op}: unknown {key} {value!r} (expected one of {', '.join(modes)})")


def _scatter_args(types: Sequence[Type], op: str) -> tuple[TensorType, TensorType, TensorType]:
    check_arity(types, 3, op)
    data, indices, updates = (tensor_arg(types, k, op) for k in range(3))
    if not _is_int(indices.dtype):
        raise TypeRelationError(f"{op}: indices must be integers, got {indices}")
    if updates.dtype != data.dtype:
        raise TypeRelationError(f"{op}: updates {updates} must have the dtype of data {data}")
    return data, indices, updates


def _scatter_elements_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "scatter_elements"
    data, indices, updates = _scatter_args(types, op)
    _check_mode(op, "reduction", attrs["reduction"], SCATTER_ELEMENTS_REDUCTIONS)
    if not data.ndim == indices.ndim == updates.ndim or data.ndim == 0:
        raise TypeRelationError(
            f"{op}: data {data}, indices {indices} and updates {updates} need one rank, at least 1"
        )
    axis = normalize_axis(attrs["axis"], data.ndim, op)
    for k, (d, i, u) in enumerate(zip(data.shape, indices.shape, updates.shape)):
        if not dims_equal(i, u):
            raise TypeRelationError(f"{op}: indices {indices} and updates {updates} must have one shape")
        if k != axis and d is not ANY and i is not ANY and i > d:
            raise TypeRelationError(f"{op}: indices {indices} exceed data {data} in dim {k} (axis is {axis})")
    return data


def _combine(reduction: str, old: object, new: object, dtype: str) -> object:
    """One scatter step on numpy scalars held in int64 / float64."""
    if reduction == "update":
        return new
    if reduction == "add":
        return old + new  # type: ignore[operator]  # numpy scalars
    if reduction == "mul":
        return old * new  # type: ignore[operator]  # numpy scalars
    if reduction == "min":
        return min(old, new)  # type: ignore[type-var]  # numpy scalars
    if reduction == "max":
        return max(old, new)  # type: ignore[type-var]  # numpy scalars
    assert reduction == "mean"
    total = old + new  # type: ignore[operator]  # numpy scalars
    if _is_int(dtype):
        half = abs(int(total)) // 2  # truncated towards zero, like C
        return np.int64(half if total >= 0 else -half)
    return np.asarray(total / 2).astype(dtype).astype(np.float64)


def _wide(a: np.ndarray) -> np.ndarray:
    """Values in int64 (integers) or float64, so a sequence of steps never overflows in numpy."""
    return a.astype(np.int64) if _is_int(str(a.dtype)) else a.astype(np.float64)


def _scatter_result(out: np.ndarray, dtype: str) -> np.ndarray:
    if _is_int(dtype):
        return out.astype(np.uint64 if dtype.startswith("u") else np.int64).astype(dtype)  # wraps like C
    return out.astype(dtype)


def _scatter_elements(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, indices, updates = a
    dtype = str(data.dtype)
    if dtype == "bool":
        out = data.copy()
        for pos in np.ndindex(*indices.shape):
            target = _element_target(pos, indices, data.shape, attrs)
            out[target] = _bool_combine(attrs["reduction"], out[target], updates[pos])
        return out
    out = _wide(data)
    upd = _wide(updates)
    for pos in np.ndindex(*indices.shape):
        target = _element_target(pos, indices, data.shape, attrs)
        out[target] = _combine(attrs["reduction"], out[target], upd[pos], dtype)
    return _scatter_result(out, dtype)


def _bool_combine(reduction: str, old: np.bool_, new: np.bool_) -> bool:
    if reduction in ("add", "max"):
        return bool(old or new)
    if reduction in ("mul", "min"):
        return bool(old and new)
    if reduction == "mean":
        return bool(old and new)  # (a + b) / 2 truncated is 1 only when both are
    return bool(new)


def _element_target(
    pos: tuple[int, ...], indices: np.ndarray, shape: tuple[int, ...], attrs: Attrs
) -> tuple[int, ...]:
    axis = normalize_axis(attrs["axis"], len(shape), "scatter_elements")
    k = int(indices[pos])
    if k < 0:
        k += shape[axis]
    return pos[:axis] + (k,) + pos[axis + 1 :]


def _combine_expr(reduction: str, old: PrimExpr, new: PrimExpr, dtype: str) -> PrimExpr:
    """One scatter step in the output dtype (integer means in int64, truncated)."""
    if reduction == "update":
        return new
    if dtype == "bool":
        return te.logical_or(old, new) if reduction in ("add", "max") else te.logical_and(old, new)
    if reduction == "add":
        return old + new
    if reduction == "mul":
        return old * new
    if reduction == "min":
        return te.minimum(old, new)
    if reduction == "max":
        return te.maximum(old, new)
    assert reduction == "mean"
    if _is_int(dtype):
        wide = "uint64" if dtype.startswith("u") else "int64"
        return cast(dtype, te.binary("tdiv", cast(wide, old) + cast(wide, new), te.const(2, wide)))
    return (old + new) / te.const(2.0, dtype)


def _copy_loops(ctx: KernelContext, data: te.Buffer, out: te.Buffer) -> Stmt:
    dims = static_dims(data.shape, "scatter")
    names = [ctx.fresh("i") for _ in dims]
    return loop_nest(names, dims, lambda v: Store(out, tuple(v), data[tuple(v)]))


def _finish(ctx: KernelContext, out: te.Buffer, epilogue: Epilogue) -> Stmt:
    """Apply a fused epilogue (if any) to the finished output in place."""
    dims = static_dims(out.shape, "scatter")
    names = [ctx.fresh("e") for _ in dims]
    probe = te.Var("probe", out.dtype)
    if epilogue(probe, tuple(te.const(0) for _ in dims)) is probe:
        return seq()
    return loop_nest(
        names, dims, lambda v: Store(out, tuple(v), cast(out.dtype, epilogue(out[tuple(v)], tuple(v))))
    )


def _scatter_elements_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    data, indices, updates = input_buffers(inputs, "scatter_elements")
    shape = static_dims(data.shape, "scatter_elements")
    axis = normalize_axis(attrs["axis"], len(shape), "scatter_elements")
    extent = shape[axis]
    ind_dims = static_dims(indices.shape, "scatter_elements")
    if 0 in ind_dims:
        return seq(_copy_loops(ctx, data, out), _finish(ctx, out, epilogue))

    def body(pos: list[te.Var]) -> Stmt:
        k = _index(indices[tuple(pos)])
        k = select(k < 0, k + extent, k)
        target = tuple(k if j == axis else p for j, p in enumerate(pos))
        value = _combine_expr(attrs["reduction"], out[target], updates[tuple(pos)], out.dtype)
        return Store(out, target, value)

    names = [ctx.fresh("u") for _ in ind_dims]
    return seq(_copy_loops(ctx, data, out), loop_nest(names, ind_dims, body), _finish(ctx, out, epilogue))


def _scatter_elements_domain(d: Draw) -> Sample:
    shape = d.shape(1, 3, 1, 4)
    axis = d.axis(len(shape))
    ind_shape = [d.integer(1, s) if d.integer(0, 3) == 0 else s for s in shape]
    ind_shape[axis] = d.integer(1, 5)
    extent = shape[axis]
    n = int(np.prod(ind_shape))
    cases = (0, extent - 1, -1, -extent)
    values = np.array([d.choice((*cases, d.integer(-extent, extent - 1))) for _ in range(n)])
    indices = values.reshape(ind_shape).astype(d.dtype(INDEX_DTYPES))
    reduction = d.choice(SCATTER_ELEMENTS_REDUCTIONS)
    dtype = d.dtype(DATA_DTYPES)
    high = 4 if reduction == "mul" and dtype in ("int8", "uint8") else 8
    return Sample(
        (TensorType(shape, dtype), indices, TensorType(tuple(ind_shape), dtype)),
        {"axis": axis, "reduction": reduction},
        int_high=high,
    )


register(
    OpDef(
        name="scatter_elements",
        num_inputs=3,
        type_rel=_scatter_elements_rel,
        pattern=OpPattern.OPAQUE,
        reference=_scatter_elements,
        shape_func=same_shape_rule,
        attrs=(AttrSpec("axis", "int", 0), AttrSpec("reduction", "str", "update")),
        kernel=_scatter_elements_kernel,
        domain=Domain(_scatter_elements_domain, accumulates=True),
        samples=(
            Sample(
                (
                    TensorType((3, 3), F32),
                    np.array([[1, 0, 2], [0, 2, 1]], dtype="int32"),
                    TensorType((2, 3), F32),
                )
            ),
            Sample(
                (
                    TensorType((2, 4), F32),
                    np.array([[0, -1, 0], [3, 3, -4]], dtype="int64"),
                    TensorType((2, 3), F32),
                ),
                {"axis": 1, "reduction": "add"},
            ),
            Sample(
                (
                    TensorType((3, 2), "int32"),
                    np.array([[2, 1], [2, 1]], dtype="int32"),
                    TensorType((2, 2), "int32"),
                ),
                {"reduction": "mul"},
                int_high=5,
            ),
            Sample(
                (
                    TensorType((2, 3), "int8"),
                    np.array([[0, 0, 2]], dtype="int32"),
                    TensorType((1, 3), "int8"),
                ),
                {"axis": -1, "reduction": "mean"},
                int_high=100,
            ),
            Sample(
                (
                    TensorType((4,), "float16"),
                    np.array([1, 1, 3], dtype="int32"),
                    TensorType((3,), "float16"),
                ),
                {"reduction": "mean"},
            ),
            Sample(
                (
                    TensorType((3, 2), "float64"),
                    np.array([[0, 1], [0, 1]], dtype="int64"),
                    TensorType((2, 2), "float64"),
                ),
                {"reduction": "min"},
            ),
            Sample(
                (
                    TensorType((3, 2), "uint8"),
                    np.array([[0], [2]], dtype="int32"),
                    TensorType((2, 1), "uint8"),
                ),
                {"reduction": "max"},
                int_high=200,
            ),
        ),
    )
)


def _scatter_nd_layout(data: TensorType, indices: TensorType, updates: TensorType) -> int:
    """M, the length of an index tuple, with the shapes checked."""
    op = "scatter_nd"
    if indices.ndim < 1 or indices.shape[0] is ANY:
        raise TypeRelationError(f"{op} needs a static first dim of indices, got {indices}")
    m = indices.shape[0]
    assert isinstance(m, int)
    if not 1 <= m <= data.ndim:
        raise TypeRelationError(f"{op}: index tuples of length {m} do not fit data {data}")
    expected = indices.shape[1:] + data.shape[m:]
    if updates.ndim != len(expected) or not all(dims_equal(u, e) for u, e in zip(updates.shape, expected)):
        raise TypeRelationError(
            f"{op}: updates {updates} must have shape indices.shape[1:] + data.shape[{m}:] = "
            f"{_show(expected)}"
        )
    return m


def _scatter_nd_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "scatter_nd"
    data, indices, updates = _scatter_args(types, op)
    _check_mode(op, "mode", attrs["mode"], SCATTER_ND_MODES)
    _scatter_nd_layout(data, indices, updates)
    return data


def _scatter_nd(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, indices, updates = a
    dtype = str(data.dtype)
    m = indices.shape[0]
    bool_data = dtype == "bool"
    out = data.copy() if bool_data else _wide(data)
    upd = updates if bool_data else _wide(updates)
    for pos in np.ndindex(*indices.shape[1:]):
        target = tuple(int(indices[(j,) + pos]) for j in range(m))
        for rest in np.ndindex(*data.shape[m:]):
            if bool_data:
                out[target + rest] = _bool_combine(attrs["mode"], out[target + rest], upd[pos + rest])
            else:
                out[target + rest] = _combine(attrs["mode"], out[target + rest], upd[pos + rest], dtype)
    return out if bool_data else _scatter_result(out, dtype)


def _scatter_nd_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    data, indices, updates = input_buffers(inputs, "scatter_nd")
    shape = static_dims(data.shape, "scatter_nd")
    ind_dims = static_dims(indices.shape, "scatter_nd")
    m = ind_dims[0]
    loop_dims = ind_dims[1:] + shape[m:]
    if 0 in loop_dims:
        return seq(_copy_loops(ctx, data, out), _finish(ctx, out, epilogue))
    k = len(ind_dims) - 1

    def body(v: list[te.Var]) -> Stmt:
        pos, rest = tuple(v[:k]), tuple(v[k:])
        target = tuple(_index(indices[(te.const(j),) + pos]) for j in range(m)) + rest
        value = _combine_expr(attrs["mode"], out[target], updates[pos + rest], out.dtype)
        return Store(out, target, value)

    names = [ctx.fresh("u") for _ in loop_dims]
    return seq(_copy_loops(ctx, data, out), loop_nest(names, loop_dims, body), _finish(ctx, out, epilogue))


def _scatter_nd_domain(d: Draw) -> Sample:
    shape = d.shape(1, 3, 1, 4)
    m = d.integer(1, len(shape))
    ys = d.shape(0, 2, 1, 3)
    count = int(np.prod(ys))
    values = np.array([[d.integer(0, shape[j] - 1) for _ in range(count)] for j in range(m)])
    indices = values.reshape((m,) + tuple(ys)).astype(d.dtype(INDEX_DTYPES))
    mode = d.choice(SCATTER_ND_MODES)
    dtype = d.dtype(DATA_DTYPES)
    high = 4 if mode == "mul" and dtype in ("int8", "uint8") else 8
    updates = TensorType(tuple(ys) + shape[m:], dtype)
    return Sample((TensorType(shape, dtype), indices, updates), {"mode": mode}, int_high=high)


register(
    OpDef(
        name="scatter_nd",
        num_inputs=3,
        type_rel=_scatter_nd_rel,
        pattern=OpPattern.OPAQUE,
        reference=_scatter_nd,
        shape_func=same_shape_rule,
        attrs=(AttrSpec("mode", "str", "update"),),
        kernel=_scatter_nd_kernel,
        domain=Domain(_scatter_nd_domain, accumulates=True),
        samples=(
            Sample(
                (TensorType((3, 4), F32), np.array([[0, 2], [1, 1]], dtype="int32"), TensorType((2,), F32))
            ),
            Sample(
                (TensorType((3, 4), F32), np.array([[2, 0, 2]], dtype="int64"), TensorType((3, 4), F32)),
                {"mode": "add"},
            ),
            Sample(
                (TensorType((2, 3), "int32"), np.array([[[1, 1], [0, 1]], [[2, 2], [0, 2]]], dtype="int32"),
                 TensorType((2, 2), "int32")),
                {"mode": "mul"},
                int_high=6,
            ),
            Sample(
                (
                    TensorType((2, 2, 2), "float16"),
                    np.array([[1, 1]], dtype="int32"),
                    TensorType((2, 2, 2), "float16"),
                ),
                {"mode": "max"},
            ),
            Sample(
                (TensorType((4,), "int8"), np.array([[3, 3, 0]], dtype="int32"), TensorType((3,), "int8")),
                {"mode": "min"},
                int_high=50,
            ),
        ),
    )
)


# --- one_hot --------------------------------------------------------------------------------------


def _one_hot_axis(ndim: int, axis: int) -> int:
    """The position of the new axis in the rank-(ndim + 1) result (TVM: -1 means last)."""
    if axis == -1:
        return ndim
    if not 0 <= axis <= ndim:
        raise TypeRelationError(f"one_hot: axis {axis} must be -1 or lie in [0, {ndim}] for rank {ndim}")
    return axis


def _one_hot_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "one_hot"
    check_arity(types, 3, op)
    indices, on, off = (tensor_arg(types, k, op) for k in range(3))
    if not _is_int(indices.dtype):
        raise TypeRelationError(f"{op}: indices must be integers, got {indices}")
    if on.ndim != 0 or off.ndim != 0:
        raise TypeRelationError(f"{op}: on_value {on} and off_value {off} must be scalars")
    if attrs["depth"] <= 0:
        raise TypeRelationError(f"{op}: depth must be positive, got {attrs['depth']}")
    if not is_valid_dtype(attrs["dtype"]):
        raise TypeRelationError(f"{op}: unknown dtype {attrs['dtype']!r}")
    at = _one_hot_axis(indices.ndim, attrs["axis"])
    shape = indices.shape[:at] + (attrs["depth"],) + indices.shape[at:]
    return TensorType(shape, attrs["dtype"])


def _one_hot(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    indices, on, off = a
    dtype = attrs["dtype"]
    at = _one_hot_axis(indices.ndim, attrs["axis"])
    hot = indices.astype(np.int64)[..., None] == np.arange(attrs["depth"])
    out = np.where(hot, np.asarray(on).astype(dtype), np.asarray(off).astype(dtype)).astype(dtype)
    return np.moveaxis(out, -1, at)


def _one_hot_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """The indices' dims with `depth` inserted at the new axis."""
    indices = dims(inputs[0], "indices")
    at = _one_hot_axis(len(indices), attrs["axis"])
    return [(*indices[:at], int(attrs["depth"]), *indices[at:])]


def _one_hot_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    indices, on, off = inputs
    dtype = attrs["dtype"]
    at = _one_hot_axis(indices.ndim, attrs["axis"])
    value = indices[tuple(idx[:at]) + tuple(idx[at + 1 :])]
    wide = "uint64" if value.dtype.startswith("u") else "int64"
    hot = eq(cast(wide, value), cast(wide, idx[at]))
    return select(hot, cast(dtype, on[()]), cast(dtype, off[()]))


def _one_hot_domain(d: Draw) -> Sample:
    shape = d.shape(0, 3, 1, 4)
    depth = d.integer(1, 5)
    axis = d.choice((-1, -1, *range(len(shape) + 1)))
    count = int(np.prod(shape))
    values = np.array([d.choice((0, depth - 1, -1, depth, d.integer(0, depth - 1))) for _ in range(count)])
    indices = values.reshape(shape).astype(d.dtype(INDEX_DTYPES))
    dtype = d.dtype(DATA_DTYPES)
    value_dtype = d.choice((dtype, dtype, F32))
    on, off = np.array(d.choice((1, 3, 5)), dtype=value_dtype), np.array(d.choice((0, 2)), dtype=value_dtype)
    return Sample((indices, on, off), {"depth": depth, "axis": axis, "dtype": dtype})


register(
    OpDef(
        name="one_hot",
        num_inputs=3,
        type_rel=_one_hot_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=_one_hot,
        shape_func=_one_hot_shape_rule,
        attrs=(
            AttrSpec("depth", "int", 1),
            AttrSpec("axis", "int", -1),
            AttrSpec("dtype", "dtype", REQUIRED),
        ),
        compute=_one_hot_compute,
        domain=Domain(_one_hot_domain),
        samples=(
            Sample(
                (np.array([0, 2, -1, 3], dtype="int32"), np.array(1.0, F32), np.array(0.0, F32)),
                {"depth": 3, "dtype": F32},
            ),
            Sample(
                (np.array([[1, 0], [2, 5]], dtype="int64"), np.array(7, "int32"), np.array(-1, "int32")),
                {"depth": 4, "axis": 0, "dtype": "int32"},
            ),
            Sample(
                (np.array([[1, 0], [2, 1]], dtype="int32"), np.array(2.5, F32), np.array(0.5, F32)),
                {"depth": 3, "axis": 1, "dtype": "float16"},
            ),
            Sample(
                (np.array(2, dtype="int32"), np.array(1, "uint8"), np.array(0, "uint8")),
                {"depth": 3, "dtype": "uint8"},
            ),
        ),
    )
)

