"""Region annotations used while partitioning for external codegens (compiler/byoc/).

`annotation.compiler_begin(%x, compiler="t")` marks a value entering a region that codegen `t`
will compile; `annotation.compiler_end(%y, compiler="t")` marks a value leaving it. Both are the
identity on their argument, so an annotated program still type-checks and interprets. They exist
only between AnnotateTarget and PartitionGraph, are never lowered, and are registered as internal
ops, which the generic per-op tests skip.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type
from compiler.ops.domain import FLOAT_CHOICES, Domain, Draw, tensor_shape
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, lookup, register
from compiler.ops.shape_rules import same_shape_rule


def _identity_type(types: Sequence[Type], attrs: Attrs) -> Type:
    if len(types) != 1:
        raise TypeRelationError(f"a region annotation takes one argument, got {len(types)}")
    return types[0]


def _identity(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return arrays[0]


def _identity_domain(d: Draw) -> Sample:
    data = TensorType(tensor_shape(d), d.dtype(FLOAT_CHOICES))
    return Sample((data,), {"compiler": d.choice(("ccompiler", "cblas"))})


def _annotation(name: str) -> OpDef:
    # Importing this module twice (e.g. under two names) must not register the ops twice.
    existing = lookup(name)
    if existing is not None:
        return existing
    return register(
        OpDef(
            name,
            1,
            _identity_type,
            OpPattern.OPAQUE,
            _identity,
            attrs=(AttrSpec("compiler", "str"),),
            domain=Domain(_identity_domain),
            shape_func=same_shape_rule,
            extras={"internal": True},
        )
    )


COMPILER_BEGIN = _annotation("annotation.compiler_begin")
COMPILER_END = _annotation("annotation.compiler_end")
