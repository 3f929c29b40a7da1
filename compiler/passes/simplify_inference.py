"""SimplifyInference: rewrite inference-time normalisation into plain arithmetic.

Before: a typed module that may use nn.batch_norm, nn.layer_norm, nn.group_norm,
nn.instance_norm and nn.dropout.
After: `nn.batch_norm(...).0` is `data * scale + shift` with per-channel `scale` and `shift`
broadcast along the channel axis, the other two projections of a batch_norm are its moving
mean and variance (what inference returns), `nn.layer_norm(...)` is mean / subtract / mean of
squares / rsqrt / multiply / add, and `nn.dropout(...).0` is its input. The module is typed.
`nn.group_norm` and `nn.instance_norm` become the layer_norm sequence over their axes (TVM's
SimplifyInference rewrites them too): group_norm first reshapes the channel axis into
(num_groups, C/num_groups) and normalises over that inner axis and every later one, then
reshapes back; instance_norm normalises over every axis but the batch and channel ones.

The batch_norm sequence is TVM's, op for op, so later passes (FoldConstant, FuseOps) see the
same graph TVM's do: `scale = 1 / sqrt(var + eps)`, times gamma when `scale=True`;
`shift = -mean * scale`, plus beta when `center=True`; both are `expand_dims`-ed to line up with
the channel axis. TVM expresses layer_norm's variance with its two-input `variance` operator and
divides by `sqrt`; we square the centred data and multiply by `rsqrt`, which needs only
elementwise ops and one more reduction and gives the same values.

`nn.dropout(...).1`, the mask, is `ones_like` of the input: inference keeps every element. A
batch_norm or dropout used as a whole tuple (not projected) is left alone: it stays correct,
it just keeps the original op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from compiler import ops
from compiler.ir.expr import Call, Constant, Expr, Op, TupleGetItem
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.ir.visitor import ExprMutator
from compiler.passes.fusion_graph import closed_function
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext


def op_call(name: str, *args: Expr, **attrs: object) -> Call:
    """A call of operator `name` with its attrs completed by the operator's defaults."""
    return Call(Op.get(name), args, ops.get(name).make_attrs(attrs))


def scalar(value: float, dtype: str) -> Constant:
    # TVM stores these constants as C floats before converting them to the data type.
    return Constant(np.array(np.float32(value), dtype=dtype))


def expand_to_axis(vector: Expr, ndim: int, axis: int) -> Expr:
    """A 1-D per-channel vector reshaped to broadcast along `axis` of an `ndim`-D tensor."""
    trailing = ndim - axis - 1
    if trailing <= 0:
        return vector
    return op_call("expand_dims", vector, axis=1, num_newaxis=trailing)


def _data_type(expr: Expr, op: str) -> TensorType:
    ty = expr.checked_type
    if not isinstance(ty, TensorType):
        raise TypeError(f"{op}: data must be a tensor, found {ty}")
    return ty


def batch_norm_inference(call: Call, data_type: TensorType) -> Expr:
    data, gamma, beta, moving_mean, moving_var = call.args
    attrs = call.attrs
    dtype = data_type.dtype
    ndim = data_type.ndim
    axis = attrs["axis"] + ndim if attrs["axis"] < 0 else attrs["axis"]
    std = op_call("sqrt", op_call("add", moving_var, scalar(attrs["epsilon"], dtype)))
    scale: Expr = op_call("divide", scalar(1.0, dtype), std)
    if attrs["scale"]:
        scale = op_call("multiply", scale, gamma)
    shift: Expr = op_call("multiply", op_call("negative", moving_mean), scale)
    if attrs["center"]:
        shift = op_call("add", shift, beta)
    scaled = op_call("multiply", data, expand_to_axis(scale, ndim, axis))
    return op_call("add", scaled, expand_to_axis(shift, ndim, axis))


def normalized(data: Expr, axes: list[int], epsilon: float, dtype: str) -> Expr:
    """(data - mean) * rsqrt(variance + epsilon), both statistics over `axes`."""
    mean = op_call("mean", data, axis=axes, keepdims=True)
    centred = op_call("subtract", data, mean)
    variance = op_call("mean", op_call("multiply", centred, centred), axis=axes, keepdims=True)
    inv_std = op_call("rsqrt", op_call("add", variance, scalar(epsilon, dtype)))
    return op_call("multiply", centred, inv_std)


