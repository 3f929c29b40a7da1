"""Losses: nn.cross_entropy and nn.nll_loss, TVM's formulas.

* cross_entropy(predictions, targets): both (batch, classes) of one float dtype; the scalar
  -sum(log(predictions) * targets) / batch. OPAQUE, as in TVM.
* nll_loss(predictions, targets, weights, reduction, ignore_index): predictions (N, C, d...),
  integer targets (N, d...) holding class indices, weights (C,). Each element's loss is
  -predictions[n, target, d...] * weights[target], or 0 where target == ignore_index;
  reduction "none" returns them (shaped like targets), "sum" their sum and "mean" their sum
  divided by the sum of the weights of the targets not ignored (NaN when every target is
  ignored). Targets outside [0, C) other than ignore_index are undefined behaviour in TVM; the
  compiled loops clamp them into range. OUT_ELEMWISE_FUSABLE, as in TVM.

Both are kernels: one pass over the elements, accumulating in the data dtype (float32 for
float16 data).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type
from compiler.ops.common import check_arity, dims_equal, tensor_arg
from compiler.ops.domain import Domain, Draw
from compiler.ops.kernels.common import buffer_dims, input_buffers, unflatten
from compiler.ops.nn import float_arg
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as ShapeDim
from compiler.ops.shape_rules import ShapeArg, dims, static_rule
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext, TensorView
from compiler.tir.stmt import Allocate, For, LetStmt, Stmt, Store, seq

F32 = "float32"
FLOATS = ("float32", "float32", "float64", "float16")


def _acc_dtype(dtype: str) -> str:
    return F32 if dtype == "float16" else dtype


def _let_all(names: Sequence[te.Var], values: Sequence[te.PrimExpr], body: Stmt) -> Stmt:
    for var, value in reversed(list(zip(names, values))):
        body = LetStmt(var, value, body)
    return body


# --- nn.cross_entropy -------------------------------------------------------------------------------


def _cross_entropy_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.cross_entropy"
    check_arity(types, 2, op)
    predictions, targets = float_arg(types, 0, op), tensor_arg(types, 1, op)
    if predictions.ndim != 2 or targets.ndim != 2:
        raise TypeRelationError(f"{op} expects 2-D (batch, classes) predictions and targets, got {predictions} "
                                f"and {targets}")
    if not all(dims_equal(a, b) for a, b in zip(predictions.shape, targets.shape)):
        raise TypeRelationError(f"{op}: shapes of predictions {predictions} and targets {targets} differ")
    if targets.dtype != predictions.dtype:
        raise TypeRelationError(f"{op} needs predictions and targets of one dtype, got {predictions} and {targets}")
    return TensorType((), predictions.dtype)


def _nll_loss_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    """Unreduced, one loss per target; reduced, a scalar."""
    return [dims(inputs[1], "targets") if attrs["reduction"] == "none" else ()]


def _cross_entropy(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, y = (v.astype(np.float64) for v in a)
    return np.asarray(-np.sum(np.log(x) * y) / x.shape[0]).astype(a[0].dtype)


def _cross_entropy_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    x, y = input_buffers(inputs, "nn.cross_entropy")
    n, c = buffer_dims(x)
    acc_dtype = _acc_dtype(x.dtype)
    zero = te.const(0)
    acc = te.Buffer(ctx.fresh("acc"), (1,), acc_dtype, scope="local")
    i, j = ctx.var("i"), ctx.var("j")
    term = te.intrin("log", te.cast(acc_dtype, x[i, j])) * te.cast(acc_dtype, y[i, j])
    total = For(i, zero, te.const(n), For(j, zero, te.const(c), Store(acc, (zero,), acc[zero] + term)))
    result = -acc[zero] / te.const(float(n), acc_dtype)
    store = Store(out, (), te.cast(out.dtype, epilogue(te.cast(out.dtype, result), ())))
    return Allocate(acc, seq(Store(acc, (zero,), te.const(0.0, acc_dtype)), total, store))


def _cross_entropy_domain(d: Draw) -> Sample:
    shape = (d.integer(1, 4), d.integer(1, 6))
    dtype = d.dtype(FLOATS)
    # Predictions are probabilities (log needs them positive); targets share the range.
    return Sample((TensorType(shape, dtype), TensorType(shape, dtype)), low=0.05, high=1.0)


register(
    OpDef(
        name="nn.cross_entropy",
        num_inputs=2,
        type_rel=_cross_entropy_rel,
        pattern=OpPattern.OPAQUE,
        reference=_cross_entropy,
        kernel=_cross_entropy_kernel,
        shape_func=static_rule,  # a scalar
        samples=(
            Sample((TensorType((4, 5), F32), TensorType((4, 5), F32)), low=0.05, high=1.0),
            Sample((TensorType((1, 3), "float64"), TensorType((1, 3), "float64")), low=0.1, high=1.0),
            Sample((TensorType((3, 2), "float16"), TensorType((3, 2), "float16")), low=0.1, high=1.0),
        ),
        domain=Domain(draw=_cross_entropy_domain, ulps=16, accumulates=True),
    )
)


# --- nn.nll_loss --------------------------------------------------------------------------------------

REDUCTIONS = ("mean", "sum", "none")


def _nll_loss_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.nll_loss"
    check_arity(types, 3, op)
    predictions = float_arg(types, 0, op)
    targets, weights = tensor_arg(types, 1, op), float_arg(types, 2, op)
    if attrs["reduction"] not in REDUCTIONS:
        raise TypeRelationError(f"{op}: unknown reduction {attrs['reduction']!r} (expected mean, sum or none)")
    if predictions.ndim < 2 or predictions.ndim != targets.ndim + 1:
        raise TypeRelationError(
            f"{op}: predictions {predictions} must be (N, C, d...) with targets {targets} (N, d...)"
        )
    expected = (predictions.shape[0],) + tuple(predictions.shape[2:])
    if not all(dims_equal(a, b) for a, b in zip(expected, targets.shape)):
        raise TypeRelationError(f"{op}: targets {targets} do not match predictions {predictions} without axis 1")
    if weights.ndim != 1 or not dims_equal(weights.shape[0], predictions.shape[1]):
        raise TypeRelationError(f"{op}: weights {weights} must be 1-D with one weight per class of {predictions}")
    if weights.dtype != predictions.dtype:
        raise TypeRelationError(f"{op}: predictions {predictions} and weights {weights} need one float dtype")
    if not targets.dtype.startswith("int"):
        raise TypeRelationError(f"{op}: targets must be signed integers, got {targets}")
    shape = targets.shape if attrs["reduction"] == "none" else ()
    return TensorType(shape, predictions.dtype)


def _nll_loss(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    predictions, targets, weights = a
    dtype = predictions.dtype
    target = targets.astype(np.int64)
    valid = target != attrs["ignore_index"]
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(predictions.astype(np.float64), safe[:, None], axis=1)[:, 0]
    weight = np.where(valid, weights.astype(np.float64)[safe], 0.0)
    loss = -picked * weight
    if attrs["reduction"] == "none":
        return loss.astype(dtype)
    total = np.sum(loss)
    if attrs["reduction"] == "sum":
        return np.asarray(total).astype(dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(total / np.sum(weight)).astype(dtype)


def _nll_loss_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    predictions, targets, weights = input_buffers(inputs, "nn.nll_loss")
    dims = buffer_dims(targets)
    classes = buffer_dims(predictions)[1]
    acc_dtype = _acc_dtype(predictions.dtype)
    zero = te.const(0)
    total = 1
    for d in dims:
        total *= d
    flat = ctx.var("e")
    coords = [ctx.var(f"t{k}") for k in range(len(dims))]
    label = ctx.var("label")
    valid = te.Var(ctx.fresh("valid"), "bool")
    # Clamped so the loads stay in bounds for ignored (or invalid) targets.
    cls = te.maximum(te.minimum(label, classes - 1), 0)
    picked = te.cast(acc_dtype, predictions[(coords[0], cls) + tuple(coords[1:])])
    weight = te.select(valid, te.cast(acc_dtype, weights[cls]), te.const(0.0, acc_dtype))
    term = -picked * weight

    def element(body: Stmt) -> Stmt:
        target = targets[tuple(coords)]
        counted = te.ne(te.cast("int64", target), te.const(attrs["ignore_index"], "int64"))
        inner = LetStmt(label, te.cast("int32", target), LetStmt(valid, counted, body))
        return For(flat, zero, te.const(total), _let_all(coords, unflatten(flat, dims), inner))

    if attrs["reduction"] == "none":
        idx = tuple(coords)
        return element(Store(out, idx, te.cast(out.dtype, epilogue(te.cast(out.dtype, term), idx))))
    acc = te.Buffer(ctx.fresh("acc"), (2,), acc_dtype, scope="local")
    one = te.const(1)
    accumulate = element(seq(
        Store(acc, (zero,), acc[zero] + term),
        Store(acc, (one,), acc[one] + weight),
    ))
    result = acc[zero] / acc[one] if attrs["reduction"] == "mean" else acc[zero]
    store = Store(out, (), te.cast(out.dtype, epilogue(te.cast(out.dtype, result), ())))
    init = seq(Store(acc, (zero,), te.const(0.0, acc_dtype)), Store(acc, (one,), te.const(0.0, acc_dtype)))
    return Allocate(acc, seq(init, accumulate, store))


def _nll_loss_domain(d: Draw) -> Sample:
    n, classes = d.integer(1, 4), d.integer(1, 5)
    extra = tuple(d.integer(1, 3) for _ in range(d.integer(0, 2)))
    dtype = d.dtype(FLOATS)
    target_dtype = d.dtype(("int32", "int64", "int8"))
    ignore = d.choice((-100, 0, classes - 1, -1))
    count = n * int(np.prod(extra, dtype=np.int64))
    labels = [d.choice((d.integer(0, classes - 1), ignore)) for _ in range(count)]
    if all(label == ignore for label in labels):
        # The mean of nothing is NaN: keep one target counted.
        others = [c for c in range(classes) if c != ignore]
        if others:
            labels[0] = others[0]
        else:
            ignore = -100
    targets = np.array(labels, dtype=target_dtype).reshape((n,) + extra)
    attrs = {"reduction": d.choice(REDUCTIONS), "ignore_index": ignore}
    return Sample(
        (TensorType((n, classes) + extra, dtype), targets, TensorType((classes,), dtype)),
        attrs, low=0.1, high=2.0,
    )


register(
    OpDef(
        name="nn.nll_loss",
        num_inputs=3,
        type_rel=_nll_loss_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=_nll_loss,
        kernel=_nll_loss_kernel,
        shape_func=_nll_loss_shape,
        attrs=(AttrSpec("reduction", "str", "mean"), AttrSpec("ignore_index", "int", REQUIRED)),
        samples=(
            Sample(
                (TensorType((4, 3), F32), np.array([0, 2, 1, 2], dtype="int32"), TensorType((3,), F32)),
                {"ignore_index": -100}, low=0.1, high=2.0,
            ),
            Sample(
                (TensorType((2, 4, 3), F32), np.array([[3, 1, 0], [1, 1, 2]], dtype="int64"),
                 TensorType((4,), F32)),
                {"reduction": "sum", "ignore_index": 1}, low=0.1, high=2.0,
            ),
            Sample(
                (TensorType((3, 2), "float64"), np.array([1, -1, 0], dtype="int32"), TensorType((2,), "float64")),
                {"reduction": "none", "ignore_index": -1}, low=0.1, high=2.0,
            ),
            Sample(
                (TensorType((2, 3, 2, 2), F32), np.array([[[0, 2], [2, 1]], [[1, 1], [0, 0]]], dtype="int32"),
                 TensorType((3,), F32)),
                {"reduction": "mean", "ignore_index": 2}, low=0.1, high=2.0,
            ),
        ),
        domain=Domain(draw=_nll_loss_domain, ulps=16, accumulates=True),
    )
)
