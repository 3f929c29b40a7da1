"""AnnotateTarget: mark which calls each external codegen takes, with region annotations.

Before: a typed module, usually after MergeComposite.
After (typed): in every ordinary Relay function, each call supported by a target `t` has every
argument wrapped in `annotation.compiler_begin(arg, compiler="t")` and its result leaves through
`annotation.compiler_end(call, compiler="t")` wherever it is used by something that is not that
same call's region. A value flowing between two annotated calls therefore reads
`compiler_begin(compiler_end(%v, compiler="a"), compiler="b")`; each annotated call is a region
of its own until MergeCompilerRegions joins neighbours.

A call is supported by the first target (in the order given) that accepts it:
* an operator call, when the target's predicate (`predicates[target](call)`) returns true;
* a call of a composite function whose `Composite` name starts with `<target>.`.
Calls without arguments, calls of globals, variables or other functions stay on the host.
A tuple whose fields all come from calls of one target, and a projection of a value annotated
for a target, belong to that target too (TVM's `include_non_call_ops`). Host code is left
unannotated (TVM writes `compiler="default"` annotations there; PartitionGraph accepts both).

Function literals are not entered. Annotating an already annotated function is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from compiler.byoc.merge_composite import mergeable
from compiler.byoc.regions import DEFAULT_TARGET, compiler_begin, compiler_end, has_annotations
from compiler.diagnostics import CompileError
from compiler.ir.expr import Call, Expr, Function, Op, Tuple, TupleGetItem
from compiler.ir.module import IRModule
from compiler.ir.visitor import post_order, rebuild
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext

OpPredicate = Callable[[Call], bool]


@dataclass(frozen=True)
class AnnotateTarget(Pass):
    name: ClassVar[str] = "AnnotateTarget"
    targets: Sequence[str] = ()
    predicates: Mapping[str, OpPredicate] | None = field(default=None)

    def __post_init__(self) -> None:
        targets = (self.targets,) if isinstance(self.targets, str) else tuple(self.targets)
        for target in targets:
            if not isinstance(target, str) or not target or target == DEFAULT_TARGET:
                raise ValueError(f"invalid codegen name {target!r} for AnnotateTarget")
        for target in self.predicates or {}:
            if target not in targets:
                raise ValueError(f"operator predicate given for {target!r}, which is not among the targets {list(targets)}")
        object.__setattr__(self, "targets", targets)

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        mod = InferType().run(mod, ctx)
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            if not mergeable(func):
                continue
            if has_annotations(func.body):
                raise CompileError(f"@{gv.name_hint} already carries region annotations", func.span)
            body = self.annotate(func.body)
            if body is not func.body:
                out.add(gv, Function(func.params, body, func.ret_type, func.attrs, func.span))
                changed = True
        return InferType().run(out, ctx) if changed else mod

    def supported_target(self, call: Call) -> str | None:
        if not call.args:
            return None
        predicates = self.predicates or {}
        for target in self.targets:
            if isinstance(call.op, Op):
                predicate = predicates.get(target)
                if predicate is not None and predicate(call):
                    return target
            elif isinstance(call.op, Function):
                composite = call.op.attrs.get("Composite")
                if isinstance(composite, str) and composite.split(".", 1)[0] == target and "." in composite:
                    return target
        return None

    def annotate(self, body: Expr) -> Expr:
        order = list(post_order(body, descend=lambda n: not isinstance(n, Function)))
        target_of: dict[Expr, str] = {}
        for node in order:
            target = self._target(node, target_of)
            if target is not None:
                target_of[node] = target
        if not target_of:
            return body

        new: dict[Expr, Expr] = {}
        ends: dict[Expr, Expr] = {}

        def leaving(child: Expr) -> Expr:
            """`child`'s new value as seen from outside its region."""
            target = target_of.get(child)
            if target is None:
                return new[child]
            end = ends.get(child)
            if end is None:
                end = ends[child] = compiler_end(new[child], target)
            return end

        for node in order:
            target = target_of.get(node)
            if isinstance(node, Function):  # opaque: not entered
                new[node] = node
                continue
            if target is None:
                new[node] = rebuild(node, leaving)
                continue
            begins: dict[Expr, Expr] = {}

            def entering(child: Expr, target: str = target, begins: dict[Expr, Expr] = begins) -> Expr:
                begin = begins.get(child)
                if begin is None:
                    begin = begins[child] = compiler_begin(leaving(child), target)
                return begin

            if isinstance(node, Call):
                callee = leaving(node.op)
                new[node] = Call(callee, tuple(entering(a) for a in node.args), node.attrs, node.span)
            else:
                new[node] = rebuild(node, entering)
        return leaving(body)

    def _target(self, node: Expr, target_of: dict[Expr, str]) -> str | None:
        if isinstance(node, Call):
            return self.supported_target(node)
        if isinstance(node, Tuple):
            targets = {target_of.get(f) for f in node.fields}
            if len(targets) == 1:
                return targets.pop()
            return None
        if isinstance(node, TupleGetItem):
            return target_of.get(node.tuple_value)
        return None
