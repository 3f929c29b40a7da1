"""PartitionGraph: outline every annotated region into a global function for its codegen.

Before: an annotated module (AnnotateTarget, optionally MergeCompilerRegions; TVM-style
`compiler="default"` annotations are accepted and simply dropped).
After (typed): no annotations are left. In each ordinary Relay function `@F`, region `n` (regions
numbered per function in post order, see regions.py) of codegen `t` became

    def @tvmgen_<mod_name>_<t>_F_<n>(%t_n_i0: T0, %t_n_i1: T1, ..., Compiler="t", Primitive=1,
                                     Inline=1, global_symbol="tvmgen_<mod_name>_<t>_F_<n>") {...}

and the region's place in `@F` holds a call `@tvmgen_..._F_<n>(inputs...)`. Details, as in TVM:
* params `<t>_<n>_i<k>` follow the region's compiler_begins in post order; one value entering
  through several begins is one param;
* with `bind_constants` (the default) a constant (or a tuple of constants) entering the region
  is written into the body instead of being passed; it keeps its number `k`, so the numbering of
  the remaining params has a gap there;
* a region with several outputs returns a tuple (one field per distinct output value, in post
  order of the compiler_ends) and each use reads `%call.i`; a compiler_end around a tuple
  expression is first split into one compiler_end per field, so outputs are never tuples built
  in the region;
* the global name is sanitised (characters other than letters, digits and `_` become `_`);
  `mod_name=None` leaves out the module part (`tvmgen_<t>_F_<n>`).
A region whose body would use a variable that does not enter it through a compiler_begin, or
regions that depend on each other in a cycle, are CompileErrors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from compiler.byoc.merge_composite import mergeable
from compiler.byoc.regions import (
    DEFAULT_TARGET,
    CycleError,
    Region,
    annotation_target,
    compiler_end,
    dependency_order,
    find_regions,
    has_annotations,
    is_annotation,
    is_end,
)
from compiler.diagnostics import CompileError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var, children
from compiler.ir.module import IRModule
from compiler.ir.visitor import ExprMutator, free_vars, post_order, rebuild
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def mangled_name(mod_name: str | None, name: str) -> str:
    prefix = f"tvmgen_{mod_name}_" if mod_name else "tvmgen_"
    return _UNSAFE.sub("_", prefix + name)


@dataclass(frozen=True)
class PartitionGraph(Pass):
    name: ClassVar[str] = "PartitionGraph"
    mod_name: str | None = "default"
    bind_constants: bool = True

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        annotated = [gv for gv, func in mod.functions() if mergeable(func) and has_annotations(func.body)]
        if not annotated:
            return InferType().run(mod, ctx)
        flat = mod.copy()
        for gv in annotated:
            func = mod[gv]
            assert isinstance(func, Function)
            flat.add(gv, Function(func.params, _Flatten().visit(func.body), func.ret_type, func.attrs, func.span))
        # Params take the types of the values entering regions.
        flat = InferType().run(flat, ctx)
        out = flat.copy()
        for gv in annotated:
            func = flat[gv]
            assert isinstance(func, Function)
            body = _RegionOutliner(self, gv.name_hint, out).outline(func.body)
            out.add(gv, Function(func.params, body, func.ret_type, func.attrs, func.span))
        return InferType().run(out, ctx)


class _Flatten(ExprMutator):
    """Drops "default" annotations and splits compiler_ends around tuple expressions."""

    def descend(self, node: Expr) -> bool:
        return not isinstance(node, Function)

    def rewrite_call(self, pre: Call, post: Expr) -> Expr:
        if not is_annotation(pre):
            return post
        assert isinstance(post, Call)
        target = annotation_target(pre)
        value = post.args[0]
        if target == DEFAULT_TARGET:
            return value
        if is_end(pre) and isinstance(value, Tuple):
            return Tuple(tuple(compiler_end(f, target) for f in value.fields), value.span)
        return post


@dataclass
class _Outlined:
    """A region turned into a global function; `call` is made when the region is first used."""

    gv: GlobalVar
    arguments: list[Expr]  # the original producers passed, in param order
    output_index: dict[Expr, int]  # original output value -> tuple field (or 0)
    multiple: bool
    call: Expr | None = None
    projections: dict[int, Expr] = field(default_factory=dict)


class _RegionOutliner:
    def __init__(self, options: PartitionGraph, func_name: str, mod: IRModule):
        self.options = options
        self.func_name = func_name
        self.mod = mod

    def outline(self, body: Expr) -> Expr:
        regions = find_regions(body)
        outlined = {r: self.make_function(r) for r in regions.regions}
        region_of = regions.region_of

        def deps(node: Expr) -> list[Expr]:
            region = region_of.get(node)
            if region is not None:  # an end: the region needs all of its inputs first
                return region.producers
            if isinstance(node, Function):
                return []
            return list(children(node))

        try:
            order = dependency_order([body], deps)
        except CycleError as err:
            raise CompileError(
                "annotated regions depend on each other in a cycle", getattr(err.node, "span", None)
            ) from None

        new: dict[Expr, Expr] = {}
        for node in order:
            region = region_of.get(node)
            if region is None:
                new[node] = node if isinstance(node, Function) else rebuild(node, new.__getitem__)
                continue
            assert is_end(node) and isinstance(node, Call)
            new[node] = self.use(outlined[region], node.args[0], new)
        return new[body]

    def use(self, outlined: _Outlined, value: Expr, new: dict[Expr, Expr]) -> Expr:
        if outlined.call is None:
            outlined.call = Call(outlined.gv, tuple(new[a] for a in outlined.arguments))
        index = outlined.output_index[value]
        if not outlined.multiple:
            return outlined.call
        projection = outlined.projections.get(index)
        if projection is None:
            projection = outlined.projections[index] = TupleGetItem(outlined.call, index)
        return projection

    def make_function(self, region: Region) -> _Outlined:
        target = region.target
        name = mangled_name(self.options.mod_name, f"{target}_{self.func_name}_{region.index}")
        if name in self.mod:
            raise CompileError(
                f"cannot outline a region for {target} as @{name}: the module already defines it "
                f"(was it partitioned for {target} before?)",
                region.outputs[0].span,
            )

        inside: dict[Expr, Expr] = {}  # begin -> param or bound constant
        entering: dict[Expr, Expr] = {}  # producer -> what stands for it inside
        params: list[Var] = []
        arguments: list[Expr] = []
        count = 0
        for begin in region.inputs:
            producer = begin.args[0]
            if producer not in entering:
                if self.options.bind_constants and _is_constant(producer):
                    entering[producer] = producer
                else:
                    param = Var(f"{target}_{region.index}_i{count}", begin.checked_type)
                    entering[producer] = param
                    params.append(param)
                    arguments.append(producer)
                count += 1
            inside[begin] = entering[producer]

        rebuilt: dict[Expr, Expr] = dict(inside)
        output_index: dict[Expr, int] = {}
        fields: list[Expr] = []
        for end in region.outputs:
            value = end.args[0]
            for node in post_order(value, seen=rebuilt, descend=lambda n: not isinstance(n, Function)):
                rebuilt[node] = rebuild(node, rebuilt.__getitem__) if not isinstance(node, Function) else node
            if value not in output_index:
                output_index[value] = len(fields)
                fields.append(rebuilt[value])
        result = fields[0] if len(fields) == 1 else Tuple(tuple(fields))
        attrs = Attrs({"Compiler": target, "Primitive": 1, "Inline": 1, "global_symbol": name})
        function = Function(tuple(params), result, None, attrs, region.outputs[0].span)
        stray = free_vars(function)
        if stray:
            raise CompileError(
                f"the region for {target} uses %{stray[0].name_hint}, which does not enter it through a compiler_begin",
                stray[0].span or region.outputs[0].span,
            )
        gv = GlobalVar(name)
        self.mod.add(gv, function)
        return _Outlined(gv, arguments, output_index, len(fields) > 1)


def _is_constant(expr: Expr) -> bool:
    if isinstance(expr, Constant):
        return True
    return isinstance(expr, Tuple) and bool(expr.fields) and all(isinstance(f, Constant) for f in expr.fields)
