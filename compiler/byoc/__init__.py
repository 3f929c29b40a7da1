"""Bring your own codegen: hand parts of a model to external compilers.

Partitioning, one pass per module:
    pattern.py / pattern_text.py   dataflow patterns and their text form (codegen JSON)
    merge_composite.py             matched subgraphs -> `Composite` functions
    annotate_target.py             which calls each codegen takes (compiler_begin/compiler_end)
    merge_compiler_regions.py      join neighbouring regions of one codegen without cycles
    partition_graph.py             regions -> `Compiler` global functions @tvmgen_<mod>_<cg>_<fn>_<n>
    regions.py                     the regions of an annotated body (shared by the two above)
    partition.py                   partition_for(): the standard sequence for one codegen
    compiler_function_utils.py     outline `Compiler` literals to globals; mark them `Extern=1`
The codegens themselves (configuration, registry, RelayToTIR hooks) live beside these modules.
"""
