"""FoldScaleAxis: a per-channel constant scale after a convolution or dense goes into its weight.

Before: a typed module with its parameters bound and its constants folded, BYOC partitioning
done (what an external codegen took is not touched).
After (typed): outside Primitive and Compiler functions,

    multiply(nn.conv2d(%x, W), S)                   → nn.conv2d(%x, W * S')
    multiply(nn.bias_add(nn.conv2d(%x, W), b), S)   → nn.bias_add(nn.conv2d(%x, W * S'), b * S'')
    multiply(add(nn.conv2d(%x, W), B), S)           → add(nn.conv2d(%x, W * S'), B * S)

and the same with `nn.dense` (S along the units), where W, b, B and S are constants and S
varies along the output-channel axis only (batch_norm's scale after SimplifyInference: `x *
scale + shift`). S' is S laid along the weight's output-channel axis, S'' along the bias; the
products are folded, so the kernel reads one weight and the multiply is gone from its store.
The multiply may name its operands in either order.

This is TVM's backward scale folding (`FoldScaleAxis`, opt level 3, after FoldConstant): the
graph TVM builds has no multiply there, and in float16 models (ours compute in float32 and
round every operator's result, float16_compute.py) the scale's rounding moves into the folded
weight, as TVM's does, so the convolution's store rounds once less.

What is left alone: a product or add with another consumer (folding would change what it
sees), a scale that varies along any other axis, runtime weights, layouts with a split channel
axis (`NCHW8c`, which only our later AlterOpLayout makes), grouped convolutions other than
OIHW-family kernels (TVM's depthwise `HWOI` does not keep the output channels on its `O`
axis), integer products, and forward folding (a scale *before* a convolution, as in
pre-activation networks).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from compiler import ops
from compiler.ir.expr import Call, Constant, Expr, Function, Op, children
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.ir.visitor import ExprMutator, post_order
from compiler.passes.fold_constant import rewrite_and_fold
from compiler.passes.fusion_graph import closed_function
from compiler.passes.pass_infra import Pass, PassContext

_FLOATS = frozenset({"float16", "float32", "float64"})


def _call(name: str, *args: Expr, **attrs: object) -> Call:
    return Call(Op.get(name), args, ops.get(name).make_attrs(attrs))


def _float_tensor(expr: Expr) -> TensorType | None:
    """`expr`'s type when it is a float tensor. Dims may be `?` (an image of run-time size):
    only the channel axis the scale runs along must be known, which `_channel_scale` checks."""
    ty = getattr(expr, "checked_type", None)
    if isinstance(ty, TensorType) and ty.dtype in _FLOATS:
        return ty
    return None


@dataclass(frozen=True)
class _Product:
    """A conv2d or dense whose output channels lie along `out_axis` of its result and along
    `weight_axis` of its constant weight (argument 1)."""

    call: Call
    out_axis: int
    weight_axis: int


def _product(call: Expr) -> _Product | None:
    if not isinstance(call, Call) or not isinstance(call.op, Op):
        return None
    out, weight = _float_tensor(call), _float_tensor(call.args[1]) if len(call.args) > 1 else None
    if out is None or weight is None or weight.dtype != out.dtype:
        return None
    if call.op.name == "nn.dense":
        return _Product(call, out.ndim - 1, 0)
    if call.op.name != "nn.conv2d":
        return None
    attrs = call.attrs
    layout = attrs["out_layout"] or attrs["data_layout"]
    kernel = attrs["kernel_layout"]
    if not (layout.isupper() and kernel.isupper()) or "C" not in layout or "O" not in kernel:
        return None
    if attrs["groups"] != 1 and not kernel.startswith("OI"):
        return None
    return _Product(call, layout.index("C"), kernel.index("O"))


def _channel_scale(scale: Expr, out: TensorType, axis: int) -> int | None:
    """How many values the constant `scale` has along `axis` of `out` (1 or the axis' extent),
    or None when it varies along another axis or would widen the result."""
    if not isinstance(scale, Constant) or _float_tensor(scale) is None or scale.data.dtype != out.dtype:
        return None
    shape = scale.data.shape
    if len(shape) > out.ndim:
        return None
    aligned = (1,) * (out.ndim - len(shape)) + tuple(shape)
    for i, (s, o) in enumerate(zip(aligned, out.shape)):
        if s != 1 and (i != axis or s != o):
            return None
    return aligned[axis]


def _along(vector: Expr, count: int, ndim: int, axis: int) -> Call:
    """`vector`'s `count` values reshaped to lie along `axis` of an `ndim`-D tensor."""
    return _call("reshape", vector, newshape=[count if i == axis else 1 for i in range(ndim)])


class _Folder(ExprMutator):
    def __init__(self, uses: Counter[int]):
        super().__init__()
        self.uses = uses

    def descend(self, node: Expr) -> bool:
        return not closed_function(node)

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        if not isinstance(post.op, Op) or post.op.name != "multiply" or _float_tensor(pre) is None:
            return post
        for side in (0, 1):
            folded = self._folded(pre, post, side)
            if folded is not None:
                return folded
        return post

    def _single_use(self, expr: Expr) -> bool:
        return self.uses[id(expr)] == 1

    def _folded(self, pre: Call, post: Call, side: int) -> Expr | None:
        """`post` (a multiply) with its scale (argument 1 - side) folded into the product
        under argument `side`, or None."""
        inner_pre, scale = pre.args[side], post.args[1 - side]
        inner_post = post.args[side]
        if not isinstance(inner_pre, Call) or not isinstance(inner_post, Call) or not self._single_use(inner_pre):
            return None
        if _float_tensor(inner_pre) != _float_tensor(pre):  # the scale must not widen the result
            return None
        add = None
        if isinstance(inner_pre.op, Op) and inner_pre.op.name in ("add", "nn.bias_add"):
            add_pre, add_post = inner_pre, inner_post
            if add_pre.op.name == "add" and isinstance(add_pre.args[0], Constant):
                product_pre, product_post, bias = add_pre.args[1], add_post.args[1], add_post.args[0]
            else:
                product_pre, product_post, bias = add_pre.args[0], add_post.args[0], add_post.args[1]
            if not isinstance(bias, Constant) or not self._single_use(product_pre):
                return None
            add = (add_post, bias)
        else:
            product_pre, product_post = inner_pre, inner_post
        product = _product(product_pre)
        if product is None or not isinstance(product_post, Call) or not isinstance(product_post.args[1], Constant):
            return None
        out = _float_tensor(product_pre)
        if out is None or out != _float_tensor(pre):
            return None
        count = _channel_scale(scale, out, product.out_axis)
        if count is None:
            return None
        weight = product_post.args[1]
        weight_scale = _along(scale, count, weight.data.ndim, product.weight_axis)
        new_product = Call(product_post.op, (product_post.args[0], _call("multiply", weight, weight_scale),
                                             *product_post.args[2:]), product_post.attrs, product_post.span)
        if add is None:
            return new_product
        add_post, bias = add
        if add_post.op.name == "nn.bias_add":
            if bias.data.ndim != 1:
                return None
            axis = add_post.attrs["axis"] % out.ndim
            if axis != product.out_axis:
                return None
            bias_scale: Expr = _call("reshape", scale, newshape=[count])
        else:
            bias_scale = scale
        new_bias = _call("multiply", bias, bias_scale)
        args = (new_product, new_bias) if add_post.args[1] is bias else (new_bias, new_product)
        return Call(add_post.op, args, add_post.attrs, add_post.span)


def _use_counts(func: Function) -> Counter[int]:
    uses: Counter[int] = Counter()
    for node in post_order(func, descend=lambda e: not closed_function(e)):
        if closed_function(node):
            continue
        for child in children(node):
            uses[id(child)] += 1
    return uses


@dataclass(frozen=True)
class FoldScaleAxis(Pass):
    name: ClassVar[str] = "FoldScaleAxis"
    opt_level: ClassVar[int] = 3

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return rewrite_and_fold(mod, ctx, lambda func: _Folder(_use_counts(func)).visit(func))
