"""AlterOpLayout: products with a constant weight take it packed in the micro-kernel's layout.

Before: a typed module, BYOC partitioning done (what an external codegen took is not touched).
After (typed): every `nn.dense(%x, W)`, `nn.matmul(%x, W)` and `nn.batch_matmul(%x, W)` (W's
batch of 1) whose weight W is a constant, outside Primitive and Compiler functions, is

    nn.contrib_dense_pack(%x, <W packed NC[b]n>, units=..., out_dtype=..., weight_layout="NC<b>n")

as TVM's x86 AlterOpLayout rewrites dense: the packed weight is the folded value of
`layout_transform(nn.pad(W), src_layout="NC", dst_layout="NC<b>n")` (FoldConstant runs here on
the rewritten functions), so the kernel reads its column panels in place and nothing is packed
per call (compiler/ops/kernels/gemm.py). `b` is the register tile's width, two vectors of the
build machine (`tir.vector_lanes`); a weight whose unit count is not a multiple of b is padded
with zero units and `units` keeps the real count. The call keeps its span, and fused epilogues
(bias_add, relu, add, ...) fuse with contrib_dense_pack as they did with dense.

Likewise every float32 `nn.conv2d(%x, W)` on NCHW data with a constant OIHW weight, one group
and a multiple of a vector's lanes of output channels becomes

    nn.contrib_conv2d_NCHWc(%x, <W packed OHWI[b]o>, ..., data_layout="NCHW",
                            kernel_layout="OHWI<b>o", out_layout="NCHW")

and then (compiler/passes/blocked_activations.py) its result becomes NCHW[b]c and its data the
blocked result of the convolution before it, the blocked layout carried through the elementwise
operators and pools between them. The weight is blocked as
b output channels (two vectors, or one when the count is not a multiple of two) innermost, then
the input channels, so the kernel's reduction runs over input channels with the taps outside
(compiler/ops/kernels/conv2d_packed.py; with the taps innermost gcc keeps a tap's inputs across
taps and spills the tile, at under half the speed). A layer with fewer than `FEW_CHANNELS` input
channels (an RGB stem) is packed OIHW[b]o instead, the taps innermost: there a loop over the
channels would be a few trips (ResNet-50's 7x7 stem: 55-60 GFLOP/s this way, 40 the other).

And a `nn.batch_matmul(%x, %y, transpose_b=True)` whose %y an injective op computes (attention's
`q @ k^T`, k from a reshape and transpose of a dense's result) takes %y untransposed: the call
becomes `nn.batch_matmul(%x, transpose(%y, axes=[0, 2, 1]), transpose_b=False)`, a transpose of a
transpose being one transpose. The new transpose fuses into the kernel that makes %y, and the
product reads whole panels of its B in place instead of packing B into a scratch on every call
(compiler/ops/kernels/matmul.py). Only where the product would pack: enough rows for the tile
(`DOT_MAX_ROWS`) and a column count of whole tile panels.

A conv2d on data of a `?` batch or image size is packed the same way. With a `?` batch the
static packed kernel runs once per image, on blocked activations as for a static batch; over an
image whose size is `?` the activations stay NCHW (BlockedActivations leaves `?` maps alone) and
the kernel reads the packed panels in place rather than packing the weight on every call
(kernels/conv2d.py, `conv2d_dynamic_loops`).

What is left alone: weights that are runtime inputs, a float type other than float32 (or an
out_dtype that differs), other `?` dims, transposed data (`transpose_a`), a batch_matmul weight with
more than one batch, and products with fewer rows than `DOT_MAX_ROWS` (a matrix-vector product
streams the weight at memory speed as dot products; packing gains nothing there).

TVM runs AlterOpLayout at opt level 3; so does this pass. It must run before FuseOps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from compiler import ops
from compiler.ir.expr import Call, Constant, Expr, Op
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.ir.visitor import ExprMutator
from compiler.ops.kernels.matmul import DOT_MAX_ROWS
from compiler.ops.registry import OpPattern
from compiler.passes.blocked_activations import block_activations
from compiler.passes.fold_constant import rewrite_and_fold
from compiler.passes.fusion_graph import closed_function
from compiler.passes.pass_infra import Pass, PassContext
from compiler.runtime.vector_width import configured_lanes

PACKED = "nn.contrib_dense_pack"
CONV_PACKED = "nn.contrib_conv2d_NCHWc"
FLOAT32 = "float32"
FEW_CHANNELS = 8


def pack_block(lanes: int) -> int:
    """Units per packed block: the register tile's width, two float32 vectors."""
    return 2 * lanes


