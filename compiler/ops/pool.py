"""2-D pooling: nn.max_pool2d, nn.avg_pool2d, nn.global_avg_pool2d, nn.global_max_pool2d.

Window semantics follow TVM's pooling kernels:
* The output size is TVM's formula; with ceil_mode the last windows may run past the bottom /
  right padding (TVM does not drop a window that starts in the padding, unlike PyTorch).
* Max pooling treats padding, and any position past it, as the lowest finite value of the dtype
  (TVM's `min_value`), so a window that holds no input element yields that value.
* Average pooling divides the window sum by the number of input elements the window covers, or
  with count_include_pad by the number of input-or-padding elements (never the positions past
  the padding that ceil_mode adds); a count of 0 divides by 1. Integer averages truncate.
* Layouts are any order of N, C, H, W, and N or C may be split into blocks (NCHW8c, the layout
  x86's AlterOpLayout gives pools after contrib_conv2d_NCHWc); H and W cannot be split. Blocks
  ride along: the window moves over H and W only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type
from compiler.ops.common import batch_first, check_arity, tensor_arg
from compiler.ops.domain import FLOAT_CHOICES, Domain, Draw, int_range, int_values
from compiler.ops.kernels.common import input_buffers
from compiler.ops.kernels.pool import PoolWindow, global_pool2d_loops, pool2d_loops
from compiler.ops.kernels.pool_blocked import blocked_global_pool2d_loops, blocked_pool2d_loops, channel_block
from compiler.ops.layout import Layout, parse_layout, pool_layout, transform_array, transform_shape
from compiler.ops.nn import accumulator_dtype
from compiler.ops.registry import (
    REQUIRED,
    AttrSpec,
    OpDef,
    OpPattern,
    Sample,
    TypeRel,
    TypeRelationError,
    register,
)
from compiler.ops.shape_rules import Dim as ShapeDim
from compiler.ops.shape_rules import ShapeArg, ShapeRule, dims, fill, layout_axis, relaid_out, window_count
from compiler.ops.window import padding4, positive_pair, window_extent, window_views
from compiler.tir.compute import Epilogue, KernelContext, TensorView
from compiler.tir.expr import Buffer
from compiler.tir.stmt import Stmt

F32 = "float32"
NCHW = parse_layout("NCHW", "pool")


@dataclass(frozen=True)
class Pool2DGeometry:
    """A pool call read once: layouts; window; output shape in NCHW order."""

    in_layout: Layout
    out_layout: Layout
    pool_size: tuple[int, int]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    out_shape_nchw: tuple[Dim, ...]


def _layouts(data: TensorType, attrs: Attrs, op: str) -> tuple[Layout, Layout, tuple[Dim, ...]]:
    """The input and output layouts and the data's shape in NCHW order (blocks merged)."""
    in_layout = pool_layout(attrs["layout"], "NCHW", op, "layout")
    out_layout = pool_layout(attrs["out_layout"] or attrs["layout"], "NCHW", op, "out_layout")
    rank = len(in_layout.axes)
    if data.ndim != rank:
        blocked = "" if rank == 4 else f" for layout {in_layout.name}"
        raise TypeRelationError(f"{op} expects {rank}-D data, got {data}{blocked}")
    return in_layout, out_layout, transform_shape(data.shape, in_layout, NCHW, op)


def _out_type(out_nchw: Sequence[Dim], out_layout: Layout, dtype: str, op: str) -> TensorType:
    return TensorType(transform_shape(out_nchw, NCHW, out_layout, op), dtype)


def pool2d_geometry(data: TensorType, attrs: Attrs, op: str) -> Pool2DGeometry:
    in_layout, out_layout, nchw = _layouts(data, attrs, op)
    pool_size = positive_pair(attrs["pool_size"], "pool_size", op)
    strides = positive_pair(attrs["strides"], "strides", op)
    dilation = positive_pair(attrs["dilation"], "dilation", op)
    padding = padding4(attrs["padding"], op)
    n, c, h, w = nchw
    ceil = attrs["ceil_mode"]
    oh = window_extent(h, padding[0] + padding[2], pool_size[0], strides[0], dilation[0], ceil, op, "height")
    ow = window_extent(w, padding[1] + padding[3], pool_size[1], strides[1], dilation[1], ceil, op, "width")
    return Pool2DGeometry(in_layout, out_layout, pool_size, strides, dilation, padding, (n, c, oh, ow))


