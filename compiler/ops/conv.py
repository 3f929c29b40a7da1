"""nn.conv2d: grouped, dilated, strided 2-D convolution in any permutation layout.

The data layout is a permutation of NCHW and the kernel layout a permutation of OIHW (OIHW,
HWIO, OHWI, HWOI, IHWO, ...). Seen in OIHW, the weight is (O, C/groups, KH, KW): output channel
o reads the input channels of group o // (O/groups). Depthwise convolution is groups == C with
one input channel per group (so an HWOI depthwise weight is (KH, KW, C*multiplier, 1)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type
from compiler.ops.common import batch_first, check_arity, dims_equal, tensor_arg
from compiler.ops.domain import Domain, Draw, int_values
from compiler.ops.kernels.common import input_buffers, place
from compiler.ops.kernels.conv2d import Conv2DLayout, conv2d_dynamic_loops, conv2d_loops
from compiler.ops.layout import from_canonical, plain_positions, to_canonical
from compiler.ops.nn import accumulator_dtype, merge_dim, result_dtype
from compiler.ops.pool import padding_attr, window_input_size, window_pair
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as ShapeDim
from compiler.ops.shape_rules import ShapeArg, dims, fill, window_count
from compiler.ops.window import padding4, positive_pair, tap_or, window_extent, window_views
from compiler.tir.compute import Epilogue, KernelContext, Reduction, TensorView
from compiler.tir.expr import Buffer, PrimExpr, cast, const
from compiler.tir.stmt import Stmt

OP = "nn.conv2d"
F32 = "float32"


@dataclass(frozen=True)
class Conv2DGeometry:
    """Everything about one conv2d call, read once from its attrs and argument types.

    `data_pos`, `kernel_pos` and `out_pos` map the canonical NCHW / OIHW orders to the actual
    layouts (see `layout.plain_positions`).
    """

    data_pos: tuple[int, ...]
    kernel_pos: tuple[int, ...]
    out_pos: tuple[int, ...]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    groups: int
    out_shape_nchw: tuple[Dim, ...]


def conv2d_geometry(data: TensorType, weight: TensorType, attrs: Attrs) -> Conv2DGeometry:
    """Validate a conv2d call; raise TypeRelationError naming the offending types or attrs."""
    data_pos = plain_positions(attrs["data_layout"], "NCHW", OP, "data_layout")
    kernel_pos = plain_positions(attrs["kernel_layout"], "OIHW", OP, "kernel_layout")
    out_pos = plain_positions(attrs["out_layout"] or attrs["data_layout"], "NCHW", OP, "out_layout")
    if data.ndim != 4 or weight.ndim != 4:
        raise TypeRelationError(f"{OP} expects 4-D data and weight, got {data} and {weight}")
    strides = positive_pair(attrs["strides"], "strides", OP)
    dilation = positive_pair(attrs["dilation"], "dilation", OP)
    padding = padding4(attrs["padding"], OP)
    groups = attrs["groups"]
    if groups <= 0:
        raise TypeRelationError(f"{OP}: groups must be positive, got {groups}")
    n, c, h, w = to_canonical(data.shape, data_pos)
    o, i, kh, kw = to_canonical(weight.shape, kernel_pos)
    if attrs["kernel_size"] is not None:
        # As in TVM, a given kernel_size also stands for a weight whose kernel dims are `?`.
        kernel_size = positive_pair(attrs["kernel_size"], "kernel_size", OP)
        if not (dims_equal(kh, kernel_size[0]) and dims_equal(kw, kernel_size[1])):
            raise TypeRelationError(
                f"{OP}: kernel_size={list(attrs['kernel_size'])} does not match weight {weight}"
            )
        kh, kw = kernel_size
    if attrs["channels"] is not None:
        if not dims_equal(attrs["channels"], o):
            raise TypeRelationError(f"{OP}: channels={attrs['channels']} does not match weight {weight}")
        o = merge_dim(o, attrs["channels"])
    if o is not ANY and o % groups:
        raise TypeRelationError(f"{OP}: {o} output channels do not split into groups={groups}")
    if c is not ANY and i is not ANY and (c % groups or c // groups != i):
        raise TypeRelationError(
            f"{OP}: data {data} has {c} channels, so with groups={groups} the weight needs "
            f"{c}/{groups} input channels, but weight {weight} has {i}"
        )
    # A `?` kernel dim (no kernel_size given) leaves that output dim unknown.
    oh: Dim = ANY
    ow: Dim = ANY
    if kh is not ANY:
        oh = window_extent(h, padding[0] + padding[2], kh, strides[0], dilation[0], False, OP, "height")
    if kw is not ANY:
        ow = window_extent(w, padding[1] + padding[3], kw, strides[1], dilation[1], False, OP, "width")
    return Conv2DGeometry(data_pos, kernel_pos, out_pos, strides, dilation, padding, groups, (n, o, oh, ow))


def _conv2d_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 2, OP)
    data, weight = tensor_arg(types, 0, OP), tensor_arg(types, 1, OP)
    # As in TVM, data and weight dtypes may differ (uint8 data, int8 weight): both are cast to
    # the output dtype before multiplying.
    geometry = conv2d_geometry(data, weight, attrs)
    return TensorType(
        from_canonical(geometry.out_shape_nchw, geometry.out_pos), result_dtype(attrs, data, OP)
    )


def _conv2d_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    """The relation's arithmetic on run-time dims: batch from the data, output channels from
    the weight, each spatial dim the window count of the data's."""
    data_pos = plain_positions(attrs["data_layout"], "NCHW", OP, "data_layout")
    kernel_pos = plain_positions(attrs["kernel_layout"], "OIHW", OP, "kernel_layout")
    out_pos = plain_positions(attrs["out_layout"] or attrs["data_layout"], "NCHW", OP, "out_layout")
    n, _, h, w = to_canonical(dims(inputs[0], "data"), data_pos)
    o, _, kh, kw = to_canonical(dims(inputs[1], "weight"), kernel_pos)
    sh, sw = positive_pair(attrs["strides"], "strides", OP)
    dh, dw = positive_pair(attrs["dilation"], "dilation", OP)
    top, left, bottom, right = padding4(attrs["padding"], OP)
    oh = window_count(h, top + bottom, kh, sh, dh)
    ow = window_count(w, left + right, kw, sw, dw)
    return [fill(out_type, from_canonical((n, o, oh, ow), out_pos))]


