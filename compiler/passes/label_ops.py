"""LabelOps: give functions the labels profilers and the lowered-code report use.

Before: any typed module (normally right after FuseOps).
After (typed): every Relay function (the globals and every function literal inside them, primitive or
not; global functions of external compilers are skipped, as TVM's function passes skip them)
carries
* `hash`: 16 lower-case hex digits of the structural hash of the function, computed without
  the attributes LabelOps adds, so running the pass twice changes nothing;
* every string attribute whose key contains "layout" (`data_layout`, `kernel_layout`,
  `out_layout`, `src_layout`, ...) of the operator calls in its own body; when several calls
  have the key the one evaluated last wins.

This is what TVM's LabelOps stores (src/relay/transforms/label_ops.cc). TVM collects the
layout attributes in one map that every function literal resets, so an enclosing function ends
up with those of the last literal visited plus its own; here each function gets exactly its own
calls' layouts.

TVM does not store the kernel name on the function: its lowering derives it from the body.
`primitive_name(func)` computes that name for LowerTE: "fused" then "_<op>" for each operator
call in evaluation order (operands first), dots turned into underscores:
`fused_nn_dense_nn_bias_add_nn_relu`. A name longer than 80 characters is cut to 80 and followed
by `_<hex of its hash>_`, hashing the dotted name with libstdc++'s `std::hash` as TVM does, so
long names match TVM's on Linux too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Expr, Function, Op
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_hash
from compiler.ir.visitor import post_order, rebuild
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext

MAX_NAME_LENGTH = 80
_MASK64 = (1 << 64) - 1


def own_calls(func: Function) -> list[Call]:
    """Operator calls of `func`'s body, operands first, not looking into function literals."""
    skip_nested = lambda node: node is func or not isinstance(node, Function)  # noqa: E731
    return [
        node
        for node in post_order(func, descend=skip_nested)
        if isinstance(node, Call) and isinstance(node.op, Op)
    ]


def layout_attrs(func: Function) -> dict[str, object]:
    found: dict[str, object] = {}
    for call in own_calls(func):
        for key, value in call.attrs.items():
            if "layout" in key and isinstance(value, str):
                found[key] = value
    return found


def function_hash(func: Function, added_keys: list[str]) -> str:
    attrs = func.attrs.without("hash", *added_keys)
    unlabelled = Function(func.params, func.body, func.ret_type, attrs, func.span)
    return f"{structural_hash(unlabelled) & _MASK64:016x}"


def label(func: Function) -> Function:
    layouts = layout_attrs(func)
    attrs = dict(func.attrs)
    attrs["hash"] = function_hash(func, list(layouts))
    attrs.update(layouts)
    return Function(func.params, func.body, func.ret_type, Attrs(attrs), func.span)


def std_string_hash(text: str) -> int:
    """libstdc++'s `std::hash<std::string>` on a 64-bit machine (its murmur-style byte hash)."""
    data = text.encode()
    mul = (0xC6A4A793 << 32) + 0x5BD1E995

    def shift_mix(v: int) -> int:
        return v ^ (v >> 47)

    h = (0xC70F6907 ^ (len(data) * mul)) & _MASK64
    aligned = len(data) & ~7
    for i in range(0, aligned, 8):
        word = int.from_bytes(data[i : i + 8], "little")
        h ^= (shift_mix((word * mul) & _MASK64) * mul) & _MASK64
        h = (h * mul) & _MASK64
    if len(data) & 7:
        h ^= int.from_bytes(data[aligned:], "little")
        h = (h * mul) & _MASK64
    h = (shift_mix(h) * mul) & _MASK64
    return shift_mix(h)


def primitive_name(func: Function) -> str:
    """The readable kernel name TVM's lowering gives a primitive function."""
    name = "fused" + "".join("_" + call.op.name for call in own_calls(func) if isinstance(call.op, Op))
    if len(name) > MAX_NAME_LENGTH:
        name = f"{name[:MAX_NAME_LENGTH]}_{std_string_hash(name):x}_"
    return name.replace(".", "_")


def label_function(func: Function) -> Function:
    """`func` and every function literal inside it labelled, innermost first."""
    memo: dict[Expr, Expr] = {}
    for node in post_order(func):
        new = rebuild(node, memo.__getitem__)
        memo[node] = label(new) if isinstance(new, Function) else new
    result = memo[func]
    assert isinstance(result, Function)
    return result


@dataclass(frozen=True)
class LabelOps(Pass):
    name: ClassVar[str] = "LabelOps"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod.copy()
        for gv, func in mod.functions():
            if func.attr("Compiler") is not None:
                continue
            out.add(gv, label_function(func))
        return InferType().run(out, ctx)
