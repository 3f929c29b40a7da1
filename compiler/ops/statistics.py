"""Statistics: all, any, variance and nn.l2_normalize.

* `all` / `any` reduce bool tensors with TVM's ReduceAttrs (axis, keepdims, exclude; see
  compiler/ops/reduce.py); they are min / max over bools. COMM_REDUCE.
* `variance(data, mean, axis=None, keepdims=False, exclude=False, unbiased=False)`: the mean
  of the squared differences from `mean` (which broadcasts against `data`; Relay's `std` and
  `mean_variance` build it with keepdims), divided by the count, or by the count minus one when
  `unbiased`. TVM registers no `std` op: relay.std is sqrt(variance(data, mean(data))) in
  Python, and logsumexp is likewise a composition, so neither is registered here. float16 data
  is summed in float32, as TVM does. COMM_REDUCE.
* `nn.l2_normalize(data, eps, axis)`: data / sqrt(max(sum(data², axis), eps)). TVM declares no
  fusion pattern for it, which FuseOps reads as OPAQUE; it has a kernel of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type
from compiler.ops.broadcast import load_broadcast
from compiler.ops.common import broadcast_shapes, check_arity, normalize_axis, same_dtype, static_dims, tensor_arg
from compiler.ops.domain import FLOAT_DTYPES, Domain, Draw
from compiler.ops.elemwise import BOOL, FLOAT, require_kind
from compiler.ops.kernels.common import input_buffers
from compiler.ops.reduce import REDUCE_ATTRS, over_reduced_axes, reduce_axes, reduce_rule, reduced_shape, reduction
from compiler.ops.shape_rules import same_shape_rule
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, Index, KernelContext, Reduction, TensorView
from compiler.tir.stmt import Allocate, For, ForKind, LetStmt, Stmt, Store, seq

# --- reduce attrs, drawn ------------------------------------------------------------------------


def draw_reduce_attrs(d: Draw, rank: int) -> dict[str, object]:
    """ReduceAttrs for a rank-`rank` tensor: every axis form (None, one axis, several, none at
    all, negative ones) with and without keepdims and exclude."""
    forms: list[object] = [None, []]
    if rank:
        forms += [[d.axis(rank)], list(d.subset(range(rank), min_size=1))]
        forms.append([a - rank if d.boolean() else a for a in d.subset(range(rank), min_size=1)])
    return {"axis": d.choice(forms), "keepdims": d.boolean(), "exclude": d.boolean()}


# --- all / any ----------------------------------------------------------------------------------


def _logical_reduce_domain(d: Draw) -> Sample:
    shape = d.shape(min_rank=0, max_rank=4)
    return Sample((TensorType(shape, "bool"),), draw_reduce_attrs(d, len(shape)))


_LOGICAL_SAMPLES = (
    Sample((np.array([[True, True, False], [True, True, True]]),)),
    Sample((np.array([[True, True, False], [True, True, True]]),), {"axis": [1]}),
    Sample((np.array([[False, False, False], [True, False, False]]),), {"axis": [0], "keepdims": True}),
    Sample((TensorType((2, 3, 4), "bool"),), {"axis": [0, 2], "exclude": True}),
    Sample((TensorType((2, 3, 4), "bool"),), {"axis": [-1, 0], "keepdims": True}),
    Sample((TensorType((3,), "bool"),), {"axis": []}),
    Sample((np.array(True),)),
)

# Over bools, min is "all true" and max is "any true".
reduction(
    "all", lambda x, axes, attrs: np.all(x, axis=axes), BOOL, samples=_LOGICAL_SAMPLES,
    lowering=over_reduced_axes("min"), domain=Domain(_logical_reduce_domain),
)
reduction(
    "any", lambda x, axes, attrs: np.any(x, axis=axes), BOOL, samples=_LOGICAL_SAMPLES,
    lowering=over_reduced_axes("max"), domain=Domain(_logical_reduce_domain),
)


# --- variance -----------------------------------------------------------------------------------

VARIANCE_ATTRS = REDUCE_ATTRS + (AttrSpec("unbiased", "bool", False),)


def _variance_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "variance"
    check_arity(types, 2, op)
    data, mean = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    require_kind(data, FLOAT, op)
    same_dtype(data, mean, op)
    if data.ndim == 0:
        raise TypeRelationError(f"{op}: data {data} must have at least one dimension")
    if mean.ndim != data.ndim:
        raise TypeRelationError(f"{op}: mean {mean} must have the rank of data {data}")
    try:
        fits = broadcast_shapes(data, mean, op) == data.shape
    except TypeRelationError:
        fits = False
    if not fits:
        raise TypeRelationError(f"{op}: mean {mean} does not broadcast to data {data}")
    axes = reduce_axes(data.ndim, attrs, op)
    return TensorType(reduced_shape(data.shape, axes, bool(attrs["keepdims"])), data.dtype)


def _count(shape: Sequence[int], axes: Sequence[int], unbiased: bool) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64)) - int(unbiased)


def _variance(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, mean = arrays
    axes = reduce_axes(data.ndim, attrs, "variance")
    diff = data.astype(np.float64) - mean.astype(np.float64)
    total = np.sum(diff * diff, axis=axes)
    out = total / _count(data.shape, axes, bool(attrs["unbiased"]))
    return np.asarray(out).reshape(reduced_shape(data.shape, axes, bool(attrs["keepdims"]))).astype(data.dtype)


def _variance_lowering(inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> Reduction:
    data, mean = inputs
    axes = reduce_axes(data.ndim, attrs, "variance")
    keepdims = bool(attrs["keepdims"])
    # float16 squares are summed in float32, as TVM does.
    acc_dtype = "float32" if data.dtype == "float16" else data.dtype

    def body(out_idx: Index, red_idx: Index) -> te.PrimExpr:
        kept = iter(i for pos, i in enumerate(out_idx) if not (keepdims and pos in axes))
        reduced = iter(red_idx)
        idx = tuple(next(reduced) if d in axes else next(kept) for d in range(data.ndim))
        diff = te.cast(acc_dtype, data[idx]) - te.cast(acc_dtype, load_broadcast(mean, idx))
        return diff * diff

    extents = tuple(data.shape[a] for a in axes)
    count = _count(static_dims(extents, "variance"), range(len(extents)), bool(attrs["unbiased"]))
    return Reduction(
        combiner="sum",
        extents=extents,
        body=body,
        dtype=acc_dtype,
        finalize=lambda acc, out_idx: acc / te.const(float(count), acc_dtype),
    )


def _variance_domain(d: Draw) -> Sample:
    shape = d.shape(min_rank=1, max_rank=4)
    attrs = draw_reduce_attrs(d, len(shape))
    axes = reduce_axes(len(shape), Attrs({**attrs}), "variance")
    count = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    # unbiased divides by count - 1, which must not be zero.
    attrs["unbiased"] = count > 1 and d.boolean()
    # The mean as relay.variance's callers pass it (keepdims) or any shape broadcasting to data.
    mean_shape = d.choice((reduced_shape(shape, axes, True), shape, tuple(1 for _ in shape)))
    dtype = d.dtype(FLOAT_DTYPES)
    return Sample((TensorType(shape, dtype), TensorType(mean_shape, dtype)), attrs)


register(
    OpDef(
        name="variance",
        num_inputs=2,
        type_rel=_variance_rel,
        pattern=OpPattern.COMM_REDUCE,
        reference=_variance,
        reduction=_variance_lowering,
        shape_func=reduce_rule("variance"),  # data's dims reduced; mean only broadcasts to data
        attrs=VARIANCE_ATTRS,
        samples=(
            Sample((TensorType((2, 3, 4), "float32"), TensorType((1, 1, 1), "float32"))),
            Sample((TensorType((2, 3, 4), "float32"), TensorType((2, 1, 4), "float32")), {"axis": [1]}),
            Sample(
                (TensorType((2, 3, 4), "float64"), TensorType((2, 3, 1), "float64")),
                {"axis": [-1], "keepdims": True, "unbiased": True},
            ),
            Sample((TensorType((2, 3, 4), "float32"), TensorType((1, 3, 1), "float32")), {"axis": [1], "exclude": True}),
            Sample((TensorType((4, 5), "float16"), TensorType((4, 1), "float16")), {"axis": [1], "unbiased": True}),
            Sample((TensorType((3, 2), "float32"), TensorType((3, 2), "float32")), {"axis": []}),
        ),
        domain=Domain(_variance_domain, accumulates=True),
    )
)


# --- nn.l2_normalize ----------------------------------------------------------------------------


def _l2_axes(ndim: int, attrs: Attrs) -> tuple[int, ...]:
    axis = attrs["axis"]
    assert isinstance(axis, tuple)
    axes = sorted(normalize_axis(a, ndim, "nn.l2_normalize") for a in axis)
    if len(set(axes)) != len(axes):
        raise TypeRelationError(f"nn.l2_normalize: axis {list(axis)} names the same axis twice for rank {ndim}")
    return tuple(axes)


def _l2_normalize_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.l2_normalize"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    require_kind(data, FLOAT, op)
    _l2_axes(data.ndim, attrs)
    return data


def _l2_normalize(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = arrays[0]
    axes = _l2_axes(x.ndim, attrs)
    x64 = x.astype(np.float64)
    eps = float(np.asarray(attrs["eps"]).astype(x.dtype))  # TVM compares in the data dtype
    norm = np.sqrt(np.maximum(np.sum(x64 * x64, axis=axes, keepdims=True), eps))
    return (x64 / norm).astype(x.dtype)


def _l2_normalize_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    """For each position of the kept axes: the sum of squares over the normalized axes into a
    local accumulator, then every element divided by the norm."""
    (data,) = input_buffers(inputs, "nn.l2_normalize")
    dims = static_dims(data.shape, "nn.l2_normalize")
    axes = _l2_axes(len(dims), attrs)
    dtype = data.dtype
    acc_dtype = "float32" if dtype == "float16" else dtype
    kept_vars = {a: ctx.var(f"i{a}") for a in range(len(dims)) if a not in axes}

    def index(red_vars: Sequence[te.Var]) -> tuple[te.PrimExpr, ...]:
        reduced = iter(red_vars)
        return tuple(kept_vars[a] if a in kept_vars else next(reduced) for a in range(len(dims)))

    def nest(red_vars: Sequence[te.Var], body: Stmt) -> Stmt:
        for var, a in reversed(list(zip(red_vars, axes))):
            body = For(var, te.const(0), te.const(dims[a]), body)
        return body

    acc = te.Buffer(ctx.fresh("sum_sq"), (1,), acc_dtype, scope="local")
    zero = te.const(0)
    sum_vars = [ctx.var("k") for _ in axes]
    x = te.cast(acc_dtype, data[index(sum_vars)])
    accumulate = nest(sum_vars, Store(acc, (zero,), acc[zero] + x * x))
    norm = te.Var(ctx.fresh("norm"), acc_dtype)
    eps = float(np.asarray(attrs["eps"]).astype(dtype))
    store_vars = [ctx.var("k") for _ in axes]
    idx = index(store_vars)
    value = te.cast(dtype, te.cast(acc_dtype, data[idx]) / norm)
    store = nest(store_vars, Store(out, idx, te.cast(out.dtype, epilogue(value, idx))))
    body: Stmt = Allocate(acc, seq(
        Store(acc, (zero,), te.const(0.0, acc_dtype)),
        accumulate,
        LetStmt(norm, te.intrin("sqrt", te.maximum(acc[zero], te.const(eps, acc_dtype))), store),
    ))
    kept = list(kept_vars.items())
    for k, (a, var) in reversed(list(enumerate(kept))):
        kind = ForKind.PARALLEL if k == 0 and ctx.parallel and data.num_elements >= 1 << 14 else ForKind.SERIAL
        body = For(var, zero, te.const(dims[a]), body, kind)
    return body


def _l2_normalize_domain(d: Draw) -> Sample:
    shape = d.shape(min_rank=1, max_rank=4)
    axis = d.choice(([d.axis(len(shape))], list(d.subset(range(len(shape)), min_size=1))))
    # A large eps is the norm wherever the data is small; a tiny one never is.
    eps = d.choice((1e-12, 1e-5, 0.5, 4.0))
    return Sample((TensorType(shape, d.dtype(FLOAT_DTYPES)),), {"eps": eps, "axis": axis})


register(
    OpDef(
        name="nn.l2_normalize",
        num_inputs=1,
        type_rel=_l2_normalize_rel,
        pattern=OpPattern.OPAQUE,
        reference=_l2_normalize,
        kernel=_l2_normalize_kernel,
        shape_func=same_shape_rule,
        attrs=(AttrSpec("eps", "float"), AttrSpec("axis", "ints")),
        samples=(
            Sample((TensorType((2, 3, 4), "float32"),), {"eps": 1e-12, "axis": [1]}),
            Sample((TensorType((2, 3, 4), "float32"),), {"eps": 1e-5, "axis": [0, 2]}),
            Sample((TensorType((4, 5), "float64"),), {"eps": 0.5, "axis": [-1]}),
            Sample((TensorType((3, 4), "float16"),), {"eps": 1e-3, "axis": [1, 0]}),
            Sample((np.zeros((2, 3), np.float32),), {"eps": 1e-10, "axis": [1]}),
        ),
        domain=Domain(_l2_normalize_domain, accumulates=True),
    )
)
