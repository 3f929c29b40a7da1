"""FuseOps: group operators into primitive functions, the unit LowerTE turns into one kernel.

Before: a typed module; batch_norm/layer_norm/dropout already simplified (SimplifyInference).
After (typed): in every Relay function that is neither `Primitive` nor `Compiler`, each fusion
group (see fusion_groups.py for the rules, fusion_graph.py for the graph) is a call in place of
its root node:

    %0 = fn (%p0: T0, %p1: T1, ..., Primitive=1) -> T { body }(arg0, arg1, ...);

* The body is the group's nodes rebuilt; a value produced outside the group becomes a
  parameter `p0, p1, ...`, numbered in the order the group's nodes (operands first) use them.
  The same argument expression used twice is one parameter.
* Scalar constants of int32/int64/float32/float64/bool fuse like elementwise ops and stay in
  the body; other constants become parameters. With `link_params` (TVM's AOT "link-params")
  every constant operand stays inside the body instead; so do the constant arguments of ops
  that read their values when lowered (`extras["constant_args"]`: the qnn ops' scales).
* A float16->float32 cast whose one use is an input the consuming kernel widens itself joins
  that call's group; so does one a group would return, used once by such an input or by an
  elementwise or broadcast op of another group (fusion_input_casts.py).
* `relay.reshape_only=1` is added when every call in the body is a reshape-only operator and
  every parameter is a tensor (the AOT executor can then alias the output to the input).
* `Primitive` is 0 for a group without any call (a projection of a fused tuple).
* Every operator call ends up in some primitive function, opaque ones alone. A projection
  `.i` whose tuple comes from another group stays a plain projection; a tuple whose fields
  are not fused into it stays a plain tuple; calls of functions stay calls.

Options: `fuse_opt_level` (-1: the PassContext's opt level; 0: every op in a group of its
own), `link_params` (None: the `relay.FuseOps.link_params` config, default False), and the
config `relay.FuseOps.max_depth` (default 256) bounding the nodes per group. TVM's
`max_function_args` limit (used only by some GPU targets) is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from compiler import ops
from compiler.diagnostics import InputError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import FuncType, TensorType, Type
from compiler.ir.visitor import post_order, rebuild
from compiler.passes.fusion_graph import build_graph, closed_function
from compiler.passes.fusion_groups import DEFAULT_MAX_DEPTH, Group, partition
from compiler.passes.fusion_input_casts import defer_output_casts, fuse_input_casts
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext
from compiler.runtime.vector_width import configured_lanes


@dataclass
class _GroupParams:
    params: list[Var] = field(default_factory=list)
    arguments: list[Expr] = field(default_factory=list)

    def param_for(self, argument: Expr, ty: Type) -> Var:
        # Groups have few inputs; a linear scan by identity is enough.
        for param, existing in zip(self.params, self.arguments):
            if existing is argument:
                return param
        param = Var(f"p{len(self.params)}", ty)
        param.set_checked_type(ty)
        self.params.append(param)
        self.arguments.append(argument)
        return param


def typed(expr: Expr, ty: Type) -> Expr:
    """`expr` with its type recorded. Every node FuseOps builds has the type of the node it
    replaces (or, for a primitive function, the type its parameters and body give it), so
    recording it spares InferType a walk over the whole rewritten function."""
    if not expr.has_type:
        expr.set_checked_type(ty)
    return expr


def body_kind(body: Expr) -> tuple[bool, bool]:
    """(has a call, every call is reshape-only and every variable a tensor)."""
    has_call = False
    reshape_only = True
    for node in post_order(body):
        if isinstance(node, Call):
            has_call = True
            opdef = ops.lookup(node.op.name) if isinstance(node.op, Op) else None
            reshape_only = reshape_only and opdef is not None and opdef.reshape_only
        elif isinstance(node, Var) and not isinstance(node.type_annotation, TensorType):
            reshape_only = False
    return has_call, has_call and reshape_only


def primitive_function(params: list[Var], body: Expr, ret_type: Type) -> Function:
    has_call, reshape_only = body_kind(body)
    attrs: dict[str, object] = {"Primitive": 1 if has_call else 0}
    if reshape_only:
        attrs["relay.reshape_only"] = 1
    func = Function(tuple(params), body, ret_type, Attrs(attrs))
    typed(func, FuncType(tuple(p.checked_type for p in params), ret_type))
    return func


class _Fuser:
    """Rebuilds a function with each fusion group turned into a call of a primitive function."""

    def __init__(self, group_of: dict[Expr, Group], link_params: bool):
        self.group_of = group_of
        self.link_params = link_params
        self.inputs: dict[Group, _GroupParams] = {}
        self.memo: dict[Expr, Expr] = {}

    def group(self, expr: Expr) -> Group | None:
        g = self.group_of.get(expr)
        return g.find_root() if g is not None else None

    def operand(self, expr: Expr, group: Group, keep_constant: bool = False) -> Expr:
        """`expr` as used by a node of `group`: itself if inside the group, else a parameter.
        With `keep_constant` (an argument of an op reading constant values at lowering time,
        `extras["constant_args"]`), a constant stays in the body."""
        new = self.memo[expr]
        if self.group(expr) is group:
            return new
        if (self.link_params or keep_constant) and isinstance(new, Constant):
            return new
        if keep_constant and isinstance(new, Tuple) and new.fields and all(isinstance(f, Constant) for f in new.fields):
            return new  # a tuple of constants read by value (qnn.concatenate's scales)
        return self.inputs.setdefault(group, _GroupParams()).param_for(new, expr.checked_type)

    def wrap(self, group: Group, body: Expr, ret_type: Type) -> Expr:
        inputs = self.inputs.get(group, _GroupParams())
        func = primitive_function(inputs.params, body, ret_type)
        return Call(func, tuple(inputs.arguments))

    def rewrite(self, node: Expr) -> Expr:
        memo = self.memo
        if isinstance(node, Call) and isinstance(node.op, Op):
            group = self.group(node)
            assert group is not None, "every operator call has a group"
            spec = ops.get(node.op.name).extras.get("constant_args")
            keep = range(len(node.args)) if spec is True else tuple(spec or ())  # type: ignore[arg-type]  # see OpDef.extras
            args = tuple(self.operand(a, group, k in keep) for k, a in enumerate(node.args))
            call = typed(Call(node.op, args, node.attrs, node.span), node.checked_type)
            return self.wrap(group, call, node.checked_type) if group.root_ref is node else call
        if isinstance(node, Tuple):
            group = self.group(node)
            if group is None or group.root_ref is node:
                return rebuild(node, memo.__getitem__)
            return Tuple(tuple(self.operand(f, group) for f in node.fields), node.span)
        if isinstance(node, TupleGetItem):
            group = self.group(node)
            if group is None:
                return rebuild(node, memo.__getitem__)
            if group.root_ref is node:
                if self.group(node.tuple_value) is not group:
                    # The tuple comes from another group (e.g. an opaque op): nothing to fuse.
                    return rebuild(node, memo.__getitem__)
                item = TupleGetItem(self.operand(node.tuple_value, group), node.index, node.span)
                return self.wrap(group, typed(item, node.checked_type), node.checked_type)
            return TupleGetItem(self.operand(node.tuple_value, group), node.index, node.span)
        return rebuild(node, memo.__getitem__)

    def run(self, func: Function) -> Expr:
        for node in post_order(func, descend=lambda n: not closed_function(n)):
            if closed_function(node):
                self.memo[node] = node
                continue
            new = self.rewrite(node)
            self.memo[node] = typed(new, node.checked_type) if node.has_type else new
        return self.memo[func]


def fuse_function(func: Function, opt_level: int, max_depth: int, link_params: bool, lanes: int) -> Function:
    """`lanes`: the target's float32 vector lanes (the kernels some rules depend on)."""
    graph = build_graph(func)
    groups = partition(graph, opt_level, max_depth)
    if opt_level > 0:
        defer_output_casts(graph, groups, lanes)
        fuse_input_casts(graph, groups, lanes)
    group_of = {node.expr: groups[node.index] for node in graph.nodes}
    new = _Fuser(group_of, link_params).run(func)
    assert isinstance(new, Function)
    return new


def max_depth_config(ctx: PassContext) -> int:
    value = ctx.get("relay.FuseOps.max_depth", DEFAULT_MAX_DEPTH)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"config relay.FuseOps.max_depth must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class FuseOps(Pass):
    name: ClassVar[str] = "FuseOps"
    fuse_opt_level: int = -1
    link_params: bool | None = None

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        mod = InferType().run(mod, ctx)
        opt_level = ctx.opt_level if self.fuse_opt_level == -1 else self.fuse_opt_level
        max_depth = max_depth_config(ctx)
        link_params = self.link_params
        if link_params is None:
            link_params = bool(ctx.get("relay.FuseOps.link_params", False))
        lanes = configured_lanes(ctx.config)
        out = mod.copy()
        for gv, func in mod.functions():
            if closed_function(func):
                continue
            out.add(gv, fuse_function(func, opt_level, max_depth, link_params, lanes))
        return InferType().run(out, ctx)