def _conv2d(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, weight = a
    g = conv2d_geometry(
        TensorType(data.shape, str(data.dtype)), TensorType(weight.shape, str(weight.dtype)), attrs
    )
    out_dtype = attrs["out_dtype"] or data.dtype
    acc = accumulator_dtype(np.dtype(out_dtype))
    x = np.transpose(data, g.data_pos).astype(out_dtype).astype(acc)
    k = np.transpose(weight, g.kernel_pos).astype(out_dtype).astype(acc)
    top, left, bottom, right = g.padding
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c = x.shape[:2]
    o, i, kh, kw = k.shape
    oh, ow = g.out_shape_nchw[2:]
    assert isinstance(oh, int) and isinstance(ow, int)
    groups = g.groups
    x = x.reshape(n, groups, i, *x.shape[2:])
    k = k.reshape(groups, o // groups, i, kh, kw)
    out = _windowed_product(x, k, g.strides, g.dilation, (oh, ow), acc)
    out_nchw = out.reshape(n, o, oh, ow)
    result = np.transpose(out_nchw, np.argsort(g.out_pos))
    return result.astype(attrs["out_dtype"] or data.dtype)


# Bytes of gathered windows per matrix product: bounds the reference's memory on large images.
_WINDOW_BYTES = 64 << 20


def _windowed_product(
    x: np.ndarray, k: np.ndarray, strides: tuple[int, int], dilation: tuple[int, int], out_hw: tuple[int, int],
    acc: np.dtype,
) -> np.ndarray:
    """sum over (c, kh, kw) of x[n, g, c, window] * k[g, o, c, kh, kw] as one matrix product per
    band of output rows (the windows gathered first), so numpy hands it to BLAS: the
    interpreter checks real models in seconds rather than minutes."""
    n, groups, i = x.shape[:3]
    _, og, _, kh, kw = k.shape
    oh, ow = out_hw
    if i == 1:
        # Depthwise: one channel per group leaves each product a row, too small for BLAS.
        total = np.zeros((n, groups, og, oh, ow), dtype=acc)
        for th, tw, view in window_views(x, (kh, kw), strides, dilation, out_hw):
            total += view * k[:, :, 0, th, tw][..., None, None]
        return total
    patch = i * kh * kw
    weights = k.reshape(groups, og, patch)
    if (kh, kw, *strides) == (1, 1, 1, 1) and x.shape[3:] == (oh, ow):
        # A pointwise convolution reads the image as it is: no windows to gather.
        return np.matmul(weights, x.reshape(n, groups, i, oh * ow)).reshape(n, groups, og, oh, ow)
    out = np.empty((n, groups, og, oh, ow), dtype=acc)
    rows = max(1, min(oh, _WINDOW_BYTES // max(1, n * groups * patch * ow * acc.itemsize)))
    for top in range(0, oh, rows):
        band = min(rows, oh - top)
        cols = np.empty((n, groups, i, kh, kw, band, ow), dtype=acc)
        for th, tw, view in window_views(x, (kh, kw), strides, dilation, out_hw):
            cols[:, :, :, th, tw] = view[..., top : top + band, :]
        product = np.matmul(weights, cols.reshape(n, groups, patch, band * ow))
        out[:, :, :, top : top + band, :] = product.reshape(n, groups, og, band, ow)
    return out


def _conv2d_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt:
    data, weight = input_buffers(inputs, OP)
    g = conv2d_geometry(TensorType(data.shape, data.dtype), TensorType(weight.shape, weight.dtype), attrs)
    layout = Conv2DLayout(g.data_pos, g.kernel_pos, g.out_pos, g.strides, g.dilation, g.padding, g.groups)
    return conv2d_loops(ctx, data, weight, out, epilogue, layout)


def _conv2d_dynamic_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt | None:
    """The tiled product over an image of run-time size (kernels/conv2d.py), or None."""
    data, weight = input_buffers(inputs, OP)
    data_pos = plain_positions(attrs["data_layout"], "NCHW", OP, "data_layout")
    kernel_pos = plain_positions(attrs["kernel_layout"], "OIHW", OP, "kernel_layout")
    out_pos = plain_positions(attrs["out_layout"] or attrs["data_layout"], "NCHW", OP, "out_layout")
    strides = positive_pair(attrs["strides"], "strides", OP)
    dilation = positive_pair(attrs["dilation"], "dilation", OP)
    layout = Conv2DLayout(data_pos, kernel_pos, out_pos, strides, dilation, padding4(attrs["padding"], OP),
                          attrs["groups"])  # type: ignore[arg-type]  # an int attr
    return conv2d_dynamic_loops(ctx, data, weight, out, epilogue, layout)


def conv2d_reduction(inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> Reduction | None:
    """The call as a plain reduction over (input channel of the group, kernel row, kernel
    column), for spatial dims known only at run time, where the tiled kernels (sized at build
    time) cannot go; None for a weight of `?` dims. Slow but general: every layout permutation,
    groups, strides, dilation, padding. Sums in float32 for float16 and float32, else in the
    output dtype, as the tiled kernels do."""
    data, weight = inputs
    data_pos = plain_positions(attrs["data_layout"], "NCHW", OP, "data_layout")
    kernel_pos = plain_positions(attrs["kernel_layout"], "OIHW", OP, "kernel_layout")
    out_pos = plain_positions(attrs["out_layout"] or attrs["data_layout"], "NCHW", OP, "out_layout")
    o, i, kh, kw = to_canonical(weight.shape, kernel_pos)
    if not all(isinstance(d, int) for d in (o, i, kh, kw)):
        return None
    _, _, h, w = to_canonical(data.shape, data_pos)
    (sh, sw), (dh, dw) = positive_pair(attrs["strides"], "strides", OP), positive_pair(attrs["dilation"], "dilation", OP)
    top, left, _, _ = padding4(attrs["padding"], OP)
    out_dtype = attrs["out_dtype"] or data.dtype
    acc = F32 if out_dtype == "float16" else out_dtype
    per_group = o // attrs["groups"]  # type: ignore[operator]  # static, checked above

    def body(out_idx: Sequence[PrimExpr], red_idx: Sequence[PrimExpr]) -> PrimExpr:
        n, oc, y, x = to_canonical(tuple(out_idx), out_pos)
        c, ky, kx = red_idx
        ic = (oc // per_group) * i + c
        w_value = cast(acc, cast(out_dtype, weight[place((oc, c, ky, kx), kernel_pos)]))

        def product(iy: PrimExpr, ix: PrimExpr) -> PrimExpr:
            return cast(acc, cast(out_dtype, data[place((n, ic, iy, ix), data_pos)])) * w_value

        return tap_or(product, y * sh - top + ky * dh, x * sw - left + kx * dw, (h, w), const(0, acc))

    return Reduction("sum", (i, kh, kw), body, acc)  # type: ignore[arg-type]  # PrimExpr sequences


_DATA_LAYOUTS = ("NCHW", "NCHW", "NHWC", "CHWN")
_KERNEL_LAYOUTS = ("OIHW", "OIHW", "HWIO", "OHWI", "HWOI", "IHWO")
# (data dtype, out_dtype): floats mostly; integers widened as quantized models do, or not.
_CONV_DTYPES = (
    ("float32", ""), ("float32", ""), ("float32", ""), ("float16", ""), ("float64", ""),
    ("float32", "float64"), ("int8", "int32"), ("int32", ""), ("uint8", "int32"),
)


def _conv2d_domain(d: Draw) -> Sample:
    """Grouped (depthwise too), strided, dilated, padded calls in any pair of layouts, with the
    optional channels / kernel_size attrs given or not."""
    groups = d.choice((1, 1, 2, 3))
    per_group_in = d.choice((1, 1, 2, 3)) if groups > 1 else d.integer(1, 4)
    # Per group: few output channels (a direct loop nest) or a vector's lanes and more (gemm).
    out_channels = groups * d.choice((1, 2, 1, 2, 8, 9, 17, 33))
    kernel = [d.integer(1, 3), d.integer(1, 3)]
    attrs: dict[str, object] = {
        "strides": window_pair(d, 1, 3),
        "padding": padding_attr(d),
        "dilation": window_pair(d, 1, 2),
        "groups": groups,
        "channels": d.choice((None, out_channels)),
        "kernel_size": d.choice((None, kernel)),
        "data_layout": d.choice(_DATA_LAYOUTS),
        "kernel_layout": d.choice(_KERNEL_LAYOUTS),
        "out_layout": d.choice(("",) * 3 + _DATA_LAYOUTS),
    }
    dtype, attrs["out_dtype"] = d.choice(_CONV_DTYPES)
    padding = attrs["padding"]
    dilation = attrs["dilation"]
    assert isinstance(padding, list) and isinstance(dilation, list)
    pads = padding * 4 if len(padding) == 1 else padding * 2 if len(padding) == 2 else padding
    h = window_input_size(d, kernel[0], dilation[0], pads[0] + pads[2])
    w = window_input_size(d, kernel[1], dilation[-1], pads[1] + pads[3])
    nchw = dict(zip("NCHW", (d.integer(1, 2), groups * per_group_in, h, w)))
    oihw = dict(zip("OIHW", (out_channels, per_group_in, *kernel)))
    data_shape = tuple(nchw[c] for c in str(attrs["data_layout"]))
    weight_shape = tuple(oihw[c] for c in str(attrs["kernel_layout"]))
    if dtype.startswith("float"):
        return Sample((TensorType(data_shape, dtype), TensorType(weight_shape, dtype)), attrs)
    # Small signed values: a product sum stays exact (and does not wrap) in the result dtype.
    low = 0 if dtype == "uint8" else -4
    return Sample((int_values(d, data_shape, dtype, low, 4), int_values(d, weight_shape, dtype, low, 4)), attrs)


register(
    OpDef(
        name=OP,
        num_inputs=2,
        type_rel=_conv2d_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=_conv2d,
        kernel=_conv2d_kernel,
        extras={"batch_rows": batch_first("data_layout", "out_layout"), "dynamic_kernel": _conv2d_dynamic_kernel,
                "dynamic_reduction": conv2d_reduction},
        shape_func=_conv2d_shape,
        attrs=(
            AttrSpec("strides", "ints", (1, 1)),
            AttrSpec("padding", "ints", (0, 0)),
            AttrSpec("dilation", "ints", (1, 1)),
            AttrSpec("groups", "int", 1),
            AttrSpec("channels", "int", None, optional=True),
            AttrSpec("kernel_size", "ints", None, optional=True),
            AttrSpec("data_layout", "str", "NCHW"),
            AttrSpec("kernel_layout", "str", "OIHW"),
            AttrSpec("out_layout", "str", ""),
            AttrSpec("out_dtype", "dtype", ""),
        ),
        samples=(
            Sample(
                (TensorType((1, 3, 8, 8), F32), TensorType((4, 3, 3, 3), F32)),
                {"padding": [1, 1, 1, 1], "channels": 4, "kernel_size": [3, 3]},
            ),
            Sample(
                (TensorType((2, 4, 7, 6), F32), TensorType((6, 2, 3, 2), F32)),
                {"strides": [2, 1], "padding": [1, 0, 0, 1], "dilation": [1, 2], "groups": 2},
            ),
            Sample(
                (TensorType((1, 6, 5, 3), F32), TensorType((3, 3, 3, 1), F32)),
                {"padding": [1], "groups": 3, "data_layout": "NHWC", "kernel_layout": "HWOI"},
            ),
            Sample(
                (TensorType((1, 5, 5, 2), F32), TensorType((3, 2, 2, 4), F32)),
                {"strides": [2, 2], "data_layout": "NHWC", "kernel_layout": "HWIO", "out_layout": "NCHW"},
            ),
            Sample(
                (TensorType((1, 2, 4, 4), "int8"), TensorType((2, 2, 2, 2), "int8")),
                {"kernel_layout": "OHWI", "out_dtype": "int32"},
            ),
            Sample(
                (TensorType((1, 3, 5, 5), "uint8"), (np.arange(108) * 37 % 256 - 128).astype("int8").reshape(4, 3, 3, 3)),
                {"padding": [1, 1], "out_dtype": "int32"},
                int_high=120,
            ),
            Sample(
                (TensorType((1, 4, 4, 8), "int8"), TensorType((2, 2, 8, 16), "uint8")),
                {"strides": [2, 2], "data_layout": "NHWC", "kernel_layout": "HWIO", "out_dtype": "int32"},
                int_high=100,
            ),
        ),
        domain=Domain(_conv2d_domain, ulps=16.0, accumulates=True),
    )
)
