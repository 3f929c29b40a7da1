"""Every operator, checked on calls drawn from its declared domain (compiler/ops/domain.py).

The samples of test_registry.py and test_lowering.py are fixed calls; the domain draws many
more, reaching attribute combinations nobody wrote down. For each drawn call the type relation
must accept the input types, the numpy reference must compute a result of exactly the inferred
type (without numpy warnings), and the compiled C must match the reference: integers exactly,
floats within the domain's ulps. Draws come from a seeded generator (reproducible from the op
name and the draw number, and compiled all together in one C build) and from hypothesis (so
that a failing call shrinks).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from compiler import ops
from compiler.backend.lower_primitive import lower_primitive
from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.ops.domain import Domain, RandomDraw, within_ulps
from compiler.ops.registry import OpDef, OpPattern, Sample, TypeRelationError
from compiler.tir.stmt import PrimFunc
from tests.built_once import built_once
from tests.compiler.backend.prim_library import PrimLibrary, build_prim_library
from tests.compiler.ops.samples import materialize, sample_rng
from tests.compiler.ops.strategies import HypothesisDraw
from tests.compiler.ops.test_lowering import (
    DECOMPOSED,
    constant_args,
    flatten,
    has_loops,
    pipeline_function,
    primitive_call,
    runtime_inputs,
)
from tests.compiler.ops.test_registry import check_sample

ALL_OPS = [op for op in ops.all_ops() if not op.extras.get("internal")]
DOMAIN_OPS = [op for op in ALL_OPS if op.domain is not None]
# Draws per op checked against the type relation, and compiled to C.
TYPED_DRAWS = 40
UNKNOWN_DIM_DRAWS = 12
COMPILED_DRAWS = 6


def _op_params(selected: list[OpDef]) -> list[object]:
    return [pytest.param(op, id=op.name) for op in selected]


def draw(op: OpDef, k: int) -> Sample:
    """Draw number `k` of `op`'s domain: the same call on every run."""
    assert op.domain is not None
    return op.domain.draw(RandomDraw(zlib.crc32(op.name.encode()) + k))


def describe(op: OpDef, k: int | None, sample: Sample) -> str:
    """Enough to reproduce a failing draw: the op, its input types and attrs, and the draw
    (number `k` of the seeded draws, or None for a hypothesis example)."""
    rng = sample_rng(op, k or 0)
    types = [materialize(entry, sample, rng)[1] for entry in sample.inputs]
    shown = ", ".join(str(ty) for ty in types)
    source = (
        "drawn by hypothesis (see the falsifying example)"
        if k is None
        else f"reproduce with tests.compiler.ops.test_domains.draw(ops.get({op.name!r}), {k})"
    )
    return (
        f"{op.name}: inputs ({shown}), attrs {dict(sample.attrs)}, "
        f"random floats in [{sample.low}, {sample.high}]; {source}"
    )


def check_draw(op: OpDef, k: int | None, sample: Sample) -> None:
    try:
        check_sample(op, k or 0, sample)
    except Exception as err:
        raise AssertionError(f"{describe(op, k, sample)}\n{type(err).__name__}: {err}") from err


def check_declares_domain(op: OpDef) -> None:
    assert isinstance(op.domain, Domain), f"{op.name} declares no domain, so no property test draws its calls"


# --- declarations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", _op_params(ALL_OPS))
def test_every_op_declares_a_domain(op: OpDef) -> None:
    check_declares_domain(op)


def test_domain_check_fails_for_an_operator_without_a_domain() -> None:
    bare = OpDef("test.bare", 1, lambda types, attrs: types[0], OpPattern.ELEMWISE, lambda a, attrs: a[0])
    with pytest.raises(AssertionError, match="declares no domain"):
        check_declares_domain(bare)


