"""Quantized linear operators: qnn.dense, qnn.batch_matmul, qnn.conv2d, qnn.conv2d_transpose,
and the quantized pooling kernel qnn.avg_pool2d (see its section).

Each takes (data, weight, input_zero_point, kernel_zero_point, input_scale, kernel_scale) and the
attrs of its float counterpart (TVM reuses DenseAttrs, BatchMatmulAttrs, Conv2DAttrs and
Conv2DTransposeAttrs), and produces the int32 (or int64) accumulator

    out = sum over the window / reduction of (x - input_zero_point) * (w - kernel_zero_point)

which is exactly what TVM's canonicalization computes: it expands the product into four terms
(sum x*w, the zero point times the sums of x and of w, and the constant term) and pads the data
with input_zero_point, so padded elements contribute nothing. The four-term form and the direct
form agree exactly in integer arithmetic (both modulo 2**32 for int32), so we compute the
direct one: the kernel first copies the shifted operands (x - zp_x and w - zp_w, in the output
dtype) into temporary buffers, then runs the float op's own kernel on them, padding with zero.
The scales do not enter the accumulator (a following qnn.requantize uses
input_scale * kernel_scale); like the zero points they must be constants, as TVM requires.

Zero points and scales: input_zero_point and input_scale are scalars; kernel_zero_point and
kernel_scale are scalars or per output channel for qnn.dense and qnn.conv2d (the zero point
along the weight's O axis: dim 0 of a dense weight, the 'O' of conv2d's kernel_layout; the
scale as long as the output channels). out_dtype must be int32 or int64 (TVM also allows an
int16 accumulator, not supported here). Data and weight are int8, uint8 or int16, as in TVM.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler import ops as _ops
from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type
from compiler.ops.common import batch_first, check_arity, tensor_arg
from compiler.ops.conv_nd import padding_nd, spatial_values
from compiler.ops.domain import Domain, Draw, int_values
from compiler.ops.kernels.common import buffer_dims, input_buffers
from compiler.ops.kernels.gemm import loop_nest
from compiler.ops.qnn import (
    F32,
    I32,
    Values,
    scalar_qparams,
    upcast_plan,
    check_scale,
    clip_cast_expr,
    clip_cast_np,
    constant_value,
    per_channel,
    qparam_type,
    scalars,
    view_data,
)
from compiler.ops.pool import pool2d_shape_rule
from compiler.ops.registry import OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import (
    Dim,
    ShapeArg,
    ShapeRule,
    ShapeRuleError,
    broadcast_dims,
    conv_output_dim,
    dims,
    fill,
    int64,
)
from compiler.ops.window import padding4, positive_pair
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext, TensorView
from compiler.tir.stmt import Allocate, Stmt, Store, seq

INPUT_DTYPES = ("int8", "uint8", "int16")
OUT_DTYPES = ("int32", "int64")


def _base(name: str) -> OpDef:
    return _ops.get(name)


def _kernel_axis(name: str, attrs: Attrs, weight_ndim: int) -> int | None:
    """The weight axis a per-channel kernel zero point / scale runs along (None: scalars only)."""
    if name == "qnn.dense":
        return 0
    if name == "qnn.conv2d":
        return str(attrs["kernel_layout"]).index("O")
    return None


def _relation(name: str, base: str):  # noqa: ANN202  a type relation
    def rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
        check_arity(types, 6, name)
        data, weight = tensor_arg(types, 0, name), tensor_arg(types, 1, name)
        for ty, what in ((data, "data"), (weight, "weight")):
            if ty.dtype not in INPUT_DTYPES:
                raise TypeRelationError(f"{name}: {what} must be one of {', '.join(INPUT_DTYPES)}, got {ty}")
        out_dtype = str(attrs["out_dtype"])
        if out_dtype not in OUT_DTYPES:
            raise TypeRelationError(f'{name}: out_dtype must be int32 or int64, got "{out_dtype}"')
        out = _base(base).type_rel([TensorType(data.shape, out_dtype), TensorType(weight.shape, out_dtype)], attrs)
        axis = _kernel_axis(name, attrs, weight.ndim)
        channels = weight.shape[axis] if axis is not None and axis < weight.ndim else None
        # kernel_scale runs along the output channels (for a depthwise HWOI kernel that is
        # I * O, not the O dim); it does not enter the accumulator.
        out_channels = channels
        if name == "qnn.conv2d":
            assert isinstance(out, TensorType)
            layout = str(attrs["out_layout"] or attrs["data_layout"])
            out_channels = out.shape[layout.index("C")] if "C" in layout else channels
        qparam_type(types, 2, name, "input_zero_point", I32, None)
        qparam_type(types, 3, name, "kernel_zero_point", I32, channels)
        qparam_type(types, 4, name, "input_scale", F32, None)
        qparam_type(types, 5, name, "kernel_scale", F32, out_channels)
        constant_value(values, 2, name, "input_zero_point")
        constant_value(values, 3, name, "kernel_zero_point")
        for k, what in ((4, "input_scale"), (5, "kernel_scale")):
            check_scale(constant_value(values, k, name, what), name, what)
        return out

    return rel


def _shift_np(x: np.ndarray, zp: np.ndarray, axis: int | None, dtype: str) -> np.ndarray:
    zp = np.asarray(zp).astype(np.int64)
    if zp.ndim == 1 and axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        zp = zp.reshape(shape)
    return (x.astype(np.int64) - zp).astype(dtype)


def _reference(name: str, base: str):  # noqa: ANN202  a reference
    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
        data, weight, izp, kzp = arrays[:4]
        dtype = str(attrs["out_dtype"])
        x = _shift_np(data, izp, None, dtype)
        w = _shift_np(weight, kzp, _kernel_axis(name, attrs, weight.ndim), dtype)
        return np.asarray(_base(base).reference([x, w], attrs)).astype(dtype)

    return reference


def _shifted_copy(
    ctx: KernelContext, source: te.Buffer, base: str, zps: Sequence[int], axis: int | None, dtype: str
) -> tuple[te.Buffer, Stmt]:
    dims = buffer_dims(source)
    shifted = te.Buffer(ctx.fresh(base), dims, dtype)

    def body(vars_: list[te.Var]) -> Stmt:
        channel = vars_[axis] if axis is not None and len(zps) > 1 else None
        value = te.cast(dtype, source[tuple(vars_)]) - per_channel(zps, channel, dtype)
        return Store(shifted, tuple(vars_), value)

    return shifted, loop_nest(ctx, base, dims, body)


def _kernel(name: str, base: str):  # noqa: ANN202  a kernel
    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
    ) -> Stmt:
        data, weight = input_buffers(inputs[:2], name)
        izp, kzp = (scalars(view_data(v, name)) for v in inputs[2:4])
        dtype = out.dtype
        x, fill_x = _shifted_copy(ctx, data, "shifted_data", izp, None, dtype)
        w, fill_w = _shifted_copy(ctx, weight, "shifted_weight", kzp, _kernel_axis(name, attrs, len(weight.shape)), dtype)
        base_kernel = _base(base).kernel
        assert base_kernel is not None
        body = base_kernel(ctx, [TensorView.of_buffer(x), TensorView.of_buffer(w)], out, attrs, out_type, epilogue)
        return Allocate(x, Allocate(w, seq(fill_x, fill_w, body)))

    return kernel


def _qparams(
    izp: int, kzp: object, iscale: float = 0.05, kscale: object = 0.02
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.array(izp, np.int32),
        np.asarray(kzp, dtype=np.int32),
        np.array(iscale, np.float32),
        np.asarray(kscale, dtype=np.float32),
    )


def _draw_qparams(d: Draw, dtype: str, channels: int | None) -> tuple[np.ndarray, ...]:
    izp = d.choice((0, 3, -5, 128 if dtype == "uint8" else 7))
    if channels is not None and d.boolean():
        kzp = int_values(d, (channels,), I32, -4, 4)
        kscale = np.linspace(0.01, 0.05, channels, dtype=np.float32)
    else:
        kzp, kscale = np.array(d.choice((0, 2, -3)), np.int32), np.array(0.02, np.float32)
    return np.array(izp, np.int32), kzp, np.array(d.choice((0.05, 0.5)), np.float32), kscale


def _int_high(dtype: str) -> int:
    # Random integer inputs are drawn in [0, int_high): 256 wraps to the whole int8 range.
    return 256 if dtype in ("int8", "uint8") else 100


def _dense_domain(d: Draw) -> Sample:
    dtype = d.choice(("int8", "uint8", "int8", "int16"))
    m, k, n = d.integer(1, 4), d.integer(1, 9), d.integer(1, 6)
    lead = d.choice(((), (d.integer(1, 3),)))
    attrs = {"units": d.choice((None, n)), "out_dtype": d.choice(OUT_DTYPES)}
    params = _draw_qparams(d, dtype, n)
    return Sample((TensorType((*lead, m, k), dtype), TensorType((n, k), dtype), *params), attrs, int_high=_int_high(dtype))


def _batch_matmul_domain(d: Draw) -> Sample:
    dtype = d.choice(("int8", "uint8"))
    b, m, k, n = d.integer(1, 3), d.integer(1, 4), d.integer(1, 7), d.integer(1, 5)
    ta, tb = d.boolean(), d.boolean()
    a_shape = (b, k, m) if ta else (b, m, k)
    b_shape = (d.choice((1, b)), n, k) if tb else (d.choice((1, b)), k, n)
    attrs = {"transpose_a": ta, "transpose_b": tb, "out_dtype": d.choice(OUT_DTYPES)}
    params = _draw_qparams(d, dtype, None)
    return Sample((TensorType(a_shape, dtype), TensorType(b_shape, dtype), *params), attrs, int_high=_int_high(dtype))


def _conv2d_domain(d: Draw) -> Sample:
    dtype = d.choice(("int8", "uint8"))
    layout = d.choice((("NCHW", "OIHW"), ("NHWC", "HWIO"), ("NCHW", "OIHW")))
    groups = d.choice((1, 1, 2))
    cin, cout = groups * d.integer(1, 2), groups * d.integer(1, 3)
    kh, kw = d.integer(1, 3), d.integer(1, 3)
    pad = d.choice(((0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0)))
    stride = d.choice(((1, 1), (2, 2), (1, 2)))
    h, w = d.integer(kh, kh + 4), d.integer(kw, kw + 4)
    nchw = dict(zip("NCHW", (d.integer(1, 2), cin, h, w)))
    oihw = dict(zip("OIHW", (cout, cin // groups, kh, kw)))
    data_shape = tuple(nchw[c] for c in layout[0])
    weight_shape = tuple(oihw[c] for c in layout[1])
    attrs = {
        "strides": list(stride), "padding": list(pad), "groups": groups, "channels": cout, "kernel_size": [kh, kw],
        "data_layout": layout[0], "kernel_layout": layout[1], "out_dtype": "int32",
    }
    params = _draw_qparams(d, dtype, cout)
    return Sample((TensorType(data_shape, dtype), TensorType(weight_shape, dtype), *params), attrs, int_high=_int_high(dtype))


def _conv2d_transpose_domain(d: Draw) -> Sample:
    dtype = d.choice(("int8", "uint8"))
    cin, cout = d.integer(1, 3), d.integer(1, 3)
    kh, kw = d.integer(2, 3), d.integer(2, 3)
    stride = d.choice(((1, 1), (2, 2)))
    pad = d.choice(((0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0)))
    h, w = d.integer(2, 4), d.integer(2, 4)
    attrs = {
        "strides": list(stride), "padding": list(pad), "channels": cout, "kernel_size": [kh, kw], "out_dtype": "int32",
    }
    params = _draw_qparams(d, dtype, None)
    return Sample(
        (TensorType((1, cin, h, w), dtype), TensorType((cin, cout, kh, kw), dtype), *params),
        attrs,
        int_high=_int_high(dtype),
    )


# --- shape rules: the float ops' shape arithmetic on the data and weight dims --------------------


def _positions(text: str, letters: str) -> tuple[int, ...]:
    """Where each of `letters` sits in the layout `text` (a permutation of them, as the type
    relation has checked)."""
    if sorted(text) != sorted(letters):
        raise ShapeRuleError(f"layout {text!r} is not a permutation of {letters}")
    return tuple(text.index(letter) for letter in letters)


def _laid_out(canonical: Sequence[Dim], positions: Sequence[int]) -> tuple[Dim, ...]:
    out: list[Dim] = [0] * len(canonical)
    for dim, p in zip(canonical, positions):
        out[p] = dim
    return tuple(out)


def _dense_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """(..., K) x (N, K) -> (..., N), N being `units` when given."""
    data, weight = dims(inputs[0], "data"), dims(inputs[1], "weight")
    n = weight[0] if attrs["units"] is None else int(attrs["units"])
    return [fill(out_type, (*data[:-1], n))]


def _batch_matmul_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """(B, M, K) x (B', K, N) -> (max-broadcast B, M, N), each side optionally transposed."""
    x, y = dims(inputs[0], "x"), dims(inputs[1], "y")
    m = x[2] if attrs["transpose_a"] else x[1]
    n = y[1] if attrs["transpose_b"] else y[2]
    (batch,) = broadcast_dims([x[:1], y[:1]])
    return [fill(out_type, (batch, m, n))]


def _conv2d_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """The window count along H and W; the output channels are `channels`, else the weight's O."""
    data, weight = dims(inputs[0], "data"), dims(inputs[1], "weight")
    n, _, h, w = (data[p] for p in _positions(str(attrs["data_layout"]), "NCHW"))
    o, _, kh, kw = (weight[p] for p in _positions(str(attrs["kernel_layout"]), "OIHW"))
    if attrs["channels"] is not None:
        o = int(attrs["channels"])
    top, left, bottom, right = padding4(attrs["padding"], "qnn.conv2d")
    sh, sw = positive_pair(attrs["strides"], "strides", "qnn.conv2d")
    dh, dw = positive_pair(attrs["dilation"], "dilation", "qnn.conv2d")
    oh = conv_output_dim(h, kh, top, bottom, sh, dh)
    ow = conv_output_dim(w, kw, left, right, sw, dw)
    out_layout = str(attrs["out_layout"] or attrs["data_layout"])
    return [fill(out_type, _laid_out((n, o, oh, ow), _positions(out_layout, "NCHW")))]


def _conv2d_transpose_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """Per spatial axis stride * (size - 1) + dilated kernel - padding + output_padding; the
    output channels are `channels`, else the weight's O/groups times groups."""
    op = "qnn.conv2d_transpose"
    data, weight = dims(inputs[0], "data"), dims(inputs[1], "weight")
    n, _, *sizes = (data[p] for p in _positions(str(attrs["data_layout"]), "NCHW"))
    _, og, *ksize = (weight[p] for p in _positions(str(attrs["kernel_layout"]), "IOHW"))
    groups = int(attrs["groups"])
    o: Dim = int64(og) * groups if attrs["channels"] is None else int(attrs["channels"])
    strides = spatial_values(attrs["strides"], 2, "strides", op, 1)
    dilation = spatial_values(attrs["dilation"], 2, "dilation", op, 1)
    output_padding = spatial_values(attrs["output_padding"], 2, "output_padding", op, 0)
    before, after = padding_nd(attrs["padding"], 2, op)
    spatial = [
        (int64(size) - 1) * stride + (int64(k) - 1) * dil + 1 - pb - pa + extra
        for size, k, stride, dil, pb, pa, extra in zip(sizes, ksize, strides, dilation, before, after, output_padding)
    ]
    out_layout = str(attrs["out_layout"] or attrs["data_layout"])
    return [fill(out_type, _laid_out((n, o, *spatial), _positions(out_layout, "NCHW")))]


SHAPE_RULES: dict[str, ShapeRule] = {
    "qnn.dense": _dense_shape_rule,
    "qnn.batch_matmul": _batch_matmul_shape_rule,
    "qnn.conv2d": _conv2d_shape_rule,
    "qnn.conv2d_transpose": _conv2d_transpose_shape_rule,
}


# A `?` batch runs the static kernel once per row where each result row reads only its own row
# of data (compiler/backend/batch_loop.py): dense's rows (a 1-D data has none), conv2d's batch
# when the layouts put it first, batch_matmul's batches.
_BATCH_ROWS: dict[str, dict[str, object]] = {
    "qnn.dense": {"batch_rows": lambda attrs, rank: rank > 1},
    "qnn.conv2d": {"batch_rows": batch_first("data_layout", "out_layout")},
    "qnn.batch_matmul": {"batch_rows": lambda attrs, rank: True},
    "qnn.conv2d_transpose": {"batch_rows": batch_first("data_layout", "out_layout")},
}


def _register(name: str, base: str, domain: Domain, samples: tuple[Sample, ...]) -> OpDef:
    base_op = _base(base)
    return register(
        OpDef(
            name=name,
            num_inputs=6,
            type_rel=_relation(name, base),
            pattern=base_op.pattern,
            reference=_reference(name, base),
            kernel=_kernel(name, base),
            shape_func=SHAPE_RULES[name],
            attrs=base_op.attrs,
            extras={"constant_args": (2, 3, 4, 5), **_BATCH_ROWS.get(name, {})},
            domain=domain,
            samples=samples,
        )
    )


_register(
    "qnn.dense",
    "nn.dense",
    Domain(_dense_domain),
    (
        Sample((TensorType((3, 8), "int8"), TensorType((5, 8), "int8"), *_qparams(3, 2)), {"units": 5, "out_dtype": "int32"}, int_high=256),
        Sample((TensorType((2, 4), "uint8"), TensorType((3, 4), "uint8"), *_qparams(128, 120)), {"units": None, "out_dtype": "int32"}, int_high=256),
        Sample(
            (TensorType((2, 2, 6), "int8"), TensorType((4, 6), "int8"), *_qparams(-1, [0, 1, -2, 3], 0.1, [0.1, 0.2, 0.3, 0.4])),
            {"units": 4, "out_dtype": "int64"},
            int_high=256,
        ),
    ),
)

_register(
    "qnn.batch_matmul",
    "nn.batch_matmul",
    Domain(_batch_matmul_domain),
    (
        Sample(
            (TensorType((2, 3, 4), "int8"), TensorType((2, 5, 4), "int8"), *_qparams(1, -2)),
            {"transpose_b": True, "out_dtype": "int32"},
            int_high=256,
        ),
        Sample(
            (TensorType((1, 4, 3), "uint8"), TensorType((1, 4, 2), "uint8"), *_qparams(128, 100)),
            {"transpose_a": True, "out_dtype": "int32"},
            int_high=256,
        ),
    ),
)

_register(
    "qnn.conv2d",
    "nn.conv2d",
    Domain(_conv2d_domain),
    (
        Sample(
            (TensorType((1, 3, 5, 5), "int8"), TensorType((4, 3, 3, 3), "int8"), *_qparams(2, 1)),
            {"padding": [1, 1, 1, 1], "channels": 4, "kernel_size": [3, 3], "out_dtype": "int32"},
            int_high=256,
        ),
        Sample(
            (TensorType((1, 6, 6, 2), "uint8"), TensorType((3, 3, 2, 3), "uint8"), *_qparams(128, [127, 128, 129], 0.1, [0.01, 0.02, 0.03])),
            {
                "strides": [2, 2], "padding": [0, 1, 1, 0], "channels": 3, "kernel_size": [3, 3],
                "data_layout": "NHWC", "kernel_layout": "HWIO", "out_dtype": "int32",
            },
            int_high=256,
        ),
        Sample(
            (TensorType((1, 4, 4, 4), "int8"), TensorType((4, 1, 3, 3), "int8"), *_qparams(-3, 0)),
            {"padding": [1, 1, 1, 1], "groups": 4, "channels": 4, "kernel_size": [3, 3], "out_dtype": "int32"},
            int_high=256,
        ),
        # Depthwise in HWOI: one kernel scale per output channel.
        Sample(
            (TensorType((1, 4, 4, 4), "uint8"), TensorType((3, 3, 4, 1), "uint8"), *_qparams(128, 127, 0.1, [0.01, 0.02, 0.03, 0.04])),
            {
                "padding": [1, 1, 1, 1], "groups": 4, "channels": 4, "kernel_size": [3, 3],
                "data_layout": "NHWC", "kernel_layout": "HWOI", "out_dtype": "int32",
            },
            int_high=256,
        ),
    ),
)

_register(
    "qnn.conv2d_transpose",
    "nn.conv2d_transpose",
    Domain(_conv2d_transpose_domain),
    (
        Sample(
            (TensorType((1, 2, 3, 3), "int8"), TensorType((2, 3, 3, 3), "int8"), *_qparams(4, -1)),
            {"strides": [2, 2], "padding": [1, 1, 1, 1], "channels": 3, "kernel_size": [3, 3], "out_dtype": "int32"},
            int_high=256,
        ),
    ),
)


# --- qnn.avg_pool2d ---------------------------------------------------------------------------------
# (data, input_scale, input_zero_point, output_scale, output_zero_point) with nn.avg_pool2d's
# attrs: the input requantized (or upcast) to int32 in the output's parameters, averaged like
# nn.avg_pool2d on int32 (truncating division), clipped and cast back to the input dtype.

AVG_POOL = "qnn.avg_pool2d"


def _avg_pool_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    check_arity(types, 5, AVG_POOL)
    data = tensor_arg(types, 0, AVG_POOL)
    if data.dtype not in ("int8", "uint8"):
        raise TypeRelationError(f"{AVG_POOL}: data must be int8 or uint8, got {data}")
    scalar_qparams(types, values, AVG_POOL)
    out = _base("nn.avg_pool2d").type_rel([data], attrs)
    assert isinstance(out, TensorType)
    return out


def _avg_pool(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, s, z, os_, oz = arrays
    plan = upcast_plan(s, z, os_, oz)
    requantized = x.astype(np.int32) if plan is None else plan.apply_np(x, 0, I32)
    pooled = np.asarray(_base("nn.avg_pool2d").reference([requantized], attrs))
    return clip_cast_np(pooled, str(x.dtype))


def _avg_pool_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt:
    (data,) = input_buffers(inputs[:1], AVG_POOL)
    s, z, os_, oz = (view_data(v, AVG_POOL) for v in inputs[1:])
    plan = upcast_plan(s, z, os_, oz)
    dims = buffer_dims(data)
    requantized = te.Buffer(ctx.fresh("requantized"), dims, I32)

    def requantize(vars_: list[te.Var]) -> Stmt:
        x = data[tuple(vars_)]
        return Store(requantized, tuple(vars_), te.cast(I32, x) if plan is None else plan.apply_expr(x, None, I32))

    out_dims = buffer_dims(out)
    pooled = te.Buffer(ctx.fresh("pooled"), out_dims, I32)
    base_kernel = _base("nn.avg_pool2d").kernel
    assert base_kernel is not None
    body = base_kernel(
        ctx, [TensorView.of_buffer(requantized)], pooled, attrs, TensorType(out_dims, I32), ctx.identity_epilogue()
    )

    def store(vars_: list[te.Var]) -> Stmt:
        idx = tuple(vars_)
        return Store(out, idx, te.cast(out.dtype, epilogue(clip_cast_expr(pooled[idx], out.dtype), idx)))

    fill = loop_nest(ctx, "requantize", dims, requantize)
    return Allocate(requantized, Allocate(pooled, seq(fill, body, loop_nest(ctx, "clip", out_dims, store))))


def _avg_pool_domain(d: Draw) -> Sample:
    base_domain = _base("nn.avg_pool2d").domain
    assert base_domain is not None
    base = base_domain.draw(d)
    entry = base.inputs[0]
    shape = entry.shape if isinstance(entry, (TensorType, np.ndarray)) else ()
    dtype = d.choice(("int8", "uint8"))
    mid = 128 if dtype == "uint8" else 0
    scales = [np.array(d.choice((0.05, 0.1, 0.25)), np.float32) for _ in range(2)]
    zps = [np.array(mid + d.choice((0, 4, -6)), np.int32) for _ in range(2)]
    if d.boolean():
        scales[1], zps[1] = scales[0], zps[0]
    return Sample((TensorType(tuple(shape), dtype), scales[0], zps[0], scales[1], zps[1]), base.attrs, int_high=256)


register(
    OpDef(
        name=AVG_POOL,
        num_inputs=5,
        type_rel=_avg_pool_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=_avg_pool,
        kernel=_avg_pool_kernel,
        shape_func=pool2d_shape_rule(AVG_POOL),
        attrs=_base("nn.avg_pool2d").attrs,
        extras={"constant_args": (1, 2, 3, 4)},
        domain=Domain(_avg_pool_domain),
        samples=(
            Sample(
                (TensorType((1, 2, 5, 5), "int8"), np.array(0.1, np.float32), np.array(0, np.int32), np.array(0.1, np.float32), np.array(0, np.int32)),
                {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1], "count_include_pad": True},
                int_high=256,
            ),
            Sample(
                (TensorType((1, 4, 4, 3), "uint8"), np.array(0.1, np.float32), np.array(128, np.int32), np.array(0.05, np.float32), np.array(120, np.int32)),
                {"pool_size": [2, 2], "layout": "NHWC", "ceil_mode": True, "strides": [2, 2], "padding": [0, 0, 1, 1]},
                int_high=256,
            ),
        ),
    )
)
