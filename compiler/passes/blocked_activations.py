"""Channel-blocked activations between packed convolutions: AlterOpLayout's second step.

Before (typed): the packed convolutions AlterOpLayout made, `nn.contrib_conv2d_NCHWc` on NCHW
data with an OHWI[b]o or OIHW[b]o weight and an NCHW result. In NCHW a register tile's b
channels of one pixel are stored a channel plane apart, one float per store, and a fused
residual is read the same way: ResNet-50's residual and 64-channel 1x1 layers ran at 35-47
GFLOP/s for it, against 55-75 for the others.

After (typed): each such convolution writes NCHW[b]c (b its weight's block, so a tile row is one
contiguous run of b floats) and reads NCHW[x]c data where its producer left it blocked (x any,
the weight OHWI[b]o: the kernel reduces over (block, channel in block)); the stem, whose weight
is OIHW[b]o, still reads NCHW. As in TVM's x86 AlterOpLayout, the blocked layout is carried
through what does not care about it, so consecutive convolutions need no transform between them:
* one-input elementwise operators without axis attributes (relu, clip, cast, ...);
* two-input broadcasting ones whose other operand is blocked alike, a scalar, or in NCHW with
  the full channel count (a folded batch norm's `[C, 1, 1]` scale and shift, a residual); that
  operand is reshaped to 4-D and transformed (a constant one folds);
* `nn.bias_add` on the channel axis, which becomes an `add` of the blocked bias;
* `nn.max_pool2d`, `nn.avg_pool2d` and the global pools, which take the layout as an attribute.
Every other use sees NCHW again (one `layout_transform` back per value), and so does the
function's result, so a function's type never changes. A function where no convolution reads
another's blocked result is left as it was: there the transforms would be all it gained.
"""

from __future__ import annotations

from compiler.ir.expr import Call, Expr, Function, Op
from compiler.ir.types import TensorType
from compiler.ir.visitor import post_order, rebuild
from compiler.ops import get as get_op
from compiler.ops.conv_nchwc import packed_block
from compiler.ops.registry import OpPattern
from compiler.passes.simplify_inference import op_call

CONV_PACKED = "nn.contrib_conv2d_NCHWc"
PLAIN = "NCHW"
POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")
# Attributes that tie an operator to an axis: such an operator sees NCHW again.
_AXIS_ATTRS = frozenset({"axis", "axes", "layout", "data_layout", "out_layout", "newshape", "shape"})


def block_activations(func: Function) -> Function:
    """`func` (typed) with blocked activations between its packed convolutions; `func` itself
    when it has none."""
    rewriter = _Blocker()
    for node in post_order(func.body, seen=rewriter.new, descend=lambda n: not isinstance(n, Function)):
        rewriter.visit(node)
    if not rewriter.chained:
        return func  # no convolution reads another's blocked result: the transforms would only cost
    return Function(func.params, rewriter.plain(func.body), func.ret_type, func.attrs, func.span)


def _tensor(expr: Expr) -> TensorType | None:
    """`expr`'s tensor type when its channels (dim 1) are known: a `?` batch runs each image
    through the static blocked kernels (their `batch_rows`), and `?` image sizes run the dynamic
    product (kernels/conv2d.py), whose blocked stores are one vector per tile row where NCHW's
    are a channel plane apart."""
    ty = expr.checked_type if expr.has_type else None
    if not isinstance(ty, TensorType) or (ty.ndim >= 2 and not isinstance(ty.shape[1], int)):
        return None
    return ty


def _transform(expr: Expr, src: str, dst: str) -> Expr:
    return op_call("layout_transform", expr, src_layout=src, dst_layout=dst)


def _axis_free(name: str) -> bool:
    opdef = get_op(name)
    return not any(a.name in _AXIS_ATTRS for a in opdef.attrs)


