"""1-D and 3-D window pools and the adaptive pools: nn.max_pool1d, nn.avg_pool1d,
nn.max_pool3d, nn.avg_pool3d, nn.adaptive_{avg,max}_pool{1,2,3}d.

The window pools read windows exactly as the 2-D ones of pool.py do (TVM's output size with or
without ceil_mode, padding and past-the-padding positions skipped, lowest-value start for max,
count_include_pad for avg, integer averages truncated); only the number of spatial axes differs.
Padding takes 1 value (every side), one per spatial axis (both sides of it) or two per axis (all
the befores, then all the afters: [left, right] in 1-D, [front, top, left, back, bottom, right]
in 3-D). `pool_size`, `strides` and `dilation` take one value per axis, or one for all.

An adaptive pool divides each spatial axis of `size` inputs into `out` windows, window i being
[floor(i*size/out), ceil((i+1)*size/out)) (TVM's rule: windows may overlap, none is empty).
`output_size` empty keeps the input's size, one value applies to every spatial axis. TVM's
type relation keeps the data layout for the output, whatever `out_layout` says.

As for the 2-D pools, N or C may be split into blocks (NCW4c, NCDHW8c); the pooled axes cannot.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import Dim, TensorType, Type
from compiler.ops.common import batch_first, check_arity, tensor_arg
from compiler.ops.domain import Domain, Draw
from compiler.ops.kernels.common import input_buffers
from compiler.ops.kernels.pool import global_pool2d_loops
from compiler.ops.kernels.pool_nd import WindowND, adaptive_pool_loops, pool_nd_loops
from compiler.ops.layout import Layout, parse_layout, pool_layout, transform_array, transform_shape
from compiler.ops.nn import accumulator_dtype
from compiler.ops.pool import average, channel_count, layout_shape, lowest_value
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
from compiler.ops.window import window_extent
from compiler.tir.compute import Epilogue, KernelContext, TensorView
from compiler.tir.expr import Buffer
from compiler.tir.stmt import Stmt

F32 = "float32"
# Canonical letters per number of spatial axes.
CANONICAL = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
AXIS_NAMES = {1: ("width",), 2: ("height", "width"), 3: ("depth", "height", "width")}


def _layout(text: str, data: TensorType, spatial: int, op: str) -> tuple[Layout, tuple[Dim, ...]]:
    """The data layout and the data's shape in canonical order (blocks merged)."""
    layout = pool_layout(text, CANONICAL[spatial], op, "layout")
    rank = len(layout.axes)
    if data.ndim != rank:
        blocked = "" if rank == spatial + 2 else f" for layout {layout.name}"
        raise TypeRelationError(f"{op} expects {rank}-D data, got {data}{blocked}")
    return layout, transform_shape(data.shape, layout, _canonical(spatial), op)


def _canonical(spatial: int) -> Layout:
    return parse_layout(CANONICAL[spatial], "pool")


def _layouts(data: TensorType, attrs: Attrs, spatial: int, op: str) -> tuple[Layout, Layout, tuple[Dim, ...]]:
    in_layout, dims = _layout(attrs["layout"], data, spatial, op)
    out_layout = pool_layout(attrs["out_layout"] or attrs["layout"], CANONICAL[spatial], op, "out_layout")
    return in_layout, out_layout, dims


def per_axis(values: Sequence[int], spatial: int, name: str, op: str, minimum: int = 1) -> tuple[int, ...]:
    """One value per spatial axis from a 1- or `spatial`-entry attribute."""
    if len(values) == 1:
        out = tuple(values) * spatial
    elif len(values) == spatial:
        out = tuple(values)
    else:
        raise TypeRelationError(f"{op}: {name} needs 1 or {spatial} values, got {list(values)}")
    if min(out) < minimum:
        raise TypeRelationError(f"{op}: {name} must be at least {minimum}, got {list(values)}")
    return out


