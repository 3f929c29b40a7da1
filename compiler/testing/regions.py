"""Calls shaped like an external codegen's patterns, so that generated models have BYOC regions.

Drawn op by op, a model almost never holds `nn.relu(nn.conv2d(...))` with float32 NCHW data
and default attributes: the codegens' patterns would rarely match and their regions would go
untested. A `Motif` is one pattern read as a chain of calls, innermost first, each call's
result the next one's argument (`nn.relu(nn.bias_add(nn.dense(*, *), *))` is dense, then
bias_add, then relu). The generator draws each call of the chain from its op's domain through
a `RegionDraw`, which leans towards what a codegen's library takes (float32, each choice's
first option, the shape of the call below), and keeps a draw only when `region_friendly`
accepts it: float32 tensors, the pattern's attribute constraints, and every attribute at its
default except those the pattern hands to the library and those a shape already implies. A
function-at-a-time codegen has no library (the host compiles its regions): any dtype and
attribute values do.

A library may accept less than its patterns claim (a dense of 2-D data only): the generator's
`accepts` hook, given by whoever knows the library, vetoes such draws.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler import ops
from compiler.byoc.codegen_config import FUNCTION_AT_A_TIME, CodegenSpec
from compiler.byoc.pattern import (
    AltPattern,
    AttrPattern,
    CallPattern,
    ConstantPattern,
    OperatorPattern,
    Pattern,
    WildcardPattern,
)
from compiler.ir.types import TensorType
from compiler.ops.domain import RandomDraw
from compiler.ops.registry import AttrError, Sample

REGION_DTYPE = "float32"
# Attributes a call's input shapes already determine: any value the type relation accepts is
# one a library computing from the shapes agrees with.
SHAPE_ATTRS = frozenset({"channels", "kernel_size", "units"})
# How strongly a RegionDraw picks a choice's first option (domains list the common case first).
FIRST_CHOICE = 0.75

# A veto on a drawn call: (codegen, op name, sample) -> whether the codegen's library takes it.
Accepts = Callable[[str, str, Sample], bool]


@dataclass(frozen=True)
class Link:
    """One call of a motif: its op, the attribute values the pattern requires, which argument
    is the call below it (None for the innermost call) and which must be constants."""

    op: str
    required: tuple[tuple[str, object], ...] = ()
    inner_at: int | None = None
    constants: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Motif:
    codegen: str
    pattern: str
    chain: tuple[Link, ...]  # innermost first
    passed_attrs: frozenset[tuple[str, str]] = field(default=frozenset())  # (op, attr) the library gets
    # A function-at-a-time codegen compiles its regions with the host's loops: any attribute
    # values and dtypes do.
    any_attrs: bool = False

    def allowed(self, op: str) -> frozenset[str] | None:
        """Attributes of `op` that may differ from their defaults in this motif (None: all)."""
        if self.any_attrs:
            return None
        return SHAPE_ATTRS | {attr for o, attr in self.passed_attrs if o == op}


def motifs(spec: CodegenSpec) -> list[Motif]:
    """The motifs of every pattern of `spec` that is a chain of operator calls (each
    alternative of a `|` pattern its own motif); other patterns have none."""
    found = []
    for p in spec.patterns:
        passed = frozenset((ref.op, ref.attr) for ref in p.attrs)
        for chain in _chains(p.pattern):
            found.append(Motif(spec.name, p.name, tuple(chain), passed, spec.mode == FUNCTION_AT_A_TIME))
    return found


def _chains(pattern: Pattern) -> list[list[Link]]:
    if isinstance(pattern, AltPattern):
        return _chains(pattern.left) + _chains(pattern.right)
    if isinstance(pattern, AttrPattern):
        required = tuple(sorted(pattern.attrs.items())) if hasattr(pattern.attrs, "items") else ()
        chains = _chains(pattern.pattern)
        return [c[:-1] + [Link(c[-1].op, c[-1].required + required, c[-1].inner_at, c[-1].constants)] for c in chains]
    if not (isinstance(pattern, CallPattern) and isinstance(pattern.op, OperatorPattern)):
        return []
    inner = [k for k, a in enumerate(pattern.args) if not isinstance(a, (WildcardPattern, ConstantPattern))]
    constants = frozenset(k for k, a in enumerate(pattern.args) if isinstance(a, ConstantPattern))
    if not inner:
        return [[Link(pattern.op.name, (), None, constants)]]
    if len(inner) > 1:
        return []  # a tree, not a chain
    at = inner[0]
    return [c + [Link(pattern.op.name, (), at, constants)] for c in _chains(pattern.args[at])]


class RegionDraw(RandomDraw):
    """Draws leaning towards a library's common case; `below` is the type of the call under
    this one in the chain, whose shape every shape draw of a matching rank returns."""

    def __init__(self, rng: np.random.Generator, below: TensorType | None = None, float32: bool = True):
        super().__init__(rng)
        self.below = below
        self.float32 = float32

    def choice(self, options: Sequence[object]) -> object:  # type: ignore[override]
        if len(options) > 1 and self.rng.random() < FIRST_CHOICE:
            return options[0]
        return super().choice(options)

    def dtype(self, options: Sequence[str]) -> str:
        if self.float32 and REGION_DTYPE in options:
            return REGION_DTYPE
        return super().dtype(options)

    def shape(self, min_rank: int = 1, max_rank: int = 4, min_dim: int = 1, max_dim: int = 5) -> tuple[int, ...]:
        if self.below is not None and min_rank <= self.below.ndim <= max_rank:
            return tuple(int(d) for d in self.below.shape)  # type: ignore[arg-type]  # static
        return super().shape(min_rank, max_rank, min_dim, max_dim)


def region_friendly(motif: Motif, link: Link, sample: Sample, below: TensorType | None) -> bool:
    """Whether a drawn call of `link.op` is one the motif's codegen should take."""
    for k, entry in enumerate(sample.inputs):
        if k in link.constants:
            continue
        if not (isinstance(entry, TensorType) and not entry.is_dynamic):
            return False
        if entry.dtype != REGION_DTYPE and not motif.any_attrs:
            return False
    if below is not None and (link.inner_at is None or link.inner_at >= len(sample.inputs)
                              or sample.inputs[link.inner_at] != below):
        return False
    opdef = ops.get(link.op)
    try:
        attrs = opdef.make_attrs(sample.attrs)
        required = opdef.make_attrs(dict(link.required)) if link.required else None
    except AttrError:
        return False
    if required is not None and any(attrs[name] != required[name] for name, _ in link.required):
        return False
    allowed = motif.allowed(link.op)
    if allowed is None:
        return True
    allowed |= {name for name, _ in link.required}
    # An attribute without a default (dense's units) is one the shapes decide.
    return all(a.required or attrs[a.name] == a.default for a in opdef.attrs if a.name not in allowed)
