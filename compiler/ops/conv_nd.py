"""nn.conv1d and nn.conv3d, and the N-d convolution geometry the transposed and blocked
convolutions share.

A call is read once into a `ConvGeometry`: its layouts, and the data, weight and output shapes
in canonical order (NCW / NCHW / NCDHW data, OIW / OIHW / OIDHW weight, or IOW / IOHW / IODHW
for the transposed ops). Layouts may be any layout TVM can convert to the canonical one: a
permutation (NWC, DHWIO, ...) or a blocked form (NCHW8c, OIHW8i8o) whose sub-axes split a
primal axis. The numpy reference converts to canonical order, convolves there and converts the
result to the output layout.

Padding forms, per spatial rank r: one value (every side), r values (each axis symmetric) or
2r values (all befores, then all afters), so conv1d takes 1 or 2, conv2d 1, 2 or 4 and conv3d
1, 3 or 6. As in TVM, the operands are cast to the output dtype before multiplying (so int8 or
uint8 data and weights with out_dtype="int32" accumulate exactly), and the data and weight
dtypes need not match.

Groups: conv1d checks the weight's input channels against C/groups like conv2d and conv3d
(TVM's conv1d relation compares them with C, which only agrees for groups=1).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type
from compiler.ops.common import check_arity, dims_equal, tensor_arg
from compiler.ops.domain import Domain, Draw
from compiler.ops.kernels.common import input_buffers
from compiler.ops.kernels.conv_direct import ConvSpec, conv_direct_loops
from compiler.ops.layout import Layout, parse_layout, transform_array, transform_shape
from compiler.ops.nn import accumulator_dtype, result_dtype
from compiler.ops.registry import (
    AttrSpec,
    OpDef,
    OpPattern,
    Reference,
    Sample,
    TypeRel,
    TypeRelationError,
    register,
)
from compiler.ops.shape_rules import Dim as ShapeDim
from compiler.ops.shape_rules import ShapeArg, ShapeRule, dims, fill, int64, layout_dims, window_count
from compiler.ops.window import window_extent
from compiler.tir.compute import Epilogue, KernelContext, TensorView
from compiler.tir.expr import Buffer
from compiler.tir.stmt import Stmt

F32 = "float32"
SPATIAL = {1: "W", 2: "HW", 3: "DHW"}
KernelBuilder = Callable[[KernelContext, Sequence[TensorView], Buffer, Attrs, Type, Epilogue], Stmt]


@dataclass(frozen=True)
class ConvGeometry:
    """One convolution call: layouts, canonical shapes and the window, validated."""

    spatial: str
    data_layout: Layout
    kernel_layout: Layout
    out_layout: Layout
    data: tuple[Dim, ...]
    kernel: tuple[Dim, ...]
    out: tuple[Dim, ...]
    strides: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_before: tuple[int, ...]
    pad_after: tuple[int, ...]
    output_padding: tuple[int, ...]
    groups: int
    transposed: bool

    @property
    def data_canonical(self) -> Layout:
        return parse_layout("NC" + self.spatial, "conv")

    @property
    def kernel_canonical(self) -> Layout:
        return parse_layout(("IO" if self.transposed else "OI") + self.spatial, "conv")

    def spec(self) -> ConvSpec:
        def ints(dims: Sequence[Dim]) -> tuple[int, ...]:
            assert all(isinstance(d, int) for d in dims), f"static shapes needed, got {dims}"
            return tuple(int(d) for d in dims)  # type: ignore[arg-type]  # ints, checked above

        return ConvSpec(
            self.spatial, self.data_layout, self.kernel_layout, self.out_layout, ints(self.data),
            ints(self.kernel), ints(self.out), self.strides, self.dilation, self.pad_before,
            self.groups, self.transposed,
        )


def spatial_values(values: Sequence[int], rank: int, name: str, op: str, minimum: int) -> tuple[int, ...]:
    """A per-axis attribute (strides, dilation, output_padding): one value for every axis or
    one per axis, each at least `minimum`."""
    if len(values) == 1:
        out = tuple(values) * rank
    elif len(values) == rank:
        out = tuple(values)
    else:
        raise TypeRelationError(f"{op}: {name} needs 1 or {rank} values, got {list(values)}")
    if min(out) < minimum:
        bound = "positive" if minimum == 1 else "non-negative"
        raise TypeRelationError(f"{op}: {name} must be {bound}, got {list(values)}")
    return out


def padding_nd(values: Sequence[int], rank: int, op: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(befores, afters) from the 1-, rank- or 2*rank-value padding forms."""
    if len(values) == 1:
        before = after = tuple(values) * rank
    elif len(values) == rank:
        before = after = tuple(values)
    elif len(values) == 2 * rank:
        before, after = tuple(values[:rank]), tuple(values[rank:])
    else:
        forms = sorted({1, rank, 2 * rank})
        raise TypeRelationError(f"{op}: padding needs {' or '.join(map(str, forms))} values, got {list(values)}")
    if min(before + after) < 0:
        raise TypeRelationError(f"{op}: padding must not be negative, got {list(values)}")
    return before, after


