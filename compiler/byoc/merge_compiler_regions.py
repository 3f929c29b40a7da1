"""MergeCompilerRegions: join neighbouring regions of one codegen into bigger regions.

Before: an annotated module (AnnotateTarget): every supported call is a region of its own.
After (typed): wherever a region's output feeds another region of the same target directly,
the two are one region (the `compiler_begin(compiler_end(%v))` pair between them is removed),
unless that would create a cycle: if some path leaves the upper region through a node of another
target or of the host and comes back into the lower one, merging would make the merged region
both produce and consume that node's value, so the regions stay apart. Host code and regions of
target "default" are never merged.

How: regions and host nodes form a dependency graph. Visiting it with every node after its
producers, each region is merged with each producing region of its target (in argument order)
unless the producer's group reaches one of the current group's other producers (then a path of
length two or more leads from one to the other). Reachability is searched in the graph of
groups as merged so far, so every merge sees the effect of the earlier ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from compiler.byoc.merge_composite import mergeable
from compiler.byoc.regions import (
    DEFAULT_TARGET,
    LEAVES,
    CycleError,
    Region,
    RegionSet,
    dependency_order,
    find_regions,
    has_annotations,
    is_begin,
    is_end,
)
from compiler.diagnostics import CompileError
from compiler.ir.expr import Call, Expr, Function, children
from compiler.ir.module import IRModule
from compiler.ir.visitor import ExprMutator
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext

Vertex = Region | Expr  # a region, or a host node outside every region


@dataclass(frozen=True)
class MergeCompilerRegions(Pass):
    name: ClassVar[str] = "MergeCompilerRegions"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            if not mergeable(func) or not has_annotations(func.body):
                continue
            body = merge_regions(func.body)
            if body is not func.body:
                out.add(gv, Function(func.params, body, func.ret_type, func.attrs, func.span))
                changed = True
        return InferType().run(out, ctx) if changed else mod


def merge_regions(body: Expr) -> Expr:
    regions = find_regions(body)
    if not regions.regions:
        return body
    groups = _Groups(regions)
    groups.merge()
    return _DropInnerAnnotations(regions, groups).visit(body)


class _Groups:
    """Union-find over vertices, with the vertices producing each group's inputs."""

    def __init__(self, regions: RegionSet):
        self.regions = regions
        self.parent: dict[Vertex, Vertex] = {}
        self.producers_of_group: dict[Vertex, set[Vertex]] = {}

    def vertex(self, node: Expr) -> Vertex | None:
        region = self.regions.region_of.get(node)
        if region is not None:
            return region
        return None if isinstance(node, LEAVES) else node

    def producers(self, v: Vertex) -> list[Vertex]:
        nodes = v.producers if isinstance(v, Region) else children(v)
        found: list[Vertex] = []
        for node in nodes:
            p = self.vertex(node)
            if p is not None and p is not v and p not in found:
                found.append(p)
        return found

    def find(self, v: Vertex) -> Vertex:
        root = v
        while self.parent.get(root, root) is not root:
            root = self.parent[root]
        while v is not root:
            self.parent[v], v = root, self.parent[v]
        return root

    def merge(self) -> None:
        root = self.vertex(self.regions.order[-1])
        if root is None:
            return
        try:
            order = dependency_order([root], self.producers)
        except CycleError as err:
            node = err.node
            span = node.outputs[0].span if isinstance(node, Region) and node.outputs else getattr(node, "span", None)
            raise CompileError("annotated regions depend on each other in a cycle", span) from None
        for v in order:
            producers = self.producers(v)
            self.producers_of_group[v] = set(producers)
            if not isinstance(v, Region) or v.target == DEFAULT_TARGET:
                continue
            for p in producers:
                if isinstance(p, Region) and p.target == v.target:
                    self._try_merge(self.find(p), self.find(v))

    def _try_merge(self, upper: Vertex, lower: Vertex) -> None:
        if upper is lower or self._reaches_another_producer(upper, lower):
            return
        # Keep only producers outside the merged group, so a long chain of merges keeps its
        # producer set small.
        outside = {
            p
            for p in self.producers_of_group.pop(upper) | self.producers_of_group[lower]
            if self.find(p) is not upper and self.find(p) is not lower
        }
        self.parent[upper] = lower
        self.producers_of_group[lower] = outside

    def _reaches_another_producer(self, upper: Vertex, lower: Vertex) -> bool:
        """Whether `upper` reaches a producer of `lower` other than itself."""
        stack = [g for g in {self.find(p) for p in self.producers_of_group[lower]} if g is not upper and g is not lower]
        seen = set(stack)
        while stack:
            group = stack.pop()
            for p in self.producers_of_group[group]:
                g = self.find(p)
                if g is upper:
                    return True
                if g not in seen and g is not lower:
                    seen.add(g)
                    stack.append(g)
        return False


class _DropInnerAnnotations(ExprMutator):
    """Removes `compiler_begin(compiler_end(%v))` pairs that now sit inside one merged region."""

    def __init__(self, regions: RegionSet, groups: _Groups):
        super().__init__()
        self.regions = regions
        self.groups = groups

    def descend(self, node: Expr) -> bool:
        return not isinstance(node, Function)

    def rewrite_call(self, pre: Call, post: Expr) -> Expr:
        if not (is_begin(pre) and is_end(pre.args[0])):
            return post
        region_of = self.regions.region_of
        inner, outer = region_of[pre], region_of[pre.args[0]]
        if inner.target == DEFAULT_TARGET or self.groups.find(inner) is not self.groups.find(outer):
            return post
        assert isinstance(post, Call) and isinstance(post.args[0], Call)
        return post.args[0].args[0]
