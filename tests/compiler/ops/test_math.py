"""Elementwise math (compiler/ops/math.py): trigonometric and hyperbolic functions, log2/log10,
sign, trunc, the float class predicates and the fast_* ops."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops import OpPattern, TypeRelationError
from tests.compiler.ops.relay_text import check_text_model
from tests.compiler.ops.domain_check import check_domain_draws

TRANSCENDENTAL = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "log2": np.log2, "log10": np.log10, "fast_exp": np.exp, "fast_tanh": np.tanh,
}
PREDICATES = ["isnan", "isinf", "isfinite"]
ALL = list(TRANSCENDENTAL) + ["fast_erf", "sign", "trunc"] + PREDICATES


def run(name: str, *arrays: np.ndarray) -> np.ndarray:
    op = ops.get(name)
    result = op.reference(list(arrays), op.make_attrs({}))
    assert isinstance(result, np.ndarray)
    return result


def infer(name: str, *types: Type) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs({}))


@pytest.mark.parametrize("name", ALL)
def test_math_ops_are_elementwise_without_attributes(name: str) -> None:
    op = ops.get(name)
    assert op.pattern == OpPattern.ELEMWISE and op.attrs == () and op.compute is not None
    assert op.domain is not None


@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL))
def test_transcendental_ops_match_numpy_in_float64(name: str) -> None:
    x = np.array([0.5, 0.25, 0.75], np.float32) + (1.0 if name == "acosh" else 0.0)
    np.testing.assert_allclose(run(name, x), TRANSCENDENTAL[name](x.astype(np.float64)), rtol=1e-6)


def test_fast_erf_is_the_exact_erf() -> None:
    out = run("fast_erf", np.array([0.0, 1.0, -2.0], np.float32))
    np.testing.assert_allclose(out, [0.0, math.erf(1.0), math.erf(-2.0)], rtol=1e-6)


@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL) + ["fast_erf"])
def test_transcendental_ops_reject_integer_tensors(name: str) -> None:
    with pytest.raises(TypeRelationError, match=f"{name} expects a float tensor"):
        infer(name, TensorType((2,), "int32"))


def test_sign_of_nan_is_zero_as_tvm_selects() -> None:
    x = np.array([np.nan, -np.inf, -0.0, 0.0, 2.5, -1e-30], np.float32)
    np.testing.assert_array_equal(run("sign", x), [0.0, -1.0, 0.0, 0.0, 1.0, -1.0])


def test_sign_of_integers_keeps_the_dtype() -> None:
    out = run("sign", np.array([-128, -1, 0, 7], np.int8))
    assert out.dtype == np.int8 and out.tolist() == [-1, -1, 0, 1]
    assert run("sign", np.array([0, 200], np.uint8)).tolist() == [0, 1]


def test_trunc_rounds_toward_zero_and_leaves_integers() -> None:
    np.testing.assert_array_equal(run("trunc", np.array([-2.7, -0.5, 0.5, 2.7], np.float64)), [-2.0, -0.0, 0.0, 2.0])
    assert run("trunc", np.array([-3, 4], np.int32)).tolist() == [-3, 4]


def test_predicates_classify_floats_and_return_bool() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], np.float16)
    assert run("isnan", x).tolist() == [True, False, False, False, False]
    assert run("isinf", x).tolist() == [False, True, True, False, False]
    assert run("isfinite", x).tolist() == [False, False, False, True, True]


def test_predicates_on_integers_are_constant() -> None:
    x = np.array([-5, 0, 9], np.int64)
    assert run("isnan", x).tolist() == [False] * 3
    assert run("isinf", x).tolist() == [False] * 3
    assert run("isfinite", x).tolist() == [True] * 3


@pytest.mark.parametrize("name", PREDICATES)
def test_predicate_types_are_bool_with_the_input_shape(name: str) -> None:
    assert infer(name, TensorType((ANY, 3), "float32")) == TensorType((ANY, 3), "bool")


@pytest.mark.parametrize("name", PREDICATES + ["sign", "trunc"])
def test_bool_tensors_are_rejected(name: str) -> None:
    with pytest.raises(TypeRelationError, match=f"{name} expects a float or int tensor"):
        infer(name, TensorType((2,), "bool"))


def test_math_ops_reject_tuples_and_extra_arguments() -> None:
    with pytest.raises(TypeRelationError, match="sin expects 1 arguments"):
        infer("sin", TensorType((2,), "float32"), TensorType((2,), "float32"))


@pytest.mark.parametrize("name", ALL)
def test_domain_draws_type_check_and_reach_special_values_where_they_matter(name: str) -> None:
    drawn = check_domain_draws(ops.get(name))
    with_specials = any(isinstance(sample.inputs[0], np.ndarray) for sample in drawn)
    assert with_specials == (name in PREDICATES + ["sign", "trunc"])


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %y: Tensor[(2, 4), float32]) {
  %0 = sin(%x);
  %1 = cos(%x);
  %2 = add(%0, %1);
  %3 = log2(%y);
  %4 = multiply(%2, %3);
  %5 = sign(%4);
  %6 = trunc(%5);
  %7 = isnan(%y);
  %8 = isfinite(%6);
  %9 = atanh(%0);
  %10 = fast_tanh(%9);
  (%6, %7, %8, %10)
}
"""


def test_text_model_of_math_ops_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, (2, 4)).astype(np.float32)
    y = rng.uniform(0.1, 4, (2, 4)).astype(np.float32)
    y[0, 0] = np.nan
    out = check_text_model(MODEL, {"x": x, "y": y}, tmp_path)
    assert out[1][0, 0] and not out[1][1, 1]
    assert out[0][0, 0] == 0.0  # sign(NaN) is 0


@pytest.mark.parametrize("name", ALL)
def test_calls_print_and_parse_back(name: str) -> None:
    from compiler.parser.printer import astext
    from compiler.ir.structural import structural_equal
    from compiler.parser import parse

    mod = parse(f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {{ {name}(%x) }}')
    assert structural_equal(parse(astext(mod)), mod)