def _pool2d_rel(op: str) -> TypeRel:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        data = tensor_arg(types, 0, op)
        geometry = pool2d_geometry(data, attrs, op)
        return _out_type(geometry.out_shape_nchw, geometry.out_layout, data.dtype, op)

    return rel


def pool2d_shape_rule(op: str, global_pool: bool = False) -> ShapeRule:
    """H and W, found by name in the layout (any permutation or blocked form): window counts,
    or 1 for a global pool; the other axes pass through; then laid out as out_layout."""

    def rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
        data, layout = dims(inputs[0], "data"), attrs["layout"]
        pooled: dict[str, ShapeDim] = {"H": 1, "W": 1}
        if not global_pool:
            kernel = positive_pair(attrs["pool_size"], "pool_size", op)
            strides = positive_pair(attrs["strides"], "strides", op)
            dilation = positive_pair(attrs["dilation"], "dilation", op)
            top, left, bottom, right = padding4(attrs["padding"], op)
            for j, (letter, pads) in enumerate((("H", top + bottom), ("W", left + right))):
                size = layout_axis(data, layout, letter, op)
                pooled[letter] = window_count(size, pads, kernel[j], strides[j], dilation[j], attrs["ceil_mode"])
        return [fill(out_type, relaid_out(data, layout, pooled, attrs["out_layout"], op))]

    return rule


def lowest_value(dtype: np.dtype) -> object:
    """The value padding takes in max pooling (TVM's min_value: finite for floats)."""
    if np.issubdtype(dtype, np.floating):
        return np.finfo(dtype).min
    if dtype == np.bool_:
        return False
    return np.iinfo(dtype).min


def average(total: np.ndarray, count: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """total / count in `dtype`, truncating toward zero for integer dtypes."""
    count = np.maximum(count, 1)
    if np.issubdtype(dtype, np.floating):
        return (total / count).astype(dtype)
    return (np.sign(total) * (np.abs(total) // count)).astype(dtype)


def _pool2d(a: Sequence[np.ndarray], attrs: Attrs, op: str, kind: str) -> np.ndarray:
    data = a[0]
    g = pool2d_geometry(TensorType(data.shape, str(data.dtype)), attrs, op)
    x = transform_array(data, g.in_layout, NCHW)
    h, w = x.shape[2:]
    oh, ow = g.out_shape_nchw[2:]
    assert isinstance(oh, int) and isinstance(ow, int)
    (kh, kw), (sh, sw), (dh, dw) = g.pool_size, g.strides, g.dilation
    top, left, bottom, right = g.padding
    # Rows/columns past the user's padding that ceil_mode windows reach.
    extra_h = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + top + bottom))
    extra_w = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (w + left + right))
    pads = ((top, bottom + extra_h), (left, right + extra_w))
    taps = (kh, kw), (sh, sw), (dh, dw), (oh, ow)
    if kind == "max":
        fill = lowest_value(data.dtype)
        padded = np.pad(x, ((0, 0), (0, 0)) + pads, constant_values=fill)
        out = np.full(x.shape[:2] + (oh, ow), fill, dtype=data.dtype)
        for _, _, view in window_views(padded, *taps):
            out = np.maximum(out, view)
    else:
        padded = np.pad(x.astype(accumulator_dtype(data.dtype)), ((0, 0), (0, 0)) + pads)
        if attrs["count_include_pad"]:
            counted = np.pad(np.ones((h + top + bottom, w + left + right)), ((0, extra_h), (0, extra_w)))
        else:
            counted = np.pad(np.ones((h, w)), pads)
        total = np.zeros(x.shape[:2] + (oh, ow), dtype=padded.dtype)
        count = np.zeros((oh, ow))
        for (_, _, view), (_, _, cview) in zip(window_views(padded, *taps), window_views(counted, *taps)):
            total += view
            count += cview
        out = average(total, count.astype("int64"), data.dtype)
    return transform_array(out, NCHW, g.out_layout)