class _Bounds:
    low, high = -3, 4


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_hypothesis_draw_keeps_to_inclusive_bounds_and_options(data: st.DataObject) -> None:
    d = HypothesisDraw(data)
    assert _Bounds.low <= d.integer(_Bounds.low, _Bounds.high) <= _Bounds.high
    assert d.choice(("a", "b")) in ("a", "b")
    shape = d.shape(1, 3, 2, 4)
    assert 1 <= len(shape) <= 3 and all(2 <= n <= 4 for n in shape)


# --- drawn calls against the type relation --------------------------------------------------------


@pytest.mark.parametrize("op", _op_params(DOMAIN_OPS))
def test_drawn_calls_type_check_and_match_the_reference_type(op: OpDef) -> None:
    for k in range(TYPED_DRAWS):
        check_draw(op, k, draw(op, k))


# Ops whose type relation needs some dims static, as TVM's does (the reason is TVM's).
STATIC_DIMS_REQUIRED = {
    "gather_nd": "the first dim of the indices is the number of indexed axes",
    "scatter_nd": "the first dim of the indices is the number of indexed axes",
    "squeeze": "without axes, which dims are 1 must be known",
    # The dyn ops: the static length of a shape-like input (newshape, begin, k) is the rank.
    **{op.name: "its shape-like inputs need a static length" for op in ALL_OPS if op.extras.get("static_form")},
}


def _hide(ty: Type, mode: str) -> Type:
    if isinstance(ty, TupleType):
        return TupleType(tuple(_hide(f, mode) for f in ty.fields))
    if not isinstance(ty, TensorType) or ty.ndim == 0:
        return ty
    return TensorType((ANY, *ty.shape[1:]) if mode == "batch" else tuple(ANY for _ in ty.shape), ty.dtype)


def _agrees(dynamic: Type, static: Type) -> bool:
    """`dynamic` could be `static` once its `?` dims are known."""
    if isinstance(static, TupleType):
        return (isinstance(dynamic, TupleType) and len(dynamic.fields) == len(static.fields)
                and all(_agrees(d, s) for d, s in zip(dynamic.fields, static.fields)))
    return (isinstance(dynamic, TensorType) and isinstance(static, TensorType) and dynamic.dtype == static.dtype
            and dynamic.ndim == static.ndim and all(d is ANY or d == s for d, s in zip(dynamic.shape, static.shape)))


@pytest.mark.parametrize("op", _op_params(DOMAIN_OPS))
def test_drawn_calls_type_check_with_unknown_dims(op: OpDef) -> None:
    """With the dims of the first input, or of every input, hidden behind `?`, the relation
    still accepts the call and infers a type the static call's type is an instance of."""
    for k in range(UNKNOWN_DIM_DRAWS):
        sample = draw(op, k)
        rng = sample_rng(op, k)
        parts = [materialize(entry, sample, rng) for entry in sample.inputs]
        values, types = [v for v, _ in parts], [t for _, t in parts]
        attrs = op.make_attrs(sample.attrs)
        constants = constant_args(op, values, sample)
        extra = () if constants is None else (constants,)
        static = op.type_rel(types, attrs, *extra)  # type: ignore[call-arg]  # see OpDef.extras
        if not types:
            continue  # a creation op: nothing to hide
        hidden = {
            "batch dim of the first input": [_hide(types[0], "batch"), *types[1:]],
            "every dim of the first input": [_hide(types[0], "all"), *types[1:]],
            "every dim of every input": [_hide(t, "all") for t in types],
        }
        for what, candidate in hidden.items():
            try:
                dynamic = op.type_rel(candidate, attrs, *extra)  # type: ignore[call-arg]
            except TypeRelationError as err:
                if op.name in STATIC_DIMS_REQUIRED:
                    continue
                raise AssertionError(f"{describe(op, k, sample)}\nwith the {what} unknown: {err}") from err
            assert _agrees(dynamic, static), (
                f"{describe(op, k, sample)}\nwith the {what} unknown the relation gives {dynamic}, "
                f"which the static type {static} is not an instance of")


