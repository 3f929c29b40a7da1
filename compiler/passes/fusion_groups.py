"""Partition a dataflow graph into fusion groups (TVM's rules, in three phases).

Every node starts in a group of its own; groups merge through a union-find whose root carries
the group's pattern and, if it holds one, its "anchor": the OUT_ELEMWISE_FUSABLE op (conv2d,
dense, ...) the group is built around. A node only ever fuses into its immediate
post-dominator, taking along every node on the paths between them, and only when those paths
satisfy a condition on the patterns of the groups they cross ("check the path"). The phases
visit nodes in post order:

* phase 0: an OUT_ELEMWISE_FUSABLE node fuses into its post-dominator when every edge on the
  way is ELEMWISE and every group crossed (the post-dominator's included) is at most
  BROADCAST: `conv2d -> bias_add -> relu` becomes one group anchored at the conv2d.
* phases 0 and 1: an ELEMWISE or BROADCAST node fuses into its post-dominator when the edges
  on the way are at most INJECTIVE or COMM_REDUCE, the groups crossed are at most INJECTIVE,
  and the post-dominator's group is not a tuple or opaque one (it may be anchored):
  `add -> sum`, `add -> relu`, bias and activation chains behind a conv. An elementwise op
  feeding a conv2d does not fuse with it: that edge has the conv2d's own pattern.
* phase 1: an INJECTIVE node or a tuple fuses when every group on the way is at most
  INJECTIVE (done after phase 0 so heavy ops have taken their outputs first).
* phase 2: an injective node fuses into a following tuple that has itself been fused into
  injective users (concatenate-like patterns), never into a group rooted at a tuple.

Never fused: into a tuple (outside phase 2), opaque nodes, nodes whose post-dominator is
missing (their paths reach external values), and a merge that would put more than `max_depth`
nodes in a group. COMM_REDUCE nodes only absorb producers. The count that `max_depth` bounds
is TVM's: the post-dominator's group size plus, for each node on the paths, the size its own
group had when that node was last a root.

With `opt_level` 0 nothing fuses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from compiler.ir.expr import Expr
from compiler.ops import OpPattern
from compiler.passes.fusion_graph import DataflowGraph, DomNode, Node, post_dominator_tree

DEFAULT_MAX_DEPTH = 256

PathCondition = Callable[[OpPattern, bool], bool]


@dataclass(eq=False)
class Group:
    pattern: OpPattern
    root_ref: Expr  # the node whose value the fused function returns (for roots)
    anchor_ref: Expr | None = None
    parent: Group | None = None
    num_nodes: int = 1

    def find_root(self) -> Group:
        root = self
        while root.parent is not None:
            root = root.parent
        node = self
        while node is not root:
            assert node.parent is not None
            node.parent, node = root, node.parent
        return root


def _fusable_into_heavy(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= OpPattern.BROADCAST


def _fusable_elemwise(kind: OpPattern, is_sink: bool) -> bool:
    if not is_sink:
        # Elementwise, broadcast and injective ops on parallel branches may join.
        return kind <= OpPattern.INJECTIVE
    return kind <= OpPattern.OUT_ELEMWISE_FUSABLE


def _fusable_injective(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= OpPattern.INJECTIVE


class Partitioner:
    def __init__(self, graph: DataflowGraph, opt_level: int, max_depth: int = DEFAULT_MAX_DEPTH):
        self.graph = graph
        self.opt_level = opt_level
        self.max_depth = max_depth
        self.groups = [
            Group(
                n.pattern,
                n.expr,
                n.expr if n.pattern == OpPattern.OUT_ELEMWISE_FUSABLE else None,
            )
            for n in graph.nodes
        ]

    def partition(self) -> list[Group]:
        """The group of each graph node (by index); call `find_root` for its final group."""
        if self.opt_level == 0:
            return self.groups
        tree = post_dominator_tree(self.graph)
        for phase in range(3):
            self.run_phase(tree, phase)
        return self.groups

    # -- path walks (iterative: the region between a node and its post-dominator can be long) --

    def _region(self, src: Node, sink: Node) -> list[Node]:
        """Nodes on the paths from `src` (exclusive) to `sink` (inclusive), each once."""
        seen: set[int] = set()
        out: list[Node] = []
        stack = [user for user, _ in reversed(src.outputs)]
        while stack:
            node = stack.pop()
            if node.index in seen:
                continue
            seen.add(node.index)
            out.append(node)
            if node is not sink:
                stack.extend(user for user, _ in reversed(node.outputs))
        return out

    def check_path(self, src: Node, sink: Node, condition: PathCondition) -> bool:
        return all(
            condition(self.groups[n.index].find_root().pattern, n is sink) for n in self._region(src, sink)
        )

    def commit_fuse(self, src: Node, sink: Node) -> None:
        target = self.groups[sink.index]
        self.merge(self.groups[src.index], target)
        for node in self._region(src, sink):
            if node is not sink:
                self.merge(self.groups[node.index], target)

    def count_fused_nodes(self, child: Node, dom_parent: Node) -> int:
        count = self.groups[dom_parent.index].find_root().num_nodes
        count += self.groups[child.index].num_nodes
        region = self._region(child, dom_parent)
        count += sum(self.groups[n.index].num_nodes for n in region if n is not dom_parent)
        return count

    @staticmethod
    def merge(child: Group, parent: Group) -> None:
        child, parent = child.find_root(), parent.find_root()
        if child is parent:
            return
        parent.num_nodes += child.num_nodes
        child.parent = parent
        if child.anchor_ref is not None:
            assert parent.anchor_ref is None, "two anchored groups never merge"
            assert not (child.pattern > OpPattern.BROADCAST and parent.pattern > OpPattern.BROADCAST)
            parent.anchor_ref = child.anchor_ref
            parent.pattern = max(child.pattern, parent.pattern)

    # -- the phases --

    def run_phase(self, tree: list[DomNode], phase: int) -> None:
        for node in self.graph.nodes:
            dom = tree[node.index]
            if self.groups[node.index].pattern == OpPattern.OPAQUE or dom.parent is None:
                continue
            sink = dom.parent.node
            condition = self.path_condition(node, dom, sink, phase)
            # The size bound is checked after the cheaper pattern tests; all of them only
            # decide whether to try, so the order does not change the result.
            if condition is None or self.count_fused_nodes(node, sink) > self.max_depth:
                continue
            if self.check_path(node, sink, condition):
                self.commit_fuse(node, sink)

    def path_condition(self, node: Node, dom: DomNode, sink: Node, phase: int) -> PathCondition | None:
        """What the paths from `node` to its post-dominator `sink` must satisfy for `node` to
        fuse into it in this phase; None when it may not fuse at all."""
        group = self.groups[node.index]
        sink_group = self.groups[sink.index]
        if phase == 2:
            if group.pattern > OpPattern.INJECTIVE:
                return None
            sink_root = sink_group.find_root()
            if sink_root.pattern == OpPattern.TUPLE:
                return None
            if sink_group.pattern == OpPattern.TUPLE and sink_root.pattern <= OpPattern.INJECTIVE:
                # The tuple already feeds injective users; the path check keeps two
                # intermediate tuples apart.
                return _fusable_injective
            return None
        if group.find_root() is sink_group.find_root() or sink_group.pattern == OpPattern.TUPLE:
            return None
        if group.pattern == OpPattern.OUT_ELEMWISE_FUSABLE:
            return _fusable_into_heavy if phase == 0 and dom.pattern == OpPattern.ELEMWISE else None
        if group.pattern <= OpPattern.BROADCAST:
            if dom.pattern <= OpPattern.INJECTIVE or dom.pattern == OpPattern.COMM_REDUCE:
                return _fusable_elemwise
            return None
        if group.pattern in (OpPattern.INJECTIVE, OpPattern.TUPLE):
            return _fusable_injective if phase == 1 else None
        assert group.pattern == OpPattern.COMM_REDUCE
        return None


def partition(graph: DataflowGraph, opt_level: int, max_depth: int = DEFAULT_MAX_DEPTH) -> list[Group]:
    return Partitioner(graph, opt_level, max_depth).partition()