def _lowest_scalar(dtype: str) -> float | int:
    value = lowest_value(np.dtype(dtype))
    return value.item() if isinstance(value, np.generic) else int(value)  # type: ignore[arg-type]  # int or bool


def _pool2d_kernel(op: str, kind: str) -> Callable[..., Stmt]:
    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type,
        epilogue: Epilogue,
    ) -> Stmt:
        (data,) = input_buffers(inputs, op)
        g = pool2d_geometry(TensorType(data.shape, data.dtype), attrs, op)
        window = PoolWindow(g.in_layout, g.out_layout, g.pool_size, g.strides, g.dilation, g.padding)
        lowest = _lowest_scalar(data.dtype)
        include_pad = kind == "avg" and attrs["count_include_pad"]
        if channel_block(g.in_layout, g.out_layout) is not None:
            return blocked_pool2d_loops(ctx, data, out, epilogue, window, kind, lowest, include_pad)
        return pool2d_loops(ctx, data, out, epilogue, window, kind, lowest, include_pad)

    return kernel


def _pool2d_dynamic_kernel(op: str, kind: str) -> Callable[..., Stmt | None]:
    """The pool over an image of run-time size: the same loops with the `?` dims as the
    kernel's parameters (kernels/pool.py, or pool_blocked.py for NCHW[b]c in and out); None
    for other layouts that split an axis."""

    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type,
        epilogue: Epilogue,
    ) -> Stmt | None:
        (data,) = input_buffers(inputs, op)
        g = pool2d_geometry(_run_time_type(data), attrs, op)
        window = PoolWindow(g.in_layout, g.out_layout, g.pool_size, g.strides, g.dilation, g.padding)
        include_pad = kind == "avg" and attrs["count_include_pad"]
        if channel_block(g.in_layout, g.out_layout) is not None:
            return blocked_pool2d_loops(ctx, data, out, epilogue, window, kind, _lowest_scalar(data.dtype), include_pad)
        if any(factor is not None for layout in (g.in_layout, g.out_layout) for _, factor in layout.axes):
            return None
        return pool2d_loops(ctx, data, out, epilogue, window, kind, _lowest_scalar(data.dtype), include_pad)

    return kernel


def _run_time_type(buffer: Buffer) -> TensorType:
    """A buffer's type with its `?` dims (the kernel's parameters) as ANY."""
    return TensorType(tuple(d if isinstance(d, int) else ANY for d in buffer.shape), buffer.dtype)


_WINDOW_ATTRS = (
    AttrSpec("pool_size", "ints", REQUIRED),
    AttrSpec("strides", "ints", (1, 1)),
    AttrSpec("dilation", "ints", (1, 1)),
    AttrSpec("padding", "ints", (0, 0)),
    AttrSpec("layout", "str", "NCHW"),
    AttrSpec("out_layout", "str", ""),
    AttrSpec("ceil_mode", "bool", False),
)

_POOL_SAMPLES = (
    Sample((TensorType((1, 2, 6, 6), F32),), {"pool_size": [2, 2], "strides": [2, 2]}),
    Sample((TensorType((2, 3, 5, 7), F32),), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    Sample(
        (TensorType((1, 2, 5, 5), F32),),
        {"pool_size": [2, 3], "strides": [2, 2], "padding": [0, 1, 1, 0], "ceil_mode": True},
    ),
    Sample(
        (TensorType((1, 6, 6, 2), F32),),
        {"pool_size": [2, 2], "dilation": [2, 1], "layout": "NHWC"},
    ),
    # As x86's AlterOpLayout leaves them after contrib_conv2d_NCHWc.
    Sample(
        (TensorType((1, 2, 5, 5, 8), F32),),
        {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1], "layout": "NCHW8c"},
    ),
    Sample(
        (TensorType((2, 4, 4, 1, 4), "int32"),),
        {"pool_size": [2, 2], "layout": "NHWC4c", "out_layout": "NCHW2c"},
        int_high=50,
    ),
)

