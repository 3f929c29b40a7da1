"""nn.contrib_dense_pack (compiler/ops/dense_pack.py): dense against a weight packed NC[b]n or
NC[b]n[c]c, against numpy that packs the weight here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError
from tests.compiler.ops.relay_models import assert_round_trips, compiled_matches_interpreter

OP = "nn.contrib_dense_pack"
F32 = "float32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(data: Type, weight: Type, **attrs: object) -> Type:
    op = ops.get(OP)
    return op.type_rel([data, weight], op.make_attrs({"units": None, **attrs}))


def run(data: np.ndarray, weight: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(OP)
    a = op.make_attrs({"units": None, **attrs})
    ty = op.type_rel([TensorType(data.shape, str(data.dtype)), TensorType(weight.shape, str(weight.dtype))], a)
    out = op.reference([data, weight], a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


def pack(w: np.ndarray, block: int) -> np.ndarray:
    """(N, K) -> NC[block]n: packed[o, k, i] = w[o * block + i, k]."""
    n, k = w.shape
    return w.reshape(n // block, block, k).transpose(0, 2, 1)


def pack_vnni(w: np.ndarray, block: int, k_block: int) -> np.ndarray:
    """(N, K) -> NC[block]n[k_block]c: packed[o, ko, i, ki] = w[o * block + i, ko * k_block + ki]."""
    n, k = w.shape
    return w.reshape(n // block, block, k // k_block, k_block).transpose(0, 2, 1, 3)


def test_dense_pack_equals_dense_with_the_unpacked_weight() -> None:
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(3, 5)).astype(F32), rng.normal(size=(16, 5)).astype(F32)
    out = run(x, pack(w, 8), weight_layout="NC8n")
    assert out.shape == (3, 16)
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-6)


def test_vnni_packed_uint8_by_int8_accumulates_in_int32() -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, size=(2, 8)).astype("uint8")
    w = rng.integers(-128, 128, size=(16, 8)).astype("int8")
    out = run(x, pack_vnni(w, 16, 4), out_dtype="int32", weight_layout="NC16n4c")
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, x.astype(np.int64) @ w.astype(np.int64).T)


def test_dense_pack_output_units_and_dtype_follow_the_weight_and_out_dtype() -> None:
    assert infer(t(4, 6), t(2, 6, 8), weight_layout="NC8n") == t(4, 16)
    assert infer(t("?", 6), t("?", 6, 8), weight_layout="NC8n", units=None) == t("?", "?")
    assert infer(t(1, 8, dtype="uint8"), t(1, 2, 16, 4, dtype="int8"), out_dtype="int32",
                 weight_layout="NC16n4c") == t(1, 16, dtype="int32")
    assert infer(t(2, 3), t(3, 3, 1), units=3, weight_layout="NC1n") == t(2, 3)


def test_units_below_the_packed_count_keep_the_first_columns_of_a_padded_weight() -> None:
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(3, 5)).astype(F32), rng.normal(size=(13, 5)).astype(F32)
    padded = np.concatenate([w, np.zeros((3, 5), F32)])
    out = run(x, pack(padded, 8), units=13, weight_layout="NC8n")
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-6)
    assert infer(t("?", 5), t(2, 5, 8), units=13, weight_layout="NC8n") == t("?", 13)


def test_leading_dims_of_the_data_fold_into_rows_as_in_dense() -> None:
    rng = np.random.default_rng(4)
    x, w = rng.normal(size=(2, 3, 5)).astype(F32), rng.normal(size=(8, 5)).astype(F32)
    out = run(x, pack(w, 4), weight_layout="NC4n")
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-6)


def test_dense_pack_errors_name_the_op_and_the_problem() -> None:
    with pytest.raises(AttrError, match="requires attribute units"):
        ops.get(OP).make_attrs({})
    with pytest.raises(TypeRelationError, match=r"dense_pack: data float32 must have an axis of input units"):
        infer(t(), t(1, 4, 8), weight_layout="NC8n")
    with pytest.raises(TypeRelationError, match=r"weight Tensor\[\(8, 4\), float32\] must be 3-D"):
        infer(t(2, 4), t(8, 4), weight_layout="NC")
    with pytest.raises(TypeRelationError, match=r"weight_layout 'NC' does not describe the packed .* expected 'NC8n'"):
        infer(t(2, 4), t(1, 4, 8))
    with pytest.raises(TypeRelationError, match=r"weight_layout 'NC4n' does not describe .* expected 'NC8n'"):
        infer(t(2, 4), t(1, 4, 8), weight_layout="NC4n")
    with pytest.raises(TypeRelationError, match=r"5 input units but the weight Tensor\[\(1, 4, 8\), float32\] has 4"):
        infer(t(2, 5), t(1, 4, 8), weight_layout="NC8n")
    with pytest.raises(TypeRelationError, match="units=8 does not fit the 16 units .* last block of 8"):
        infer(t(2, 4), t(2, 4, 8), weight_layout="NC8n", units=8)
    with pytest.raises(TypeRelationError, match="units=17 does not fit the 16 units"):
        infer(t(2, 4), t(2, 4, 8), weight_layout="NC8n", units=17)


def test_dense_pack_attrs_and_pattern_follow_tvm() -> None:
    op = ops.get(OP)
    assert [(s.name, s.default) for s in op.attrs][1:] == [("out_dtype", ""), ("weight_layout", "NC")]
    assert op.attrs[0].name == "units"
    assert op.pattern is OpPattern.OUT_ELEMWISE_FUSABLE


# What x86's AlterOpLayout makes of a dense classifier head.
MODEL = """def @main(%x: Tensor[(2, 20), float32], %w: Tensor[(24, 20), float32], %b: Tensor[(24), float32]) {
  %0 = layout_transform(%w, src_layout="NC", dst_layout="NC8n");
  %1 = nn.contrib_dense_pack(%x, %0, units=None, out_dtype="float32", weight_layout="NC8n");
  %2 = nn.bias_add(%1, %b, axis=-1);
  nn.relu(%2)
}
"""


def test_model_with_packed_dense_compiles_and_matches_interpreter_and_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    shapes = {"x": (2, 20), "w": (24, 20), "b": (24,)}
    inputs = {name: rng.normal(size=shape).astype(F32) for name, shape in shapes.items()}
    (got,) = compiled_matches_interpreter(MODEL, inputs, tmp_path)
    expected = np.maximum(inputs["x"] @ inputs["w"].T + inputs["b"], 0)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call", [
    'nn.contrib_dense_pack(%x, %w, units=None, out_dtype="float32", weight_layout="NC8n")',
    'nn.contrib_dense_pack(%x, %w, units=16, weight_layout="NC8n")',
])
def test_dense_pack_attrs_round_trip_through_the_printer(call: str) -> None:
    assert_round_trips(f"def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(2, 4, 8), float32]) {{\n  {call}\n}}\n")
