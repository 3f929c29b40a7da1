"""nn.contrib_conv2d_NCHWc and nn.contrib_depthwise_conv2d_NCHWc: conv2d on channel-blocked
tensors, as TVM's AlterOpLayout produces them for x86.

Data is NCHW[x]c: (N, C/x, H, W, x), channel `c = C_outer * x + c_inner`; the weight is
OIHW[x]i[y]o: (O/y, I/x, KH, KW, x, y) for the dense op, OIHW1i[y]o: (O/y, 1, KH, KW, 1, y) for
the depthwise one; the output is laid out as `out_layout` (usually NCHW[y]c). Both take
Conv2DAttrs. Seen through their layouts these are ordinary grouped convolutions, so they share
the N-d geometry, reference and loops of compiler/ops/conv_nd.py.

As in TVM, contrib_conv2d_NCHWc needs `channels` and `kernel_size` (its relation reads the output
shape from them rather than from the blocked weight); here the weight is checked against them.
The depthwise op is a convolution with one input channel per group, `groups` = input channels.

Beyond TVM's uses, the weight may be blocked by output channels only, OIHW[b]o or OHWI[b]o,
on NCHW data (the stem) or NCHW[x]c data (OHWI[b]o), with an NCHW or NCHW[b]c result: what
AlterOpLayout makes of a float32 nn.conv2d with a constant weight. Such a call (one group, b one
or two vectors) runs the register-blocked kernel of compiler/ops/kernels/conv2d_packed.py.
That kernel also takes the float16 tensor a float32 call's data was cast from, and widens it
while copying its bands (`extras["widened_inputs"]`): FuseOps puts such a cast into the call's
primitive function (compiler/passes/fusion_input_casts.py) and the lowering hands the kernel the
float16 buffer (compiler/backend/lower_primitive.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type
from compiler.ops.common import batch_first, check_arity, dims_equal, tensor_arg
from compiler.ops.conv_nd import (
    conv_attrs,
    conv_geometry,
    conv_kernel,
    conv_numpy,
    conv_shape_rule,
    conv_type,
    draw_dtypes,
    draw_padding,
    int8_ramp,
)
from compiler.ops.domain import Domain, Draw
from compiler.ops.kernels import conv2d_packed
from compiler.ops.kernels.common import input_buffers
from compiler.ops.kernels.conv2d import Conv2DLayout, conv2d_dynamic_loops
from compiler.ops.kernels.gemm import vector_lanes
from compiler.ops.registry import OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.window import padding4, positive_pair
from compiler.tir.compute import Epilogue, KernelContext, TensorView
from compiler.tir.expr import Buffer
from compiler.tir.stmt import Stmt

F32 = "float32"
NCHWC = "nn.contrib_conv2d_NCHWc"
DEPTHWISE = "nn.contrib_depthwise_conv2d_NCHWc"
ULPS = 64.0


def _nchwc_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 2, NCHWC)
    data, weight = tensor_arg(types, 0, NCHWC), tensor_arg(types, 1, NCHWC)
    if attrs["channels"] is None or attrs["kernel_size"] is None:
        given = f"channels={attrs['channels']}, kernel_size={attrs['kernel_size'] and list(attrs['kernel_size'])}"
        raise TypeRelationError(f"{NCHWC}: channels and kernel_size must be set (got {given})")
    return conv_type(conv_geometry(NCHWC, data, weight, attrs, 2), attrs, data, NCHWC)


def _depthwise_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 2, DEPTHWISE)
    data, weight = tensor_arg(types, 0, DEPTHWISE), tensor_arg(types, 1, DEPTHWISE)
    g = conv_geometry(DEPTHWISE, data, weight, attrs, 2)
    if not dims_equal(g.data[1], g.groups) or not dims_equal(g.kernel[1], 1):
        raise TypeRelationError(
            f"{DEPTHWISE}: a depthwise convolution needs groups equal to the {g.data[1]} input channels of "
            f"data {data} and one input channel per filter, got groups={g.groups} and weight {weight}"
        )
    return conv_type(g, attrs, data, DEPTHWISE)


_generic_kernel = conv_kernel(NCHWC, 2)


def packed_block(attrs: Attrs) -> tuple[int, bool] | None:
    """(b, whether the taps come before the input channels) of a call with an OIHW[b]o or
    OHWI[b]o weight on NCHW or NCHW[x]c data (OHWI[b]o only for blocked data) whose output is
    NCHW or NCHW[b]c, else None."""
    kernel = attrs["kernel_layout"]
    if kernel[:4] not in ("OIHW", "OHWI") or not kernel.endswith("o") or not kernel[4:-1].isdigit():
        return None
    block, taps_outer = int(kernel[4:-1]), kernel[:4] == "OHWI"
    data_layout = attrs["data_layout"]
    out_layout = attrs["out_layout"] or data_layout
    data_ok = data_layout == "NCHW" or (taps_outer and _channel_block(data_layout) is not None)
    if not data_ok or (out_layout != "NCHW" and _channel_block(out_layout) != block):
        return None
    return block, taps_outer


def _channel_block(layout: str) -> int | None:
    """x of an NCHW[x]c layout, else None."""
    inner = layout[4:-1]
    return int(inner) if layout.startswith("NCHW") and layout.endswith("c") and inner.isdigit() else None


def _packed_applies(ctx: KernelContext, attrs: Attrs, data_dtype: str, weight_dtype: str, dtype: str) -> bool:
    packing = packed_block(attrs)
    data_ok = data_dtype == dtype or conv2d_packed.widens(data_dtype, dtype)
    return (packing is not None and data_ok and weight_dtype == dtype
            and conv2d_packed.applies(dtype, attrs["groups"], packing[0], vector_lanes(ctx, dtype)))


def _widened_inputs(ctx: KernelContext, attrs: Attrs, arg_types: Sequence[Type], out_type: Type) -> tuple[int, ...]:
    """The inputs this call's kernel may be given in float16 and widens itself: the data, when
    the packed kernel computes the call (float32 throughout) and would take float16 data."""
    data, weight = arg_types
    if not (isinstance(data, TensorType) and isinstance(weight, TensorType) and isinstance(out_type, TensorType)):
        return ()
    dtype = out_type.dtype
    widened = data.dtype == dtype and _packed_applies(ctx, attrs, conv2d_packed.HALF, weight.dtype, dtype)
    return (0,) if widened else ()


def _casts_at_store(ctx: KernelContext, attrs: Attrs, arg_types: Sequence[Type], out_type: Type) -> bool:
    """Whether this call's kernel computes in the call's own dtype whatever its output buffer's:
    the packed form does, casting each value as it stores it, so a fused chain may end in
    another dtype (float16 ResNet-50's `cast` after a residual add) without a float32 copy of
    the whole result in the workspace."""
    data, weight = arg_types
    return (isinstance(data, TensorType) and isinstance(weight, TensorType) and isinstance(out_type, TensorType)
            and _packed_applies(ctx, attrs, data.dtype, weight.dtype, out_type.dtype))


def _nchwc_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt:
    data, weight = input_buffers(inputs, NCHWC)
    assert isinstance(out_type, TensorType)
    if _packed_applies(ctx, attrs, data.dtype, weight.dtype, out_type.dtype):
        g = conv_geometry(NCHWC, TensorType(data.shape, data.dtype), TensorType(weight.shape, weight.dtype), attrs, 2)
        window = (g.strides, g.dilation, g.pad_before)
        packing = packed_block(attrs)
        assert packing is not None
        return conv2d_packed.conv2d_packed_loops(ctx, data, weight, out, epilogue, window, packing[1],  # type: ignore[arg-type]  # 2-D
                                                 out_type.dtype)
    return _generic_kernel(ctx, inputs, out, attrs, out_type, epilogue)


def _nchwc_dynamic_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt | None:
    """Data of a run-time image size, NCHW or NCHW[x]c, into NCHW or NCHW[b]c, with a weight
    packed at compile time (AlterOpLayout's and BlockedActivations' forms of such a conv2d):
    the dynamic tiled product reading the panels in place (kernels/conv2d.py); None for
    anything else (refused by the caller)."""
    data, weight = input_buffers(inputs, NCHWC)
    packing = packed_block(attrs)
    if packing is None or attrs["groups"] != 1 or not isinstance(out_type, TensorType):
        return None
    if not _packed_applies(ctx, attrs, data.dtype, weight.dtype, out_type.dtype):
        return None
    layout = Conv2DLayout((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3), positive_pair(attrs["strides"], "strides", NCHWC),
                          positive_pair(attrs["dilation"], "dilation", NCHWC), padding4(attrs["padding"], NCHWC), 1)
    return conv2d_dynamic_loops(ctx, data, weight, out, epilogue, layout, packing)


def _blocked_domain(depthwise: bool) -> Callable[[Draw], Sample]:
    def draw(d: Draw) -> Sample:
        data_dtype, weight_dtype, out_dtype = draw_dtypes(d)
        ic_bn = d.choice((1, 2, 4, 8))
        oc_bn = d.choice((1, 2, 4, 8))
        c = ic_bn * d.integer(1, 2)
        if depthwise:
            ic_bn = oc_bn  # channel multiplier 1 or 2 keeps O = C * m blockable by oc_bn
            c = oc_bn * d.integer(1, 2)
            o = c * d.choice((1, 2))
            groups, cg = c, 1
        else:
            o = oc_bn * d.integer(1, 2)
            groups, cg = 1, c
        kh, kw = d.integer(1, 3), d.integer(1, 3)
        strides = [d.choice((1, 2, 4)), d.choice((1, 2, 4))]
        dilation = d.choice(([1, 1], [1, 1], [2, 1], [2, 2]))
        padding = draw_padding(d, 2, 2)
        top, left = padding[0], padding[1 % len(padding)]
        bottom = padding[2] if len(padding) == 4 else top
        right = padding[3] if len(padding) == 4 else left
        h = max(1, (kh - 1) * dilation[0] + 1 - top - bottom) + d.integer(0, 4)
        w = max(1, (kw - 1) * dilation[1] + 1 - left - right) + d.integer(0, 4)
        n = d.integer(1, 2)
        out_layout = d.choice((f"NCHW{oc_bn}c", f"NCHW{oc_bn}c", "NCHW", "NHWC"))
        if depthwise:
            weight = (o // oc_bn, 1, kh, kw, 1, oc_bn)
            kernel_layout = f"OIHW1i{oc_bn}o"
        else:
            weight = (o // oc_bn, cg // ic_bn, kh, kw, ic_bn, oc_bn)
            kernel_layout = f"OIHW{ic_bn}i{oc_bn}o"
        attrs: dict[str, object] = {
            "strides": strides, "padding": padding, "dilation": dilation, "groups": groups,
            "channels": o, "kernel_size": [kh, kw], "data_layout": f"NCHW{ic_bn}c",
            "kernel_layout": kernel_layout, "out_layout": out_layout, "out_dtype": out_dtype,
        }
        return Sample(
            (TensorType((n, c // ic_bn, h, w, ic_bn), data_dtype), TensorType(weight, weight_dtype)),
            attrs,
            int_high=d.choice((4, 100)),
        )

    return draw


register(
    OpDef(
        name=NCHWC,
        num_inputs=2,
        type_rel=_nchwc_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=conv_numpy(NCHWC, 2),
        kernel=_nchwc_kernel,
        extras={"batch_rows": batch_first("data_layout", "out_layout"), "casts_at_store": _casts_at_store,
                "widened_inputs": _widened_inputs, "dynamic_kernel": _nchwc_dynamic_kernel},
        shape_func=conv_shape_rule(NCHWC, 2),
        attrs=conv_attrs(2, "NCHW", "OIHW"),
        samples=(
            Sample(
                (TensorType((1, 2, 5, 5, 8), F32), TensorType((1, 2, 3, 3, 8, 8), F32)),
                {"padding": [1, 1], "channels": 8, "kernel_size": [3, 3], "data_layout": "NCHW8c",
                 "kernel_layout": "OIHW8i8o", "out_layout": "NCHW8c"},
            ),
            Sample(
                (TensorType((2, 1, 7, 6, 4), F32), TensorType((2, 1, 2, 3, 4, 4), F32)),
                {"strides": [3, 2], "padding": [1, 0, 2, 1], "dilation": [2, 1], "channels": 8, "kernel_size": [2, 3],
                 "data_layout": "NCHW4c", "kernel_layout": "OIHW4i4o", "out_layout": "NCHW8c"},
            ),
            Sample(
                (TensorType((1, 4, 4, 4, 4), F32), TensorType((2, 4, 1, 1, 4, 16), F32)),
                {"channels": 32, "kernel_size": [1, 1], "data_layout": "NCHW4c", "kernel_layout": "OIHW4i16o",
                 "out_layout": "NCHW16c"},
            ),
            Sample(
                (TensorType((1, 2, 3, 3, 4), "uint8"), int8_ramp(1, 2, 2, 2, 4, 4)),
                {"channels": 4, "kernel_size": [2, 2], "data_layout": "NCHW4c", "kernel_layout": "OIHW4i4o",
                 "out_layout": "NCHW4c", "out_dtype": "int32"},
                int_high=120,
            ),
        ),
        domain=Domain(_blocked_domain(False), ulps=ULPS, accumulates=True),
    )
)

register(
    OpDef(
        name=DEPTHWISE,
        num_inputs=2,
        type_rel=_depthwise_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=conv_numpy(DEPTHWISE, 2),
        kernel=conv_kernel(DEPTHWISE, 2),
        extras={"batch_rows": batch_first("data_layout", "out_layout")},
        shape_func=conv_shape_rule(DEPTHWISE, 2),
        attrs=conv_attrs(2, "NCHW", "OIHW"),
        samples=(
            Sample(
                (TensorType((1, 2, 5, 5, 8), F32), TensorType((2, 1, 3, 3, 1, 8), F32)),
                {"padding": [1, 1], "groups": 16, "channels": 16, "kernel_size": [3, 3], "data_layout": "NCHW8c",
                 "kernel_layout": "OIHW1i8o", "out_layout": "NCHW8c"},
            ),
            Sample(
                (TensorType((1, 1, 6, 7, 4), F32), TensorType((2, 1, 2, 2, 1, 4), F32)),
                {"strides": [3, 2], "padding": [0, 1], "dilation": [2, 2], "groups": 4, "channels": 8,
                 "data_layout": "NCHW4c", "kernel_layout": "OIHW1i4o", "out_layout": "NCHW4c"},
            ),
            Sample(
                (int8_ramp(1, 2, 4, 4, 2), int8_ramp(2, 1, 3, 3, 1, 2)),
                {"padding": [1], "groups": 4, "data_layout": "NCHW2c", "kernel_layout": "OIHW1i2o",
                 "out_layout": "NCHW", "out_dtype": "int32"},
                int_high=100,
            ),
        ),
        domain=Domain(_blocked_domain(True), ulps=ULPS, accumulates=True),
    )
)
