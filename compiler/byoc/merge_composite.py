"""MergeComposite: wrap each match of a pattern table in a composite function called in place.

Before: a module (typed or not) and a pattern table `[(name, pattern[, check]), ...]`.
After (typed): in every ordinary Relay function (not Primitive, Extern or Compiler-owned), each
accepted match rooted at a call, tuple or projection is replaced by

    %5 = fn (%FunctionVar_0_0: T0, %FunctionVar_0_1: T1, ...,
             PartitionedFromPattern="nn.dense_nn.bias_add_nn.relu_", Composite="<name>") {
      <the matched nodes, inputs replaced by the params>
    };
    %6 = %5(input0, input1, ...);

Naming follows TVM so that printed modules line up with TVM's:
* params are `FunctionVar_<g>_<k>`: `g` counts the candidate matches of one pattern in one
  function (restarting for every pattern; candidates later rejected or vetoed still take a
  number), `k` numbers the inputs in the order of the pattern's leaves (callee before
  arguments, left to right); an expression feeding several leaves is one param;
* `PartitionedFromPattern` lists the matched nodes in post order: each operator call adds
  `<op name>_`, other calls `Call_`, tuples `Tuple_`, projections `TupleGetItem<i>_`;
* candidates are tried from the function's result towards its inputs.

Inputs matched by `is_constant()` (or `is_expr` of a constant) stay inside the composite body;
constants matched by a wildcard become params. Operators, global names and function literals
are never params.

A candidate match is rejected when one of its interior nodes (neither the root nor an input)
belongs to an earlier match or is also used outside the match: the composite has a single
output, so such a value would have to be computed twice. The table order is the priority: all
matches of the first pattern are made before the second pattern is tried, and nodes inside
composite functions (or other partitioned functions) are never matched again. A `check`
callback receives the matched root and may veto the match; unlike TVM, a vetoed match does not
keep its nodes from other matches of the same pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from compiler.byoc.pattern import (
    ConstantPattern,
    ExprPattern,
    Match,
    OperatorPattern,
    Pattern,
    VarPattern,
    WildcardPattern,
    find_match,
    pattern_post_order,
)
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var, children
from compiler.ir.module import IRModule
from compiler.ir.visitor import ExprMutator, post_order, rebuild
from compiler.passes.infer_type import InferType, infer_expr
from compiler.passes.pass_infra import Pass, PassContext

Check = Callable[[Expr], bool]
_LEAF_PATTERNS = (WildcardPattern, OperatorPattern, ConstantPattern, VarPattern, ExprPattern)
# Function attributes that make a function's body off limits to further matching.
PARTITIONED_ATTRS = ("Composite", "PartitionedFromPattern", "Compiler")


@dataclass(frozen=True)
class CompositePattern:
    """One pattern table entry: the composite's name (`<codegen>.<pattern>`), its pattern and an
    optional check on the matched root."""

    name: str
    pattern: Pattern
    check: Check | None = None


PatternEntry = tuple[str, Pattern] | tuple[str, Pattern, Check] | CompositePattern


def composite_table(entries: Sequence[PatternEntry]) -> tuple[CompositePattern, ...]:
    table = []
    for entry in entries:
        if not isinstance(entry, CompositePattern):
            if not isinstance(entry, tuple) or len(entry) not in (2, 3):
                raise ValueError(f"a pattern table entry is (name, pattern) or (name, pattern, check), got {entry!r}")
            entry = CompositePattern(*entry)
        if not isinstance(entry.name, str) or not entry.name:
            raise ValueError(f"a composite needs a non-empty name, got {entry.name!r}")
        if not isinstance(entry.pattern, Pattern):
            raise ValueError(f"composite {entry.name}: expected a Pattern, got {entry.pattern!r}")
        if entry.check is not None and not callable(entry.check):
            raise ValueError(f"composite {entry.name}: check must be callable, got {entry.check!r}")
        table.append(entry)
    return tuple(table)


def is_partitioned(func: Function) -> bool:
    return any(key in func.attrs for key in PARTITIONED_ATTRS)


def mergeable(func: object) -> bool:
    """Functions MergeComposite (and the passes after it) work inside."""
    return isinstance(func, Function) and not (
        is_partitioned(func) or func.has_nonzero_attr("Primitive") or func.has_nonzero_attr("Extern")
    )


@dataclass(frozen=True)
class MergeComposite(Pass):
    name: ClassVar[str] = "MergeComposite"
    patterns: Sequence[PatternEntry] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", composite_table(self.patterns))

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        table = composite_table(self.patterns)
        mod = InferType().run(mod, ctx)
        if not table:
            return mod
        out = mod.copy()
        for gv, func in mod.functions():
            if not mergeable(func):
                continue
            for entry in table:
                func = merge_pattern(func, entry)
                infer_expr(func, out)
            out.add(gv, func)
        return InferType().run(out, ctx)


@dataclass
class _Group:
    root: Expr
    args: list[Expr]
    function: Function
    members: set[Expr]  # every node of the composite body except the inputs
    outer_members: list[Expr]  # the members not inside function literals


def merge_pattern(func: Function, entry: CompositePattern) -> Function:
    """`func` (typed) with the accepted matches of one table entry replaced by composites."""

    def descend(node: Expr) -> bool:
        return not (isinstance(node, Function) and node is not func and is_partitioned(node))

    nodes = list(post_order(func, descend=descend))
    consumers: dict[Expr, set[Expr]] = {}
    for node in nodes:
        if descend(node):
            for child in children(node):
                consumers.setdefault(child, set()).add(node)

    claimed: set[Expr] = set()
    groups: dict[Expr, _Group] = {}
    index = 0
    for node in reversed(nodes):
        if node in claimed or not isinstance(node, (Call, Tuple, TupleGetItem)):
            continue
        match = find_match(entry.pattern, node)
        if match is None:
            continue
        group = _extract(match, entry, index)
        index += 1
        if group is None or not _acceptable(group, consumers, claimed):
            continue
        if entry.check is not None and not entry.check(node):
            continue
        claimed.update(group.members)
        groups[node] = group
    if not groups:
        return func
    result = _Rewriter(groups, descend).visit(func)
    assert isinstance(result, Function)
    return result


def _embeds(leaf: Pattern, expr: Expr) -> bool:
    if not isinstance(expr, Constant):
        return False
    return isinstance(leaf, ConstantPattern) or (isinstance(leaf, ExprPattern) and isinstance(leaf.expr, Constant))


def _extract(match: Match, entry: CompositePattern, index: int) -> _Group | None:
    """The candidate composite for `match`, or None when the pattern's root is itself an input
    (a bare wildcard or var pattern: nothing to wrap)."""
    inputs: dict[Expr, Var] = {}
    args: list[Expr] = []
    for leaf in pattern_post_order(entry.pattern):
        if not isinstance(leaf, _LEAF_PATTERNS):
            continue
        expr = match.bindings.get(leaf)
        if expr is None or isinstance(expr, (Op, GlobalVar, Function)) or _embeds(leaf, expr) or expr in inputs:
            continue
        param = Var(f"FunctionVar_{index}_{len(args)}", expr.checked_type)
        param.set_checked_type(expr.checked_type)
        inputs[expr] = param
        args.append(expr)

    if match.root in inputs:
        return None
    rebuilt: dict[Expr, Expr] = dict(inputs)
    name: list[str] = []
    for node in post_order(match.root, seen=inputs):
        rebuilt[node] = rebuild(node, rebuilt.__getitem__)
        name.append(_name_part(node))
    members = set(rebuilt) - set(inputs)
    outer = list(post_order(match.root, seen=inputs, descend=lambda n: not isinstance(n, Function)))
    attrs = Attrs({"PartitionedFromPattern": "".join(name), "Composite": entry.name})
    function = Function(tuple(inputs[a] for a in args), rebuilt[match.root], None, attrs, match.root.span)
    return _Group(match.root, args, function, members, outer)


def _name_part(node: Expr) -> str:
    if isinstance(node, Call):
        return f"{node.op.name}_" if isinstance(node.op, Op) else "Call_"
    if isinstance(node, Tuple):
        return "Tuple_"
    if isinstance(node, TupleGetItem):
        return f"TupleGetItem{node.index}_"
    if isinstance(node, Function):
        return "Function"
    return ""


def _acceptable(group: _Group, consumers: dict[Expr, set[Expr]], claimed: set[Expr]) -> bool:
    for node in group.outer_members:
        if isinstance(node, (Op, Constant, Function, GlobalVar)):
            continue
        if node in claimed:
            return False
        if node is not group.root and not consumers.get(node, set()) <= group.members:
            return False
    return True


class _Rewriter(ExprMutator):
    def __init__(self, groups: dict[Expr, _Group], descend: Callable[[Expr], bool]):
        super().__init__()
        self.groups = groups
        self._descend = descend

    def descend(self, node: Expr) -> bool:
        return self._descend(node)

    def _replace(self, pre: Expr, post: Expr) -> Expr:
        group = self.groups.get(pre)
        if group is None:
            return post
        return Call(group.function, tuple(self.memo[a] for a in group.args), span=pre.span)

    rewrite_call = _replace
    rewrite_tuple = _replace
    rewrite_tuple_get_item = _replace