# Layouts: any permutation of NCHW is accepted, with N or C split into blocks; these are the
# common ones, two odd ones and channel-blocked ones (x86's NCHW8c, and smaller blocks).
POOL_LAYOUTS = ("NCHW", "NCHW", "NHWC", "CHWN", "HWNC", "NCHW8c", "NCHW4c", "NHWC2c")
POOL_DTYPES = FLOAT_CHOICES + ("int8", "int32", "uint8")


def layout_shape(dims: dict[str, int], layout: str) -> tuple[int, ...]:
    """The shape of a tensor with `dims` per primal letter (in canonical order), laid out as
    `layout`, blocked axes split."""
    canonical = parse_layout("".join(dims), "domain")
    shape = transform_shape(tuple(dims.values()), canonical, parse_layout(layout, "domain"), "domain")
    return tuple(int(d) for d in shape)  # type: ignore[arg-type]  # int dims in, int dims out


def channel_count(d: Draw, *layouts: str) -> int:
    """A channel count every one of `layouts` can split into its blocks (1 to 3 blocks, or 1 to
    3 channels when none is blocked)."""
    block = 1
    for text in layouts:
        if text:
            block = math.lcm(block, parse_layout(text, "domain").factor("C") or 1)
    return block * d.integer(1, 2 if block > 1 else 3)


def window_pair(d: Draw, low: int, high: int) -> list[int]:
    """A pool_size / strides / dilation attribute: one value for both axes, or two."""
    return [d.integer(low, high)] if d.boolean() else [d.integer(low, high), d.integer(low, high)]


def padding_attr(d: Draw, most: int = 2) -> list[int]:
    """A padding attribute in each of its 1-, 2- and 4-value forms."""
    return [d.integer(0, most) for _ in range(d.choice((1, 2, 4)))]


def window_input_size(d: Draw, kernel: int, dilation: int, pad_total: int) -> int:
    """An input extent the dilated window fits into once padded, from a tight fit (where
    ceil_mode and floor agree or differ by one window) to several strides more."""
    span = (kernel - 1) * dilation + 1
    return max(1, span - pad_total) + d.integer(0, 5)


def pool_data(d: Draw, attrs: dict[str, object], batch_channels: tuple[int, int]) -> object:
    """The data of a pool call with `attrs`' window, laid out as attrs["layout"] says."""
    kernel = attrs["pool_size"]
    dilation = attrs["dilation"]
    padding = attrs["padding"]
    assert isinstance(kernel, list) and isinstance(dilation, list) and isinstance(padding, list)
    pads = padding * 4 if len(padding) == 1 else padding * 2 if len(padding) == 2 else padding
    h = window_input_size(d, kernel[0], dilation[0], pads[0] + pads[2])
    w = window_input_size(d, kernel[-1], dilation[-1], pads[1] + pads[3])
    nchw = dict(zip("NCHW", (*batch_channels, h, w)))
    layout = attrs["layout"]
    assert isinstance(layout, str)
    shape = layout_shape(nchw, layout)
    dtype = d.dtype(POOL_DTYPES)
    if dtype.startswith("float"):
        return TensorType(shape, dtype)
    return int_values(d, shape, dtype, *int_range(d, dtype))