def convertible_layout(text: str, canonical: str, op: str, attr: str) -> Layout:
    layout = parse_layout(text, op)
    if sorted(layout.primal) != sorted(canonical):
        raise TypeRelationError(
            f"{op}: unsupported {attr} {text!r}; expected a layout of the axes {canonical}"
        )
    return layout


def _canonical_shape(ty: TensorType, layout: Layout, canonical: str, op: str, what: str) -> tuple[Dim, ...]:
    if ty.ndim != len(layout.axes):
        raise TypeRelationError(f"{op}: {what} {ty} does not have the {len(layout.axes)} dims of layout {layout.name}")
    return transform_shape(ty.shape, layout, parse_layout(canonical, op), op)


def conv_geometry(
    op: str, data: TensorType, weight: TensorType, attrs: Attrs, rank: int, transposed: bool = False
) -> ConvGeometry:
    """Validate a convolution call; raise TypeRelationError naming the offending types or attrs."""
    spatial = SPATIAL[rank]
    data_canon, kernel_canon = "NC" + spatial, ("IO" if transposed else "OI") + spatial
    data_layout = convertible_layout(attrs["data_layout"], data_canon, op, "data_layout")
    kernel_layout = convertible_layout(attrs["kernel_layout"], kernel_canon, op, "kernel_layout")
    out_layout = convertible_layout(attrs["out_layout"] or attrs["data_layout"], data_canon, op, "out_layout")
    d = _canonical_shape(data, data_layout, data_canon, op, "data")
    k = _canonical_shape(weight, kernel_layout, kernel_canon, op, "weight")
    strides = spatial_values(attrs["strides"], rank, "strides", op, 1)
    dilation = spatial_values(attrs["dilation"], rank, "dilation", op, 1)
    before, after = padding_nd(attrs["padding"], rank, op)
    output_padding = (
        spatial_values(attrs["output_padding"], rank, "output_padding", op, 0) if transposed else (0,) * rank
    )
    groups = attrs["groups"]
    if groups <= 0:
        raise TypeRelationError(f"{op}: groups must be positive, got {groups}")
    ksize = k[2:]
    if attrs["kernel_size"] is not None:
        # As in TVM, a given kernel_size also stands for a weight whose kernel dims are `?`.
        given = tuple(attrs["kernel_size"])
        if len(given) != rank or not all(dims_equal(s, g) for s, g in zip(ksize, given)):
            raise TypeRelationError(f"{op}: kernel_size={list(attrs['kernel_size'])} does not match weight {weight}")
        ksize = given
    c = d[1]
    if transposed:
        # Weight (C, O/groups, *K): every input channel has its own slice of filters.
        wc, og = k[0], k[1]
        if not dims_equal(c, wc):
            raise TypeRelationError(f"{op}: data {data} has {c} channels but weight {weight} has {wc} input channels")
        o = ANY if og is ANY else og * groups  # type: ignore[operator]  # og is an int here
    else:
        o, wi = k[0], k[1]
        if o is not ANY and o % groups:  # type: ignore[operator]  # o is an int here
            raise TypeRelationError(f"{op}: {o} output channels do not split into groups={groups}")
        if c is not ANY and wi is not ANY and (c % groups or c // groups != wi):  # type: ignore[operator]  # ints here
            raise TypeRelationError(
                f"{op}: data {data} has {c} channels, so with groups={groups} the weight needs "
                f"{c}/{groups} input channels, but weight {weight} has {wi}"
            )
    if c is not ANY and c % groups:  # type: ignore[operator]  # c is an int here
        raise TypeRelationError(f"{op}: {c} input channels do not split into groups={groups}")
    if attrs["channels"] is not None:
        if not dims_equal(attrs["channels"], o):
            raise TypeRelationError(f"{op}: channels={attrs['channels']} does not match weight {weight}")
        o = attrs["channels"]
    out_spatial: list[Dim] = []
    for j, axis in enumerate(spatial):
        size, kj = d[2 + j], ksize[j]
        if kj is ANY:  # no kernel_size given: the output dim is unknown too
            out_spatial.append(ANY)
            continue
        assert isinstance(kj, int)
        if transposed:
            if size is ANY:
                out_spatial.append(ANY)
                continue
            assert isinstance(size, int)
            extent = strides[j] * (size - 1) + (kj - 1) * dilation[j] + 1 - before[j] - after[j] + output_padding[j]
            if extent <= 0:
                raise TypeRelationError(
                    f"{op}: padding {list(attrs['padding'])} leaves no output along axis {axis} of data {data}"
                )
            out_spatial.append(extent)
        else:
            out_spatial.append(
                window_extent(size, before[j] + after[j], kj, strides[j], dilation[j], False, op, f"{axis} axis")
            )
    out = (d[0], o, *out_spatial)
    # Checks that the output channels split into out_layout's blocks.
    transform_shape(out, parse_layout(data_canon, op), out_layout, op)
    return ConvGeometry(
        spatial, data_layout, kernel_layout, out_layout, d, k, out, strides, dilation, before, after,
        output_padding, groups, transposed,
    )


def conv_type(g: ConvGeometry, attrs: Attrs, data: TensorType, op: str) -> TensorType:
    shape = transform_shape(g.out, g.data_canonical, g.out_layout, op)
    return TensorType(shape, result_dtype(attrs, data, op))


def conv_reference(g: ConvGeometry, data: np.ndarray, weight: np.ndarray, out_dtype: str) -> np.ndarray:
    """The convolution in numpy: operands cast to the output dtype, then accumulated exactly
    (float64, or 64-bit integers that wrap like the output dtype does)."""
    acc = accumulator_dtype(np.dtype(out_dtype))
    x = transform_array(data, g.data_layout, g.data_canonical).astype(out_dtype).astype(acc)
    w = transform_array(weight, g.kernel_layout, g.kernel_canonical).astype(out_dtype).astype(acc)
    n, c = x.shape[:2]
    groups, cg = g.groups, x.shape[1] // g.groups
    ksize = w.shape[2:]
    out_sizes = tuple(int(s) for s in g.out[2:])  # type: ignore[arg-type]  # static here
    o = int(g.out[1])  # type: ignore[arg-type]  # static here
    og = o // groups
    x = x.reshape(n, groups, cg, *x.shape[2:])
    if g.transposed:
        w = w.reshape(groups, cg, og, *ksize)
        sizes = x.shape[3:]
        spans = [(s - 1) * st + (k - 1) * dl + 1 for s, st, k, dl in zip(sizes, g.strides, ksize, g.dilation)]
        full = [span + max(0, op - pa) for span, op, pa in zip(spans, g.output_padding, g.pad_after)]
        buf = np.zeros((n, groups, og, *full), dtype=acc)
        for tap in itertools.product(*(range(k) for k in ksize)):
            contrib = np.einsum("ngc...,gco->ngo...", x, w[(..., *tap)])
            where = tuple(
                slice(t * dl, t * dl + (s - 1) * st + 1, st) for t, dl, s, st in zip(tap, g.dilation, sizes, g.strides)
            )
            buf[(..., *where)] += contrib
        crop = tuple(slice(pb, pb + os) for pb, os in zip(g.pad_before, out_sizes))
        result = buf[(..., *crop)]
    else:
        w = w.reshape(groups, og, cg, *ksize)
        pads = [(0, 0)] * 3 + list(zip(g.pad_before, g.pad_after))
        x = np.pad(x, pads)
        result = np.zeros((n, groups, og, *out_sizes), dtype=acc)
        for tap in itertools.product(*(range(k) for k in ksize)):
            where = tuple(
                slice(t * dl, t * dl + (os - 1) * st + 1, st)
                for t, dl, os, st in zip(tap, g.dilation, out_sizes, g.strides)
            )
            result += np.einsum("ngc...,goc->ngo...", x[(..., *where)], w[(..., *tap)])
    canonical = result.reshape(n, o, *out_sizes)
    return transform_array(canonical, g.data_canonical, g.out_layout).astype(out_dtype)


def conv_relation(op: str, rank: int, transposed: bool = False) -> TypeRel:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 2, op)
        data, weight = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
        return conv_type(conv_geometry(op, data, weight, attrs, rank, transposed), attrs, data, op)

    return rel


