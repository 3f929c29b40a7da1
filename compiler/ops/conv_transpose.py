"""nn.conv1d_transpose, nn.conv2d_transpose, nn.conv3d_transpose: the gradient of a strided
convolution with respect to its input (a "deconvolution").

Each input element scatters its kernel-weighted contribution to the outputs
`y = i*stride + k*dilation - pad_before`: with canonical data (N, C, *S) and a weight laid out
as TVM's default IOW / IOHW / IODHW, i.e. (C, O/groups, *K), output channel o of group g sums
over the group's C/groups input channels. The output extent is TVM's formula
`stride*(S-1) + (K-1)*dilation + 1 - pad_before - pad_after + output_padding`: output_padding
adds positions at the end (bottom / right) that only the zero padding reaches.

The output channel count is `channels` when given, else O/groups * groups from the weight. (TVM's
relation takes the weight's O/groups alone when `channels` is unset, which disagrees with its
own grouped kernels for groups > 1; the two agree for groups = 1.)

The loops run the equivalent stride-1 convolution over the input spread out by the strides,
with the kernel flipped (compiler/ops/kernels/conv_direct.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type
from compiler.ops.conv_nd import (
    SPATIAL,
    conv_kernel,
    conv_numpy,
    conv_relation,
    conv_shape_rule,
    draw_dtypes,
    draw_padding,
    draw_per_axis,
    int8_ramp,
    padding_nd,
)
from compiler.ops.domain import Domain, Draw
from compiler.ops.common import batch_first
from compiler.ops.kernels.common import place
from compiler.ops.layout import plain_positions, to_canonical
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.window import tap_or
from compiler.tir.compute import Reduction, TensorView
from compiler.tir.expr import PrimExpr, cast, const, eq, select

F32 = "float32"
ULPS = 64.0


def transpose_attrs(rank: int, data_layout: str, kernel_layout: str) -> tuple[AttrSpec, ...]:
    """Conv{1,2,3}DTransposeAttrs: TVM's names, order and defaults."""
    return (
        AttrSpec("channels", "int", None, optional=True),
        AttrSpec("kernel_size", "ints", None, optional=True),
        AttrSpec("strides", "ints", (1,) * rank),
        AttrSpec("output_padding", "ints", (0,) * rank),
        AttrSpec("padding", "ints", (0,) * rank),
        AttrSpec("dilation", "ints", (1,) * rank),
        AttrSpec("groups", "int", 1),
        AttrSpec("data_layout", "str", data_layout),
        AttrSpec("kernel_layout", "str", kernel_layout),
        AttrSpec("out_layout", "str", ""),
        AttrSpec("out_dtype", "dtype", ""),
    )


