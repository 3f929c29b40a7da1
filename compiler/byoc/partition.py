"""partition_for: the standard BYOC partitioning sequence for one codegen.

    MergeComposite(patterns) -> AnnotateTarget([codegen]) -> MergeCompilerRegions()
        -> PartitionGraph(mod_name) -> InferType

Composites are named `<codegen>.<pattern name>` (AnnotateTarget recognises a composite by that
prefix); table names given without a dot get the prefix here. Operator calls outside any
composite can be offloaded too by an `op_predicate`. Without `merge_regions` every composite
(and every accepted operator call) becomes a partition of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compiler.byoc.annotate_target import AnnotateTarget
from compiler.byoc.merge_compiler_regions import MergeCompilerRegions
from compiler.byoc.merge_composite import CompositePattern, MergeComposite, PatternEntry, composite_table
from compiler.byoc.partition_graph import PartitionGraph
from compiler.ir.expr import Call
from compiler.ir.module import IRModule
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext, Sequential


def qualified_table(codegen_name: str, patterns: Sequence[PatternEntry]) -> tuple[CompositePattern, ...]:
    """The table with every composite named `<codegen>.<name>`."""
    table = []
    for entry in composite_table(patterns):
        name = entry.name
        if "." not in name:
            name = f"{codegen_name}.{name}"
        elif name.split(".", 1)[0] != codegen_name:
            raise ValueError(f"composite {name} does not belong to codegen {codegen_name} (expected {codegen_name}.<name>)")
        table.append(CompositePattern(name, entry.pattern, entry.check))
    return tuple(table)


def partition_for(
    mod: IRModule,
    codegen_name: str,
    patterns: Sequence[PatternEntry],
    *,
    merge_regions: bool = True,
    mod_name: str | None = "default",
    op_predicate: Callable[[Call], bool] | None = None,
    ctx: PassContext | None = None,
) -> IRModule:
    """`mod` with the parts `codegen_name` supports outlined into `Compiler` global functions."""
    predicates = {codegen_name: op_predicate} if op_predicate is not None else None
    passes: list[Pass] = [
        MergeComposite(qualified_table(codegen_name, patterns)),
        AnnotateTarget((codegen_name,), predicates),
    ]
    if merge_regions:
        passes.append(MergeCompilerRegions())
    passes += [PartitionGraph(mod_name), InferType()]
    return Sequential(passes)(mod, ctx)