def conv_shape_rule(op: str, rank: int, transposed: bool = False) -> ShapeRule:
    """The relation's output shape on run-time dims (conv_geometry's arithmetic): batch from the
    data, channels from the attrs or the weight, each spatial dim a window count or, transposed,
    the scattered extent."""
    spatial = SPATIAL[rank]
    data_canon = parse_layout("NC" + spatial, op)
    kernel_canon = parse_layout(("IO" if transposed else "OI") + spatial, op)

    def rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
        data_layout = parse_layout(attrs["data_layout"], op)
        out_layout = parse_layout(attrs["out_layout"] or attrs["data_layout"], op)
        d = layout_dims(dims(inputs[0], "data"), data_layout, data_canon)
        k = layout_dims(dims(inputs[1], "weight"), parse_layout(attrs["kernel_layout"], op), kernel_canon)
        strides = spatial_values(attrs["strides"], rank, "strides", op, 1)
        dilation = spatial_values(attrs["dilation"], rank, "dilation", op, 1)
        before, after = padding_nd(attrs["padding"], rank, op)
        o: ShapeDim
        if attrs["channels"] is not None:
            o = attrs["channels"]
        else:
            o = int64(k[1]) * attrs["groups"] if transposed else k[0]
        extra = spatial_values(attrs["output_padding"], rank, "output_padding", op, 0) if transposed else ()
        sizes: list[ShapeDim] = []
        for j in range(rank):
            size, kj = d[2 + j], k[2 + j]
            if transposed:
                span = (int64(kj) - 1) * dilation[j] + 1
                sizes.append((int64(size) - 1) * strides[j] + span - before[j] - after[j] + extra[j])
            else:
                sizes.append(window_count(size, before[j] + after[j], kj, strides[j], dilation[j]))
        return [fill(out_type, layout_dims((d[0], o, *sizes), data_canon, out_layout))]

    return rule