class _Blocker:
    """`new[n]`: node n rewritten; `blocked[n]`: the NCHW[x]c layout that rewritten value is in,
    when it is not n's NCHW."""

    def __init__(self) -> None:
        self.new: dict[Expr, Expr] = {}
        self.blocked: dict[Expr, str] = {}
        self.restored: dict[Expr, Expr] = {}
        self.chained = False  # whether some convolution reads blocked data

    def plain(self, node: Expr) -> Expr:
        """`node`'s rewritten value in NCHW."""
        layout = self.blocked.get(node)
        if layout is None:
            return self.new[node]
        if node not in self.restored:
            self.restored[node] = _transform(self.new[node], layout, PLAIN)
        return self.restored[node]

    def visit(self, node: Expr) -> None:
        if isinstance(node, Function):
            self.new[node] = node  # closed functions (composites, primitives) are not entered
            return
        if isinstance(node, Call) and isinstance(node.op, Op) and self.call(node, node.op.name):
            return
        self.new[node] = rebuild(node, self.plain)

    def call(self, call: Call, name: str) -> bool:
        if name == CONV_PACKED:
            return self.conv(call)
        carried = [self.blocked[a] for a in call.args if a in self.blocked]
        if not carried or _tensor(call) is None or _tensor(call).ndim != 4:  # type: ignore[union-attr]  # checked
            return False
        layout = carried[0]
        if name in POOLS:
            return self.pool(call, layout)
        if name == "nn.bias_add":
            return self.bias_add(call, layout)
        opdef = get_op(name)
        if opdef.pattern > OpPattern.BROADCAST or not _axis_free(name) or len(call.args) not in (1, 2):
            return False
        args = [self.operand(arg, call, layout) for arg in call.args]
        if any(a is None for a in args):
            return False
        self.new[call] = Call(call.op, tuple(args), call.attrs, call.span)  # type: ignore[arg-type]  # no None left
        self.blocked[call] = layout
        return True

    def operand(self, arg: Expr, call: Call, layout: str) -> Expr | None:
        """`arg` of a broadcasting `call` carried in `layout`, or None when it cannot be."""
        if self.blocked.get(arg) == layout:
            return self.new[arg]
        if arg in self.blocked:
            return None  # blocked otherwise: that would need a transform between blockings
        ty, result = _tensor(arg), _tensor(call)
        if ty is None or result is None:
            return None
        if all(d == 1 for d in ty.shape):
            return self.new[arg]  # a scalar broadcasts into any layout
        if ty.ndim > 4:
            return None
        dims = (1,) * (4 - ty.ndim) + tuple(ty.shape)
        channels = result.shape[1]
        if dims[1] != channels or any(d not in (1, r) for d, r in zip(dims, result.shape)):
            return None
        value = self.new[arg]
        if ty.ndim != 4:
            value = op_call("reshape", value, newshape=list(dims))
        return _transform(value, PLAIN, layout)

    def conv(self, call: Call) -> bool:
        attrs = call.attrs
        packing = packed_block(attrs)
        data, out = _tensor(call.args[0]), _tensor(call)
        if packing is None or data is None or out is None or data.dtype != "float32":
            return False
        if attrs["data_layout"] != PLAIN or (attrs["out_layout"] or PLAIN) != PLAIN or attrs["groups"] != 1:
            return False
        block, taps_outer = packing
        layout = f"NCHW{block}c"
        source = self.blocked.get(call.args[0])
        data_layout = source if source is not None and taps_outer else PLAIN
        self.chained |= data_layout != PLAIN
        arg = self.new[call.args[0]] if data_layout != PLAIN else self.plain(call.args[0])
        new_attrs = attrs.with_attr("data_layout", data_layout).with_attr("out_layout", layout)
        self.new[call] = Call(call.op, (arg, self.new[call.args[1]]), new_attrs, call.span)
        self.blocked[call] = layout
        return True

    def pool(self, call: Call, layout: str) -> bool:
        attrs = call.attrs
        if attrs["layout"] != PLAIN or (attrs["out_layout"] or PLAIN) != PLAIN:
            return False
        new_attrs = attrs.with_attr("layout", layout).with_attr("out_layout", layout)
        self.new[call] = Call(call.op, (self.new[call.args[0]],), new_attrs, call.span)
        self.blocked[call] = layout
        return True

    def bias_add(self, call: Call, layout: str) -> bool:
        data, bias = call.args
        ty = _tensor(data)
        if data not in self.blocked or ty is None or int(call.attrs["axis"]) % 4 != 1:
            return False
        channels = ty.shape[1]
        shaped = op_call("reshape", self.plain(bias), newshape=[1, channels, 1, 1])
        add = op_call("add", self.new[data], _transform(shaped, PLAIN, layout))
        self.new[call] = Call(add.op, add.args, add.attrs, call.span)
        self.blocked[call] = layout
        return True