@dataclass(frozen=True)
class _Weight:
    """The 2-D weight of a product, as an expression, with its layout ("NC": units first)."""

    expr: Expr
    layout: str
    units: int


def _static(ty: object) -> TensorType | None:
    if isinstance(ty, TensorType) and not ty.is_dynamic:
        return ty
    return None


def _channels_known(ty: object) -> TensorType | None:
    """An NCHW tensor type whose channel count is known: its batch and image size may be `?`.
    A `?` batch runs the static packed kernel once per image; a `?` image size the dynamic
    product, reading the packed weight in place (BlockedActivations leaves `?` maps NCHW)."""
    if isinstance(ty, TensorType) and ty.ndim == 4 and isinstance(ty.shape[1], int):
        return ty
    return None


def _weight_of(call: Call, args: tuple[Expr, ...]) -> _Weight | None:
    """The product's constant weight in 2-D form, or None when the call is not rewritten."""
    name = call.op_name
    weight = _static(call.args[1].checked_type)
    if weight is None or not isinstance(call.args[1], Constant):
        return None
    attrs = call.attrs
    if name == "nn.dense":
        return _Weight(args[1], "NC", weight.shape[0]) if weight.ndim == 2 else None  # type: ignore[arg-type]  # static
    if name == "nn.matmul":
        if attrs["transpose_a"] or weight.ndim != 2:
            return None
        layout = "NC" if attrs["transpose_b"] else "CN"
        return _Weight(args[1], layout, weight.shape[layout.index("N")])  # type: ignore[arg-type]  # static
    if name == "nn.batch_matmul":
        if attrs["transpose_a"] or weight.shape[0] != 1:
            return None
        squeezed = Call(Op.get("squeeze"), (args[1],), ops.get("squeeze").make_attrs({"axis": [0]}))
        layout = "NC" if attrs["transpose_b"] else "CN"
        return _Weight(squeezed, layout, weight.shape[1 + layout.index("N")])  # type: ignore[arg-type]  # static
    return None


def _rows(data: TensorType) -> int:
    """Rows of the product: data's dims but the last (a batch_matmul's batch folds in too)."""
    rows = 1
    for d in data.shape[:-1]:
        rows *= int(d)  # type: ignore[arg-type]  # static, checked by the caller
    return rows


def packed_call(call: Call, args: tuple[Expr, ...], lanes: int) -> Call | None:
    """`call` (typed) as contrib_dense_pack of a packed weight expression, or None."""
    if call.op_name not in ("nn.dense", "nn.matmul", "nn.batch_matmul"):
        return None
    data, out = _static(call.args[0].checked_type), _static(call.checked_type)
    if data is None or out is None or data.ndim < 1:
        return None
    if not (data.dtype == out.dtype == FLOAT32 and call.args[1].checked_type.dtype == FLOAT32):  # type: ignore[attr-defined]  # a TensorType
        return None
    weight = _weight_of(call, args)
    if weight is None or _rows(data) < DOT_MAX_ROWS:
        return None
    block = pack_block(lanes)
    padding = -weight.units % block
    expr = weight.expr
    if padding:
        widths = [[0, padding], [0, 0]] if weight.layout == "NC" else [[0, 0], [0, padding]]
        zero = Constant(np.zeros((), FLOAT32))
        expr = Call(Op.get("nn.pad"), (expr, zero), ops.get("nn.pad").make_attrs({"pad_width": widths}))
    layout = f"NC{block}n"
    transform = ops.get("layout_transform").make_attrs({"src_layout": weight.layout, "dst_layout": layout})
    packed = Call(Op.get("layout_transform"), (expr,), transform)
    # batch_matmul has no `units`; dense and matmul keep theirs unless padding needs the count.
    written = call.attrs["units"] if call.op_name != "nn.batch_matmul" else None
    attrs = ops.get(PACKED).make_attrs({
        "units": weight.units if padding else written,
        "out_dtype": call.attrs["out_dtype"],
        "weight_layout": layout,
    })
    return Call(Op.get(PACKED), (args[0], packed), attrs, call.span)


def conv_block(channels: int, lanes: int) -> int | None:
    """Output channels per block of a packed conv2d weight: two vectors, one, or None when
    `channels` is not a multiple of a vector."""
    for block in (2 * lanes, lanes):
        if channels % block == 0:
            return block
    return None


