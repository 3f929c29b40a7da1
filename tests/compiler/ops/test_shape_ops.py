"""arange, shape_of, ndarray_size and the *_like ops (compiler/ops/shape_ops.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.driver import export, lower
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError
from compiler.parser import parse
from compiler.passes.infer_type import TypeCheckError
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

F32 = "float32"
I32 = "int32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    a = op.make_attrs(attrs)
    types = [TensorType(x.shape, str(x.dtype)) for x in arrays]
    ty = op.type_rel(types, a, list(arrays)) if op.extras.get("constant_args") else op.type_rel(types, a)
    out = op.reference(list(arrays), a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


def main_type(text: str) -> Type:
    return parse(text)["main"].result_type


def test_arange_length_is_static_only_for_constant_inputs() -> None:
    const = '#[version = "0.0.5"]\ndef @main() { arange(1f, 10f, 3f, dtype="float32") }'
    assert main_type(const) == t(3)
    dynamic = (
        '#[version = "0.0.5"]\ndef @main(%n: Tensor[(), int32]) { arange(0, %n, 1, dtype="int32") }'
    )
    assert main_type(dynamic) == t("?", dtype=I32)
    # Without values the relation cannot know the length either.
    assert infer("arange", t(), t(), t(), dtype=F32) == t("?")


def test_arange_counts_ceil_of_span_over_step_and_steps_down() -> None:
    up = run("arange", *(np.array(v, I32) for v in (1, 10, 3)), dtype=I32)
    np.testing.assert_array_equal(up, [1, 4, 7])
    down = run("arange", *(np.array(v, "int64") for v in (5, -1, -2)), dtype="int64")
    np.testing.assert_array_equal(down, [5, 3, 1])
    out = run("arange", *(np.array(v, F32) for v in (0.0, 1.0, 0.25)), dtype=F32)
    np.testing.assert_array_equal(out, [0.0, 0.25, 0.5, 0.75])


def test_arange_with_constant_inputs_that_give_no_elements_is_a_type_error() -> None:
    text = '#[version = "0.0.5"]\ndef @main() { arange(5f, 1f, 1f, dtype="float32") }'
    with pytest.raises(TypeCheckError, match="arange: start 5.0, stop 1.0 and step 1.0 give no elements"):
        parse(text)


@pytest.mark.parametrize(("start", "stop", "step"), [("5f", "-inff", "-2f"), ("0f", "inff", "1f"), ("0f", "1e30f", "1e-30f")])
def test_arange_whose_constant_inputs_give_no_finite_count_is_a_type_error(start: str, stop: str, step: str) -> None:
    # Found by make fuzz: the count went to int() and raised OverflowError, a crash.
    text = f'#[version = "0.0.5"]\ndef @main() {{ arange({start}, {stop}, {step}, dtype="float32") }}'
    with pytest.raises(TypeCheckError, match="give no finite element count"):
        parse(text)


def test_arange_inputs_must_be_scalars_of_the_dtype_attr() -> None:
    with pytest.raises(TypeRelationError, match="arange: stop must be a 0-d float32 tensor"):
        infer("arange", t(), t(dtype=I32), t(), dtype=F32)
    with pytest.raises(TypeRelationError, match="arange: start must be a 0-d"):
        infer("arange", t(2), t(), t(), dtype=F32)
    with pytest.raises(AttrError, match="requires attribute dtype"):
        ops.get("arange").make_attrs({})


def test_shape_of_and_ndarray_size_report_the_static_shape() -> None:
    x = np.zeros((2, 3, 4), "int8")
    assert run("shape_of", x).tolist() == [2, 3, 4] and run("shape_of", x).dtype == np.int32
    assert run("shape_of", x, dtype="int64").dtype == np.int64
    assert run("ndarray_size", x).tolist() == 24
    assert infer("shape_of", t("?", 3)) == t(2, dtype=I32)
    assert infer("ndarray_size", t("?", 3), dtype="int64") == t(dtype="int64")


def test_reshape_like_replaces_a_span_of_dims() -> None:
    x = np.arange(24, dtype=F32).reshape(2, 3, 4)
    out = run("reshape_like", x, np.zeros((5, 12, 7), F32), lhs_begin=1, rhs_begin=1, rhs_end=2)
    np.testing.assert_array_equal(out, x.reshape(2, 12))
    assert infer("reshape_like", t(6, 5), t(2, 3, 1), lhs_end=-1, rhs_end=-1) == t(2, 3, 5)
    assert infer("reshape_like", t(2, 6), t(3, 4, dtype=I32)) == t(3, 4)


def test_broadcast_to_like_takes_the_like_type() -> None:
    x = np.array([[1.0], [2.0]], F32)
    out = run("broadcast_to_like", x, np.zeros((3, 2, 2), F32))
    np.testing.assert_array_equal(out, np.broadcast_to(x, (3, 2, 2)))
    assert infer("broadcast_to_like", t(1, 3), t("?", 3)) == t("?", 3)


def test_collapse_sum_like_sums_the_broadcast_dims() -> None:
    x = np.arange(24, dtype=F32).reshape(2, 3, 4)
    out = run("collapse_sum_like", x, np.zeros((3, 1), F32))
    np.testing.assert_array_equal(out, x.sum(axis=(0, 2)).reshape(3, 1))
    assert run("collapse_sum_like", x.astype(I32), np.zeros((), I32)).tolist() == x.sum()


def test_slice_like_cuts_the_leading_or_listed_axes() -> None:
    x = np.arange(20, dtype=F32).reshape(4, 5)
    np.testing.assert_array_equal(run("slice_like", x, np.zeros((2, 3), I32)), x[:2, :3])
    np.testing.assert_array_equal(run("slice_like", x, np.zeros((2, 3), I32), axes=[-1]), x[:, :3])
    np.testing.assert_array_equal(run("slice_like", x, np.zeros((3,), F32)), x[:3])


def test_full_like_casts_the_fill_value_to_the_data_dtype() -> None:
    out = run("full_like", np.zeros((2, 2), "int8"), np.array(7.9, F32))
    assert out.dtype == np.int8 and out.tolist() == [[7, 7], [7, 7]]


def test_shape_ops_patterns_follow_tvm() -> None:
    patterns = {
        "arange": OpPattern.OPAQUE,
        "shape_of": OpPattern.OPAQUE,
        "ndarray_size": OpPattern.INJECTIVE,
        "reshape_like": OpPattern.INJECTIVE,
        "broadcast_to_like": OpPattern.BROADCAST,
        "collapse_sum_like": OpPattern.COMM_REDUCE,
        "slice_like": OpPattern.INJECTIVE,
        "full_like": OpPattern.ELEMWISE,
    }
    assert {name: ops.get(name).pattern for name in patterns} == patterns
    assert ops.get("shape_of").make_attrs({})["dtype"] == "int32"
    assert ops.get("ndarray_size").make_attrs({})["dtype"] == "int32"


@pytest.mark.parametrize(
    ("name", "types", "attrs", "message"),
    [
        ("reshape_like", [t(2, 3), t(4, 2)], {}, r"cannot reshape \(2, 3\) \(6 elements\) to \(4, 2\)"),
        ("reshape_like", [t(2, 3), t(6)], {"lhs_begin": 3}, "lhs_begin=3, lhs_end=None do not select dims"),
        ("broadcast_to_like", [t(2, 3), t(3)], {}, r"does not broadcast to Tensor\[\(3\)"),
        ("broadcast_to_like", [t(3), t(2, 3, dtype=I32)], {}, "must have one dtype"),
        ("broadcast_to_like", [t(2), t(3)], {}, "do not broadcast"),
        ("collapse_sum_like", [t(3), t(2, 3)], {}, "cannot collapse"),
        ("slice_like", [t(2, 3), t(3, 3)], {}, r"dim 0 of shape_like \(3, 3\) exceeds"),
        ("slice_like", [t(2, 3), t(2)], {"axes": [1]}, "axis 1 exceeds the rank 1"),
        ("slice_like", [t(2, 3), t(2)], {"axes": []}, "axes must not be empty"),
        ("full_like", [t(2, 3), t(1)], {}, "fill_value must be a scalar"),
        ("shape_of", [t(2)], {"dtype": "bool"}, "unsupported dtype 'bool'"),
    ],
)
def test_shape_ops_misuse_is_a_type_error(name: str, types: list[Type], attrs: dict, message: str) -> None:
    with pytest.raises(TypeRelationError, match=message):
        infer(name, *types, **attrs)


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32], %b: Tensor[(3, 1), float32], %s: Tensor[(5, 12), float16]) {
  %0 = arange(0f, 4f, 1f, dtype="float32");
  %1 = add(%x, %0);
  %2 = collapse_sum_like(%1, %b);
  %3 = broadcast_to_like(%2, %x);
  %4 = reshape_like(%3, %s, lhs_begin=1, lhs_end=None, rhs_begin=1, rhs_end=2);
  %5 = slice_like(%x, %b, axes=[-2]);
  %6 = full_like(%b, 2f);
  %7 = shape_of(%x, dtype="int64");
  %8 = ndarray_size(%x);
  (%4, %5, %6, %7, %8)
}
"""


