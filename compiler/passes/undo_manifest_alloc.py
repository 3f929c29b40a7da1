"""UndoManifestAlloc: turn what TVM's ManifestAlloc wrote back into calls that return values.

Before: any module. After VM compilation TVM prints a primitive call as

    let %storage_0 = memory.alloc_storage(24i64, 64i64, ...);
    let %tensor_0 = memory.alloc_tensor(%storage_0, 0i64, ..., assert_shape=[2, 3]);
    let %_ = vm.invoke_tvm_op(%f, (%x, %y), (%tensor_0,), ...);
    ... %tensor_0 ...

After: `let %result_0 = %f(%x, %y);` and every later `%tensor_0` is `%result_0` (or
`%result_0.i` for the i-th output of a tuple result); storage and tensor allocations, and
`memory.kill` (ManifestLifetimes), are gone; `vm.shape_of(x)` is `shape_of(x)` and
`vm.reshape_tensor(x, shape, newshape=[static dims])` is `reshape(x, newshape=...)`. A
primitive function bound by `let` and used only as an invoke_tvm_op callee is written at its
call. relaycc plans memory itself, so nothing is lost.

This is undone only where it means exactly the functional program: every allocated tensor is
the output of one invoke_tvm_op, is read only after that call, and no storage or tensor value
is used in any other way. A function where that does not hold (dynamic shapes computed with
vm.shape_func, a tensor read before it is written, ...) is left as it is, and CheckCompilable
then names the first memory op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from compiler import ops
from compiler.ir.attrs import EMPTY_ATTRS
from compiler.ir.expr import Call, Expr, Function, Let, Op, Tuple, TupleGetItem, Var, children
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, TupleType
from compiler.ir.visitor import ExprMutator, post_order
from compiler.ops.memory import MEMORY_OPS
from compiler.passes.pass_infra import Pass, PassContext


def _op_call(node: Expr, name: str) -> bool:
    return isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == name


class _Plan:
    """What to rewrite in one function, or `ok = False` when it cannot be undone exactly."""

    def __init__(self, func: Function):
        self.ok = False
        self.drop: set[Let] = set()  # lets whose binding disappears
        self.invokes: dict[Let, Var] = {}  # invoke_tvm_op let -> the var of its result
        self.replace: dict[Var, Expr] = {}  # tensor var -> result (or its projection)
        self.inline: dict[Var, Function] = {}  # let-bound primitive callee -> its function
        nodes = list(post_order(func))
        if not any(_op_call(n, name) for n in nodes for name in MEMORY_OPS):
            return
        self.ok = self._analyse(nodes)

    def _analyse(self, nodes: list[Expr]) -> bool:
        lets = [n for n in nodes if isinstance(n, Let)]
        bound = {let.var: let for let in lets}
        storages = {let.var for let in lets if _op_call(let.value, "memory.alloc_storage")}
        tensors = {let.var: let for let in lets if _op_call(let.value, "memory.alloc_tensor")}
        written: dict[Var, Let] = {}
        allowed_uses: set[tuple[Expr, Var]] = set()
        for let in lets:
            value = let.value
            if _op_call(value, "memory.alloc_storage") or _op_call(value, "memory.kill"):
                self.drop.add(let)
            elif _op_call(value, "memory.alloc_tensor"):
                assert isinstance(value, Call)
                if not (isinstance(value.args[0], Var) and value.args[0] in storages):
                    return False
                allowed_uses.add((value, value.args[0]))
                self.drop.add(let)
            elif _op_call(value, "vm.invoke_tvm_op"):
                assert isinstance(value, Call)
                callee, inputs, outputs = value.args
                if not (isinstance(inputs, Tuple) and isinstance(outputs, Tuple) and callee.has_type):
                    return False
                result = Var(f"result_{len(self.invokes)}", None, let.var.span)
                self.invokes[let] = result
                callee_type = callee.checked_type
                tuple_result = isinstance(callee_type, FuncType) and isinstance(callee_type.ret_type, TupleType)
                for i, out in enumerate(outputs.fields):
                    if not (isinstance(out, Var) and out in tensors) or out in written:
                        return False
                    written[out] = let
                    self.replace[out] = TupleGetItem(result, i, out.span) if tuple_result else result
                    allowed_uses.add((outputs, out))
                function = bound[callee].value if isinstance(callee, Var) and callee in bound else None
                if isinstance(callee, Var) and isinstance(function, Function):
                    self.inline[callee] = function
                    allowed_uses.add((value, callee))
            elif _op_call(value, "vm.shape_func"):
                return False  # shapes computed at run time: dynamic, which the AOT executor lacks
            elif _op_call(value, "vm.reshape_tensor"):
                assert isinstance(value, Call)
                if any(d is ANY for d in _dims(value.attrs["newshape"])):
                    return False
        if set(tensors) != set(written):
            return False
        kills = {n for n in nodes if _op_call(n, "memory.kill")}
        after = {let: set(post_order(let.body)) for let in self.invokes}
        for node in nodes:
            for child in _uses(node):
                if not isinstance(child, Var) or node in kills or (node, child) in allowed_uses:
                    continue
                if child in storages:
                    return False
                if child in written and node not in after[written[child]]:
                    return False
                if child in self.inline:
                    return False  # a primitive function used otherwise stays bound
        for var in self.inline:
            self.drop.add(bound[var])
        # The result of an invoke_tvm_op (`()`) must not be used.
        results = {let.var for let in self.invokes}
        return not any(c in results for n in nodes for c in _uses(n))


def _uses(node: Expr) -> list[Expr]:
    """The children of `node` it reads (a let's own variable is bound, not read)."""
    return [c for c in children(node) if not (isinstance(node, Let) and node.var is c)]


def _dims(value: object) -> tuple[object, ...]:
    return value if isinstance(value, tuple) else (value,)


class _Substitute(ExprMutator):
    """Every use of an allocated tensor becomes the result that was written into it."""

    def __init__(self, replace: dict[Var, Expr]):
        super().__init__()
        self.replace = replace

    def rewrite_var(self, pre: Var, post: Expr) -> Expr:
        return self.replace.get(pre, post)


class _Undo(ExprMutator):
    """Drops the allocations and turns each invoke_tvm_op into a call bound to its result; the
    tensors, no longer bound anywhere, are substituted afterwards."""

    def __init__(self, plan: _Plan):
        super().__init__()
        self.plan = plan

    def rewrite_let(self, pre: Let, post: Expr) -> Expr:
        assert isinstance(post, Let)
        if pre in self.plan.drop:
            return post.body
        result = self.plan.invokes.get(pre)
        if result is None:
            return post
        invoke = post.value
        assert isinstance(invoke, Call) and isinstance(pre.value, Call)
        callee, inputs = invoke.args[0], invoke.args[1]
        assert isinstance(inputs, Tuple)
        function = self.plan.inline.get(pre.value.args[0])  # type: ignore[call-overload]  # Var keys; others miss
        if function is not None:
            # The function literal's rewritten form (its body has no memory ops, so usually itself).
            callee = self.memo.get(function, function)
        call = Call(callee, inputs.fields, EMPTY_ATTRS, invoke.span)
        return Let(result, call, post.body, post.span)

    def rewrite_call(self, pre: Call, post: Expr) -> Expr:
        assert isinstance(post, Call)
        if _op_call(post, "vm.shape_of"):
            attrs = ops.get("shape_of").make_attrs({"dtype": post.attrs["dtype"]})
            return Call(Op.get("shape_of"), post.args, attrs, post.span)
        if _op_call(post, "vm.reshape_tensor"):
            newshape = tuple(int(str(d)) for d in _dims(post.attrs["newshape"]))  # static: checked by _Plan
            attrs = ops.get("reshape").make_attrs({"newshape": newshape})
            return Call(Op.get("reshape"), post.args[:1], attrs, post.span)
        return post


@dataclass(frozen=True)
class UndoManifestAlloc(Pass):
    name: ClassVar[str] = "UndoManifestAlloc"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            plan = _Plan(func)
            if not plan.ok:
                continue
            out.add(gv, _Substitute(plan.replace).visit(_Undo(plan).visit(func)))
            changed = True
        return out if changed else mod