def packed_conv2d(call: Call, args: tuple[Expr, ...], lanes: int) -> Call | None:
    """`call` (typed) as contrib_conv2d_NCHWc of an OHWI[b]o weight expression, or None."""
    if call.op_name != "nn.conv2d" or not isinstance(call.args[1], Constant):
        return None
    data, out = (_channels_known(t) for t in (call.args[0].checked_type, call.checked_type))
    weight = _static(call.args[1].checked_type)
    if data is None or weight is None or out is None:
        return None
    attrs = call.attrs
    plain = attrs["data_layout"] == "NCHW" and attrs["kernel_layout"] == "OIHW" and attrs["out_layout"] in ("", "NCHW")
    if not plain or attrs["groups"] != 1 or not data.dtype == weight.dtype == out.dtype == FLOAT32:
        return None
    channels, inputs, kh, kw = (int(d) for d in weight.shape)  # type: ignore[arg-type]  # static
    block = conv_block(channels, lanes)
    if block is None:
        return None
    layout = f"{'OIHW' if inputs < FEW_CHANNELS else 'OHWI'}{block}o"
    transform = ops.get("layout_transform").make_attrs({"src_layout": "OIHW", "dst_layout": layout})
    packed = Call(Op.get("layout_transform"), (args[1],), transform)
    new_attrs = ops.get(CONV_PACKED).make_attrs({
        "strides": list(attrs["strides"]), "padding": list(attrs["padding"]), "dilation": list(attrs["dilation"]),
        "groups": 1, "channels": channels, "kernel_size": [kh, kw], "data_layout": "NCHW",
        "kernel_layout": layout, "out_layout": "NCHW", "out_dtype": attrs["out_dtype"],
    })
    return Call(Op.get(CONV_PACKED), (args[0], packed), new_attrs, call.span)


def _transpose(expr: Expr, axes: list[int]) -> Call:
    """transpose(expr, axes), composed with `expr` when that is a transpose itself."""
    if isinstance(expr, Call) and expr.op_name == "transpose" and expr.attrs["axes"] is not None:
        inner = [int(a) % len(axes) for a in expr.attrs["axes"]]
        axes, expr = [inner[a] for a in axes], expr.args[0]
        if axes == sorted(axes):
            return expr  # type: ignore[return-value]  # the identity: the untransposed operand itself
    return Call(Op.get("transpose"), (expr,), ops.get("transpose").make_attrs({"axes": axes}))


def untransposed_batch_matmul(call: Call, args: tuple[Expr, ...], lanes: int) -> Call | None:
    """`call` (a batch_matmul with transpose_b) reading its B untransposed, as the module
    docstring says; None when it is left alone."""
    if call.op_name != "nn.batch_matmul" or not call.attrs["transpose_b"]:
        return None
    x, y, out = (_static(t) for t in (call.args[0].checked_type, call.args[1].checked_type, call.checked_type))
    if x is None or y is None or out is None or len(y.shape) != 3:
        return None
    producer = args[1]
    opdef = ops.get(producer.op_name) if isinstance(producer, Call) and isinstance(producer.op, Op) else None
    if opdef is None or opdef.pattern > OpPattern.INJECTIVE:
        return None
    rows, columns = int(out.shape[1]), int(out.shape[2])
    width = lanes if columns <= lanes else 2 * lanes
    if rows < DOT_MAX_ROWS or columns % width:
        return None
    attrs = call.attrs.with_attr("transpose_b", False)
    return Call(call.op, (args[0], _transpose(producer, [0, 2, 1])), attrs, call.span)


class _Rewriter(ExprMutator):
    def __init__(self, lanes: int):
        super().__init__()
        self.lanes = lanes

    def descend(self, node: Expr) -> bool:
        return not closed_function(node)

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        packed = (packed_call(pre, post.args, self.lanes) or packed_conv2d(pre, post.args, self.lanes)
                  or untransposed_batch_matmul(pre, post.args, self.lanes))
        return packed if packed is not None else post


@dataclass(frozen=True)
class AlterOpLayout(Pass):
    name: ClassVar[str] = "AlterOpLayout"
    opt_level: ClassVar[int] = 3

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        # The packing is folded into the weight constant here, before fusion sees it; so are the
        # blocked forms of the constants the blocked activations meet (a bias, a scale).
        mod = rewrite_and_fold(mod, ctx, _Rewriter(configured_lanes(ctx.config)).visit)
        return rewrite_and_fold(mod, ctx, block_activations)
