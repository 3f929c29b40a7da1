"""Quantized (QNN) operators: quantize, dequantize, requantize, fixed_point_multiply, the
quantized elementwise arithmetic qnn.add / qnn.subtract / qnn.mul, qnn.leaky_relu and the
quantized float functions (qnn.tanh, qnn.sigmoid, ...) and qnn.concatenate (whose scales and
zero points are tuples of constants: InferType passes a tuple of Constants' data as one value).

Semantics are those of TVM's QNN canonicalization (src/relay/qnn/op/*.cc, src/relay/qnn/utils.cc),
which rewrites every qnn op into integer Relay arithmetic before fusion. We lower the ops
directly, with exactly that arithmetic, so the compiled C is bit-exact with TVM's integer
results and with the numpy references here:

* Fixed-point multiplier of a positive real multiplier M (a ratio of scales, computed in double
  from the float32 scales): `frexp(M) = (f, e)` with f in [0.5, 1); `q = round(f * 2**31)`
  (halves away from zero, as std::round); q == 2**31 becomes 2**30 with e + 1. M == 0 gives
  (0, 0).
* Fixed-point multiply of an integer x by (q, e) (TVM's FixedPointMultiply and the
  q_multiply_shift intrinsic, identical for both): in int64,
  `((x << max(e, 0)) * q + r) >> (31 + max(-e, 0))` with an arithmetic right shift, then a cast
  to int32; `r = 2**(30 + max(-e, 0))` for rounding "UPWARD" (halves toward +inf), and for
  "TONEAREST" the same r when the product is >= 0 and r - 1 when negative (halves away from
  zero). TVM's power-of-two shortcut (q == 2**30) computes the same values.
* requantize (compute_dtype "int64", the RequantizeConfig default that "None" means):
  `t = int32(x) - zp_in`, `t = fpm(t, scale_in / scale_out)` (skipped when the per-tensor scales
  are equal: it would be the identity), `t = t + zp_out`, all int32 as TVM emits them, then
  clipped to out_dtype and cast, except that an int32 result is not clipped. rounding "None"
  means the config default "UPWARD". compute_dtype "float32"/"float64" (RequantizeLowerFP):
  `(float(x) - zp_in) * float(multiplier) + zp_out` in that type, rounded by floor(v + 0.5)
  (UPWARD) or C's round (TONEAREST), cast to int32, clipped likewise.
* quantize: `cast(clip(round(x / scale) + float32(zp), qmin, qmax))` in float32, round being
  C's round (halves away from zero).
* dequantize: `float32(int32(x) - zp) * scale` in float32; for out_dtype float16, clipped to
  +-65504 and cast.
* qnn.add / qnn.subtract: each operand is requantized (UPWARD) to the output's scale and zero
  point in int32 unless its own are scalars equal to them; then `a' + b' - zp_out` (add) or
  `a' - b' + zp_out` (subtract), clipped and cast to the operands' dtype. An operand's scale and
  zero point may be per channel along lhs_axis / rhs_axis of that operand (axis 0 for ranks
  0 and 1, as TVM); the output's are scalars.
* qnn.mul: `(a - zp_a) * (b - zp_b)` in int32, requantized from scale `float32(s_a * s_b)`
  (zero point 0) to the output scale and zero point, in the operands' dtype. Per-channel scales
  need lhs_axis == rhs_axis and equal lengths (TVM rejects the rest); the product's scale is
  then the double product rounded to float32, per channel along lhs_axis.
* qnn.leaky_relu(alpha): `q = requantize-or-upcast(x)` to the output parameters (int32), then
  where x < zp_in: `fpm(q, alpha) + fpm(zp_out, 1 - alpha)` (UPWARD), else q; clipped and cast.
* qnn.tanh, sigmoid, exp, sqrt, rsqrt, erf, log, abs, hardswish: TVM canonicalizes them as
  dequantize (float32), the float function, quantize to the input dtype with the output scale
  and zero point. The function is evaluated in double here (C's libm in the loops, numpy in the
  reference) and rounded once to float32, so that the float32 value both see is the correctly
  rounded one (in all but vanishingly rare cases) and the quantized integers agree bit for bit;
  TVM's own float32 kernels may differ from it by an ulp, and so by one quantization step at a
  rounding boundary. sigmoid is 1 / (1 + exp(-x)) and hardswish x * clip(x + 3, 0, 6) / 6, as
  Relay writes them.

* qnn.softmax: TVM's integer approximation (see its section); fixed_point_multiply_per_axis:
  q_multiply_shift_per_axis with run-time parameter tensors (see its section).

Scales and zero points must be constants, as TVM requires them to be (it reads their values
while canonicalizing). Their types are checked like TVM's AssignType: a scalar, or a vector as
long as the input's `axis` dim (per-channel). The type relations read their values through
`extras["constant_args"]` (InferType passes each Constant argument's data) and a missing value
is a type error naming the argument. `extras["constant_args"]` lists the indices of those
arguments; FuseOps keeps exactly those constants inside the primitive function (a constant
data tensor still becomes a parameter), so the lowering sees them too: each compute reads the values from its
input views (`TensorView.data`) and bakes the derived integers (multipliers, shifts, zero
points, rounding offsets) into the loop body as literals; a per-channel value is a balanced
`select` over the channel index. Deriving them at lowering time from the same constants (with
the same Python function the reference uses) keeps the call's attrs exactly TVM's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, TupleType, Type
from compiler.ops.broadcast import broadcast_index
from compiler.ops.common import broadcast_shapes, check_arity, dims_equal, normalize_axis, tensor_arg
from compiler.ops.domain import Domain, Draw, float_values, int_values, tensor_shape
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim, ShapeArg, broadcast_dims, dims, fields, fill, int64, same_shape_rule
from compiler.tir.compute import Epilogue, Index, KernelContext, TensorView
from compiler.tir.expr import Buffer, Const, PrimExpr, binary, cast, intrin, maximum, minimum, select
from compiler.tir.stmt import Allocate, For, Stmt, Store, seq

Values = Sequence["np.ndarray | None"]

QUANTIZED_DTYPES = ("int8", "uint8", "int16", "uint16", "int32")
F32 = "float32"
I32 = "int32"
I64 = "int64"


# --- fixed-point arithmetic (shared with qnn_linear) ------------------------------------------------


def fixed_point_multiplier_shift(multiplier: float) -> tuple[int, int]:
    """TVM's GetFixedPointMultiplierShift: (q, e) with multiplier ~= q * 2**(e - 31)."""
    if multiplier == 0.0:
        return 0, 0
    significand, exponent = math.frexp(multiplier)
    scaled = significand * float(1 << 31)  # exact: a power-of-two scaling
    q = int(math.floor(abs(scaled) + 0.5))  # std::round: halves away from zero
    q = q if scaled >= 0 else -q
    if q == 1 << 31:
        q //= 2
        exponent += 1
    return q, exponent


def check_rounding(rounding: str, op: str) -> bool:
    """Whether `rounding` (an attr value) means TONEAREST; "None" is the config default UPWARD."""
    if rounding not in ("None", "UPWARD", "TONEAREST"):
        raise TypeRelationError(f'{op}: rounding must be "UPWARD" or "TONEAREST", got "{rounding}"')
    return rounding == "TONEAREST"


