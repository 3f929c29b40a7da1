"""ONNX If and Scan, whose subgraphs are converted into the enclosing function.

If: a condition known at import picks its branch; otherwise both branches become the arms of a
Relay `if` (which the AOT executor compiles to a C `if`), and they must agree in type.
Scan: unrolled over its static scan length; each step is the body with the state and that
step's slices bound to its inputs, and the scan outputs are stacked along their axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from compiler.frontend.onnx.context import Converted, NodeContext, normalize_axis
from compiler.frontend.onnx.registry import converter
from compiler.ir.expr import Expr, If, Tuple
from compiler.passes.infer_type import infer_expr

_LATER = (13, 16, 19, 21, 23, 24, 25)


def _inline(ctx: NodeContext, graph: object, inputs: Sequence[Expr]) -> list[Expr]:
    assert ctx.inline_graph is not None and isinstance(graph, onnx.GraphProto)
    return ctx.inline_graph(graph, inputs)


@converter("If", (11, *_LATER))
def _if(ctx: NodeContext) -> Converted:
    then_graph, else_graph = ctx.attr("then_branch"), ctx.attr("else_branch")
    known = ctx.value(0)
    if known is not None:
        if np.asarray(known).size != 1:
            raise ctx.unsupported(f"a condition of {np.asarray(known).size} elements (one is needed)")
        return _inline(ctx, then_graph if bool(np.asarray(known).reshape(-1)[0]) else else_graph, [])
    cond = ctx.input(0)
    shape = ctx.static_shape(0)
    if int(np.prod(shape)) != 1:
        raise ctx.unsupported(f"a condition of shape {shape} (one element is needed)")
    if shape:
        cond = ctx.op("reshape", cond, newshape=())
    then_out, else_out = _inline(ctx, then_graph, []), _inline(ctx, else_graph, [])
    for k, (a, b) in enumerate(zip(then_out, else_out)):
        if a.checked_type != b.checked_type:
            raise ctx.unsupported(f"output {k} is {a.checked_type} in then_branch and {b.checked_type} in else_branch; "
                                  "both branches must give one type")
    if len(then_out) == 1:
        node = If(cond, then_out[0], else_out[0])
        infer_expr(node)
        return node
    node = If(cond, Tuple(tuple(then_out)), Tuple(tuple(else_out)))
    infer_expr(node)
    return [ctx.item(node, k) for k in range(len(then_out))]


@converter("Scan", (9, 11, 16, *_LATER[2:]))
def _scan(ctx: NodeContext) -> Converted:
    body = ctx.attr("body")
    assert isinstance(body, onnx.GraphProto)
    scans = ctx.int_attr("num_scan_inputs", 0)
    given = len(ctx.input_names)
    states = [ctx.input(k) for k in range(given - scans)]
    scan_axes = ctx.ints_attr("scan_input_axes") or [0] * scans
    scan_dirs = ctx.ints_attr("scan_input_directions") or [0] * scans
    outputs = len(body.output) - len(states)
    out_axes = ctx.ints_attr("scan_output_axes") or [0] * outputs
    out_dirs = ctx.ints_attr("scan_output_directions") or [0] * outputs

    sequences, length = [], None
    for k in range(scans):
        index = len(states) + k
        axis = normalize_axis(scan_axes[k], ctx.rank(index))
        extent = ctx.static_shape(index)[axis]
        if length is not None and extent != length:
            raise ctx.unsupported(f"scan inputs of lengths {length} and {extent}")
        length = extent
        steps = _steps(ctx, ctx.input(index), extent, axis)
        sequences.append(steps[::-1] if scan_dirs[k] else steps)
    if length is None:
        raise ctx.unsupported("no scan input")

    collected: list[list[Expr]] = [[] for _ in range(outputs)]
    for t in range(length):
        results = _inline(ctx, body, [*states, *(seq[t] for seq in sequences)])
        states = results[:len(states)]
        for k in range(outputs):
            collected[k].append(results[len(states) + k])
    stacked = []
    for k, items in enumerate(collected):
        rank = len(items[0].checked_type.shape) + 1  # type: ignore[attr-defined]  # tensors
        ordered = items[::-1] if out_dirs[k] else items
        stacked.append(ctx.op("stack", ctx.tuple(ordered), axis=normalize_axis(out_axes[k], rank)))
    return [*states, *stacked]


def _steps(ctx: NodeContext, x: Expr, length: int, axis: int) -> list[Expr]:
    """x's slices along `axis`, that axis removed."""
    if length == 1:
        return [ctx.op("squeeze", x, axis=(axis,))]
    pieces = ctx.op("split", x, indices_or_sections=length, axis=axis)
    return [ctx.op("squeeze", ctx.item(pieces, t), axis=(axis,)) for t in range(length)]
