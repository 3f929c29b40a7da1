"""ONNX neural-network ops: Conv, ConvTranspose, Gemm, MatMul, pools, Softmax/LogSoftmax.

Padding: ONNX lists all begins then all ends, which is our conv and pool `padding` order too.
`auto_pad` SAME_UPPER/SAME_LOWER is resolved here into explicit pads from the static input
shape, as ONNX defines them."""

from __future__ import annotations

import math

from compiler.frontend.onnx.context import Converted, NodeContext, normalize_axis
from compiler.frontend.onnx.registry import converter
from compiler.ir.expr import Expr

_CONV_OPS = {1: "nn.conv1d", 2: "nn.conv2d", 3: "nn.conv3d"}
_CONV_TRANSPOSE_OPS = {1: "nn.conv1d_transpose", 2: "nn.conv2d_transpose", 3: "nn.conv3d_transpose"}
_MAX_POOLS = {1: "nn.max_pool1d", 2: "nn.max_pool2d", 3: "nn.max_pool3d"}
_AVG_POOLS = {1: "nn.avg_pool1d", 2: "nn.avg_pool2d", 3: "nn.avg_pool3d"}


def _window_pads(ctx: NodeContext, kernel: list[int], strides: list[int], dilations: list[int]) -> list[int]:
    """Explicit pads (begins, then ends) for the node's `pads` / `auto_pad`."""
    spatial = len(kernel)
    auto_pad = ctx.str_attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        return ctx.ints_attr("pads") or [0] * (2 * spatial)
    if auto_pad == "VALID":
        return [0] * (2 * spatial)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.unsupported(f"auto_pad {auto_pad!r}")
    dims = ctx.shape(0)[2:]
    begins, ends = [], []
    for dim, k, s, d in zip(dims, kernel, strides, dilations):
        if not isinstance(dim, int):
            raise ctx.unsupported(f"auto_pad {auto_pad} along a `?` spatial dim")
        total = max((math.ceil(dim / s) - 1) * s + (k - 1) * d + 1 - dim, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return begins + ends


def _spatial(ctx: NodeContext) -> int:
    spatial = ctx.rank(0) - 2
    if spatial not in (1, 2, 3):
        raise ctx.unsupported(f"{spatial} spatial dims (1 to 3 supported)")
    return spatial


def convolution(ctx: NodeContext, data: Expr, weight: Expr, weight_shape: tuple[int, ...], **extra: object) -> Expr:
    """The node's convolution (its kernel, strides, dilations, pads, group) of `data` by `weight`;
    also for the integer and quantized convs, which take other inputs at other positions."""
    spatial = _spatial(ctx)
    kernel = ctx.ints_attr("kernel_shape") or list(weight_shape[2:])
    strides = ctx.ints_attr("strides") or [1] * spatial
    dilations = ctx.ints_attr("dilations") or [1] * spatial
    pads = _window_pads(ctx, kernel, strides, dilations)
    return ctx.op(
        _CONV_OPS[spatial], data, weight,
        strides=tuple(strides), padding=tuple(pads), dilation=tuple(dilations),
        groups=ctx.int_attr("group", 1), channels=weight_shape[0], kernel_size=tuple(kernel), **extra,
    )


@converter("Conv", (11, 22))
def _conv(ctx: NodeContext) -> Converted:
    out = convolution(ctx, ctx.input(0), ctx.input(1), ctx.static_shape(1))
    if ctx.has_input(2):
        out = ctx.op("nn.bias_add", out, ctx.input(2), axis=1)
    return out


@converter("ConvTranspose", (11, 22))
def _conv_transpose(ctx: NodeContext) -> Converted:
    spatial = _spatial(ctx)
    weight_shape = ctx.static_shape(1)
    group = ctx.int_attr("group", 1)
    kernel = ctx.ints_attr("kernel_shape") or list(weight_shape[2:])
    strides = ctx.ints_attr("strides") or [1] * spatial
    dilations = ctx.ints_attr("dilations") or [1] * spatial
    output_padding = ctx.ints_attr("output_padding") or [0] * spatial
    output_shape = ctx.ints_attr("output_shape")
    auto_pad = ctx.str_attr("auto_pad", "NOTSET")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        dims = ctx.static_shape(0)[2:]
        wanted = output_shape[-spatial:] if output_shape is not None else [d * s for d, s in zip(dims, strides)]
        begins, ends = [], []
        output_padding = list(output_padding)
        for i, (dim, want, k, s, d) in enumerate(zip(dims, wanted, kernel, strides, dilations)):
            total = s * (dim - 1) + output_padding[i] + (k - 1) * d + 1 - want
            if total < 0:
                # More output than the kernel reaches: the rest is output padding (zeros
                # plus the bias), at the end.
                output_padding[i] -= total
                total = 0
            if auto_pad == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
        pads = begins + ends
    elif auto_pad == "VALID":
        pads = [0] * (2 * spatial)
    else:
        pads = ctx.ints_attr("pads") or [0] * (2 * spatial)
    out = ctx.op(
        _CONV_TRANSPOSE_OPS[spatial], ctx.input(0), ctx.input(1),
        channels=weight_shape[1] * group, kernel_size=tuple(kernel), strides=tuple(strides),
        output_padding=tuple(output_padding), padding=tuple(pads), dilation=tuple(dilations), groups=group,
    )
    if ctx.has_input(2):
        out = ctx.op("nn.bias_add", out, ctx.input(2), axis=1)
    return out


def _pool(ctx: NodeContext, table: dict[int, str], *, zero_padded: bool = False, **extra: object) -> Expr:
    """The node's pool; `zero_padded` pads the data with zeros first (the pads then count in
    an average, but not the part of a window that ceil mode extends past them)."""
    if ctx.num_outputs > 1:
        raise ctx.unsupported("the Indices output of MaxPool is not supported")
    spatial = _spatial(ctx)
    kernel = ctx.ints_attr("kernel_shape")
    if kernel is None:
        raise ctx.unsupported("kernel_shape is required")
    strides = ctx.ints_attr("strides") or [1] * spatial
    dilations = ctx.ints_attr("dilations") or [1] * spatial
    pads = _window_pads(ctx, kernel, strides, dilations)
    data, dims = ctx.input(0), ctx.shape(0)[2:]
    ceil_mode = bool(ctx.int_attr("ceil_mode", 0))
    extensions = [0] * spatial
    if ceil_mode and all(isinstance(d, int) for d in dims):
        # ONNX's ceil mode drops a last window that would start in the end padding; stated as
        # floor mode with the end padding extended to give ONNX's output size.
        for i, (dim, k, s, d) in enumerate(zip(dims, kernel, strides, dilations)):
            span = (k - 1) * d + 1
            out = -(-(dim + pads[i] + pads[i + spatial] - span) // s) + 1
            if (out - 1) * s >= dim + pads[i]:
                out -= 1
            extensions[i] = max((out - 1) * s + span - dim - pads[i] - pads[i + spatial], 0)
        ceil_mode = False
    if zero_padded and any(pads):
        widths = ((0, 0), (0, 0), *zip(pads[:spatial], pads[spatial:]))
        data = ctx.op("nn.pad", data, ctx.scalar(0, ctx.dtype(0)), pad_width=widths)
        pads = [0] * (2 * spatial)
    pads = [*pads[:spatial], *(e + x for e, x in zip(pads[spatial:], extensions))]
    return ctx.op(
        table[spatial], data, pool_size=tuple(kernel), strides=tuple(strides),
        dilation=tuple(dilations), padding=tuple(pads), ceil_mode=ceil_mode, **extra,
    )


@converter("MaxPool", (12, 22))
def _max_pool(ctx: NodeContext) -> Converted:
    if ctx.int_attr("storage_order", 0):
        raise ctx.unsupported("storage_order=1 (it only affects the Indices output)")
    return _pool(ctx, _MAX_POOLS)


@converter("AveragePool", (11, 19, 22))
def _average_pool(ctx: NodeContext) -> Converted:
    if ctx.int_attr("count_include_pad", 0) and ctx.int_attr("ceil_mode", 0):
        # Ceil mode's extension of the last window is not padding ONNX counts.
        return _pool(ctx, _AVG_POOLS, zero_padded=True, count_include_pad=False)
    return _pool(ctx, _AVG_POOLS, count_include_pad=bool(ctx.int_attr("count_include_pad", 0)))


def _global_pool(op_type: str, reduce: str, pool2d: str) -> None:
    def convert(ctx: NodeContext) -> Converted:
        rank = ctx.rank(0)
        if rank == 4:
            return ctx.op(pool2d, ctx.input(0))
        return ctx.op(reduce, ctx.input(0), axis=tuple(range(2, rank)), keepdims=True)

    converter(op_type, (1, 22))(convert)


_global_pool("GlobalAveragePool", "mean", "nn.global_avg_pool2d")
_global_pool("GlobalMaxPool", "max", "nn.global_max_pool2d")


@converter("Gemm", (13,))
def _gemm(ctx: NodeContext) -> Converted:
    a, b = ctx.input(0), ctx.input(1)
    if ctx.int_attr("transA", 0):
        a = ctx.op("transpose", a, axes=(1, 0))
    # nn.dense multiplies by the transposed weight: B as ONNX gives it with transB=1.
    if not ctx.int_attr("transB", 0):
        b = ctx.op("transpose", b, axes=(1, 0))
    units = b.checked_type.shape[0]  # type: ignore[attr-defined]  # a tensor
    out = ctx.op("nn.dense", a, b, units=units if isinstance(units, int) else None)
    dtype = ctx.dtype(0)
    alpha, beta = ctx.float_attr("alpha", 1.0), ctx.float_attr("beta", 1.0)
    if alpha != 1.0:
        out = ctx.op("multiply", out, ctx.scalar(alpha, dtype))
    if ctx.has_input(2):
        c = ctx.input(2)
        if beta != 1.0:
            c = ctx.op("multiply", c, ctx.scalar(beta, dtype))
        out = ctx.op("add", out, c)
    return out


@converter("MatMul", (13,))
def _matmul(ctx: NodeContext) -> Converted:
    a, b = ctx.input(0), ctx.input(1)
    rank_a, rank_b = ctx.rank(0), ctx.rank(1)
    # numpy's matmul: a 1-D operand is a row (left) or a column (right), dropped afterwards.
    if rank_a == 1:
        a = ctx.op("expand_dims", a, axis=0)
    if rank_b == 1:
        b = ctx.op("expand_dims", b, axis=1)
    shape_a = a.checked_type.shape  # type: ignore[attr-defined]  # tensors
    shape_b = b.checked_type.shape  # type: ignore[attr-defined]
    if len(shape_b) == 2:
        # (..., M, K) x (K, N): a dense over the last axis; its weight is B transposed.
        units = shape_b[1]
        out = ctx.op("nn.dense", a, ctx.op("transpose", b, axes=(1, 0)),
                     units=units if isinstance(units, int) else None)
    else:
        out = _batched_matmul(ctx, a, b, shape_a, shape_b)
    if rank_a == 1 and rank_b == 1:
        return ctx.op("reshape", out, newshape=())
    if rank_a == 1:
        return ctx.op("squeeze", out, axis=(len(out.checked_type.shape) - 2,))  # type: ignore[attr-defined]
    if rank_b == 1:
        return ctx.op("squeeze", out, axis=(len(out.checked_type.shape) - 1,))  # type: ignore[attr-defined]
    return out


def _batched_matmul(ctx: NodeContext, a: Expr, b: Expr, shape_a: tuple[object, ...], shape_b: tuple[object, ...]) -> Expr:
    batch_a, batch_b = shape_a[:-2], shape_b[:-2]
    rank = max(len(batch_a), len(batch_b))
    batch_a = (1,) * (rank - len(batch_a)) + tuple(batch_a)
    batch_b = (1,) * (rank - len(batch_b)) + tuple(batch_b)
    batch = []
    for x, y in zip(batch_a, batch_b):
        if x == 1:
            batch.append(y)
        elif y == 1 or x == y:
            batch.append(x)
        else:
            raise ctx.unsupported(f"MatMul batch dims {list(shape_a[:-2])} and {list(shape_b[:-2])} "
                                  "must be static where they broadcast")
    m, k, n = shape_a[-2], shape_a[-1], shape_b[-1]
    if not all(isinstance(d, int) for d in batch):
        if tuple(batch_a) != tuple(batch_b) or sum(not isinstance(d, int) for d in batch) != 1:
            raise ctx.unsupported("MatMul with `?` batch dims needs them equal on both sides, one of them `?`")
        return _batch_matmul_dynamic(ctx, a, b, batch)
    if tuple(batch_a) != tuple(batch):
        a = ctx.op("broadcast_to", a, shape=(*batch, m, k))
    if tuple(batch_b) != tuple(batch):
        b = ctx.op("broadcast_to", b, shape=(*batch, k, n))
    count = math.prod(batch)  # type: ignore[arg-type]  # ints, checked
    a3 = ctx.op("reshape", a, newshape=(count, m if isinstance(m, int) else -1, k))
    b3 = ctx.op("reshape", b, newshape=(count, k, n))
    out = ctx.op("nn.batch_matmul", a3, b3, transpose_a=False, transpose_b=False)
    return ctx.op("reshape", out, newshape=(*batch, m if isinstance(m, int) else -1, n))


def _batch_matmul_dynamic(ctx: NodeContext, a: Expr, b: Expr, batch: list[object]) -> Expr:
    """Batch dims with one `?` among them (attention's (batch, heads) with a dynamic batch):
    merged into one (newshape -3) for batch_matmul, then split back one at a time (-4), where
    the dim that is not split off is -1."""
    for _ in range(len(batch) - 1):
        a = ctx.op("reshape", a, newshape=(-3, -2))
        b = ctx.op("reshape", b, newshape=(-3, -2))
    out = ctx.op("nn.batch_matmul", a, b, transpose_a=False, transpose_b=False)
    for j in range(len(batch) - 1):
        head, rest = batch[j], batch[j + 1:]
        parts = (head, -1) if isinstance(head, int) else (-1, math.prod(rest))  # type: ignore[arg-type]  # rest static
        out = ctx.op("reshape", out, newshape=(*([0] * j), -4, *parts, -2))
    return out


def _softmax(op_type: str, our_op: str) -> None:
    def convert(ctx: NodeContext) -> Converted:
        return ctx.op(our_op, ctx.input(0), axis=normalize_axis(ctx.int_attr("axis", -1), ctx.rank(0)))

    converter(op_type, (13,))(convert)


_softmax("Softmax", "nn.softmax")
_softmax("LogSoftmax", "nn.log_softmax")


@converter("LpPool", (11, 18, 22))
def _lp_pool(ctx: NodeContext) -> Converted:
    # (sum over the window of |x|^p)^(1/p): an average pool that counts the padding, times
    # the window's size.
    p = ctx.int_attr("p", 2)
    dtype = ctx.dtype(0)
    x = ctx.input(0)
    powered = ctx.op("power", ctx.op("abs", x), ctx.scalar(p, dtype))
    kernel = ctx.ints_attr("kernel_shape") or []
    spatial = _spatial(ctx)
    strides = ctx.ints_attr("strides") or [1] * spatial
    dilations = ctx.ints_attr("dilations") or [1] * spatial
    pads = _window_pads(ctx, kernel, strides, dilations)
    mean = ctx.op(_AVG_POOLS[spatial], powered, pool_size=tuple(kernel), strides=tuple(strides),
                  dilation=tuple(dilations), padding=tuple(pads), ceil_mode=bool(ctx.int_attr("ceil_mode", 0)),
                  count_include_pad=True)
    total = ctx.op("multiply", mean, ctx.scalar(math.prod(kernel), dtype))
    return ctx.op("power", total, ctx.scalar(1.0 / p, dtype))
