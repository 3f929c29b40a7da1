"""Regions of an annotated function body, shared by MergeCompilerRegions and PartitionGraph.

AnnotateTarget marks every value entering code for an external codegen with
`annotation.compiler_begin(%v, compiler="t")` and every value leaving it with
`annotation.compiler_end(%v, compiler="t")`. A *region* is what lies between: starting from a
compiler_end and walking towards the inputs, every node reached before a compiler_begin belongs
to the end's region; walks that meet join their regions. So a region is a connected piece of
dataflow whose inputs are its begins and whose outputs are its ends.

Regions are numbered in post order of the body (the region whose first node is evaluated first
is 0); a region's inputs and outputs are listed in post order too. Region target "default"
(TVM marks unsupported operators that way) means the host.

Leaves (variables, constants, operators, global names, function literals) never belong to a
region: a composite function literal stays the callee of its call, and a constant written inside
a region without a begin is simply part of it. Function literals are opaque: annotations inside
them are not regions of the enclosing body.

Malformed annotations are CompileErrors located at the offending node: a value computed inside a
region used outside without a compiler_end, a compiler_begin that reaches no compiler_end, an end
nested directly inside another region, or begins and ends of different targets in one region.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from compiler.diagnostics import CompileError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Var, children
from compiler.ir.visitor import post_order
from compiler.ops import annotation

BEGIN = Op.get(annotation.COMPILER_BEGIN.name)
END = Op.get(annotation.COMPILER_END.name)
DEFAULT_TARGET = "default"
LEAVES = (Var, Constant, Op, GlobalVar, Function)
T = TypeVar("T", bound=Hashable)


def compiler_begin(expr: Expr, target: str) -> Call:
    return Call(BEGIN, (expr,), Attrs(compiler=target))


def compiler_end(expr: Expr, target: str) -> Call:
    return Call(END, (expr,), Attrs(compiler=target))


def is_begin(node: Expr) -> bool:
    return isinstance(node, Call) and node.op is BEGIN


def is_end(node: Expr) -> bool:
    return isinstance(node, Call) and node.op is END


def is_annotation(node: Expr) -> bool:
    return isinstance(node, Call) and (node.op is BEGIN or node.op is END)


def annotation_target(node: Call) -> str:
    target = node.attrs.get("compiler")
    if not isinstance(target, str):
        raise CompileError(f"{node.op_name} needs a string `compiler` attribute", node.span)
    return target


def has_annotations(body: Expr) -> bool:
    return any(is_annotation(n) for n in post_order(body, descend=lambda n: not isinstance(n, Function)))


@dataclass(eq=False)
class Region:
    index: int
    target: str
    nodes: list[Expr] = field(default_factory=list)  # post order, begins and ends included
    inputs: list[Call] = field(default_factory=list)  # the compiler_begins, post order
    outputs: list[Call] = field(default_factory=list)  # the compiler_ends, post order

    @property
    def producers(self) -> list[Expr]:
        """The values entering the region (the begins' arguments), one per begin."""
        return [begin.args[0] for begin in self.inputs]


@dataclass
class RegionSet:
    regions: list[Region]
    region_of: dict[Expr, Region]
    order: list[Expr]  # the body in post order (function literals not entered)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: list[int] = []

    def make(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:
            self.parent[i], i = root, self.parent[i]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def find_regions(body: Expr) -> RegionSet:
    order = list(post_order(body, descend=lambda n: not isinstance(n, Function)))
    sets = _UnionFind()
    owner: dict[Expr, int] = {}
    for node in order:
        if not is_end(node):
            continue
        assert isinstance(node, Call)
        rid = sets.make()
        owner[node] = rid
        stack: list[Expr] = [node.args[0]]
        while stack:
            current = stack.pop()
            if isinstance(current, LEAVES):
                continue
            if is_end(current):
                assert isinstance(current, Call)
                raise CompileError(
                    f'compiler_end for "{annotation_target(current)}" is used inside a region without a compiler_begin',
                    current.span,
                )
            found = owner.get(current)
            if found is not None:
                sets.union(rid, found)
                continue
            owner[current] = rid
            if not is_begin(current):
                stack.extend(children(current))

    regions: list[Region] = []
    by_root: dict[int, Region] = {}
    region_of: dict[Expr, Region] = {}
    for node in order:
        rid = owner.get(node)
        if rid is None:
            continue
        root = sets.find(rid)
        region = by_root.get(root)
        if region is None:
            region = by_root[root] = Region(len(regions), "")
            regions.append(region)
        region.nodes.append(node)
        region_of[node] = region
        if is_begin(node) or is_end(node):
            assert isinstance(node, Call)
            _check_target(region, node)
            (region.inputs if is_begin(node) else region.outputs).append(node)

    _check_boundaries(body, order, region_of)
    return RegionSet(regions, region_of, order)


def _check_target(region: Region, annotation_call: Call) -> None:
    target = annotation_target(annotation_call)
    if not region.target:
        region.target = target
    elif region.target != target:
        raise CompileError(
            f'a region mixes annotations for "{region.target}" and "{target}"', annotation_call.span
        )


def _check_boundaries(body: Expr, order: list[Expr], region_of: dict[Expr, Region]) -> None:
    """Values leave regions only through compiler_ends; every begin reaches an end."""

    def escapes(value: Expr, user: Expr) -> None:
        if value in region_of and not is_end(value):
            region = region_of[value]
            if is_begin(value):
                message = f'compiler_begin for "{region.target}" is used outside its region'
            else:
                message = f'a value computed in the region for "{region.target}" is used outside it without a compiler_end'
            raise CompileError(message, getattr(value, "span", None) or getattr(user, "span", None))
        if is_begin(value) and value not in region_of:
            assert isinstance(value, Call)
            raise CompileError(
                f'compiler_begin for "{annotation_target(value)}" is not followed by a compiler_end', value.span
            )

    for node in order:
        if is_begin(node) and node in region_of:
            assert isinstance(node, Call)
            escapes(node.args[0], node)
        if node in region_of or isinstance(node, LEAVES):
            continue
        for child in children(node):
            escapes(child, node)
    escapes(body, body)


class CycleError(Exception):
    """The dependency relation given to dependency_order has a cycle through `node`."""

    def __init__(self, node: object):
        super().__init__("dependency cycle")
        self.node = node


def dependency_order(roots: Sequence[T], deps: Callable[[T], Sequence[T]]) -> list[T]:
    """Every node reachable from `roots` through `deps`, each after its dependencies.

    Iterative depth-first search; raises CycleError when a node depends on itself.
    """
    done: set[T] = set()
    active: set[T] = set()
    order: list[T] = []
    for root in roots:
        if root in done:
            continue
        stack: list[tuple[T, Iterator[T]]] = [(root, iter(deps(root)))]
        active.add(root)
        while stack:
            node, pending = stack[-1]
            advanced = False
            for dep in pending:
                if dep in done:
                    continue
                if dep in active:
                    raise CycleError(dep)
                active.add(dep)
                stack.append((dep, iter(deps(dep))))
                advanced = True
                break
            if not advanced:
                stack.pop()
                active.discard(node)
                done.add(node)
                order.append(node)
    return order