def conv_numpy(op: str, rank: int, transposed: bool = False) -> Reference:
    def reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
        data, weight = a
        data_ty = TensorType(data.shape, str(data.dtype))
        g = conv_geometry(op, data_ty, TensorType(weight.shape, str(weight.dtype)), attrs, rank, transposed)
        return conv_reference(g, data, weight, result_dtype(attrs, data_ty, op))

    return reference


def conv_kernel(op: str, rank: int, transposed: bool = False) -> KernelBuilder:
    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
    ) -> Stmt:
        data, weight = input_buffers(inputs, op)
        g = conv_geometry(
            op, TensorType(data.shape, data.dtype), TensorType(weight.shape, weight.dtype), attrs, rank, transposed
        )
        return conv_direct_loops(ctx, data, weight, out, epilogue, g.spec())

    return kernel


def conv_attrs(rank: int, data_layout: str, kernel_layout: str) -> tuple[AttrSpec, ...]:
    """Conv1DAttrs / Conv2DAttrs / Conv3DAttrs: TVM's names, order and defaults."""
    return (
        AttrSpec("strides", "ints", (1,) * rank),
        AttrSpec("padding", "ints", (0,) * max(rank, 2)),
        AttrSpec("dilation", "ints", (1,) * rank),
        AttrSpec("groups", "int", 1),
        AttrSpec("channels", "int", None, optional=True),
        AttrSpec("kernel_size", "ints", None, optional=True),
        AttrSpec("data_layout", "str", data_layout),
        AttrSpec("kernel_layout", "str", kernel_layout),
        AttrSpec("out_layout", "str", ""),
        AttrSpec("out_dtype", "dtype", ""),
    )