def _pool2d_domain(average: bool) -> Domain:
    def draw(d: Draw) -> Sample:
        attrs: dict[str, object] = {
            "pool_size": window_pair(d, 1, 3),
            # Strides up to 4: larger than every window drawn, so some inputs are skipped.
            "strides": window_pair(d, 1, 4),
            "dilation": window_pair(d, 1, 2),
            "padding": padding_attr(d),
            "layout": d.choice(POOL_LAYOUTS),
            "out_layout": d.choice(("",) * 3 + POOL_LAYOUTS),
            "ceil_mode": d.boolean(),
        }
        if average:
            attrs["count_include_pad"] = d.boolean()
        layouts = (str(attrs["layout"]), str(attrs["out_layout"]))
        data = pool_data(d, attrs, (d.integer(1, 2), channel_count(d, *layouts)))
        return Sample((data,), attrs)

    return Domain(draw, ulps=8.0, accumulates=average)


register(
    OpDef(
        name="nn.max_pool2d",
        num_inputs=1,
        type_rel=_pool2d_rel("nn.max_pool2d"),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=lambda a, attrs: _pool2d(a, attrs, "nn.max_pool2d", "max"),
        kernel=_pool2d_kernel("nn.max_pool2d", "max"),
        extras={"batch_rows": batch_first("layout", "out_layout"),
                "dynamic_kernel": _pool2d_dynamic_kernel("nn.max_pool2d", "max")},
        shape_func=pool2d_shape_rule("nn.max_pool2d"),
        attrs=_WINDOW_ATTRS,
        samples=_POOL_SAMPLES
        + (Sample((TensorType((1, 1, 4, 4), "int32"),), {"pool_size": [3, 3], "padding": [1]}),),
        domain=_pool2d_domain(average=False),
    )
)

register(
    OpDef(
        name="nn.avg_pool2d",
        num_inputs=1,
        type_rel=_pool2d_rel("nn.avg_pool2d"),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=lambda a, attrs: _pool2d(a, attrs, "nn.avg_pool2d", "avg"),
        kernel=_pool2d_kernel("nn.avg_pool2d", "avg"),
        extras={"batch_rows": batch_first("layout", "out_layout"),
                "dynamic_kernel": _pool2d_dynamic_kernel("nn.avg_pool2d", "avg")},
        shape_func=pool2d_shape_rule("nn.avg_pool2d"),
        attrs=_WINDOW_ATTRS + (AttrSpec("count_include_pad", "bool", False),),
        samples=_POOL_SAMPLES
        + (
            Sample(
                (TensorType((1, 2, 5, 5), F32),),
                {
                    "pool_size": [3, 3],
                    "strides": [2, 2],
                    "padding": [1],
                    "count_include_pad": True,
                    "ceil_mode": True,
                },
            ),
        ),
        domain=_pool2d_domain(average=True),
    )
)


def _global_rel(op: str) -> TypeRel:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        data = tensor_arg(types, 0, op)
        _, out_layout, (n, c, _, _) = _layouts(data, attrs, op)
        return _out_type((n, c, 1, 1), out_layout, data.dtype, op)

    return rel


def _global_pool(a: Sequence[np.ndarray], attrs: Attrs, op: str, kind: str) -> np.ndarray:
    data = a[0]
    in_layout, out_layout, _ = _layouts(TensorType(data.shape, str(data.dtype)), attrs, op)
    x = transform_array(data, in_layout, NCHW)
    if kind == "max":
        out = np.max(x, axis=(2, 3), keepdims=True)
    else:
        total = np.sum(x.astype(accumulator_dtype(data.dtype)), axis=(2, 3), keepdims=True)
        out = average(total, np.array(x.shape[2] * x.shape[3]), data.dtype)
    return transform_array(out, NCHW, out_layout)


def _global_pool_kernel(op: str, kind: str) -> Callable[..., Stmt]:
    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type,
        epilogue: Epilogue,
    ) -> Stmt:
        (data,) = input_buffers(inputs, op)
        in_layout, out_layout, _ = _layouts(TensorType(data.shape, data.dtype), attrs, op)
        lowest = _lowest_scalar(data.dtype)
        if channel_block(in_layout, out_layout) is not None:
            return blocked_global_pool2d_loops(ctx, data, out, epilogue, kind, lowest)
        return global_pool2d_loops(ctx, data, out, epilogue, in_layout, out_layout, kind, lowest)

    return kernel


