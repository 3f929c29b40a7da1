"""Bitwise operators, shifts and truncating division (compiler/ops/bitwise.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops import OpPattern, TypeRelationError
from tests.compiler.ops.domain_check import check_domain_draws
from tests.compiler.ops.relay_text import check_text_model
from tests.compiler.ops.samples import materialize

BINARY = ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "trunc_divide", "trunc_mod"]
ALL = ["bitwise_not"] + BINARY


def run(name: str, *arrays: np.ndarray) -> np.ndarray:
    op = ops.get(name)
    result = op.reference(list(arrays), op.make_attrs({}))
    assert isinstance(result, np.ndarray)
    return result


def infer(name: str, *types: Type) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs({}))


def test_fusion_patterns_follow_tvm() -> None:
    assert ops.get("bitwise_not").pattern == OpPattern.ELEMWISE
    for name in BINARY:
        assert ops.get(name).pattern == OpPattern.BROADCAST, name


def test_bitwise_not_flips_every_bit_and_negates_bools() -> None:
    assert run("bitwise_not", np.array([0, -1, 5, -128], np.int8)).tolist() == [-1, 0, -6, 127]
    assert run("bitwise_not", np.array([0, 255], np.uint8)).tolist() == [255, 0]
    assert run("bitwise_not", np.array([True, False])).tolist() == [False, True]


def test_and_or_xor_work_bit_by_bit_with_broadcasting() -> None:
    a = np.array([[12], [-1]], np.int32)
    b = np.array([10, 3], np.int32)
    assert run("bitwise_and", a, b).tolist() == [[8, 0], [10, 3]]
    assert run("bitwise_or", a, b).tolist() == [[14, 15], [-1, -1]]
    assert run("bitwise_xor", a, b).tolist() == [[6, 15], [-11, -4]]


def test_shifts_wrap_in_the_dtype_and_right_shift_is_arithmetic() -> None:
    x = np.array([100, -100, 1], np.int8)
    assert run("left_shift", x, np.array([2, 1, 7], np.int8)).tolist() == [-112, 56, -128]
    assert run("right_shift", x, np.array([2, 2, 1], np.int8)).tolist() == [25, -25, 0]
    assert run("right_shift", np.array([200], np.uint8), np.array([3], np.uint8)).tolist() == [25]


def test_trunc_divide_and_mod_round_toward_zero_for_integers() -> None:
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    assert run("trunc_divide", a, b).tolist() == [3, -3, -3, 3]
    assert run("trunc_mod", a, b).tolist() == [1, -1, 1, -1]


def test_float_trunc_mod_is_a_minus_trunc_quotient_times_b() -> None:
    a = np.array([7.5, -7.5, 5.25], np.float32)
    b = np.array([2.0, 2.0, -0.5], np.float32)
    np.testing.assert_array_equal(run("trunc_divide", a, b), [3.0, -3.0, -10.0])
    np.testing.assert_array_equal(run("trunc_mod", a, b), [1.5, -1.5, 0.25])


def test_binary_types_broadcast_with_unknown_dims() -> None:
    assert infer("bitwise_and", TensorType((ANY, 1), "int8"), TensorType((4,), "int8")) == TensorType((ANY, 4), "int8")
    assert infer("left_shift", TensorType((2, 3), "uint8"), TensorType((), "uint8")) == TensorType((2, 3), "uint8")


@pytest.mark.parametrize("name", ["bitwise_not", "bitwise_and", "left_shift", "right_shift"])
def test_bitwise_ops_reject_float_tensors(name: str) -> None:
    types = [TensorType((2,), "float32")] * (1 if name == "bitwise_not" else 2)
    with pytest.raises(TypeRelationError, match=f"{name} expects a"):
        infer(name, *types)


@pytest.mark.parametrize("name", ["left_shift", "right_shift"])
def test_shifts_reject_bools(name: str) -> None:
    with pytest.raises(TypeRelationError, match=f"{name} expects a int tensor"):
        infer(name, TensorType((2,), "bool"), TensorType((2,), "bool"))


def test_trunc_divide_rejects_bools_and_mixed_dtypes() -> None:
    with pytest.raises(TypeRelationError, match="trunc_divide expects a float or int tensor"):
        infer("trunc_divide", TensorType((2,), "bool"), TensorType((2,), "bool"))
    with pytest.raises(TypeRelationError, match="trunc_mod needs operands of one dtype"):
        infer("trunc_mod", TensorType((2,), "int32"), TensorType((2,), "int64"))


def test_binary_ops_reject_shapes_that_do_not_broadcast() -> None:
    with pytest.raises(TypeRelationError, match="bitwise_xor: shapes"):
        infer("bitwise_xor", TensorType((2, 3), "int32"), TensorType((4,), "int32"))


@pytest.mark.parametrize("name", ALL)
def test_domain_draws_type_check(name: str) -> None:
    check_domain_draws(ops.get(name))


@pytest.mark.parametrize("name", ["left_shift", "right_shift"])
def test_shift_domain_keeps_amounts_below_the_bit_width(name: str) -> None:
    for seed, sample in enumerate(check_domain_draws(ops.get(name), 80)):
        amounts, _ = materialize(sample.inputs[1], sample, np.random.default_rng(seed))
        assert isinstance(amounts, np.ndarray)
        assert amounts.size == 0 or (amounts.min() >= 0 and amounts.max() < amounts.dtype.itemsize * 8)


MODEL = """#[version = "0.0.5"]
def @main(%a: Tensor[(2, 3), int32], %b: Tensor[(3), int32], %s: Tensor[(3), int32], %f: Tensor[(3), float32]) {
  %0 = bitwise_and(%a, %b);
  %1 = bitwise_or(%0, %b);
  %2 = bitwise_xor(%1, %a);
  %3 = bitwise_not(%2);
  %4 = left_shift(%3, %s);
  %5 = right_shift(%4, %s);
  %6 = trunc_divide(%5, 3);
  %7 = trunc_mod(%a, -4);
  %8 = trunc_mod(%f, 0.75f);
  (%6, %7, %8)
}
"""


def test_text_model_of_bitwise_ops_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    a = np.array([[-7, 0, 13], [100, -128, 5]], np.int32)
    b = np.array([6, -1, 9], np.int32)
    s = np.array([0, 3, 31], np.int32)
    f = np.array([-2.5, 1.25, 3.0], np.float32)
    out = check_text_model(MODEL, {"a": a, "b": b, "s": s, "f": f}, tmp_path)
    assert out[1].tolist() == [[-3, 0, 1], [0, 0, 1]]
    np.testing.assert_array_equal(out[2], [-0.25, 0.5, 0.0])