def test_unknown_dim_check_fails_for_a_relation_that_refuses_unknown_dims(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from compiler.ops import registry

    def picky(types: list[Type], attrs: Attrs) -> Type:
        if any(isinstance(t, TensorType) and t.is_dynamic for t in types):
            raise TypeRelationError("exp: the shape must be known")
        return types[0]

    monkeypatch.setitem(registry._REGISTRY, "exp", dataclasses.replace(ops.get("exp"), type_rel=picky))
    with pytest.raises(AssertionError, match="the shape must be known"):
        test_drawn_calls_type_check_with_unknown_dims(ops.get("exp"))


@pytest.mark.parametrize("op", _op_params(DOMAIN_OPS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])
@given(data=st.data())
def test_hypothesis_drawn_calls_type_check_and_match_the_reference_type(op: OpDef, data: st.DataObject) -> None:
    assert op.domain is not None
    sample = op.domain.draw(HypothesisDraw(data))
    check_draw(op, None, sample)


# --- drawn calls compiled -------------------------------------------------------------------------


def _compiled_name(op: OpDef, k: int) -> str:
    return f"draw_{op.name.replace('.', '_')}_{k}"


def _draw_values(op: OpDef, k: int, sample: Sample) -> tuple[list[object], list[Type]]:
    rng = sample_rng(op, k)
    parts = [materialize(entry, sample, rng) for entry in sample.inputs]
    return [value for value, _ in parts], [ty for _, ty in parts]


@dataclass(repr=False)
class CompiledDraws:
    """The library of every drawn call that lowered, and the lowering errors of the others."""

    library: PrimLibrary
    errors: dict[str, Exception]

    def __repr__(self) -> str:
        return f"CompiledDraws({self.library!r}, {len(self.errors)} lowering errors)"


COMPILED_OPS = [op for op in DOMAIN_OPS if has_loops(op)]


@pytest.fixture(scope="session")
def compiled_draws(tmp_path_factory: pytest.TempPathFactory) -> CompiledDraws:
    return built_once(tmp_path_factory, "op_domains", lambda directory: build_draws(COMPILED_OPS, directory))


def build_draws(selected: list[OpDef], directory: Path) -> CompiledDraws:
    """The seeded draws of `selected` ops lowered and built into one library."""
    funcs: list[PrimFunc] = []
    errors: dict[str, Exception] = {}
    for op in selected:
        for k in range(COMPILED_DRAWS):
            name = _compiled_name(op, k)
            sample = draw(op, k)
            try:
                values, types = _draw_values(op, k, sample)
                call = primitive_call(op, types, op.make_attrs(sample.attrs), constant_args(op, values, sample))
                funcs.append(lower_primitive(call, name))
            except Exception as err:  # noqa: BLE001  reported by the op's own test
                errors[name] = err
    library = build_prim_library(funcs, directory, "draws")
    return CompiledDraws(library, errors)


def _mismatch(actual: np.ndarray, expected: np.ndarray, domain: Domain) -> str | None:
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return f"{actual.dtype}{actual.shape} where the reference is {expected.dtype}{expected.shape}"
    if actual.dtype.kind != "f":
        wrong = actual != expected
    else:
        wrong = ~within_ulps(actual, expected, domain)
    if not wrong.any():
        return None
    at = tuple(int(i) for i in np.argwhere(wrong)[0])
    return (
        f"{int(wrong.sum())} of {wrong.size} elements differ, first at {at}: "
        f"{actual[at]!r}, reference {expected[at]!r}"
    )


def check_compiled_draw(op: OpDef, k: int, compiled: CompiledDraws) -> None:
    assert op.domain is not None
    sample = draw(op, k)
    name = _compiled_name(op, k)
    where = describe(op, k, sample)
    if name in compiled.errors:
        err = compiled.errors[name]
        raise AssertionError(f"{where}\nlowering failed: {type(err).__name__}: {err}") from err
    if name in compiled.library.broken:
        raise AssertionError(f"{where}\nthe C does not compile:\n{compiled.library.broken[name]}")
    values, _ = _draw_values(op, k, sample)
    attrs: Attrs = op.make_attrs(sample.attrs)
    try:
        expected = list(flatten(op.reference(values, attrs)))  # type: ignore[arg-type]  # tuple inputs too
        actual = compiled.library.run(name, runtime_inputs(op, values, sample))
    except Exception as err:
        raise AssertionError(f"{where}\n{type(err).__name__}: {err}") from err
    assert len(actual) == len(expected), f"{where}\n{len(actual)} outputs, the reference has {len(expected)}"
    for index, (a, e) in enumerate(zip(actual, expected)):
        problem = _mismatch(a, e, op.domain)
        assert problem is None, f"{where}\noutput {index}: {problem}"


@pytest.mark.parametrize("op", _op_params(COMPILED_OPS))
def test_compiled_draws_match_the_reference(op: OpDef, compiled_draws: CompiledDraws) -> None:
    failures = []
    for k in range(COMPILED_DRAWS):
        try:
            check_compiled_draw(op, k, compiled_draws)
        except AssertionError as err:
            failures.append(str(err))
    assert not failures, "\n\n".join(failures)


def test_compiled_draws_build_without_warnings(compiled_draws: CompiledDraws) -> None:
    assert compiled_draws.library.warnings == []


def test_compiled_draw_check_reports_a_wrong_result() -> None:
    domain = Domain(draw=lambda d: Sample(()))
    problem = _mismatch(np.array([1.0, 2.0], "float32"), np.array([1.0, 2.5], "float32"), domain)
    assert problem is not None and "first at (1,)" in problem


# Ops without loops of their own (SimplifyInference decomposes them) go through the pipeline.
PIPELINE_DRAWS = 2


@pytest.mark.parametrize(
    ("op", "k"),
    [
        pytest.param(op, k, id=f"{op.name}-{k}")
        for op in DOMAIN_OPS
        if op.name in DECOMPOSED
        for k in range(PIPELINE_DRAWS)
    ],
)
def test_drawn_calls_of_decomposed_ops_compile_through_the_pipeline(op: OpDef, k: int, tmp_path: Path) -> None:
    from compiler.driver import export, lower
    from compiler.ir.module import IRModule
    from compiler.runtime.module import CompiledModule

    assert op.domain is not None
    sample = draw(op, k)
    values, types = _draw_values(op, k, sample)
    attrs = op.make_attrs(sample.attrs)
    func, inputs = pipeline_function(op, values, types, attrs, sample)
    export(lower(IRModule.from_expr(func)), tmp_path, "")
    result = CompiledModule(tmp_path).run(inputs)
    expected = next(flatten(op.reference(values, attrs)))  # type: ignore[arg-type]  # the first output
    problem = _mismatch(np.asarray(result.outputs[0]), expected, op.domain)
    assert problem is None, f"{describe(op, k, sample)}\noutput 0: {problem}"


def test_a_subtly_wrong_loop_body_fails_the_ops_property_test(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The harness itself: tanh's loop body made 0.1% too large (in a temporary copy of its
    registry entry) must fail its compiled draws, while the real tanh passes them."""
    import dataclasses

    from compiler.ops import registry
    from compiler.ops.elemwise import elementwise_compute
    from compiler.tir.expr import Const, intrin

    real = ops.get("tanh")
    broken = dataclasses.replace(
        real, compute=elementwise_compute(lambda x: intrin("tanh", x) * Const(1.001, x.dtype))
    )
    monkeypatch.setitem(registry._REGISTRY, "tanh", broken)
    compiled = build_draws([broken], tmp_path)
    failed = 0
    for k in range(COMPILED_DRAWS):
        try:
            check_compiled_draw(broken, k, compiled)
        except AssertionError as err:
            assert "elements differ" in str(err)
            failed += 1
    assert failed > 0
    monkeypatch.setitem(registry._REGISTRY, "tanh", real)
    (tmp_path / "real").mkdir()
    good = build_draws([real], tmp_path / "real")
    for k in range(COMPILED_DRAWS):
        check_compiled_draw(real, k, good)