def _scale_and_shift(out: Expr, call: Call, ndim: int, axis: int) -> Expr:
    _, gamma, beta = call.args
    if call.attrs["scale"]:
        out = op_call("multiply", out, expand_to_axis(gamma, ndim, axis))
    if call.attrs["center"]:
        out = op_call("add", out, expand_to_axis(beta, ndim, axis))
    return out


def group_norm_inference(call: Call, data_type: TensorType) -> Expr:
    ndim = data_type.ndim
    axis = call.attrs["axis"] % ndim
    # reshape codes: copy the leading dims, split the channel axis, keep the rest.
    grouped = op_call("reshape", call.args[0], newshape=[0] * axis + [-4, call.attrs["num_groups"], -1, -2])
    out = normalized(grouped, list(range(axis + 1, ndim + 1)), call.attrs["epsilon"], data_type.dtype)
    out = op_call("reshape", out, newshape=[0] * axis + [-3, -2])
    return _scale_and_shift(out, call, ndim, axis)


def instance_norm_inference(call: Call, data_type: TensorType) -> Expr:
    ndim = data_type.ndim
    axis = call.attrs["axis"] % ndim
    axes = [i for i in range(1, ndim) if i != axis]
    out = normalized(call.args[0], axes, call.attrs["epsilon"], data_type.dtype)
    return _scale_and_shift(out, call, ndim, axis)


def layer_norm_inference(call: Call, data_type: TensorType) -> Expr:
    data, gamma, beta = call.args
    attrs = call.attrs
    ndim = data_type.ndim
    axis = attrs["axis"] + ndim if attrs["axis"] < 0 else attrs["axis"]
    mean = op_call("mean", data, axis=[attrs["axis"]], keepdims=True)
    centred = op_call("subtract", data, mean)
    variance = op_call("mean", op_call("multiply", centred, centred), axis=[attrs["axis"]], keepdims=True)
    inv_std = op_call("rsqrt", op_call("add", variance, scalar(attrs["epsilon"], data_type.dtype)))
    out: Expr = op_call("multiply", centred, inv_std)
    if attrs["scale"]:
        out = op_call("multiply", out, expand_to_axis(gamma, ndim, axis))
    if attrs["center"]:
        out = op_call("add", out, expand_to_axis(beta, ndim, axis))
    return out


class _Simplifier(ExprMutator):
    def descend(self, node: Expr) -> bool:
        # Primitive and external functions are finished kernels; leave them as they are.
        return not closed_function(node)

    def rewrite_tuple_get_item(self, pre: TupleGetItem, post: TupleGetItem) -> Expr:
        call = post.tuple_value
        original = pre.tuple_value
        if not isinstance(call, Call) or not isinstance(original, Call):
            return post
        name = call.op_name
        if name == "nn.batch_norm":
            if post.index == 0:
                return batch_norm_inference(call, _data_type(original.args[0], name))
            # Inference-mode batch_norm returns its moving statistics unchanged.
            return call.args[2 + post.index]
        if name == "nn.dropout":
            # In inference the mask keeps every element: ones, like the data.
            return call.args[0] if post.index == 0 else Call(Op.get("ones_like"), (call.args[0],))
        return post

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        if post.op_name == "nn.layer_norm":
            return layer_norm_inference(post, _data_type(pre.args[0], "nn.layer_norm"))
        if post.op_name == "nn.group_norm":
            return group_norm_inference(post, _data_type(pre.args[0], "nn.group_norm"))
        if post.op_name == "nn.instance_norm":
            return instance_norm_inference(post, _data_type(pre.args[0], "nn.instance_norm"))
        return post


@dataclass(frozen=True)
class SimplifyInference(Pass):
    name: ClassVar[str] = "SimplifyInference"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        mod = InferType().run(mod, ctx)
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            simplifier = _Simplifier()
            if not simplifier.descend(func):
                continue
            new = simplifier.visit(func)
            if new is not func:
                out.add(gv, new)
                changed = True
        return InferType().run(out, ctx) if changed else mod