def fixed_point_multiply_np(x: np.ndarray, q: np.ndarray, e: np.ndarray, tonearest: bool) -> np.ndarray:
    """The int32 result of TVM's fixed-point multiply of int64 `x` by per-element (q, e)."""
    x = np.asarray(x, dtype=np.int64)
    q = np.asarray(q, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    left = np.maximum(e, 0)
    total = np.maximum(-e, 0) + 31
    product = (x << left) * q
    rounder = np.left_shift(np.int64(1), total - 1)
    if tonearest:
        rounder = np.where(product >= 0, rounder, rounder - 1)
    return np.asarray((product + rounder) >> total).astype(np.int32)


def per_channel(values: Sequence[int], channel: PrimExpr | None, dtype: str) -> PrimExpr:
    """A literal per channel, chosen by `channel` (a balanced select tree); one literal if all agree."""
    if len(set(values)) == 1 or channel is None:
        return Const(int(values[0]), dtype)

    def pick(lo: int, hi: int) -> PrimExpr:
        if hi - lo == 1:
            return Const(int(values[lo]), dtype)
        mid = (lo + hi) // 2
        return select(channel < mid, pick(lo, mid), pick(mid, hi))

    return pick(0, len(values))


def fixed_point_multiply_expr(
    x: PrimExpr, qs: Sequence[int], es: Sequence[int], channel: PrimExpr | None, tonearest: bool
) -> PrimExpr:
    """The loop-IR form of `fixed_point_multiply_np` on an int64 `x`, cast to int32."""
    lefts = [1 << max(e, 0) for e in es]
    totals = [max(-e, 0) + 31 for e in es]
    product = x * per_channel(lefts, channel, I64) * per_channel(qs, channel, I64)
    rounder = per_channel([1 << (t - 1) for t in totals], channel, I64)
    if tonearest:
        rounder = select(product >= Const(0, I64), rounder, rounder - Const(1, I64))
    # An arithmetic right shift by a positive amount is a floor division by the power of two.
    return cast(I32, (product + rounder) // per_channel([1 << t for t in totals], channel, I64))


def qrange(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def clip_cast_np(x: np.ndarray, dtype: str) -> np.ndarray:
    lo, hi = qrange(dtype)
    return np.asarray(np.clip(x.astype(np.int64), lo, hi)).astype(dtype)


def clip_cast_expr(x: PrimExpr, dtype: str) -> PrimExpr:
    lo, hi = qrange(dtype)
    return cast(dtype, maximum(minimum(x, Const(hi, x.dtype)), Const(lo, x.dtype)))


# --- quantization parameters ---------------------------------------------------------------------


def qparam_type(
    types: Sequence[Type], k: int, op: str, name: str, dtype: str, axis_dim: object | None
) -> TensorType:
    """Argument `k`, a scale (float32) or zero point (int32): a scalar, or per-channel when
    `axis_dim` is given (a vector of that length, as TVM's AssignType)."""
    ty = tensor_arg(types, k, op)
    if ty.dtype != dtype:
        raise TypeRelationError(f"{op}: {name} must be {dtype}, got {ty}")
    if ty.ndim == 0 or (ty.ndim == 1 and ty.shape[0] == 1):
        return ty  # one value (TVM treats a one-element tensor as a scalar)
    if axis_dim is None:
        raise TypeRelationError(f"{op}: {name} must be a scalar, got {ty}")
    if ty.ndim != 1 or not (ty.shape[0] == axis_dim or not isinstance(axis_dim, int) or not isinstance(ty.shape[0], int)):
        raise TypeRelationError(f"{op}: {name} must be a scalar or a vector of the axis length {axis_dim}, got {ty}")
    return ty


def constant_value(values: Values, k: int, op: str, name: str) -> np.ndarray:
    """The value of constant argument `k`, or a type error saying it must be a constant."""
    value = values[k] if k < len(values) else None
    if value is None:
        raise TypeRelationError(f"{op}: {name} must be a constant (its value fixes the integer arithmetic)")
    return np.asarray(value)


def check_scale(value: np.ndarray, op: str, name: str) -> None:
    if not np.all(np.isfinite(value)) or np.any(value <= 0):
        raise TypeRelationError(f"{op}: {name} must be positive and finite, got {value.tolist()}")


def out_dtype_of(attrs: Attrs, op: str, allowed: Sequence[str] = QUANTIZED_DTYPES) -> str:
    dtype = str(attrs["out_dtype"])
    if dtype not in allowed:
        raise TypeRelationError(f"{op}: out_dtype must be one of {', '.join(allowed)}, got \"{dtype}\"")
    return dtype


def expand_to_axis(value: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast along `axis` of a rank-`ndim` tensor."""
    value = np.asarray(value)
    if value.size == 1:
        return value.reshape(())
    shape = [1] * ndim
    shape[axis] = -1
    return value.reshape(shape)


def view_data(view: TensorView, op: str) -> np.ndarray:
    if view.data is None:
        raise TypeRelationError(f"{op}: a scale or zero point reached the lowering without its constant value")
    return view.data


def scalars(values: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _axis_of(attrs: Attrs, ndim: int, op: str) -> int:
    return normalize_axis(int(attrs["axis"]), max(ndim, 1), op)


def _axis_dim(data: TensorType, axis: int) -> object:
    return data.shape[axis] if data.ndim else 1


def _channel(idx: Index, ndim: int, axis: int) -> PrimExpr | None:
    return idx[axis] if ndim else None


# --- qnn.quantize --------------------------------------------------------------------------------


def _quantize_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "qnn.quantize"
    check_arity(types, 3, op)
    data = tensor_arg(types, 0, op)
    if data.dtype != F32:
        raise TypeRelationError(f"{op}: data must be float32, got {data}")
    axis = _axis_of(attrs, data.ndim, op)
    qparam_type(types, 1, op, "output_scale", F32, _axis_dim(data, axis))
    qparam_type(types, 2, op, "output_zero_point", I32, _axis_dim(data, axis))
    check_scale(constant_value(values, 1, op, "output_scale"), op, "output_scale")
    constant_value(values, 2, op, "output_zero_point")
    return TensorType(data.shape, out_dtype_of(attrs, op))


def _quantize(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, scale, zp = arrays
    axis = _axis_of(attrs, x.ndim, "qnn.quantize")
    scale = expand_to_axis(scale.astype(np.float32), x.ndim, axis)
    zp = expand_to_axis(zp, x.ndim, axis).astype(np.float32)
    lo, hi = qrange(str(attrs["out_dtype"]))
    rounded = _round_half_away(np.asarray(x / scale, dtype=np.float32))
    shifted = np.asarray(rounded + zp, dtype=np.float32)
    return np.asarray(np.clip(shifted, np.float32(lo), np.float32(hi))).astype(str(attrs["out_dtype"]))


def _round_half_away(x: np.ndarray) -> np.ndarray:
    magnitude = np.abs(x)
    whole = np.floor(magnitude)
    return np.copysign(whole + (magnitude - whole >= 0.5), x).astype(x.dtype)


def _quantize_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    op = "qnn.quantize"
    data = inputs[0]
    axis = _axis_of(attrs, data.ndim, op)
    channel = _channel(idx, data.ndim, axis)
    scale = _float_per_channel(view_data(inputs[1], op), channel)
    zp = per_channel(scalars(view_data(inputs[2], op)), channel, I32)
    out_dtype = str(attrs["out_dtype"])
    lo, hi = qrange(out_dtype)
    value = intrin("round", data[tuple(idx)] / scale) + cast(F32, zp)
    clipped = maximum(minimum(value, Const(float(np.float32(hi)), F32)), Const(float(np.float32(lo)), F32))
    return cast(out_dtype, clipped)


def _float_per_channel(values: np.ndarray, channel: PrimExpr | None, dtype: str = F32) -> PrimExpr:
    """A float literal per channel (rounded to `dtype`), chosen by `channel` like `per_channel`."""
    flat = [float(v) for v in np.asarray(values, dtype=np.float64).astype(dtype).reshape(-1)]
    if len(set(flat)) == 1 or channel is None:
        return Const(flat[0], dtype)

    def pick(lo: int, hi: int) -> PrimExpr:
        if hi - lo == 1:
            return Const(flat[lo], dtype)
        mid = (lo + hi) // 2
        return select(channel < mid, pick(lo, mid), pick(mid, hi))

    return pick(0, len(flat))


def _scale(value: float) -> np.ndarray:
    return np.array(value, dtype=np.float32)


def _zp(value: int) -> np.ndarray:
    return np.array(value, dtype=np.int32)


def _quantize_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, max_rank=4)
    out_dtype = d.choice(("int8", "uint8", "int16", "uint16", "int32"))
    per_axis = d.boolean()
    axis = d.axis(len(shape))
    lo, hi = qrange(out_dtype)
    n = shape[axis] if per_axis else None
    scale = float_values(d, (n,) if n else (), F32, 0.01, 0.5)
    zp = int_values(d, (n,) if n else (), I32, max(lo, -20), min(hi, 20))
    return Sample((TensorType(shape, F32), scale, zp), {"out_dtype": out_dtype, "axis": axis}, low=-3.0, high=3.0)


register(
    OpDef(
        name="qnn.quantize",
        num_inputs=3,
        type_rel=_quantize_rel,
        pattern=OpPattern.ELEMWISE,
        reference=_quantize,
        shape_func=same_shape_rule,
        compute=_quantize_compute,
        attrs=(AttrSpec("out_dtype", "dtype", REQUIRED), AttrSpec("axis", "int", -1)),
        extras={"constant_args": (1, 2)},
        domain=Domain(_quantize_domain),
        samples=(
            Sample((TensorType((2, 5), F32), _scale(0.05), _zp(3)), {"out_dtype": "int8"}, low=-8.0, high=8.0),
            Sample((TensorType((3, 4), F32), _scale(0.5), _zp(128)), {"out_dtype": "uint8"}, low=-80.0, high=80.0),
            Sample(
                (TensorType((2, 3, 2), F32), np.array([0.1, 0.25, 1.0], np.float32), np.array([0, -2, 5], np.int32)),
                {"out_dtype": "int8", "axis": 1},
            ),
            Sample((TensorType((6,), F32), _scale(0.25), _zp(0)), {"out_dtype": "int32"}),
        ),
    )
)


# --- qnn.dequantize ------------------------------------------------------------------------------

DEQUANTIZE_INPUTS = ("int8", "uint8", "int16", "uint16", "int32")


def _dequantize_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "qnn.dequantize"
    check_arity(types, 3, op)
    data = tensor_arg(types, 0, op)
    if data.dtype not in DEQUANTIZE_INPUTS:
        raise TypeRelationError(f"{op}: data must be one of {', '.join(DEQUANTIZE_INPUTS)}, got {data}")
    axis = _axis_of(attrs, data.ndim, op)
    qparam_type(types, 1, op, "input_scale", F32, _axis_dim(data, axis))
    qparam_type(types, 2, op, "input_zero_point", I32, _axis_dim(data, axis))
    check_scale(constant_value(values, 1, op, "input_scale"), op, "input_scale")
    constant_value(values, 2, op, "input_zero_point")
    return TensorType(data.shape, out_dtype_of(attrs, op, ("float32", "float16")))


def _dequantize(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, scale, zp = arrays
    axis = _axis_of(attrs, x.ndim, "qnn.dequantize")
    shifted = x.astype(np.int32) - expand_to_axis(zp.astype(np.int32), x.ndim, axis)
    value = np.asarray(shifted.astype(np.float32) * expand_to_axis(scale.astype(np.float32), x.ndim, axis))
    if attrs["out_dtype"] == "float32":
        return value
    # float16: clipped to its finite range first, as TVM does.
    return np.asarray(np.clip(value, np.float32(-65504.0), np.float32(65504.0))).astype(np.float16)


def _dequantize_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    op = "qnn.dequantize"
    data = inputs[0]
    axis = _axis_of(attrs, data.ndim, op)
    channel = _channel(idx, data.ndim, axis)
    scale = _float_per_channel(view_data(inputs[1], op), channel)
    zp = per_channel(scalars(view_data(inputs[2], op)), channel, I32)
    value = cast(F32, cast(I32, data[tuple(idx)]) - zp) * scale
    if attrs["out_dtype"] == "float32":
        return value
    return cast("float16", maximum(minimum(value, Const(65504.0, F32)), Const(-65504.0, F32)))


def _dequantize_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, max_rank=4)
    dtype = d.choice(DEQUANTIZE_INPUTS)
    axis = d.axis(len(shape))
    n = shape[axis] if d.boolean() else None
    scale = float_values(d, (n,) if n else (), F32, 0.001, 2.0)
    zp = int_values(d, (n,) if n else (), I32, -20, 20)
    attrs = {"axis": axis, "out_dtype": d.choice(("float32", "float32", "float16"))}
    return Sample((TensorType(shape, dtype), scale, zp), attrs, int_high=256)


register(
    OpDef(
        name="qnn.dequantize",
        num_inputs=3,
        type_rel=_dequantize_rel,
        pattern=OpPattern.ELEMWISE,
        reference=_dequantize,
        shape_func=same_shape_rule,
        compute=_dequantize_compute,
        # out_dtype (float32 or float16) is newer than axis; texts without it mean float32.
        attrs=(AttrSpec("out_dtype", "dtype", F32), AttrSpec("axis", "int", -1)),
        extras={"constant_args": (1, 2)},
        domain=Domain(_dequantize_domain),
        samples=(
            # int_high 256 wraps to the whole int8 range.
            Sample((TensorType((2, 5), "int8"), _scale(0.05), _zp(3)), int_high=256),
            Sample((TensorType((3, 4), "uint8"), _scale(0.5), _zp(128)), int_high=256),
            Sample(
                (TensorType((2, 3, 2), "int32"), np.array([0.1, 0.25, 1.0], np.float32), np.array([0, -2, 5], np.int32)),
                {"axis": 1},
                int_high=1000,
            ),
            Sample((TensorType((4,), "int16"), _scale(100.0), _zp(-7)), {"out_dtype": "float16"}, int_high=2000),
        ),
    )
)


# --- qnn.requantize ------------------------------------------------------------------------------

REQUANTIZE_INPUTS = ("int8", "uint8", "int16", "int32", "int64")
REQUANTIZE_OUTPUTS = ("int8", "uint8", "int16", "int32")


def _per_axis_np(values: Sequence[int] | Sequence[float], ndim: int, axis: int, dtype: type) -> np.ndarray:
    """Per-channel values (or one value) shaped to broadcast along `axis`."""
    if len(values) == 1:
        return np.asarray(values[0], dtype=dtype)
    return expand_to_axis(np.asarray(values, dtype=dtype), ndim, axis)


@dataclass(frozen=True)
class Requant:
    """Everything requantize computes with, derived from its constant arguments once.

    `compute` is the compute_dtype: "int64" (TVM's integer path: int32 values, the multiply in
    int64) or "float32"/"float64" (RequantizeLowerFP: the real multiplier in that float type)."""

    in_zp: tuple[int, ...]
    multipliers: tuple[int, ...]
    shifts: tuple[int, ...]
    reals: tuple[float, ...]  # the multipliers as doubles
    skip: bool  # per-tensor scales that are equal: no multiply
    out_zp: int
    tonearest: bool
    compute: str = "int64"

    @staticmethod
    def of(
        in_scale: np.ndarray,
        in_zp: np.ndarray,
        out_scale: np.ndarray,
        out_zp: np.ndarray,
        tonearest: bool,
        compute: str = "int64",
    ) -> Requant:
        in_scale = np.asarray(in_scale, dtype=np.float32)
        out_f = float(np.asarray(out_scale, dtype=np.float32).reshape(-1)[0])
        reals = tuple(float(s) / out_f for s in in_scale.reshape(-1))
        pairs = [fixed_point_multiplier_shift(m) for m in reals]
        skip = in_scale.ndim == 0 and float(in_scale) == out_f
        return Requant(
            tuple(scalars(in_zp)),
            tuple(q for q, _ in pairs),
            tuple(e for _, e in pairs),
            reals,
            skip,
            scalars(out_zp)[0],
            tonearest,
            compute,
        )

    def _finish_np(self, value: np.ndarray, out_dtype: str) -> np.ndarray:
        # TVM skips the clip for an int32 result: the value is already int32.
        return value if out_dtype == I32 else clip_cast_np(value, out_dtype)

    def apply_np(self, x: np.ndarray, axis: int, out_dtype: str) -> np.ndarray:
        ndim = x.ndim
        if self.compute != "int64":
            ft = np.float32 if self.compute == "float32" else np.float64
            value = x.astype(ft) - _per_axis_np(self.in_zp, ndim, axis, np.int64).astype(ft)
            if not self.skip:
                value = value * _per_axis_np(self.reals, ndim, axis, np.float64).astype(ft)
            value = np.asarray(value + ft(self.out_zp), dtype=ft)
            if self.tonearest:
                magnitude = np.abs(value)
                whole = np.floor(magnitude)
                value = np.copysign(whole + (magnitude - whole >= ft(0.5)), value)
            else:
                value = np.floor(np.asarray(value + ft(0.5), dtype=ft))
            return self._finish_np(np.asarray(value).astype(np.int32), out_dtype)
        # Integer path: int32 values (wrapping like the casts and int32 arithmetic TVM emits).
        value = x.astype(np.int64).astype(np.int32).astype(np.int64)
        value = (value - _per_axis_np(self.in_zp, ndim, axis, np.int64)).astype(np.int32)
        if not self.skip:
            q = _per_axis_np(self.multipliers, ndim, axis, np.int64)
            e = _per_axis_np(self.shifts, ndim, axis, np.int64)
            value = fixed_point_multiply_np(value.astype(np.int64), q, e, self.tonearest)
        value = (value.astype(np.int64) + self.out_zp).astype(np.int32)
        return self._finish_np(np.asarray(value), out_dtype)

    def apply_expr(self, x: PrimExpr, channel: PrimExpr | None, out_dtype: str) -> PrimExpr:
        if self.compute != "int64":
            ft = self.compute
            value = cast(ft, x) - cast(ft, per_channel(self.in_zp, channel, I32))
            if not self.skip:
                value = value * _float_per_channel(np.asarray(self.reals), channel, ft)
            value = value + Const(float(self.out_zp), ft)
            if self.tonearest:
                value = intrin("round", value)
            else:
                value = intrin("floor", value + Const(0.5, ft))
            result = cast(I32, value)
        else:
            value = cast(I32, x) - per_channel(self.in_zp, channel, I32)
            if not self.skip:
                value = fixed_point_multiply_expr(cast(I64, value), self.multipliers, self.shifts, channel, self.tonearest)
            result = value + Const(self.out_zp, I32)
        return result if out_dtype == I32 else clip_cast_expr(result, out_dtype)


def _requantize_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "qnn.requantize"
    check_arity(types, 5, op)
    data = tensor_arg(types, 0, op)
    if data.dtype not in REQUANTIZE_INPUTS:
        raise TypeRelationError(f"{op}: data must be one of {', '.join(REQUANTIZE_INPUTS)}, got {data}")
    axis = _axis_of(attrs, data.ndim, op)
    qparam_type(types, 1, op, "input_scale", F32, _axis_dim(data, axis))
    qparam_type(types, 2, op, "input_zero_point", I32, _axis_dim(data, axis))
    qparam_type(types, 3, op, "output_scale", F32, None)
    qparam_type(types, 4, op, "output_zero_point", I32, None)
    check_rounding(str(attrs["rounding"]), op)
    if attrs["compute_dtype"] not in ("None", "int64", "float32", "float64"):
        raise TypeRelationError(
            f'{op}: compute_dtype must be "int64", "float32" or "float64", got "{attrs["compute_dtype"]}"'
        )
    out_dtype = out_dtype_of(attrs, op, REQUANTIZE_OUTPUTS)
    for k, name in ((1, "input_scale"), (3, "output_scale")):
        check_scale(constant_value(values, k, op, name), op, name)
    constant_value(values, 2, op, "input_zero_point")
    constant_value(values, 4, op, "output_zero_point")
    return TensorType(data.shape, out_dtype)


def _requant_of(scale_in: np.ndarray, zp_in: np.ndarray, scale_out: np.ndarray, zp_out: np.ndarray, attrs: Attrs) -> Requant:
    tonearest = check_rounding(str(attrs["rounding"]), "qnn.requantize")
    compute = "int64" if attrs["compute_dtype"] == "None" else str(attrs["compute_dtype"])
    return Requant.of(scale_in, zp_in, scale_out, zp_out, tonearest, compute)


def _requantize(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = arrays[0]
    axis = _axis_of(attrs, x.ndim, "qnn.requantize")
    return _requant_of(*arrays[1:], attrs).apply_np(x, axis, str(attrs["out_dtype"]))


def _requantize_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    op = "qnn.requantize"
    data = inputs[0]
    axis = _axis_of(attrs, data.ndim, op)
    plan = _requant_of(*(view_data(v, op) for v in inputs[1:]), attrs)
    return plan.apply_expr(data[tuple(idx)], _channel(idx, data.ndim, axis), str(attrs["out_dtype"]))


def _requantize_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, max_rank=4)
    dtype = d.choice(REQUANTIZE_INPUTS)
    out_dtype = d.choice(REQUANTIZE_OUTPUTS)
    axis = d.axis(len(shape))
    n = shape[axis] if d.boolean() else None
    # Ratios below and above 1, exact powers of two (the ties), and equal scales (no multiply).
    out_scale = d.choice((0.25, 0.1, 1.0, 0.0078125, 3.0))
    if n:
        in_scale = float_values(d, (n,), F32, 0.001, 2.0)
    else:
        in_scale = np.array(d.choice((0.5, 0.125, out_scale, 0.3, 2.0, 0.0123)), np.float32)
    in_zp = int_values(d, (n,) if n else (), I32, -10, 10)
    out_zp = np.array(d.integer(-10, 10), np.int32)
    attrs = {
        "out_dtype": out_dtype,
        "axis": axis,
        "rounding": d.choice(("None", "UPWARD", "TONEAREST")),
        "compute_dtype": d.choice(("None", "None", "int64", "float32", "float64")),
    }
    return Sample((TensorType(shape, dtype), in_scale, in_zp, np.array(out_scale, np.float32), out_zp), attrs, int_high=256)


register(
    OpDef(
        name="qnn.requantize",
        num_inputs=5,
        type_rel=_requantize_rel,
        pattern=OpPattern.ELEMWISE,
        reference=_requantize,
        shape_func=same_shape_rule,
        compute=_requantize_compute,
        attrs=(
            AttrSpec("axis", "int", -1),
            AttrSpec("rounding", "str", "None"),
            AttrSpec("compute_dtype", "str", "None"),
            AttrSpec("out_dtype", "dtype", ""),
        ),
        extras={"constant_args": (1, 2, 3, 4)},
        domain=Domain(_requantize_domain),
        samples=(
            Sample((TensorType((4, 6), I32), _scale(0.5), _zp(0), _scale(1.0), _zp(0)), {"out_dtype": "int8"}, int_high=600),
            Sample(
                (TensorType((4, 6), I32), _scale(0.5), _zp(0), _scale(1.0), _zp(0)),
                {"out_dtype": "int8", "rounding": "TONEAREST"},
                int_high=600,
            ),
            Sample((TensorType((3, 5), "int8"), _scale(0.3), _zp(-3), _scale(0.07), _zp(5)), {"out_dtype": "uint8"}, int_high=256),
            Sample((TensorType((3, 5), "uint8"), _scale(0.1), _zp(128), _scale(0.1), _zp(3)), {"out_dtype": "int32"}, int_high=256),
            Sample(
                (TensorType((2, 3, 2), I32), np.array([0.001, 0.02, 0.5], np.float32), np.array([0, 1, -1], np.int32), _scale(0.05), _zp(-2)),
                {"out_dtype": "int16", "axis": 1, "rounding": "TONEAREST"},
                int_high=100000,
            ),
            Sample(
                (TensorType((4, 6), I32), _scale(0.5), _zp(1), _scale(1.0), _zp(0)),
                {"out_dtype": "int8", "compute_dtype": "float32"},
                int_high=600,
            ),
            Sample(
                (TensorType((2, 3), "int64"), np.array([0.5, 0.25, 3.0], np.float32), _zp(0), _scale(1.0), _zp(4)),
                {"out_dtype": "int8", "rounding": "TONEAREST", "compute_dtype": "float64"},
                int_high=100,
            ),
        ),
    )
)


# --- fixed_point_multiply ------------------------------------------------------------------------


def _fpm_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "fixed_point_multiply"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    if data.dtype != I32:
        raise TypeRelationError(f"{op}: data must be int32, got {data}")
    return data


def _fpm(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return fixed_point_multiply_np(arrays[0], np.int64(attrs["multiplier"]), np.int64(attrs["shift"]), False)


def _fpm_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    x = cast(I64, inputs[0][tuple(idx)])
    return fixed_point_multiply_expr(x, [int(attrs["multiplier"])], [int(attrs["shift"])], None, False)


def _fpm_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, empty=True)
    q, e = fixed_point_multiplier_shift(d.choice((0.5, 0.3, 1.7, 0.001, 0.75, 12.5)))
    return Sample((TensorType(shape, I32),), {"multiplier": q, "shift": e}, int_high=100000)


register(
    OpDef(
        name="fixed_point_multiply",
        num_inputs=1,
        type_rel=_fpm_rel,
        pattern=OpPattern.ELEMWISE,
        reference=_fpm,
        shape_func=same_shape_rule,
        compute=_fpm_compute,
        attrs=(AttrSpec("multiplier", "int"), AttrSpec("shift", "int")),
        domain=Domain(_fpm_domain),
        samples=(
            Sample((TensorType((3, 4), I32),), {"multiplier": 1 << 30, "shift": 0}, int_high=1000),
            Sample((TensorType((5,), I32),), {"multiplier": 1288490189, "shift": -3}, int_high=100000),
            Sample((TensorType((2, 2), I32),), {"multiplier": 1879048192, "shift": 2}, int_high=1000),
        ),
    )
)


# --- qnn.add / qnn.subtract / qnn.mul ------------------------------------------------------------

BINARY_INPUTS = ("int8", "uint8", "int16", "int32")
_BINARY_ARGS = ("lhs_scale", "lhs_zero_point", "rhs_scale", "rhs_zero_point", "output_scale", "output_zero_point")


def channel_axis(rank: int, axis: int) -> int:
    """TVM's channel axis of a binary operand: 0 for ranks 0 and 1, else the attr (negative from the end)."""
    if rank <= 1:
        return 0
    return rank + axis if axis < 0 else axis


def _binary_axes(lhs: TensorType, rhs: TensorType, attrs: Attrs, op: str) -> tuple[int, int]:
    axes = []
    for ty, key in ((lhs, "lhs_axis"), (rhs, "rhs_axis")):
        axis = channel_axis(ty.ndim, int(attrs[key]))
        if not 0 <= axis < max(ty.ndim, 1):
            raise TypeRelationError(f"{op}: {key} {attrs[key]} is out of range for {ty}")
        axes.append(axis)
    return axes[0], axes[1]


def _binary_rel(op: str):  # noqa: ANN202  a type relation
    def rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
        check_arity(types, 8, op)
        lhs, rhs = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
        if lhs.dtype != rhs.dtype:
            raise TypeRelationError(f"{op} needs operands of one dtype, got {lhs} and {rhs}")
        if lhs.dtype not in BINARY_INPUTS:
            raise TypeRelationError(f"{op}: operands must be one of {', '.join(BINARY_INPUTS)}, got {lhs}")
        shape = broadcast_shapes(lhs, rhs, op)
        lhs_axis, rhs_axis = _binary_axes(lhs, rhs, attrs, op)
        dims = (_axis_dim(lhs, lhs_axis),) * 2 + (_axis_dim(rhs, rhs_axis),) * 2 + (None, None)
        qtypes = []
        for k, (name, dim) in enumerate(zip(_BINARY_ARGS, dims), start=2):
            qtypes.append(qparam_type(types, k, op, name, F32 if name.endswith("scale") else I32, dim))
            value = constant_value(values, k, op, name)
            if name.endswith("scale"):
                check_scale(value, op, name)
        if op == "qnn.mul" and (qtypes[0].ndim or qtypes[2].ndim):
            # Per-channel multiply: TVM pairs lhs_scale[i] with rhs_scale[i] along one axis.
            same = attrs["lhs_axis"] == attrs["rhs_axis"] and lhs.ndim == rhs.ndim == len(shape)
            if not same or qtypes[0].shape != qtypes[2].shape:
                raise TypeRelationError(
                    f"{op}: per-channel scales need lhs_axis == rhs_axis, operands of one rank and "
                    f"scales of one length, got {qtypes[0]} and {qtypes[2]}"
                )
        return TensorType(shape, lhs.dtype)

    return rel


def _binary_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """The operands broadcast; the scales and zero points (arguments 2-7) never shape the result."""
    return [fill(out_type, broadcast_dims([dims(inputs[0], "lhs"), dims(inputs[1], "rhs")]))]


def _is_scalar(value: np.ndarray) -> bool:
    return np.asarray(value).ndim == 0


def upcast_plan(scale: np.ndarray, zp: np.ndarray, out_scale: np.ndarray, out_zp: np.ndarray) -> Requant | None:
    """RequantizeOrUpcast: None (a plain cast to int32) when the scale and zero point are
    scalars equal to the output's; else a requantize to int32 (UPWARD, integer path)."""
    if _is_scalar(scale) and _is_scalar(zp) and float(scale) == float(out_scale) and int(zp) == int(out_zp):
        return None
    return Requant.of(scale, zp, out_scale, out_zp, False)


def _mul_plan(ls: np.ndarray, rs: np.ndarray, os_: np.ndarray, oz: np.ndarray) -> Requant:
    """The requantize of the product: from float32(ls * rs) (per-tensor: float32 product; per
    channel: the double product rounded to float32), zero point 0."""
    if _is_scalar(ls) and _is_scalar(rs):
        scale = np.asarray(np.float32(ls) * np.float32(rs))
    else:
        scale = (np.asarray(ls, np.float64) * np.asarray(rs, np.float64)).astype(np.float32)
    return Requant.of(scale, _zp(0), os_, oz, False)


def _binary_reference(kind: str):  # noqa: ANN202  a reference
    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
        lhs, rhs, ls, lz, rs, rz, os_, oz = arrays
        dtype = str(lhs.dtype)
        la, ra = channel_axis(lhs.ndim, int(attrs["lhs_axis"])), channel_axis(rhs.ndim, int(attrs["rhs_axis"]))
        if kind == "mul":
            a = lhs.astype(np.int64) - expand_to_axis(lz.astype(np.int64), lhs.ndim, la)
            b = rhs.astype(np.int64) - expand_to_axis(rz.astype(np.int64), rhs.ndim, ra)
            product = (a.astype(np.int32).astype(np.int64) * b.astype(np.int32)).astype(np.int32)
            return _mul_plan(ls, rs, os_, oz).apply_np(np.asarray(product), la, dtype)
        parts = []
        for x, s, z, axis in ((lhs, ls, lz, la), (rhs, rs, rz, ra)):
            plan = upcast_plan(s, z, os_, oz)
            parts.append((x.astype(np.int32) if plan is None else plan.apply_np(x, axis, I32)).astype(np.int64))
        a, b = np.broadcast_arrays(*parts)
        out_zp = int(oz)
        out = a + b - out_zp if kind == "add" else a - b + out_zp
        return clip_cast_np(out.astype(np.int32), dtype)

    return reference


def _binary_compute(kind: str):  # noqa: ANN202  a compute
    def compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
        op = f"qnn.{kind}"
        lhs, rhs = inputs[0], inputs[1]
        ls, lz, rs, rz, os_, oz = (view_data(v, op) for v in inputs[2:])
        la, ra = channel_axis(lhs.ndim, int(attrs["lhs_axis"])), channel_axis(rhs.ndim, int(attrs["rhs_axis"]))
        lidx, ridx = broadcast_index(idx, lhs.shape), broadcast_index(idx, rhs.shape)
        lch = lidx[la] if lhs.ndim else None
        rch = ridx[ra] if rhs.ndim else None
        a, b = lhs[lidx], rhs[ridx]
        dtype = lhs.dtype
        if kind == "mul":
            product = (cast(I32, a) - per_channel(scalars(lz), lch, I32)) * (cast(I32, b) - per_channel(scalars(rz), rch, I32))
            return _mul_plan(ls, rs, os_, oz).apply_expr(product, lch, dtype)
        parts = []
        for x, s, z, ch in ((a, ls, lz, lch), (b, rs, rz, rch)):
            plan = upcast_plan(s, z, os_, oz)
            parts.append(cast(I32, x) if plan is None else plan.apply_expr(x, ch, I32))
        out_zp = Const(int(oz), I32)
        out = parts[0] + parts[1] - out_zp if kind == "add" else parts[0] - parts[1] + out_zp
        return clip_cast_expr(out, dtype)

    return compute


def _binary_domain(d: Draw) -> Sample:
    dtype = d.choice(BINARY_INPUTS)
    shape = tensor_shape(d, min_rank=1, max_rank=4)
    other = d.broadcastable(shape)
    lhs_shape, rhs_shape = (shape, other) if d.boolean() else (other, shape)
    scales = [np.array(d.choice((0.1, 0.25, 0.5, 0.05, 1.0)), np.float32) for _ in range(3)]
    zps = [np.array(d.choice((0, 0, 3, -5, 10)), np.int32) for _ in range(3)]
    attrs: dict[str, object] = {}
    if d.boolean():  # operands already in the output's parameters: a plain upcast
        scales[0], zps[0] = scales[2], zps[2]
    elif d.boolean() and len(lhs_shape) == len(rhs_shape):
        # Per-channel operands along one axis of equal extent on both sides.
        axis = d.axis(len(shape))
        n = min(lhs_shape[axis], rhs_shape[axis])
        lhs_shape = tuple(n if k == axis % len(shape) else e for k, e in enumerate(lhs_shape))
        rhs_shape = tuple(n if k == axis % len(shape) else e for k, e in enumerate(rhs_shape))
        for k in (0, 1):
            scales[k] = float_values(d, (n,), F32, 0.02, 0.6)
            zps[k] = int_values(d, (n,), I32, -4, 4)
        attrs = {"lhs_axis": axis, "rhs_axis": axis}
    return Sample(
        (TensorType(lhs_shape, dtype), TensorType(rhs_shape, dtype), scales[0], zps[0], scales[1], zps[1], scales[2], zps[2]),
        attrs,
        int_high=256 if dtype in ("int8", "uint8") else 200,
    )


def _binary_samples() -> tuple[Sample, ...]:
    return (
        Sample((TensorType((2, 3), "int8"), TensorType((2, 3), "int8"), _scale(0.1), _zp(2), _scale(0.2), _zp(-1), _scale(0.15), _zp(3)), int_high=256),
        Sample((TensorType((2, 3), "uint8"), TensorType((3,), "uint8"), _scale(0.5), _zp(128), _scale(0.5), _zp(128), _scale(0.5), _zp(128)), int_high=256),
        Sample((TensorType((4, 1), "int32"), TensorType((1, 5), "int32"), _scale(0.25), _zp(0), _scale(0.125), _zp(0), _scale(1.0), _zp(0)), int_high=300),
        Sample(
            (
                TensorType((2, 3), "int8"), TensorType((2, 3), "int8"),
                np.array([0.1, 0.2, 0.3], np.float32), np.array([0, 1, -1], np.int32),
                np.array([0.3, 0.05, 0.2], np.float32), np.array([2, 0, 0], np.int32),
                _scale(0.2), _zp(-4),
            ),
            {"lhs_axis": 1, "rhs_axis": 1},
            int_high=256,
        ),
    )


def _binary(kind: str) -> OpDef:
    name = f"qnn.{kind}"
    return register(
        OpDef(
            name=name,
            num_inputs=8,
            type_rel=_binary_rel(name),
            pattern=OpPattern.BROADCAST,
            reference=_binary_reference(kind),
            shape_func=_binary_shape_rule,
            compute=_binary_compute(kind),
            attrs=(AttrSpec("lhs_axis", "int", -1), AttrSpec("rhs_axis", "int", -1)),
            extras={"constant_args": (2, 3, 4, 5, 6, 7)},
            domain=Domain(_binary_domain),
            samples=_binary_samples(),
        )
    )


_binary("add")
_binary("subtract")
_binary("mul")


# --- qnn.leaky_relu ------------------------------------------------------------------------------

UNARY_INPUTS = ("int8", "uint8")
_UNARY_ARGS = ("input_scale", "input_zero_point", "output_scale", "output_zero_point")


def scalar_qparams(types: Sequence[Type], values: Values, op: str, names: Sequence[str] = _UNARY_ARGS) -> None:
    for k, name in enumerate(names, start=1):
        qparam_type(types, k, op, name, F32 if name.endswith("scale") else I32, None)
        value = constant_value(values, k, op, name)
        if name.endswith("scale"):
            check_scale(value, op, name)


def _quantized_unary_rel(op: str):  # noqa: ANN202  a type relation
    def rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
        check_arity(types, 5, op)
        data = tensor_arg(types, 0, op)
        if data.dtype not in UNARY_INPUTS:
            raise TypeRelationError(f"{op}: data must be int8 or uint8, got {data}")
        scalar_qparams(types, values, op)
        return data

    return rel


def _leaky_relu(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, s, z, os_, oz = arrays
    alpha = float(attrs["alpha"])
    plan = upcast_plan(s, z, os_, oz)
    requantized = x.astype(np.int32) if plan is None else plan.apply_np(x, 0, I32)
    q, e = fixed_point_multiplier_shift(alpha)
    prod = fixed_point_multiply_np(requantized.astype(np.int64), np.int64(q), np.int64(e), False)
    qz, ez = fixed_point_multiplier_shift(1.0 - alpha)
    scaled_z = fixed_point_multiply_np(np.asarray(int(oz), np.int64), np.int64(qz), np.int64(ez), False)
    added = (prod.astype(np.int64) + scaled_z.astype(np.int64)).astype(np.int32)
    out = np.where(x.astype(np.int32) < np.int32(int(z)), added, requantized)
    return clip_cast_np(np.asarray(out), str(x.dtype))


def _leaky_relu_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    op = "qnn.leaky_relu"
    x = inputs[0][tuple(idx)]
    s, z, os_, oz = (view_data(v, op) for v in inputs[1:])
    alpha = float(attrs["alpha"])
    plan = upcast_plan(s, z, os_, oz)
    requantized = cast(I32, x) if plan is None else plan.apply_expr(x, None, I32)
    q, e = fixed_point_multiplier_shift(alpha)
    prod = fixed_point_multiply_expr(cast(I64, requantized), [q], [e], None, False)
    qz, ez = fixed_point_multiplier_shift(1.0 - alpha)
    scaled_z = fixed_point_multiply_expr(Const(int(oz), I64), [qz], [ez], None, False)
    out = select(cast(I32, x) < Const(int(z), I32), prod + scaled_z, requantized)
    return clip_cast_expr(out, inputs[0].dtype)


def _unary_qparams(d: Draw, dtype: str) -> tuple[np.ndarray, ...]:
    mid = 128 if dtype == "uint8" else 0
    zps = [np.array(mid + d.choice((0, 5, -7, 20)), np.int32) for _ in range(2)]
    scales = [np.array(d.choice((0.02, 0.05, 0.1, 0.25)), np.float32) for _ in range(2)]
    if d.boolean():
        scales[1], zps[1] = scales[0], zps[0]
    return scales[0], zps[0], scales[1], zps[1]


def _leaky_relu_domain(d: Draw) -> Sample:
    dtype = d.choice(UNARY_INPUTS)
    attrs = {"alpha": d.choice((0.25, 0.1, 0.0, 1.0, 0.3333, 0.75))}
    return Sample((TensorType(tensor_shape(d, empty=True), dtype), *_unary_qparams(d, dtype)), attrs, int_high=256)


register(
    OpDef(
        name="qnn.leaky_relu",
        num_inputs=5,
        type_rel=_quantized_unary_rel("qnn.leaky_relu"),
        pattern=OpPattern.ELEMWISE,
        reference=_leaky_relu,
        shape_func=same_shape_rule,
        compute=_leaky_relu_compute,
        attrs=(AttrSpec("alpha", "float", 0.25),),
        extras={"constant_args": (1, 2, 3, 4)},
        domain=Domain(_leaky_relu_domain),
        samples=(
            Sample((TensorType((3, 5), "int8"), _scale(0.1), _zp(0), _scale(0.05), _zp(-3)), {"alpha": 0.1}, int_high=256),
            Sample((TensorType((16,), "uint8"), _scale(0.1), _zp(128), _scale(0.1), _zp(128)), int_high=256),
        ),
    )
)


# --- qnn.tanh, qnn.sigmoid, ... : dequantize, the float function, quantize ------------------------


def _hardswish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _erf_np(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.vectorize(math.erf, otypes=[np.float64])(x), dtype=np.float64)


def _sigmoid_np(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _hardswish_expr(x: PrimExpr) -> PrimExpr:
    return x * maximum(minimum(x + Const(3.0, x.dtype), Const(6.0, x.dtype)), Const(0.0, x.dtype)) / Const(6.0, x.dtype)


# name: (numpy in float64, loop body in float64, value range of the dequantized input)
_FLOAT_FUNCTIONS = {
    "tanh": (np.tanh, lambda x: intrin("tanh", x), "any"),
    "exp": (np.exp, lambda x: intrin("exp", x), "any"),
    "sqrt": (np.sqrt, lambda x: intrin("sqrt", x), "positive"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), lambda x: Const(1.0, x.dtype) / intrin("sqrt", x), "positive"),
    "erf": (_erf_np, lambda x: intrin("erf", x), "any"),
    "sigmoid": (_sigmoid_np, lambda x: Const(1.0, x.dtype) / (Const(1.0, x.dtype) + intrin("exp", -x)), "any"),
    "hardswish": (_hardswish, _hardswish_expr, "any"),
    "log": (np.log, lambda x: intrin("log", x), "positive"),
    "abs": (np.abs, lambda x: intrin("fabs", x), "any"),
}


def _dequantized_np(x: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> np.ndarray:
    return np.asarray((x.astype(np.int32) - np.int32(int(zp))).astype(np.float32) * np.float32(scale))


def _quantized_np(value: np.ndarray, scale: np.ndarray, zp: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return _quantize([np.asarray(value, np.float32), np.asarray(scale, np.float32), np.asarray(zp, np.int32)], Attrs({"out_dtype": dtype, "axis": -1}))


def _float_function_reference(name: str):  # noqa: ANN202  a reference
    fn = _FLOAT_FUNCTIONS[name][0]

    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
        x, s, z, os_, oz = arrays
        dequantized = _dequantized_np(x, s, z)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            # The function in double, rounded once to float32 (see the module docstring).
            value = np.asarray(fn(dequantized.astype(np.float64))).astype(np.float32)
        return _quantized_np(value, os_, oz, str(x.dtype))

    return reference


def _float_function_compute(name: str):  # noqa: ANN202  a compute
    body = _FLOAT_FUNCTIONS[name][1]

    def compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
        op = f"qnn.{name}"
        x = inputs[0][tuple(idx)]
        s, z, os_, oz = (view_data(v, op) for v in inputs[1:])
        dequantized = cast(F32, cast(I32, x) - Const(int(z), I32)) * Const(float(np.float32(s)), F32)
        value = cast(F32, body(cast("float64", dequantized)))
        out_dtype = inputs[0].dtype
        lo, hi = qrange(out_dtype)
        rounded = intrin("round", value / Const(float(np.float32(os_)), F32)) + Const(float(int(oz)), F32)
        clipped = maximum(minimum(rounded, Const(float(hi), F32)), Const(float(lo), F32))
        return cast(out_dtype, clipped)

    return compute


def _float_function_domain(name: str):  # noqa: ANN202  a domain draw
    positive = _FLOAT_FUNCTIONS[name][2] == "positive"

    def draw(d: Draw) -> Sample:
        dtype = d.choice(UNARY_INPUTS)
        s, z, os_, oz = _unary_qparams(d, dtype)
        if positive:  # every dequantized value > 0: the zero point below the dtype's range
            z = np.array(qrange(dtype)[0] - d.choice((1, 10)), np.int32)
        if name == "exp":  # keep exp finite in float32
            s = np.array(d.choice((0.02, 0.05, 0.1, 0.3)), np.float32)
        return Sample((TensorType(tensor_shape(d, empty=True), dtype), s, z, os_, oz), int_high=256)

    return draw


def _float_function_samples(name: str) -> tuple[Sample, ...]:
    positive = _FLOAT_FUNCTIONS[name][2] == "positive"
    return (
        Sample((TensorType((4, 8), "int8"), _scale(0.05), _zp(-129 if positive else 0), _scale(1.0 / 128), _zp(-3)), int_high=256),
        Sample((TensorType((16, 16), "uint8"), _scale(0.02), _zp(-1 if positive else 128), _scale(1.0 / 256), _zp(0)), int_high=256),
    )


for _name in _FLOAT_FUNCTIONS:
    register(
        OpDef(
            name=f"qnn.{_name}",
            num_inputs=5,
            type_rel=_quantized_unary_rel(f"qnn.{_name}"),
            pattern=OpPattern.ELEMWISE,
            reference=_float_function_reference(_name),
            shape_func=same_shape_rule,
            compute=_float_function_compute(_name),
            extras={"constant_args": (1, 2, 3, 4)},
            domain=Domain(_float_function_domain(_name)),
            samples=_float_function_samples(_name),
        )
    )


# --- qnn.concatenate -----------------------------------------------------------------------------
# (data tuple, input_scales tuple, input_zero_points tuple, output_scale, output_zero_point; axis):
# each input whose scalar scale or zero point differs from the output's is requantized (UPWARD)
# to the output parameters in its own dtype, then the tensors are concatenated.

CONCATENATE = "qnn.concatenate"


def _tuple_arg(types: Sequence[Type], k: int, name: str) -> tuple[Type, ...]:
    ty = types[k] if k < len(types) else None
    if not isinstance(ty, TupleType):
        raise TypeRelationError(f"{CONCATENATE}: {name} must be a tuple, got {ty}")
    return ty.fields


def _concatenate_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    check_arity(types, 5, CONCATENATE)
    fields = _tuple_arg(types, 0, "data")
    scales, zps = _tuple_arg(types, 1, "input_scales"), _tuple_arg(types, 2, "input_zero_points")
    if not (len(fields) == len(scales) == len(zps)):
        raise TypeRelationError(
            f"{CONCATENATE}: {len(fields)} inputs need as many input_scales and input_zero_points, "
            f"got {len(scales)} and {len(zps)}"
        )
    for k, name in ((1, "input_scales"), (2, "input_zero_points")):
        want = F32 if k == 1 else I32
        for ty in _tuple_arg(types, k, name):
            if not isinstance(ty, TensorType) or ty.dtype != want or ty.ndim != 0:
                raise TypeRelationError(f"{CONCATENATE}: each of {name} must be a {want} scalar, got {ty}")
        value = values[k] if k < len(values) else None
        if not isinstance(value, tuple):
            raise TypeRelationError(f"{CONCATENATE}: {name} must be a tuple of constants (its values fix the integer arithmetic)")
        if k == 1:
            for v in value:
                check_scale(np.asarray(v), CONCATENATE, name)
    qparam_type(types, 3, CONCATENATE, "output_scale", F32, None)
    qparam_type(types, 4, CONCATENATE, "output_zero_point", I32, None)
    check_scale(constant_value(values, 3, CONCATENATE, "output_scale"), CONCATENATE, "output_scale")
    constant_value(values, 4, CONCATENATE, "output_zero_point")
    for ty in fields:
        if not isinstance(ty, TensorType) or ty.dtype not in BINARY_INPUTS:
            raise TypeRelationError(f"{CONCATENATE}: inputs must be {', '.join(BINARY_INPUTS)} tensors, got {ty}")
    from compiler import ops as _ops  # the registry holds concatenate by now

    return _ops.get("concatenate").type_rel([TupleType(fields)], attrs)


def _concatenate_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """Along `axis` the inputs' extents add up; every other dim is the first input's."""
    parts = fields(inputs[0], "data")
    axis = normalize_axis(int(attrs["axis"]), len(parts[0]), CONCATENATE)
    computed = [int64(d) for d in parts[0]]
    computed[axis] = sum((int64(p[axis]) for p in parts[1:]), computed[axis])
    return [fill(out_type, computed)]


def _concatenate(arrays: Sequence[object], attrs: Attrs) -> np.ndarray:
    data, scales, zps, os_, oz = arrays
    assert isinstance(data, tuple) and isinstance(scales, tuple) and isinstance(zps, tuple)
    parts = []
    for x, s, z in zip(data, scales, zps):
        plan = upcast_plan(np.asarray(s), np.asarray(z), np.asarray(os_), np.asarray(oz))
        parts.append(x if plan is None else plan.apply_np(x, 0, str(x.dtype)))
    return np.concatenate(parts, axis=int(attrs["axis"]))


def _concatenate_compute(idx: Index, inputs: Sequence[object], attrs: Attrs, out_type: Type) -> PrimExpr:
    from compiler import ops as _ops

    data, scales, zps, out_scale, out_zp = inputs
    assert isinstance(data, tuple) and isinstance(scales, tuple) and isinstance(zps, tuple)
    assert isinstance(out_scale, TensorView) and isinstance(out_zp, TensorView)
    os_, oz = view_data(out_scale, CONCATENATE), view_data(out_zp, CONCATENATE)
    views = []
    for view, s, z in zip(data, scales, zps):
        plan = upcast_plan(view_data(s, CONCATENATE), view_data(z, CONCATENATE), os_, oz)
        if plan is None:
            views.append(view)
            continue

        def load(index: Index, view: TensorView = view, plan: Requant = plan) -> PrimExpr:
            return plan.apply_expr(view[tuple(index)], None, view.dtype)

        views.append(TensorView(view.shape, view.dtype, load))
    compute = _ops.get("concatenate").compute
    assert compute is not None
    return compute(idx, [tuple(views)], attrs, out_type)


def _concatenate_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, max_rank=4)
    axis = d.axis(len(shape))
    dtype = d.choice(("int8", "uint8", "int8", "int32"))
    mid = 128 if dtype == "uint8" else 0
    count = d.integer(1, 3)
    fields, scales, zps = [], [], []
    out_scale, out_zp = np.array(d.choice((0.1, 0.2)), np.float32), np.array(mid + d.choice((0, 3)), np.int32)
    for _ in range(count):
        field = list(shape)
        field[axis] = d.integer(1, 3)
        fields.append(TensorType(tuple(field), dtype))
        if d.boolean():
            scales.append(out_scale.copy())
            zps.append(out_zp.copy())
        else:
            scales.append(np.array(d.choice((0.05, 0.1, 0.3)), np.float32))
            zps.append(np.array(mid + d.choice((0, -4, 7)), np.int32))
    return Sample(
        (TupleType(tuple(fields)), tuple(scales), tuple(zps), out_scale, out_zp),
        {"axis": axis},
        int_high=256 if dtype != "int32" else 1000,
    )


register(
    OpDef(
        name=CONCATENATE,
        num_inputs=5,
        type_rel=_concatenate_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_concatenate,  # type: ignore[arg-type]  # tuple-valued inputs
        shape_func=_concatenate_shape_rule,
        compute=_concatenate_compute,
        attrs=(AttrSpec("axis", "int", 0),),
        extras={"constant_args": (1, 2, 3, 4)},
        domain=Domain(_concatenate_domain),
        samples=(
            Sample(
                (
                    TupleType((TensorType((2, 3), "int8"), TensorType((2, 2), "int8"))),
                    (_scale(0.1), _scale(0.2)),
                    (_zp(0), _zp(-3)),
                    _scale(0.1),
                    _zp(0),
                ),
                {"axis": 1},
                int_high=256,
            ),
            Sample(
                (
                    TupleType((TensorType((1, 4), "uint8"), TensorType((2, 4), "uint8"), TensorType((1, 4), "uint8"))),
                    (_scale(0.05), _scale(0.5), _scale(0.5)),
                    (_zp(128), _zp(128), _zp(120)),
                    _scale(0.5),
                    _zp(128),
                ),
                {"axis": -2},
                int_high=256,
            ),
        ),
    )
)


# --- qnn.softmax ---------------------------------------------------------------------------------
# TVM's integer softmax (Algorithm 1 of arXiv 2207.01405, as QnnSoftmaxCanonicalize writes it),
# int8 in and out, input_scale <= 1. Along the axis, with x0 = round(1 / input_scale) (float32):
#   d = (x - zp) - max(x - zp);  p = d + (d >> 1) - (d >> 4)  (arithmetic shifts)
#   q = clip(p / -x0, 0, 20) (truncating);  r = p + q * x0;  b = (r >> 1) + x0
#   e = b << (max(q) - q);  out = ((2**30 / sum(e)) * e) >> 23
# then requantized (UPWARD) from scale 1/128, zero point 0 to the output parameters, as int8.
# Everything is int32, so the kernel and the reference agree exactly.

SOFTMAX = "qnn.softmax"


def _softmax_x0(scale: np.ndarray) -> int:
    value = np.float32(1.0) / np.float32(scale)
    return int(np.copysign(np.floor(np.abs(value) + np.float32(0.5)), value))


def _softmax_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    check_arity(types, 5, SOFTMAX)
    data = tensor_arg(types, 0, SOFTMAX)
    if data.dtype != "int8":
        raise TypeRelationError(f"{SOFTMAX}: data must be int8, got {data}")
    normalize_axis(int(attrs["axis"]), data.ndim, SOFTMAX)
    scalar_qparams(types, values, SOFTMAX, ("scale", "zero_point", "output_scale", "output_zero_point"))
    if float(np.asarray(values[1])) > 1.0:
        raise TypeRelationError(f"{SOFTMAX}: scale must be at most 1, got {float(np.asarray(values[1]))}")
    return data


def _softmax_plan(os_: np.ndarray, oz: np.ndarray) -> Requant:
    return Requant.of(np.asarray(np.float32(1.0 / 128)), _zp(0), os_, oz, False)


def _qnn_softmax(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, s, z, os_, oz = arrays
    axis = normalize_axis(int(attrs["axis"]), x.ndim, SOFTMAX)
    x0 = np.int64(_softmax_x0(s))
    qd = x.astype(np.int64) - int(z)
    if x.size == 0:
        return x.copy()
    d = qd - qd.max(axis=axis, keepdims=True)
    p = d + (d >> 1) - (d >> 4)
    q = np.clip(p // -x0, 0, 20)  # both operands <= 0: floor is truncation here
    r = p - q * -x0
    b = (r >> 1) + x0
    e = b << (q.max(axis=axis, keepdims=True) - q)
    total = e.sum(axis=axis, keepdims=True)
    out = (((1 << 30) // total) * e) >> 23  # total > 0: floor is truncation here
    return _softmax_plan(os_, oz).apply_np(out.astype(np.int32), 0, "int8")


def _qnn_softmax_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt:
    view = inputs[0]
    assert view.buffer is not None
    data = view.buffer
    s, z, os_, oz = (view_data(v, SOFTMAX) for v in inputs[1:])
    dims = tuple(int(d) for d in data.shape)  # type: ignore[arg-type]  # static shapes here
    axis = normalize_axis(int(attrs["axis"]), len(dims), SOFTMAX)
    if 0 in dims:
        return seq()
    x0 = Const(_softmax_x0(s), I32)
    zero, one, two = Const(0), Const(1), Const(2)
    stats = Buffer(ctx.fresh("stats"), (3,), I32, scope="local")  # max of x - zp, max of q, sum
    outer = [ctx.var("i") for _ in dims[:axis]]
    inner = [ctx.var("j") for _ in dims[axis + 1 :]]
    length = dims[axis]

    def at(k: PrimExpr) -> tuple[PrimExpr, ...]:
        return (*outer, k, *inner)

    def p_of(k: PrimExpr) -> PrimExpr:
        d = cast(I32, data[at(k)]) - Const(int(z), I32) - stats[zero]
        return d + d // 2 - d // 16

    def q_of(p: PrimExpr) -> PrimExpr:
        quotient = binary("tdiv", p, -x0)
        return maximum(minimum(quotient, Const(20, I32)), Const(0, I32))

    def e_of(k: PrimExpr) -> PrimExpr:
        p = p_of(k)
        q = q_of(p)
        b = (p + q * x0) // 2 + x0
        return b * per_channel([1 << n for n in range(21)], stats[one] - q, I32)

    plan = _softmax_plan(os_, oz)
    k1, k2, k3, k4 = (ctx.var("k") for _ in range(4))
    scale = binary("tdiv", Const(1 << 30, I32), stats[two])
    value = plan.apply_expr((scale * e_of(k4)) // Const(1 << 23, I32), None, "int8")
    body: Stmt = Allocate(
        stats,
        seq(
            Store(stats, (zero,), Const(-(1 << 31), I32)),
            For(k1, zero, Const(length), Store(stats, (zero,), maximum(stats[zero], cast(I32, data[at(k1)]) - Const(int(z), I32)))),
            Store(stats, (one,), Const(0, I32)),
            For(k2, zero, Const(length), Store(stats, (one,), maximum(stats[one], q_of(p_of(k2))))),
            Store(stats, (two,), Const(0, I32)),
            For(k3, zero, Const(length), Store(stats, (two,), stats[two] + e_of(k3))),
            For(k4, zero, Const(length), Store(out, at(k4), cast(out.dtype, epilogue(value, at(k4))))),
        ),
    )
    for var, extent in reversed(list(zip(outer + inner, dims[:axis] + dims[axis + 1 :]))):
        body = For(var, zero, Const(extent), body)
    return body


def _qnn_softmax_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, max_rank=3)
    attrs = {"axis": d.axis(len(shape))}
    scale = np.array(d.choice((0.1, 0.05, 0.02, 1.0, 0.3)), np.float32)
    zp = np.array(d.choice((0, -5, 10)), np.int32)
    out_scale = np.array(d.choice((1.0 / 256, 1.0 / 128, 0.01)), np.float32)
    out_zp = np.array(d.choice((-128, 0)), np.int32)
    return Sample((TensorType(shape, "int8"), scale, zp, out_scale, out_zp), attrs, int_high=256)


register(
    OpDef(
        name=SOFTMAX,
        num_inputs=5,
        type_rel=_softmax_rel,
        pattern=OpPattern.OPAQUE,
        reference=_qnn_softmax,
        shape_func=same_shape_rule,
        kernel=_qnn_softmax_kernel,
        attrs=(AttrSpec("axis", "int", -1),),
        extras={"constant_args": (1, 2, 3, 4)},
        domain=Domain(_qnn_softmax_domain),
        samples=(
            Sample((TensorType((3, 10), "int8"), _scale(0.1), _zp(0), _scale(1.0 / 256), _zp(-128)), int_high=256),
            Sample((TensorType((2, 5, 3), "int8"), _scale(0.05), _zp(-5), _scale(1.0 / 128), _zp(0)), {"axis": 1}, int_high=256),
        ),
    )
)


# --- fixed_point_multiply_per_axis ---------------------------------------------------------------
# (x, fixed_point_multiplier, left_shift, right_shift; is_lshift_required, is_rshift_required,
# axes): the parameter tensors are indexed by x's indices along `axes` and read at run time;
# per element, in int64: x << left_shift (only when is_lshift_required), times the multiplier,
# plus 2**(right_shift + 30), arithmetic right shift by right_shift + 31, cast to int32
# (q_multiply_shift_per_axis; is_rshift_required does not change the arithmetic).

FPM_PER_AXIS = "fixed_point_multiply_per_axis"
_POW2 = [1 << n for n in range(63)]


def _fpm_per_axis_axes(x: TensorType, attrs: Attrs) -> list[int]:
    return [normalize_axis(int(a), x.ndim, FPM_PER_AXIS) for a in attrs["axes"]]


def _fpm_per_axis_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 4, FPM_PER_AXIS)
    x = tensor_arg(types, 0, FPM_PER_AXIS)
    if x.dtype != I32:
        raise TypeRelationError(f"{FPM_PER_AXIS}: x must be int32, got {x}")
    axes = _fpm_per_axis_axes(x, attrs)
    want = tuple(x.shape[a] for a in axes)
    for k, name in ((1, "fixed_point_multiplier"), (2, "left_shift"), (3, "right_shift")):
        ty = tensor_arg(types, k, FPM_PER_AXIS)
        if ty.dtype != I32 or ty.ndim != len(want) or not all(dims_equal(a, b) for a, b in zip(ty.shape, want)):
            raise TypeRelationError(f"{FPM_PER_AXIS}: {name} must be int32 of shape {want} (x's axes {axes}), got {ty}")
    return x


def _fpm_per_axis(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, m, ls, rs = arrays
    axes = [normalize_axis(int(a), x.ndim, FPM_PER_AXIS) for a in attrs["axes"]]
    # The parameters broadcast along x's other axes, kept in x's axis order.
    order = np.argsort(axes)
    shape = [1] * x.ndim
    for a in axes:
        shape[a] = x.shape[a]

    def expand(p: np.ndarray) -> np.ndarray:
        return np.transpose(p, order).reshape(shape).astype(np.int64)

    value = x.astype(np.int64)
    if attrs["is_lshift_required"]:
        value = value << expand(ls)
    value = value * expand(m)
    total = expand(rs) + 31
    return np.asarray((value + (np.int64(1) << (total - 1))) >> total).astype(np.int32)


def _fpm_per_axis_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    x, m, ls, rs = inputs
    axes = [normalize_axis(int(a), x.ndim, FPM_PER_AXIS) for a in attrs["axes"]]
    at = tuple(idx[a] for a in axes)
    value = cast(I64, x[tuple(idx)])
    if attrs["is_lshift_required"]:
        value = value * per_channel(_POW2, ls[at], I64)
    value = value * cast(I64, m[at])
    total = rs[at] + Const(31, I32)
    rounder = per_channel(_POW2, total - Const(1, I32), I64)
    return cast(I32, (value + rounder) // per_channel(_POW2, total, I64))


def _fpm_per_axis_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, max_rank=3)
    axes = [d.axis(len(shape))]
    n = shape[axes[0]]
    pairs = [fixed_point_multiplier_shift(d.choice((0.5, 0.3, 1.7, 0.001, 0.75, 12.5))) for _ in range(n)]
    m = np.array([q for q, _ in pairs], np.int32)
    ls = np.array([max(e, 0) for _, e in pairs], np.int32)
    rs = np.array([max(-e, 0) for _, e in pairs], np.int32)
    attrs = {"is_lshift_required": bool(ls.any()) or d.boolean(), "is_rshift_required": bool(rs.any()), "axes": axes}
    return Sample((TensorType(shape, I32), m, ls, rs), attrs, int_high=100000)


register(
    OpDef(
        name=FPM_PER_AXIS,
        num_inputs=4,
        type_rel=_fpm_per_axis_rel,
        pattern=OpPattern.BROADCAST,
        reference=_fpm_per_axis,
        shape_func=same_shape_rule,
        compute=_fpm_per_axis_compute,
        attrs=(
            AttrSpec("is_lshift_required", "bool", False),
            AttrSpec("is_rshift_required", "bool", False),
            AttrSpec("axes", "ints"),
        ),
        domain=Domain(_fpm_per_axis_domain),
        samples=(
            Sample(
                (
                    TensorType((2, 3), I32),
                    np.array([1 << 30, 1288490189, 1879048192], np.int32),
                    np.array([0, 0, 2], np.int32),
                    np.array([0, 1, 0], np.int32),
                ),
                {"is_lshift_required": True, "is_rshift_required": True, "axes": [1]},
                int_high=1000,
            ),
            Sample(
                (TensorType((3, 2), I32), np.array([1 << 30, 1 << 30, 1 << 30], np.int32), np.zeros(3, np.int32), np.array([0, 1, 2], np.int32)),
                {"is_rshift_required": True, "axes": [0]},
                int_high=1000,
            ),
        ),
    )
)