def _transpose_domain(
    rank: int, op: str, data_layouts: Sequence[str], kernel_layouts: Sequence[str]
) -> Callable[[Draw], Sample]:
    spatial = SPATIAL[rank]

    def draw(d: Draw) -> Sample:
        data_dtype, weight_dtype, out_dtype = draw_dtypes(d)
        groups = d.choice((1, 1, 2, 3))
        depthwise = d.integer(0, 3) == 0
        cg = 1 if depthwise else d.integer(1, 3)
        og = 1 if depthwise else d.integer(1, 3)
        c = cg * groups
        ksize = [d.integer(1, 3) for _ in range(rank)]
        strides = [d.choice((1, 2, 3, 4)) for _ in range(rank)]
        dilation = draw_per_axis(d, rank, (1, 1, 2))
        dil = dilation * rank if len(dilation) == 1 else dilation
        output_padding = [d.integer(0, max(s, dl) - 1) for s, dl in zip(strides, dil)]
        padding = draw_padding(d, rank, 2)
        before, after = padding_nd(padding, rank, op)
        max_size = {1: 7, 2: 5, 3: 3}[rank]
        sizes = []
        for j in range(rank):
            short = before[j] + after[j] - (ksize[j] - 1) * dil[j] - output_padding[j]
            low = 1 + max(0, -(-short // strides[j]))
            sizes.append(d.integer(low, max(low, max_size)))
        data_layout, kernel_layout = d.choice(data_layouts), d.choice(kernel_layouts)
        attrs: dict[str, object] = {
            "strides": strides, "padding": padding, "dilation": dilation, "groups": groups,
            "output_padding": output_padding, "data_layout": data_layout, "kernel_layout": kernel_layout,
            "out_layout": d.choice(("", "", data_layouts[-1])), "out_dtype": out_dtype,
        }
        if d.boolean():
            attrs["channels"] = og * groups
            attrs["kernel_size"] = ksize
        data_canon = {"N": d.integer(1, 2), "C": c, **dict(zip(spatial, sizes))}
        kernel_canon = {"I": c, "O": og, **dict(zip(spatial, ksize))}
        return Sample(
            (
                TensorType(tuple(data_canon[a] for a in data_layout), data_dtype),
                TensorType(tuple(kernel_canon[a] for a in kernel_layout), weight_dtype),
            ),
            attrs,
            int_high=d.choice((4, 100)),
        )

    return draw


def _conv2d_transpose_reduction(inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> Reduction | None:
    """nn.conv2d_transpose over an image of run-time size as a plain reduction over (input
    channel of the group, kernel row, kernel column): output (y, x) gathers input (iy, ix)
    where y = iy*stride + k*dilation - pad_before, i.e. where y + pad - k*dilation is a
    multiple of the stride; None for layouts that are not permutations or a `?` weight."""
    data, weight = inputs
    op = "nn.conv2d_transpose"
    try:
        data_pos = plain_positions(attrs["data_layout"], "NCHW", op, "data_layout")
        kernel_pos = plain_positions(attrs["kernel_layout"], "IOHW", op, "kernel_layout")
        out_pos = plain_positions(attrs["out_layout"] or attrs["data_layout"], "NCHW", op, "out_layout")
    except TypeRelationError:
        return None
    c_all, og, kh, kw = to_canonical(weight.shape, kernel_pos)
    if not all(isinstance(d, int) for d in (c_all, og, kh, kw)):
        return None
    _, _, h, w = to_canonical(data.shape, data_pos)
    cg = c_all // attrs["groups"]  # type: ignore[operator]  # ints, checked above
    (sh, sw), (dh, dw) = tuple(attrs["strides"]), tuple(attrs["dilation"])
    (top, left), _ = padding_nd(attrs["padding"], 2, op)
    out_dtype = attrs["out_dtype"] or data.dtype
    acc = F32 if out_dtype == "float16" else out_dtype

    def body(out_idx: Sequence[PrimExpr], red_idx: Sequence[PrimExpr]) -> PrimExpr:
        n, oc, y, x = to_canonical(tuple(out_idx), out_pos)
        c, ky, kx = red_idx
        ic = (oc // og) * cg + c
        w_value = cast(acc, cast(out_dtype, weight[place((ic, oc % og, ky, kx), kernel_pos)]))
        ny, nx = y + top - ky * dh, x + left - kx * dw

        def product(iy: PrimExpr, ix: PrimExpr) -> PrimExpr:
            return cast(acc, cast(out_dtype, data[place((n, ic, iy, ix), data_pos)])) * w_value

        zero = const(0, acc)
        gathered = tap_or(product, ny // sh, nx // sw, (h, w), zero)
        return select(eq(ny % sh, 0), select(eq(nx % sw, 0), gathered, zero), zero)

    return Reduction("sum", (cg, kh, kw), body, acc)  # type: ignore[arg-type]  # PrimExpr sequences


def _register(
    name: str, rank: int, data_layouts: Sequence[str], kernel_layouts: Sequence[str], samples: tuple[Sample, ...]
) -> None:
    register(
        OpDef(
            name=name,
            num_inputs=2,
            type_rel=conv_relation(name, rank, transposed=True),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            reference=conv_numpy(name, rank, transposed=True),
            kernel=conv_kernel(name, rank, transposed=True),
            extras={"batch_rows": batch_first("data_layout", "out_layout"),
                    **({"dynamic_reduction": _conv2d_transpose_reduction} if rank == 2 else {})},
            shape_func=conv_shape_rule(name, rank, transposed=True),
            attrs=transpose_attrs(rank, data_layouts[0], kernel_layouts[0]),
            samples=samples,
            domain=Domain(_transpose_domain(rank, name, data_layouts, kernel_layouts), ulps=ULPS, accumulates=True),
        )
    )


_register(
    "nn.conv1d_transpose",
    1,
    ("NCW", "NWC"),
    ("IOW", "OIW", "WIO"),
    (
        Sample((TensorType((1, 3, 5), F32), TensorType((3, 2, 3), F32)), {"strides": [2], "padding": [1]}),
        Sample(
            (TensorType((2, 4, 4), F32), TensorType((4, 3, 2), F32)),
            {"strides": [3], "padding": [0, 1], "output_padding": [2], "dilation": [2], "groups": 2, "channels": 6},
        ),
        Sample(
            (TensorType((1, 6, 3), F32), TensorType((2, 3, 1), F32)),
            {"strides": [4], "data_layout": "NWC", "kernel_layout": "WIO", "groups": 3, "kernel_size": [2]},
        ),
        Sample(
            (TensorType((1, 2, 6), "uint8"), int8_ramp(2, 2, 3)),
            {"strides": [2], "padding": [2, 0], "output_padding": [1], "out_dtype": "int32"},
            int_high=120,
        ),
    ),
)

_register(
    "nn.conv2d_transpose",
    2,
    ("NCHW", "NHWC"),
    ("IOHW", "OIHW", "HWOI"),
    (
        Sample(
            (TensorType((1, 3, 4, 5), F32), TensorType((3, 2, 3, 3), F32)),
            {"strides": [2, 2], "padding": [1, 1], "output_padding": [1, 1], "channels": 2, "kernel_size": [3, 3]},
        ),
        Sample(
            (TensorType((1, 4, 3, 4), F32), TensorType((4, 1, 2, 3), F32)),
            {"strides": [3, 1], "padding": [1, 0, 0, 2], "dilation": [1, 2], "groups": 4},
        ),
        Sample(
            (TensorType((2, 3, 4, 2), F32), TensorType((2, 3, 2, 3), F32)),
            {"strides": [2, 3], "padding": [1], "data_layout": "NHWC", "kernel_layout": "HWIO", "out_layout": "NCHW"},
        ),
        Sample(
            (int8_ramp(1, 2, 3, 3), int8_ramp(2, 2, 2, 2)),
            {"strides": [2, 2], "out_dtype": "int32"},
            int_high=100,
        ),
        Sample((TensorType((1, 2, 3, 3), "float64"), TensorType((2, 2, 1, 1), "float64")), {"strides": [4, 4]}),
    ),
)

_register(
    "nn.conv3d_transpose",
    3,
    ("NCDHW", "NDHWC"),
    ("IODHW", "OIDHW", "DHWOI"),
    (
        Sample(
            (TensorType((1, 2, 3, 3, 3), F32), TensorType((2, 3, 2, 2, 2), F32)),
            {"strides": [2, 2, 2], "padding": [1, 0, 0], "output_padding": [1, 0, 1]},
        ),
        Sample(
            (TensorType((1, 3, 4, 2, 2), F32), TensorType((2, 2, 1, 1, 2), F32)),
            {"strides": [1, 3, 2], "padding": [0, 1, 0, 1, 0, 0], "groups": 2, "data_layout": "NDHWC",
             "kernel_layout": "DHWOI", "dilation": [2, 1, 1]},
        ),
        Sample(
            (TensorType((1, 2, 2, 2, 2), "uint8"), TensorType((2, 2, 2, 2, 2), "uint8")),
            {"strides": [2], "out_dtype": "int32"},
            int_high=200,
        ),
    ),
)
