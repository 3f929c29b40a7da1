"""einsum: Einstein summation over a tuple of tensors, as numpy.einsum defines it.

The equation names each operand's dims with letters (`ij,jk->ik`); a label shared by several
operands or repeated in one (`ii->i`, a diagonal) walks those dims together. Labels missing from
the output are summed. Without `->` the output is numpy's implicit one: the labels used exactly
once, in alphabetical order. `...` stands for the dims not named by letters; those broadcast
across operands like numpy's and lead the implicit output. Unlike numpy, one label must have one
size everywhere (numpy lets a size-1 dim broadcast against it).

Loops: a sum reduction (TVM declares einsum INJECTIVE; its topi compute is a reduction too).
The body multiplies one element of each operand; float16 accumulates in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, TupleType, Type
from compiler.ops.common import dims_equal
from compiler.ops.domain import Domain, Draw
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as RuleDim
from compiler.ops.shape_rules import ShapeArg, broadcast_dims, fields, fill
from compiler.ops.transform import tuple_views
from compiler.tir.compute import Index, Reduction
from compiler.tir.expr import Const, PrimExpr, cast

OP = "einsum"
F32 = "float32"
ELLIPSIS = "."  # the label of every dim `...` covers, numbered from the right: (".", 0) is the last


@dataclass(frozen=True)
class EinsumPlan:
    """An equation resolved against operand ranks.

    Labels are letters, or (ELLIPSIS, k) for the k-th ellipsis dim counted from the right (so
    operands with fewer ellipsis dims line up like numpy broadcasting). `operands[i]` labels
    operand i's dims; `output` the result's; `summed` the labels summed over, in first-seen order.
    """

    operands: tuple[tuple[object, ...], ...]
    output: tuple[object, ...]
    summed: tuple[object, ...]


def _split_term(term: str, where: str) -> tuple[str, str, bool]:
    """(letters before `...`, letters after, whether `...` appears)."""
    if term.count("...") > 1 or term.replace("...", "").count("."):
        raise TypeRelationError(f"{OP}: {where} {term!r} has a misplaced '.' (only one '...' is allowed)")
    head, dots, tail = term.partition("...")
    for ch in head + tail:
        if not ch.isalpha() or not ch.isascii():
            raise TypeRelationError(f"{OP}: {where} {term!r} has the invalid label {ch!r}")
    return head, tail, bool(dots)


def plan_einsum(equation: str, ranks: Sequence[int]) -> EinsumPlan:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise TypeRelationError(f"{OP}: equation {equation!r} names {len(terms)} operands, got {len(ranks)}")
    operands: list[tuple[object, ...]] = []
    ellipsis_rank = 0
    for i, (term, rank) in enumerate(zip(terms, ranks)):
        head, tail, dots = _split_term(term, f"operand {i}")
        covered = rank - len(head) - len(tail)
        if covered < 0 or (covered and not dots):
            raise TypeRelationError(
                f"{OP}: operand {i} {term!r} of equation {equation!r} labels {len(head) + len(tail)} dims, "
                f"the tensor has {rank}"
            )
        ellipsis_rank = max(ellipsis_rank, covered)
        labels = [*head, *((ELLIPSIS, covered - 1 - k) for k in range(covered)), *tail]
        operands.append(tuple(labels))
    letters = [label for labels in operands for label in labels if isinstance(label, str)]
    ellipsis_dims = [(ELLIPSIS, k) for k in reversed(range(ellipsis_rank))]
    if arrow:
        head, tail, dots = _split_term(rhs, "output")
        if ellipsis_rank and not dots:
            raise TypeRelationError(
                f"{OP}: equation {equation!r} has {ellipsis_rank} dims under '...' "
                "but its output has no '...'"
            )
        output = [*head, *(ellipsis_dims if dots else []), *tail]
        for ch in head + tail:
            if ch not in letters:
                raise TypeRelationError(f"{OP}: output label {ch!r} of {equation!r} labels no operand dim")
        if len(set(head + tail)) != len(head + tail):
            raise TypeRelationError(f"{OP}: output {rhs!r} of {equation!r} repeats a label")
    else:
        output = [*ellipsis_dims, *sorted(ch for ch in set(letters) if letters.count(ch) == 1)]
    seen: list[object] = []
    for labels in operands:
        for label in labels:
            if label not in output and label not in seen:
                seen.append(label)
    return EinsumPlan(tuple(operands), tuple(output), tuple(seen))


def label_sizes(plan: EinsumPlan, shapes: Sequence[Sequence[Dim]], equation: str) -> dict[object, Dim]:
    """The size of every label; ellipsis dims broadcast (1 against n), letters must agree."""
    sizes: dict[object, Dim] = {}
    for i, (labels, shape) in enumerate(zip(plan.operands, shapes)):
        for label, dim in zip(labels, shape):
            if label not in sizes:
                sizes[label] = dim
                continue
            known = sizes[label]
            broadcasts = isinstance(label, tuple)
            if broadcasts and dim == 1:
                continue
            if broadcasts and known == 1:
                sizes[label] = dim
            elif not dims_equal(known, dim):
                name = "'...'" if broadcasts else repr(label)
                raise TypeRelationError(
                    f"{OP}: label {name} of {equation!r} has size {known} and, in operand {i}, size {dim}"
                )
            elif known is ANY:
                sizes[label] = dim
    return sizes


def _operand_types(types: Sequence[Type]) -> tuple[TensorType, ...]:
    if len(types) != 1 or not isinstance(types[0], TupleType) or not types[0].fields:
        shown = ", ".join(map(str, types))
        raise TypeRelationError(f"{OP} expects one non-empty tuple of tensors, got {shown}")
    fields = types[0].fields
    if not all(isinstance(f, TensorType) for f in fields):
        raise TypeRelationError(f"{OP} expects a tuple of tensors, got {types[0]}")
    for ty in fields:
        if ty.dtype != fields[0].dtype:  # type: ignore[union-attr]  # tensors, checked above
            raise TypeRelationError(f"{OP} needs tensors of one dtype, got {types[0]}")
    return tuple(fields)  # type: ignore[arg-type]  # tensors, checked above


def _einsum_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    fields = _operand_types(types)
    equation = attrs["equation"]
    plan = plan_einsum(equation, [f.ndim for f in fields])
    sizes = label_sizes(plan, [f.shape for f in fields], equation)
    return TensorType(tuple(sizes[label] for label in plan.output), fields[0].dtype)


def _einsum_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[RuleDim, ...]]:
    """Each output label's size: a letter's from the first operand naming it (the relation
    checked they agree), an ellipsis dim broadcast over the operands that have it."""
    operands = fields(inputs[0], "operands")
    plan = plan_einsum(attrs["equation"], [len(shape) for shape in operands])
    along: dict[object, list[RuleDim]] = {}
    for labels, shape in zip(plan.operands, operands):
        for label, dim in zip(labels, shape):
            along.setdefault(label, []).append(dim)
    out: list[RuleDim] = []
    for label in plan.output:
        sizes = along[label]
        out.append(broadcast_dims([(d,) for d in sizes])[0] if isinstance(label, tuple) else sizes[0])
    return [fill(out_type, out)]


def _einsum(a: Sequence[object], attrs: Attrs) -> np.ndarray:
    arrays = list(a[0])  # type: ignore[call-overload]  # a tuple argument
    dtype = arrays[0].dtype
    wide = np.float64 if dtype.kind == "f" else np.int64
    return np.asarray(np.einsum(attrs["equation"], *[x.astype(wide) for x in arrays])).astype(dtype)


def _accumulator(dtype: str) -> str:
    return F32 if dtype == "float16" else dtype


def _einsum_reduction(inputs: Sequence[object], attrs: Attrs, out_type: Type) -> Reduction:
    views = tuple_views(inputs, OP)
    equation = attrs["equation"]
    plan = plan_einsum(equation, [v.ndim for v in views])
    sizes = label_sizes(plan, [v.shape for v in views], equation)
    acc = _accumulator(views[0].dtype)

    def body(out_idx: Index, red_idx: Index) -> PrimExpr:
        at = {**dict(zip(plan.output, out_idx)), **dict(zip(plan.summed, red_idx))}
        value: PrimExpr | None = None
        for view, labels in zip(views, plan.operands):
            # An ellipsis dim of size 1 broadcasts: it is read at 0.
            idx = tuple(
                Const(0) if isinstance(lb, tuple) and dim == 1 else at[lb]
                for lb, dim in zip(labels, view.shape)
            )
            term = cast(acc, view[idx])
            value = term if value is None else value * term
        assert value is not None
        return value

    extents = tuple(sizes[label] for label in plan.summed)
    return Reduction("sum", extents, body, acc)  # type: ignore[arg-type]  # static dims when lowering


def _einsum_domain(d: Draw) -> Sample:
    """A contraction from a short list of classic forms, or a random one over a few letters."""
    dtype = d.choice((F32, F32, "float64", "float16", "int32", "int64"))
    forms = (
        "ij,jk->ik", "bij,bjk->bik", "ii->i", "ii", "ij->ji", "i,j->ij", "ij,ij->", "...ij,...jk",
        "i...->...", "ijk", "ab,b", "abc,cd,de->ae", "...", "ba",
    )
    equation = d.choice((*forms, "random"))
    if equation == "random":
        letters = "abcd"
        terms = ["".join(d.choice(letters) for _ in range(d.integer(0, 3))) for _ in range(d.integer(1, 3))]
        used = sorted(set("".join(terms)))
        equation = ",".join(terms) + ("->" + "".join(d.subset(used)) if d.boolean() else "")
    sizes: dict[str, int] = {ch: d.integer(1, 4) for ch in "abcdeijk"}
    ellipsis = d.shape(0, 2, 1, 3)
    lhs = equation.partition("->")[0]
    shapes = []
    for term in lhs.split(","):
        head, _, tail = term.partition("...")
        lead = ellipsis[d.integer(0, len(ellipsis)) :] if "..." in term else ()
        lead = tuple(1 if d.integer(0, 4) == 0 else n for n in lead)
        shapes.append((*(sizes[c] for c in head), *lead, *(sizes[c] for c in tail)))
    inputs = tuple(TensorType(s, dtype) for s in shapes)
    # Integers stay small so no product or sum overflows; floats stay away from cancellation.
    return Sample((inputs,), {"equation": equation}, low=-1.0, high=1.0, int_high=3)


register(
    OpDef(
        name=OP,
        num_inputs=1,
        type_rel=_einsum_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_einsum,  # type: ignore[arg-type]  # a tuple argument
        shape_func=_einsum_shape_rule,
        attrs=(AttrSpec("equation", "str", REQUIRED),),
        reduction=_einsum_reduction,
        domain=Domain(draw=_einsum_domain, ulps=64.0, accumulates=True),
        samples=(
            Sample(
                ((TensorType((3, 4), F32), TensorType((4, 5), F32)),),
                {"equation": "ij,jk->ik"},
                low=0.5,
                high=1.5,
            ),
            Sample(((TensorType((2, 3, 4), F32), TensorType((2, 4, 3), F32)),), {"equation": "bij,bjk->bik"},
                   low=0.5, high=1.5),
            Sample(((TensorType((4, 4), "int32"),),), {"equation": "ii->i"}),
            Sample(((TensorType((3, 4), "int64"),),), {"equation": "ij->ji"}),
            Sample(((TensorType((3,), F32), TensorType((4,), F32)),), {"equation": "i,j"}),
            Sample(
                ((TensorType((2, 1, 2, 3), F32), TensorType((4, 3, 2), F32)),),
                {"equation": "...ij,...jk"},
                low=0.5,
                high=1.5,
            ),
            Sample(((TensorType((3, 2), "float16"), TensorType((2,), "float16")),), {"equation": "ab,b->a"},
                   low=0.5, high=1.5),
            Sample(
                ((TensorType((2, 3), "float64"), TensorType((2, 3), "float64")),), {"equation": "ij,ij->"}
            ),
        ),
    )
)
