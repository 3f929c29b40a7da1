"""StripDevices: remove device placement before lowering for relaycc's single CPU.

Before: any module; calls of `on_device` and `device_copy`, parameters with
`{virtual_device=...}` and functions with a `virtual_device` attribute may appear.
After: none of them does. `on_device(x, ...)` and `device_copy(x, ...)` are replaced by `x`
(both are the identity on one device), parameters lose their virtual device (each becomes a new
variable, substituted at every use) and functions lose the attribute (and TVM 0.8's `param_device_types` / `result_device_type`;
its `on_device(x, device_type=.., is_fixed=..)` and `device_copy(x, src_dev_type=..,
dst_dev_type=..)` go like the newer forms). Nothing else changes;
a module without placement is returned as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from compiler import ops
from compiler.ir.expr import Call, Expr, Function, Op, Var
from compiler.ir.module import IRModule
from compiler.ir.visitor import ExprMutator, post_order
from compiler.ops.device import DEVICE_OPS
from compiler.passes.pass_infra import Pass, PassContext


# The function attributes of placement: TVM 0.9+ and, for TVM 0.8's PlanDevices, the device
# types of the parameters and of the result.
_FUNCTION_DEVICE_ATTRS = ("virtual_device", "param_device_types", "result_device_type")


class _Strip(ExprMutator):
    def rewrite_var(self, pre: Var, post: Expr) -> Expr:
        if pre.virtual_device is None:
            return post
        return Var(pre.name_hint, pre.type_annotation, pre.span)

    def rewrite_call(self, pre: Call, post: Expr) -> Expr:
        assert isinstance(post, Call)
        if isinstance(post.op, Op) and post.op.name in DEVICE_OPS:
            return post.args[0]
        return post

    def rewrite_function(self, pre: Function, post: Expr) -> Expr:
        assert isinstance(post, Function)
        placed = {key: None for key in _FUNCTION_DEVICE_ATTRS if key in post.attrs}
        return post.with_attrs(**placed) if placed else post


def device_placements(mod: IRModule) -> list[dict[str, object]]:
    """What StripDevices removes from `mod`, for the report: each `on_device` and `device_copy`
    call, placed parameter and placed function, with its location and the devices it named.
    On one CPU they change nothing; the list tells a user their placement was seen."""
    found: list[dict[str, object]] = []
    for gv, func in mod.functions():
        for node in post_order(func):
            entry: dict[str, object] | None = None
            if isinstance(node, Call) and isinstance(node.op, Op) and node.op.name in DEVICE_OPS:
                defaults = {spec.name: spec.default for spec in ops.get(node.op.name).attrs}
                shown = {k: str(v) for k, v in node.attrs.items() if v != defaults.get(k)}
                entry = {"kind": node.op.name, "attrs": shown}
            elif isinstance(node, Var) and node.virtual_device is not None:
                entry = {"kind": "parameter", "name": f"%{node.name_hint}", "attrs": {"virtual_device": str(node.virtual_device)}}
            elif isinstance(node, Function):
                placed = {k: str(node.attrs[k]) for k in _FUNCTION_DEVICE_ATTRS if k in node.attrs}
                if placed:
                    name = f"@{gv.name_hint}" if node is func else "a function literal"
                    entry = {"kind": "function", "name": name, "attrs": placed}
            if entry is not None:
                if node.span is not None:
                    entry["location"] = f"{node.span.line}:{node.span.column}"
                found.append(entry)
    return found


@dataclass(frozen=True)
class StripDevices(Pass):
    name: ClassVar[str] = "StripDevices"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            new = _Strip().visit(func)
            if new is not func:
                out.add(gv, new)
                changed = True
        return out if changed else mod
