"""Every registered operator, checked through its own samples.

For each sample call the type relation runs on the input types and the numpy reference on
matching arrays; the reference's result must have exactly the inferred shape and dtype. A new
operator is covered by existing: it only has to declare samples.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from compiler import ops
from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, TensorType, TupleType, Type, dtype_of
from compiler.ops.registry import ATTR_KINDS, OpDef, OpPattern, Sample, TypeRelationError
from tests.compiler.ops.samples import materialize, sample_rng

# Internal ops (call_lowered) exist only after lowering: they have no samples or reference.
ALL_OPS = [op for op in ops.all_ops() if not op.extras.get("internal")]


def _op_params(selected: list[OpDef] | None = None) -> list[object]:
    return [pytest.param(op, id=op.name) for op in (ALL_OPS if selected is None else selected)]


def _sample_params() -> list[object]:
    return [
        pytest.param(op, index, sample, id=f"{op.name}-{index}")
        for op in ALL_OPS
        for index, sample in enumerate(op.samples)
    ]


def _assert_value_has_type(value: object, ty: Type, where: str) -> None:
    if isinstance(ty, TupleType):
        assert isinstance(value, tuple), f"{where}: expected a tuple for {ty}, got {type(value).__name__}"
        assert len(value) == len(ty.fields), f"{where}: {len(value)} values for {ty}"
        for index, (part, field_ty) in enumerate(zip(value, ty.fields)):
            _assert_value_has_type(part, field_ty, f"{where}.{index}")
        return
    assert isinstance(ty, TensorType), f"{where}: unexpected inferred type {ty}"
    assert isinstance(value, np.ndarray), f"{where}: expected an ndarray for {ty}, got {type(value).__name__}"
    assert dtype_of(value) == ty.dtype, f"{where}: reference dtype {value.dtype}, inferred {ty}"
    shape_ok = value.ndim == ty.ndim and all(d is ANY or d == n for d, n in zip(ty.shape, value.shape))
    assert shape_ok, f"{where}: reference shape {value.shape}, inferred {ty}"


def _copy_values(value: object) -> object:
    return tuple(_copy_values(v) for v in value) if isinstance(value, tuple) else np.array(value, copy=True)


def _assert_same_values(before: object, after: object) -> None:
    if isinstance(before, tuple):
        assert isinstance(after, tuple)
        for b, a in zip(before, after):
            _assert_same_values(b, a)
        return
    np.testing.assert_array_equal(after, before, err_msg="the reference changed its input")


def check_declaration(op: OpDef) -> None:
    assert op.samples, f"{op.name} declares no samples, so nothing tests it"
    assert callable(op.type_rel), f"{op.name} has no type relation"
    assert callable(op.reference), f"{op.name} has no numpy reference"
    assert isinstance(op.pattern, OpPattern), f"{op.name} has no fusion pattern"


def check_sample(op: OpDef, index: int, sample: Sample) -> None:
    if op.num_inputs is not None:
        assert len(sample.inputs) == op.num_inputs, f"{op.name} takes {op.num_inputs} inputs"
    rng = sample_rng(op, index)
    parts = [materialize(entry, sample, rng) for entry in sample.inputs]
    values = [value for value, _ in parts]
    types = [ty for _, ty in parts]
    attrs = op.make_attrs(sample.attrs)

    if op.extras.get("constant_args"):
        # The sample's arrays are the call's constant arguments, whose values the type may need.
        constants = [
            v if isinstance(v, np.ndarray) or (isinstance(e, tuple) and e and all(isinstance(f, np.ndarray) for f in e)) else None
            for v, e in zip(values, sample.inputs)
        ]
        inferred = op.type_rel(types, attrs, constants)  # type: ignore[call-arg]  # see OpDef.extras
    else:
        inferred = op.type_rel(types, attrs)
    before = [_copy_values(v) for v in values]
    with warnings.catch_warnings():
        # A sample that makes numpy warn (overflow, log of a negative) tests nothing useful.
        warnings.simplefilter("error")
        result = op.reference(values, attrs)  # type: ignore[arg-type]  # tuple-valued inputs too
    _assert_value_has_type(result, inferred, op.name)
    for b, a in zip(before, values):
        _assert_same_values(b, a)


def test_registry_holds_operators_of_every_loaded_family() -> None:
    names = {op.name for op in ALL_OPS}
    assert {"exp", "cast", "add", "where", "sum", "argmax"} <= names


@pytest.mark.parametrize("op", _op_params())
def test_operator_declares_samples_type_relation_reference_and_pattern(op: OpDef) -> None:
    check_declaration(op)


@pytest.mark.parametrize("op", _op_params())
def test_attr_defaults_coerce_to_themselves(op: OpDef) -> None:
    for spec in op.attrs:
        assert spec.kind in ATTR_KINDS, f"{op.name}.{spec.name} has unknown kind {spec.kind}"
        if not spec.required:
            assert spec.coerce(spec.default) == spec.default, f"{op.name}.{spec.name}"


@pytest.mark.parametrize(("op", "index", "sample"), _sample_params())
def test_reference_result_has_the_inferred_type(op: OpDef, index: int, sample: Sample) -> None:
    check_sample(op, index, sample)


@pytest.mark.parametrize("op", _op_params([op for op in ALL_OPS if op.num_inputs]))
def test_type_relation_rejects_a_wrong_number_of_arguments(op: OpDef) -> None:
    sample = op.samples[0]
    rng = np.random.default_rng(0)
    types = [materialize(entry, sample, rng)[1] for entry in sample.inputs]
    attrs = op.make_attrs(sample.attrs)
    with pytest.raises(TypeRelationError):
        op.type_rel(types + [types[-1]], attrs)
    with pytest.raises(TypeRelationError):
        op.type_rel(types[:-1], attrs)


# The checks above must fail loudly for a bad declaration, not pass vacuously.


def _identity_type(types: object, attrs: Attrs) -> TensorType:
    return TensorType((2,), "float32")


def test_declaration_check_fails_for_an_operator_without_samples() -> None:
    bare = OpDef("test.bare", 1, _identity_type, OpPattern.ELEMWISE, lambda arrays, attrs: arrays[0])
    with pytest.raises(AssertionError, match="no samples"):
        check_declaration(bare)


def test_sample_check_fails_when_the_reference_dtype_differs_from_the_type() -> None:
    sample = Sample((TensorType((2,), "float32"),))
    widening = OpDef(
        "test.widen",
        1,
        _identity_type,
        OpPattern.ELEMWISE,
        lambda arrays, attrs: arrays[0].astype("float64"),
        samples=(sample,),
    )
    with pytest.raises(AssertionError, match="dtype float64"):
        check_sample(widening, 0, sample)


def test_sample_check_fails_when_the_reference_changes_its_input() -> None:
    def in_place(arrays: list[np.ndarray], attrs: Attrs) -> np.ndarray:
        arrays[0] += 1
        return arrays[0]

    sample = Sample((TensorType((2,), "float32"),))
    mutating = OpDef("test.mutate", 1, _identity_type, OpPattern.ELEMWISE, in_place, samples=(sample,))
    with pytest.raises(AssertionError, match="changed its input"):
        check_sample(mutating, 0, sample)
