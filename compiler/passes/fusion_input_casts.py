"""FuseOps' rule for casts in front of kernels that widen their own input.

Before: FuseOps' groups after its three phases (fusion_groups.py). After: each
`cast(x, "float32")` of a float16 `x` that is alone in its group and whose one use is an input
the consuming call's kernel widens itself (`extras["widened_inputs"]` of its op, e.g. a packed
convolution's data) is in that call's group, so the primitive function takes `x`:

    %1 = fn (%p0: float16 T) { cast(%p0, float32) };
    %2 = fn (%p0: float32 T, %p1: W) { nn.contrib_conv2d_NCHWc(%p0, %p1, ...) ... };
    %2(%1(%x), %w)
  becomes
    %2 = fn (%p0: float16 T, %p1: W) { nn.contrib_conv2d_NCHWc(cast(%p0, float32), %p1, ...) ... };
    %2(%x, %w)

Why: float16 ResNet-50 computes in float32 (float16_compute.py) and its activations between
blocks are float16, each cast to float32 by a kernel of its own that wrote a float32 copy of
the whole tensor for the next convolution to read (5% of the run). The lowering instead hands
the convolution the float16 buffer, and its band copy widens it (compiler/backend/
lower_primitive.py, compiler/ops/kernels/conv2d_packed.py). The values are the same: widening
float16 to float32 is exact.

TVM's rules never fuse an elementwise op into a following convolution (that edge has the
convolution's pattern, and its kernel reads its inputs from memory); this rule only applies
where the kernel says it reads the narrower tensor itself. A cast with several uses is left
alone (each use would widen it again, and a float32 copy read twice may be the cheaper).

The same holds at a group's other end (`defer_output_casts`): a group whose returned value is
such a widening cast, used once, by an elementwise or broadcast op of another group or as an
input its kernel widens, gives the cast to that group and returns the float16 value instead:

    %1 = fn (...) { cast(cast(add(conv2d(...), ...), float16), float32) };  -- float32 result
    %2 = fn (%p0, ..., %p3: float32 T) { add(..., %p3) ... };
  becomes
    %1 = fn (...) { cast(add(conv2d(...), ...), float16) };  -- float16 result
    %2 = fn (%p0, ..., %p3: float16 T) { add(..., cast(%p3, float32)) ... };

Why: fusion puts the cast that widens a kernel's float16 result for its one user into that
kernel's epilogue (the cast is elementwise), which then writes a float32 intermediate twice
the float16 one: a ResNet block's projection shortcut, 3.1 MiB at ResNet-50's first stage, and
each convolution's result read by the next. Those buffers set the float16 model's workspace
(5,488 KiB against the bound of 4,704 for its two largest live intermediates), a float32
buffer can take no float16 result in place, and every reader read twice the bytes it needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from compiler import ops
from compiler.ir.expr import Call, Expr, Op
from compiler.ops import OpPattern
from compiler.ir.types import TensorType
from compiler.passes.fusion_graph import DataflowGraph, Node
from compiler.passes.fusion_groups import Group, Partitioner
from compiler.tir.compute import KernelContext

HALF, FLOAT = "float16", "float32"


def half_cast_source(expr: Expr) -> Expr | None:
    """`x` when `expr` is `cast(x, "float32")` of a float16 `x` (an exact widening), else None."""
    if not (isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name == "cast" and len(expr.args) == 1):
        return None
    arg = expr.args[0]
    result = expr.checked_type if expr.has_type else None
    source = arg.checked_type if arg.has_type else None
    if isinstance(result, TensorType) and isinstance(source, TensorType) and (source.dtype, result.dtype) == (
            HALF, FLOAT):
        return arg
    return None


def widened_by(user: Expr, cast: Expr, ctx: KernelContext) -> bool:
    """Whether `cast` is exactly one input of call `user` and one its kernel widens itself."""
    if not (isinstance(user, Call) and isinstance(user.op, Op)):
        return False
    test = ops.get(user.op.name).extras.get("widened_inputs")
    positions = [k for k, arg in enumerate(user.args) if arg is cast]
    if test is None or len(positions) != 1:
        return False
    arg_types = [a.checked_type for a in user.args]
    return positions[0] in test(ctx, user.attrs, arg_types, user.checked_type)  # type: ignore[operator]  # see OpDef.extras


def fuse_input_casts(graph: DataflowGraph, groups: Sequence[Group], lanes: int) -> None:
    """Merges each such cast's group into its user's (`groups` by graph node index); `lanes`:
    the target's float32 vector lanes, which decide the kernel a call gets."""
    ctx = KernelContext(vector_lanes=lanes)
    for node in graph.nodes:
        if _lone_cast(node, groups) and widened_by(node.outputs[0][0].expr, node.expr, ctx):
            Partitioner.merge(groups[node.index], groups[node.outputs[0][0].index])


def _lone_cast(node: Node, groups: Sequence[Group]) -> bool:
    group = groups[node.index]
    return (half_cast_source(node.expr) is not None and not node.external and len(node.outputs) == 1
            and group.find_root() is group and group.num_nodes == 1)


def defer_output_casts(graph: DataflowGraph, groups: list[Group], lanes: int) -> None:
    """Moves each group's returned widening cast into the group of its one user, where that
    user is an elementwise or broadcast op or a kernel that widens the input itself (`groups`
    by graph node index; an entry may be replaced)."""
    ctx = KernelContext(vector_lanes=lanes)
    for node in graph.nodes:
        source = half_cast_source(node.expr)
        if source is None or node.external or len(node.outputs) != 1:
            continue
        owner = groups[node.index].find_root()
        user, _ = node.outputs[0]
        below = graph.node_of.get(source)
        if (owner.num_nodes < 2 or owner.root_ref is not node.expr or below is None
                or groups[below.index].find_root() is not owner):
            continue
        target = groups[user.index].find_root()
        if target is owner or target.pattern > OpPattern.OUT_ELEMWISE_FUSABLE:
            continue
        if user.pattern > OpPattern.BROADCAST and not widened_by(user.expr, node.expr, ctx):
            continue
        owner.root_ref = source
        owner.num_nodes -= 1
        alone = Group(OpPattern.ELEMWISE, node.expr)
        groups[node.index] = alone
        Partitioner.merge(alone, target)