def test_shape_ops_parse_print_and_compile_end_to_end(tmp_path: Path) -> None:
    mod = parse(MODEL)
    assert structural_equal(parse(astext(mod)), mod)
    rng = np.random.default_rng(0)
    inputs = {
        "x": rng.standard_normal((2, 3, 4)).astype(F32),
        "b": rng.standard_normal((3, 1)).astype(F32),
        "s": np.zeros((5, 12), "float16"),
    }
    expected = run_main(mod, inputs)
    export(lower(mod), tmp_path, MODEL)
    got = CompiledModule(tmp_path).run(inputs).outputs
    assert len(got) == len(expected) == 5
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    x = inputs["x"]
    summed = (x + np.arange(4, dtype=F32)).sum(axis=(0, 2)).reshape(3, 1)
    np.testing.assert_allclose(got[0], np.broadcast_to(summed, (2, 3, 4)).reshape(2, 12), rtol=1e-5)
    np.testing.assert_array_equal(got[1], x[:, :1, :])
    assert got[3].tolist() == [2, 3, 4] and got[4].tolist() == 24


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_arange_shape_rule_counts_the_run_time_range_in_compiled_c(dtype: str, tmp_path: Path) -> None:
    from compiler.backend.shape_func import DATA_DEPENDENT, lower_shape_func
    from compiler.ir.expr import Call, Function, Op, Var
    from compiler.passes.infer_type import infer_expr
    from tests.compiler.backend.prim_library import build_prim_library

    params = tuple(Var(name, TensorType((), dtype)) for name in ("start", "stop", "step"))
    func = Function(params, Call(Op.get("arange"), params, ops.get("arange").make_attrs({"dtype": dtype})))
    infer_expr(func)
    shape_func = lower_shape_func(func, "shape_func_arange")
    assert shape_func.param_states == (DATA_DEPENDENT,) * 3
    library = build_prim_library([shape_func.prim_func], tmp_path, "arange_rule")
    assert library.warnings == []
    cases = [(0, 5, 1), (1, 10, 3), (5, -1, -2), (3, 3, 1), (4, 0, 1)]
    if dtype == "float32":
        cases += [(0.5, 2.0, 0.25), (1.0, -1.0, -0.3)]
    for start, stop, step in cases:
        values = [np.array(v, dtype) for v in (start, stop, step)]
        expected = len(ops.get("arange").reference(values, ops.get("arange").make_attrs({"dtype": dtype})))
        (out,) = library.run("shape_func_arange", values)
        assert out.tolist() == [expected], (start, stop, step)