def padding_nd(values: Sequence[int], spatial: int, op: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(before, after) per spatial axis from the 1-, n- or 2n-value padding forms."""
    if len(values) == 2 * spatial:
        before, after = tuple(values[:spatial]), tuple(values[spatial:])
    elif len(values) in (1, spatial):
        before = after = per_axis(values, spatial, "padding", op, minimum=0)
    else:
        raise TypeRelationError(
            f"{op}: padding needs 1, {spatial} or {2 * spatial} values, got {list(values)}"
        )
    if min(before + after) < 0:
        raise TypeRelationError(f"{op}: padding must not be negative, got {list(values)}")
    return before, after


@dataclass(frozen=True)
class PoolGeometry:
    """A window pool call read once; `out_shape` is in canonical (N, C, spatial...) order."""

    window: WindowND
    out_shape: tuple[Dim, ...]


def pool_geometry(data: TensorType, attrs: Attrs, spatial: int, op: str) -> PoolGeometry:
    in_layout, out_layout, dims = _layouts(data, attrs, spatial, op)
    pool_size = per_axis(attrs["pool_size"], spatial, "pool_size", op)
    strides = per_axis(attrs["strides"], spatial, "strides", op)
    dilation = per_axis(attrs["dilation"], spatial, "dilation", op)
    before, after = padding_nd(attrs["padding"], spatial, op)
    out: list[Dim] = list(dims[:2])
    for k in range(spatial):
        out.append(window_extent(
            dims[2 + k], before[k] + after[k], pool_size[k], strides[k], dilation[k], attrs["ceil_mode"], op,
            AXIS_NAMES[spatial][k],
        ))
    window = WindowND(in_layout, out_layout, pool_size, strides, dilation, before, after)
    return PoolGeometry(window, tuple(out))


def _pool_rel(op: str, spatial: int) -> TypeRel:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        data = tensor_arg(types, 0, op)
        g = pool_geometry(data, attrs, spatial, op)
        return TensorType(transform_shape(g.out_shape, _canonical(spatial), g.window.out_layout, op), data.dtype)

    return rel


def pool_nd_shape_rule(op: str, spatial: int, adaptive: bool = False) -> ShapeRule:
    """Each spatial axis, found by name in the layout (any permutation or blocked form): a
    window count, or the adaptive pool's output_size (its input size when none is given); the
    other axes pass through. Window pools then lay out as out_layout, adaptive ones keep the
    data layout as their relation does."""
    letters = CANONICAL[spatial][2:]

    def rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
        data, layout = dims(inputs[0], "data"), attrs["layout"]
        sizes = [layout_axis(data, layout, letter, op) for letter in letters]
        if adaptive:
            given = attrs["output_size"]
            pooled: list[ShapeDim] = list(sizes) if not given else list(given) * (spatial // len(given))
            return [fill(out_type, relaid_out(data, layout, dict(zip(letters, pooled)), "", op))]
        kernel = per_axis(attrs["pool_size"], spatial, "pool_size", op)
        strides = per_axis(attrs["strides"], spatial, "strides", op)
        dilation = per_axis(attrs["dilation"], spatial, "dilation", op)
        before, after = padding_nd(attrs["padding"], spatial, op)
        pooled = [
            window_count(sizes[k], before[k] + after[k], kernel[k], strides[k], dilation[k], attrs["ceil_mode"])
            for k in range(spatial)
        ]
        return [fill(out_type, relaid_out(data, layout, dict(zip(letters, pooled)), attrs["out_layout"], op))]

    return rule


def window_views_nd(
    padded: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
    out: Sequence[int],
) -> Iterator[np.ndarray]:
    """For each kernel tap: the strided view of the trailing spatial axes that tap reads."""
    for tap in itertools.product(*(range(k) for k in kernel)):
        index: tuple[slice, ...] = (Ellipsis,)  # type: ignore[assignment]  # Ellipsis leads the slices
        for t, s, d, o in zip(tap, stride, dilation, out):
            index += (slice(t * d, t * d + (o - 1) * s + 1, s),)
        yield padded[index]


def _pool(a: Sequence[np.ndarray], attrs: Attrs, op: str, spatial: int, kind: str) -> np.ndarray:
    data = a[0]
    g = pool_geometry(TensorType(data.shape, str(data.dtype)), attrs, spatial, op)
    w = g.window
    x = transform_array(data, w.in_layout, _canonical(spatial))
    sizes = x.shape[2:]
    out = tuple(int(d) for d in g.out_shape[2:])  # type: ignore[arg-type]  # static here
    # Positions past the user's padding that ceil_mode windows reach.
    extra = [
        max(0, (o - 1) * s + (k - 1) * d + 1 - (n + b + e))
        for o, s, k, d, n, b, e in zip(out, w.strides, w.pool_size, w.dilation, sizes, w.pad_before, w.pad_after)
    ]
    pads = tuple((b, e + x_) for b, e, x_ in zip(w.pad_before, w.pad_after, extra))
    taps = (w.pool_size, w.strides, w.dilation, out)
    if kind == "max":
        fill = lowest_value(data.dtype)
        padded = np.pad(x, ((0, 0), (0, 0)) + pads, constant_values=fill)
        result = np.full(x.shape[:2] + out, fill, dtype=data.dtype)
        for view in window_views_nd(padded, *taps):
            result = np.maximum(result, view)
    else:
        padded = np.pad(x.astype(accumulator_dtype(data.dtype)), ((0, 0), (0, 0)) + pads)
        if attrs["count_include_pad"]:
            full = tuple(n + b + e for n, b, e in zip(sizes, w.pad_before, w.pad_after))
            counted = np.pad(np.ones(full), tuple((0, x_) for x_ in extra))
        else:
            counted = np.pad(np.ones(sizes), pads)
        total = np.zeros(x.shape[:2] + out, dtype=padded.dtype)
        count = np.zeros(out)
        for view, cview in zip(window_views_nd(padded, *taps), window_views_nd(counted, *taps)):
            total += view
            count += cview
        result = average(total, count.astype("int64"), data.dtype)
    return transform_array(result, _canonical(spatial), w.out_layout)


def _lowest_scalar(dtype: str) -> float | int:
    value = lowest_value(np.dtype(dtype))
    return value.item() if isinstance(value, np.generic) else int(value)  # type: ignore[arg-type]  # int or bool


def _pool_kernel(op: str, spatial: int, kind: str) -> Callable[..., Stmt]:
    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type,
        epilogue: Epilogue,
    ) -> Stmt:
        (data,) = input_buffers(inputs, op)
        g = pool_geometry(TensorType(data.shape, data.dtype), attrs, spatial, op)
        include_pad = kind == "avg" and attrs["count_include_pad"]
        return pool_nd_loops(ctx, data, out, epilogue, g.window, kind, _lowest_scalar(data.dtype), include_pad)

    return kernel


def _window_attrs(spatial: int, kind: str) -> tuple[AttrSpec, ...]:
    ones, zeros = (1,) * spatial, (0,) * spatial
    attrs = (
        AttrSpec("pool_size", "ints", REQUIRED),
        AttrSpec("strides", "ints", ones),
        AttrSpec("dilation", "ints", ones),
        AttrSpec("padding", "ints", zeros),
        AttrSpec("layout", "str", CANONICAL[spatial]),
        AttrSpec("out_layout", "str", ""),
        AttrSpec("ceil_mode", "bool", False),
    )
    return attrs + ((AttrSpec("count_include_pad", "bool", False),) if kind == "avg" else ())


def _channels_last(spatial: int) -> str:
    letters = CANONICAL[spatial]
    return "N" + letters[2:] + "C"


def _layout_choices(spatial: int) -> tuple[str, ...]:
    """Channels first and last, plain and channel-blocked (NCW4c, NCDHW8c...)."""
    first, last = CANONICAL[spatial], _channels_last(spatial)
    return (first, first, last, first + "4c", first + "8c" if spatial < 3 else first + "2c")


def _shape(d: Draw, layout: str, spatial: int, sizes: list[int], *layouts: str) -> tuple[int, ...]:
    """A data shape: batch 1-2, channels every one of `layouts` can split, `sizes` spatially."""
    dims = (d.integer(1, 2), channel_count(d, layout, *layouts), *sizes)
    return layout_shape(dict(zip(CANONICAL[spatial], dims)), layout)


def _pool_domain(spatial: int, kind: str) -> Callable[[Draw], Sample]:
    def draw(d: Draw) -> Sample:
        pool_size = [d.integer(1, 3) for _ in range(spatial)]
        strides = [d.choice((1, 2, 3)) for _ in range(spatial)]
        dilation = [d.choice((1, 1, 2)) for _ in range(spatial)]
        form = d.choice(("one", "axis", "sides"))
        width = {"one": 1, "axis": spatial, "sides": 2 * spatial}[form]
        padding = [d.integer(0, 2) for _ in range(width)]
        before, after = padding_nd(padding, spatial, "domain")
        # A dim large enough for the dilated window over the padded extent.
        sizes = [
            max(d.integer(1, 6), (k - 1) * dl + 1 - b - e)
            for k, dl, b, e in zip(pool_size, dilation, before, after)
        ]
        layout = d.choice(_layout_choices(spatial))
        out_layout = d.choice(("", "") + _layout_choices(spatial))
        shape = _shape(d, layout, spatial, sizes, out_layout)
        dtype = d.dtype(("float32", "float32", "float64", "float16", "int32", "int8", "uint8"))
        attrs: dict[str, object] = {
            "pool_size": pool_size if d.boolean() or len(set(pool_size)) > 1 else pool_size[:1],
            "strides": strides, "dilation": dilation, "padding": padding, "layout": layout,
            "out_layout": out_layout, "ceil_mode": d.boolean(),
        }
        if kind == "avg":
            attrs["count_include_pad"] = d.boolean()
        return Sample((TensorType(shape, dtype),), attrs, int_high=100)

    return draw


_POOL1D_SAMPLES = (
    Sample((TensorType((2, 3, 8), F32),), {"pool_size": [2], "strides": [2]}),
    Sample((TensorType((1, 2, 7), F32),), {"pool_size": [3], "strides": [2], "padding": [1, 2], "ceil_mode": True}),
    Sample((TensorType((1, 9, 2), F32),), {"pool_size": [3], "dilation": [2], "padding": [1], "layout": "NWC"}),
    Sample((TensorType((2, 6, 3), "int32"),), {"pool_size": [2], "layout": "NWC", "out_layout": "NCW"}, int_high=50),
    Sample((TensorType((1, 2, 7, 4), F32),), {"pool_size": [3], "strides": [2], "padding": [1], "layout": "NCW4c"}),
)
_POOL3D_SAMPLES = (
    Sample((TensorType((1, 2, 4, 4, 4), F32),), {"pool_size": [2, 2, 2], "strides": [2, 2, 2]}),
    Sample(
        (TensorType((1, 2, 3, 5, 5), F32),),
        {"pool_size": [2, 3, 3], "strides": [2, 2, 2], "padding": [0, 1, 1, 1, 0, 1], "ceil_mode": True},
    ),
    Sample(
        (TensorType((1, 4, 5, 3, 2), F32),),
        {"pool_size": [2], "dilation": [2, 1, 1], "padding": [1, 0, 0], "layout": "NDHWC"},
    ),
    Sample((TensorType((1, 2, 3, 3, 3), "int8"),), {"pool_size": [2, 2, 2], "padding": [1]}, int_high=100),
    Sample((TensorType((1, 1, 3, 4, 4, 8), F32),), {"pool_size": [2], "strides": [2], "layout": "NCDHW8c"}),
)

for _spatial, _samples in ((1, _POOL1D_SAMPLES), (3, _POOL3D_SAMPLES)):
    for _kind in ("max", "avg"):
        _name = f"nn.{_kind}_pool{_spatial}d"
        _extra: tuple[Sample, ...] = ()
        if _kind == "avg":
            _extra = (Sample(
                (TensorType((1, 2) + (5,) * _spatial, F32),),
                {"pool_size": [3], "strides": [2], "padding": [1], "count_include_pad": True, "ceil_mode": True},
            ),)
        register(
            OpDef(
                name=_name,
                num_inputs=1,
                type_rel=_pool_rel(_name, _spatial),
                pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                reference=lambda a, attrs, _n=_name, _s=_spatial, _k=_kind: _pool(a, attrs, _n, _s, _k),
                kernel=_pool_kernel(_name, _spatial, _kind),
                extras={"batch_rows": batch_first("layout", "out_layout")},
                shape_func=pool_nd_shape_rule(_name, _spatial),
                attrs=_window_attrs(_spatial, _kind),
                samples=_samples + _extra,
                domain=Domain(draw=_pool_domain(_spatial, _kind), accumulates=_kind == "avg"),
            )
        )


# --- adaptive pools ------------------------------------------------------------------------------


def adaptive_output(data: TensorType, attrs: Attrs, spatial: int, op: str) -> tuple[Dim, ...]:
    """The output sizes of the spatial axes, in canonical order."""
    sizes = _layout(attrs["layout"], data, spatial, op)[1][2:]
    given = attrs["output_size"]
    if not given:
        return sizes
    if len(given) > spatial or (spatial > 1 and len(given) not in (1, spatial)):
        raise TypeRelationError(f"{op}: output_size needs 0, 1 or {spatial} values, got {list(given)}")
    out = tuple(given) * spatial if len(given) == 1 else tuple(given)
    if min(out) <= 0:
        raise TypeRelationError(f"{op}: output_size must be positive, got {list(given)}")
    for size in sizes:
        if size == 0:
            raise TypeRelationError(f"{op}: cannot pool an empty axis of {data}")
    return out


def _adaptive_rel(op: str, spatial: int) -> TypeRel:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        data = tensor_arg(types, 0, op)
        layout, dims = _layout(attrs["layout"], data, spatial, op)
        out = adaptive_output(data, attrs, spatial, op)
        return TensorType(transform_shape(dims[:2] + out, _canonical(spatial), layout, op), data.dtype)

    return rel


def adaptive_bounds(size: int, n_out: int) -> list[tuple[int, int]]:
    """TVM's adaptive windows along one axis: [floor(i*size/out), ceil((i+1)*size/out))."""
    return [((i * size) // n_out, -(-((i + 1) * size) // n_out)) for i in range(n_out)]


def _adaptive(a: Sequence[np.ndarray], attrs: Attrs, op: str, spatial: int, kind: str) -> np.ndarray:
    data = a[0]
    layout, _ = _layout(attrs["layout"], TensorType(data.shape, str(data.dtype)), spatial, op)
    out = adaptive_output(TensorType(data.shape, str(data.dtype)), attrs, spatial, op)
    x = transform_array(data, layout, _canonical(spatial))
    result = np.zeros(x.shape[:2] + tuple(out), dtype=data.dtype)  # type: ignore[operator]  # static
    axes = tuple(range(2, 2 + spatial))
    windows = [adaptive_bounds(n, o) for n, o in zip(x.shape[2:], out)]  # type: ignore[arg-type]  # static
    for position in itertools.product(*(range(len(w)) for w in windows)):
        index = (slice(None), slice(None)) + tuple(slice(*windows[k][i]) for k, i in enumerate(position))
        part = x[index]
        if kind == "max":
            value = np.max(part, axis=axes)
        else:
            total = np.sum(part.astype(accumulator_dtype(data.dtype)), axis=axes)
            value = average(total, np.array(int(np.prod(part.shape[2:]))), data.dtype)
        result[(slice(None), slice(None)) + position] = value
    return transform_array(result, _canonical(spatial), layout)


def _adaptive_kernel(op: str, spatial: int, kind: str) -> Callable[..., Stmt]:
    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type,
        epilogue: Epilogue,
    ) -> Stmt:
        (data,) = input_buffers(inputs, op)
        layout, _ = _layout(attrs["layout"], TensorType(data.shape, data.dtype), spatial, op)
        return adaptive_pool_loops(ctx, data, out, epilogue, layout, layout, kind, _lowest_scalar(data.dtype))

    return kernel


def _adaptive_dynamic_kernel(op: str, kind: str) -> Callable[..., Stmt | None]:
    """An adaptive pool to one pixel (squeeze-and-excite's) over an image of run-time size: the
    global pool's loops with the `?` dims as parameters; None for other output sizes and
    channel-blocked layouts."""

    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type,
        epilogue: Epilogue,
    ) -> Stmt | None:
        if not attrs["output_size"] or any(size != 1 for size in attrs["output_size"]):
            return None
        (data,) = input_buffers(inputs, op)
        layouts = [parse_layout(text, op) for text in (attrs["layout"], attrs["out_layout"] or attrs["layout"])]
        if any(factor is not None for layout in layouts for _, factor in layout.axes):
            return None
        return global_pool2d_loops(ctx, data, out, epilogue, *layouts, kind, _lowest_scalar(data.dtype))

    return kernel


def _adaptive_domain(spatial: int) -> Callable[[Draw], Sample]:
    def draw(d: Draw) -> Sample:
        layout = d.choice(_layout_choices(spatial))
        sizes = [d.integer(1, 7) for _ in range(spatial)]
        form = d.choice(("none", "one", "each"))
        output_size: list[int] = []
        if form == "one":
            output_size = [d.choice((1, 2, 3, 5))]
        elif form == "each":
            # Outputs that divide, do not divide, or exceed the input.
            output_size = [d.choice((1, n, max(1, n // 2), n + 1, 3)) for n in sizes]
        shape = _shape(d, layout, spatial, sizes)
        dtype = d.dtype(("float32", "float32", "float64", "float16", "int32", "int8", "uint8"))
        return Sample((TensorType(shape, dtype),), {"output_size": output_size, "layout": layout}, int_high=100)

    return draw


_ADAPTIVE_SAMPLES = {
    1: (
        Sample((TensorType((2, 3, 10), F32),), {"output_size": [4]}),
        Sample((TensorType((1, 5, 3), F32),), {"output_size": [5], "layout": "NWC"}),
        Sample((TensorType((1, 2, 6), "int32"),), {}, int_high=50),
        Sample((TensorType((1, 1, 5, 4), F32),), {"output_size": [2], "layout": "NCW4c"}),
    ),
    2: (
        Sample((TensorType((1, 3, 7, 9), F32),), {"output_size": [3, 4]}),
        Sample((TensorType((2, 5, 4, 2), F32),), {"output_size": [1], "layout": "NHWC"}),
        Sample((TensorType((1, 2, 3, 2), "int8"),), {"output_size": [4, 5]}, int_high=100),
        Sample((TensorType((1, 2, 4, 4, 8), F32),), {"output_size": [1, 1], "layout": "NCHW8c"}),
    ),
    3: (
        Sample((TensorType((1, 2, 4, 5, 6), F32),), {"output_size": [2, 3, 4]}),
        Sample((TensorType((1, 3, 3, 2, 2), F32),), {"output_size": [1], "layout": "NDHWC"}),
        Sample((TensorType((1, 1, 2, 3, 4), "int32"),), {"output_size": [3, 2, 1]}, int_high=50),
        Sample((TensorType((1, 1, 3, 2, 2, 8), F32),), {"output_size": [2, 1, 1], "layout": "NCDHW8c"}),
    ),
}

for _spatial in (1, 2, 3):
    for _kind in ("avg", "max"):
        _name = f"nn.adaptive_{_kind}_pool{_spatial}d"
        register(
            OpDef(
                name=_name,
                num_inputs=1,
                type_rel=_adaptive_rel(_name, _spatial),
                pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                reference=lambda a, attrs, _n=_name, _s=_spatial, _k=_kind: _adaptive(a, attrs, _n, _s, _k),
                kernel=_adaptive_kernel(_name, _spatial, _kind),
                extras={"batch_rows": batch_first("layout", "out_layout"),
                        **({"dynamic_kernel": _adaptive_dynamic_kernel(_name, _kind)} if _spatial == 2 else {})},
                shape_func=pool_nd_shape_rule(_name, _spatial, adaptive=True),
                attrs=(
                    AttrSpec("output_size", "ints", ()),
                    AttrSpec("layout", "str", CANONICAL[_spatial]),
                    AttrSpec("out_layout", "str", ""),
                ),
                samples=_ADAPTIVE_SAMPLES[_spatial],
                domain=Domain(draw=_adaptive_domain(_spatial), accumulates=_kind == "avg"),
            )
        )
