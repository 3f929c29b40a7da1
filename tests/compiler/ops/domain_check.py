"""Draws from an op's domain, checked the way the central property test will use them."""

from __future__ import annotations

import warnings

import numpy as np

from compiler.ir.types import TensorType, TupleType
from compiler.ops.domain import RandomDraw
from compiler.ops.registry import OpDef, Sample
from tests.compiler.ops.samples import materialize


def check_domain_draws(op: OpDef, count: int = 60) -> list[Sample]:
    """Draw `count` calls: each must type-check, and the reference must give the inferred type
    without a numpy warning. Returns the samples drawn, for tests of their coverage."""
    assert op.domain is not None, f"{op.name} declares no domain"
    drawn = []
    for seed in range(count):
        sample = op.domain.draw(RandomDraw(seed))
        rng = np.random.default_rng(seed)
        parts = [materialize(entry, sample, rng) for entry in sample.inputs]
        attrs = op.make_attrs(sample.attrs)
        ty = op.type_rel([t for _, t in parts], attrs)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = op.reference([v for v, _ in parts], attrs)  # type: ignore[arg-type]  # tuple inputs too
        outs = out if isinstance(out, tuple) else (out,)
        types = ty.fields if isinstance(ty, TupleType) else (ty,)
        for value, field in zip(outs, types):
            assert isinstance(field, TensorType)
            assert value.shape == field.shape and str(value.dtype) == field.dtype, (op.name, seed, field)
        drawn.append(sample)
    return drawn