def _global_pool_dynamic_kernel(op: str, kind: str) -> Callable[..., Stmt | None]:
    """The global pool over an image of run-time size; None for layouts that split an axis
    other than NCHW[b]c in and out."""

    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type,
        epilogue: Epilogue,
    ) -> Stmt | None:
        (data,) = input_buffers(inputs, op)
        in_layout, out_layout, _ = _layouts(_run_time_type(data), attrs, op)
        if channel_block(in_layout, out_layout) is not None:
            return blocked_global_pool2d_loops(ctx, data, out, epilogue, kind, _lowest_scalar(data.dtype))
        if any(factor is not None for layout in (in_layout, out_layout) for _, factor in layout.axes):
            return None
        return global_pool2d_loops(ctx, data, out, epilogue, in_layout, out_layout, kind, _lowest_scalar(data.dtype))

    return kernel


_GLOBAL_ATTRS = (AttrSpec("layout", "str", "NCHW"), AttrSpec("out_layout", "str", ""))
_GLOBAL_SAMPLES = (
    Sample((TensorType((2, 3, 4, 5), F32),)),
    Sample((TensorType((1, 4, 3, 2), F32),), {"layout": "NHWC"}),
    Sample((TensorType((1, 2, 3, 3, 8), F32),), {"layout": "NCHW8c"}),
    Sample((TensorType((2, 1, 2, 5, 4), "int8"),), {"layout": "NCHW4c", "out_layout": "NHWC"}, int_high=100),
)

def _global_pool_domain(average: bool) -> Domain:
    def draw(d: Draw) -> Sample:
        layout, out_layout = d.choice(POOL_LAYOUTS), d.choice(("",) * 3 + POOL_LAYOUTS)
        channels = channel_count(d, layout, out_layout)
        nchw = dict(zip("NCHW", (d.integer(1, 2), channels, d.integer(1, 6), d.integer(1, 6))))
        shape = layout_shape(nchw, layout)
        dtype = d.dtype(POOL_DTYPES)
        if dtype.startswith("float"):
            data: object = TensorType(shape, dtype)
        else:
            data = int_values(d, shape, dtype, *int_range(d, dtype))
        return Sample((data,), {"layout": layout, "out_layout": out_layout})

    return Domain(draw, ulps=8.0, accumulates=average)


register(
    OpDef(
        name="nn.global_avg_pool2d",
        num_inputs=1,
        type_rel=_global_rel("nn.global_avg_pool2d"),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=lambda a, attrs: _global_pool(a, attrs, "nn.global_avg_pool2d", "avg"),
        kernel=_global_pool_kernel("nn.global_avg_pool2d", "avg"),
        extras={"batch_rows": batch_first("layout", "out_layout"),
                "dynamic_kernel": _global_pool_dynamic_kernel("nn.global_avg_pool2d", "avg")},
        shape_func=pool2d_shape_rule("nn.global_avg_pool2d", global_pool=True),
        attrs=_GLOBAL_ATTRS,
        samples=_GLOBAL_SAMPLES,
        domain=_global_pool_domain(average=True),
    )
)

register(
    OpDef(
        name="nn.global_max_pool2d",
        num_inputs=1,
        type_rel=_global_rel("nn.global_max_pool2d"),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=lambda a, attrs: _global_pool(a, attrs, "nn.global_max_pool2d", "max"),
        kernel=_global_pool_kernel("nn.global_max_pool2d", "max"),
        extras={"batch_rows": batch_first("layout", "out_layout"),
                "dynamic_kernel": _global_pool_dynamic_kernel("nn.global_max_pool2d", "max")},
        shape_func=pool2d_shape_rule("nn.global_max_pool2d", global_pool=True),
        attrs=_GLOBAL_ATTRS,
        samples=_GLOBAL_SAMPLES,
        domain=_global_pool_domain(average=False),
    )
)