def int8_ramp(*shape: int) -> np.ndarray:
    """A fixed int8 array spanning -128..127, for samples whose weights must be negative too
    (random sample integers are drawn non-negative)."""
    count = int(np.prod(shape))
    return ((np.arange(count) * 37) % 256 - 128).astype("int8").reshape(shape)


# --- domains ----------------------------------------------------------------------------------


def draw_dtypes(d: Draw) -> tuple[str, str, str]:
    """(data dtype, weight dtype, out_dtype attr): floats of one dtype, or 8-bit integers of
    either signedness accumulated into int32 (the quantized convolutions)."""
    kind = d.choice(("float32", "float32", "float64", "int8", "uint8", "mixed"))
    if kind == "mixed":
        data, weight = d.choice((("uint8", "int8"), ("int8", "uint8")))
        return data, weight, "int32"
    if kind in ("int8", "uint8"):
        return kind, kind, d.choice(("int32", "int32", ""))
    return kind, kind, ""


def draw_padding(d: Draw, rank: int, high: int) -> list[int]:
    form = d.choice(sorted({1, rank, 2 * rank}))
    return [d.integer(0, high) for _ in range(form)]


def draw_per_axis(d: Draw, rank: int, options: Sequence[int]) -> list[int]:
    if d.boolean():
        return [d.choice(options)]
    return [d.choice(options) for _ in range(rank)]


def _conv_domain(
    rank: int, op: str, data_layouts: Sequence[str], kernel_layouts: Sequence[str]
) -> Callable[[Draw], Sample]:
    spatial = SPATIAL[rank]

    def draw(d: Draw) -> Sample:
        data_dtype, weight_dtype, out_dtype = draw_dtypes(d)
        groups = d.choice((1, 1, 2, 3, "depthwise"))
        cg = d.integer(1, 3)
        if groups == "depthwise":
            groups = d.integer(1, 4)
            cg = 1
        assert isinstance(groups, int)
        c = cg * groups
        o = groups * d.integer(1, 3)
        max_size = {1: 9, 2: 6, 3: 4}[rank]
        ksize = [d.integer(1, 3) for _ in range(rank)]
        strides = draw_per_axis(d, rank, (1, 1, 2, 3, 4))
        dilation = draw_per_axis(d, rank, (1, 1, 2))
        padding = draw_padding(d, rank, 2)
        before, after = padding_nd(padding, rank, op)
        sizes = []
        for j in range(rank):
            dj = dilation[0] if len(dilation) == 1 else dilation[j]
            span = (ksize[j] - 1) * dj + 1
            low = max(1, span - before[j] - after[j])
            sizes.append(d.integer(low, max(low, max_size)))
        n = d.integer(1, 2)
        data_layout, kernel_layout = d.choice(data_layouts), d.choice(kernel_layouts)
        out_layout = d.choice(("", "", data_layouts[-1]))
        data_canon = {"N": n, "C": c, **dict(zip(spatial, sizes))}
        kernel_canon = {"O": o, "I": cg, **dict(zip(spatial, ksize))}
        attrs: dict[str, object] = {
            "strides": strides, "padding": padding, "dilation": dilation, "groups": groups,
            "data_layout": data_layout, "kernel_layout": kernel_layout, "out_layout": out_layout,
            "out_dtype": out_dtype,
        }
        if d.boolean():
            attrs["channels"] = o
            attrs["kernel_size"] = ksize
        return Sample(
            (
                TensorType(tuple(data_canon[a] for a in data_layout), data_dtype),
                TensorType(tuple(kernel_canon[a] for a in kernel_layout), weight_dtype),
            ),
            attrs,
            int_high=d.choice((4, 100)),
        )

    return draw


# --- nn.conv1d / nn.conv3d --------------------------------------------------------------------

CONV_ULPS = 64.0

register(
    OpDef(
        name="nn.conv1d",
        num_inputs=2,
        type_rel=conv_relation("nn.conv1d", 1),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=conv_numpy("nn.conv1d", 1),
        kernel=conv_kernel("nn.conv1d", 1),
        shape_func=conv_shape_rule("nn.conv1d", 1),
        attrs=conv_attrs(1, "NCW", "OIW"),
        samples=(
            Sample((TensorType((1, 3, 10), F32), TensorType((4, 3, 3), F32)), {"padding": [1], "channels": 4, "kernel_size": [3]}),
            Sample(
                (TensorType((2, 4, 11), F32), TensorType((6, 2, 2), F32)),
                {"strides": [3], "padding": [2, 0], "dilation": [2], "groups": 2},
            ),
            Sample(
                (TensorType((1, 9, 3), F32), TensorType((3, 1, 6), F32)),
                {"padding": [1, 2], "groups": 3, "data_layout": "NWC", "kernel_layout": "WIO"},
            ),
            Sample(
                (TensorType((1, 8, 2), F32), TensorType((3, 2, 4), "float32")),
                {"strides": [4], "data_layout": "NWC", "kernel_layout": "WIO", "out_layout": "NCW"},
            ),
            Sample(
                (TensorType((2, 3, 7), "uint8"), int8_ramp(2, 3, 3)),
                {"padding": [1, 1], "out_dtype": "int32"},
                int_high=120,
            ),
            Sample((TensorType((1, 2, 5), "float64"), TensorType((2, 2, 5), "float64")), {}),
        ),
        domain=Domain(_conv_domain(1, "nn.conv1d", ("NCW", "NWC"), ("OIW", "WIO")), ulps=CONV_ULPS, accumulates=True),
    )
)

register(
    OpDef(
        name="nn.conv3d",
        num_inputs=2,
        type_rel=conv_relation("nn.conv3d", 3),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=conv_numpy("nn.conv3d", 3),
        kernel=conv_kernel("nn.conv3d", 3),
        shape_func=conv_shape_rule("nn.conv3d", 3),
        attrs=conv_attrs(3, "NCDHW", "OIDHW"),
        samples=(
            Sample(
                (TensorType((1, 2, 4, 5, 5), F32), TensorType((3, 2, 3, 3, 3), F32)),
                {"padding": [1], "channels": 3, "kernel_size": [3, 3, 3]},
            ),
            Sample(
                (TensorType((1, 4, 5, 6, 7), F32), TensorType((4, 2, 2, 1, 2), F32)),
                {"strides": [2, 3, 1], "padding": [1, 0, 2], "dilation": [2, 1, 3], "groups": 2},
            ),
            Sample(
                (TensorType((1, 4, 5, 3, 2), F32), TensorType((2, 2, 3, 1, 4), F32)),
                {"padding": [0, 1, 0, 1, 0, 1], "groups": 2, "data_layout": "NDHWC", "kernel_layout": "DHWIO"},
            ),
            Sample(
                (int8_ramp(1, 3, 4, 4, 4), TensorType((2, 3, 2, 2, 2), "uint8")),
                {"strides": [3], "out_dtype": "int32", "out_layout": "NDHWC"},
                int_high=100,
            ),
        ),
        domain=Domain(
            _conv_domain(3, "nn.conv3d", ("NCDHW", "NDHWC"), ("OIDHW", "DHWIO")), ulps=CONV_ULPS, accumulates=True
        ),
    )
)
