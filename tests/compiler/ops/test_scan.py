"""cumsum and cumprod (compiler/ops/scan.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops import OpPattern, TypeRelationError
from tests.compiler.ops.domain_check import check_domain_draws
from tests.compiler.ops.relay_text import check_text_model

SCANS = ["cumsum", "cumprod"]


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    result = op.reference(list(arrays), op.make_attrs(attrs))
    assert isinstance(result, np.ndarray)
    return result


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


@pytest.mark.parametrize("name", SCANS)
def test_scans_are_opaque_with_tvm_defaults(name: str) -> None:
    op = ops.get(name)
    assert op.pattern == OpPattern.OPAQUE and op.kernel is not None
    assert dict(op.make_attrs({})) == {"axis": None, "dtype": None, "exclusive": False}


def test_cumsum_without_axis_scans_the_flattened_data() -> None:
    x = np.array([[1, 2], [3, 4]], np.int32)
    assert run("cumsum", x).tolist() == [1, 3, 6, 10]
    assert infer("cumsum", TensorType((2, 3), "float32")) == TensorType((6,), "float32")
    assert infer("cumprod", TensorType((ANY, 3), "float32")) == TensorType((ANY,), "float32")


def test_cumsum_along_an_axis_keeps_the_shape() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run("cumsum", x, axis=1), [[0, 1, 3], [3, 7, 12]])
    np.testing.assert_array_equal(run("cumsum", x, axis=-2), [[0, 1, 2], [3, 5, 7]])


def test_cumsum_exclusive_shifts_by_one_and_starts_at_zero() -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
    assert run("cumsum", x, axis=1, exclusive=True).tolist() == [[0, 1, 3], [0, 4, 9]]
    assert run("cumsum", x, exclusive=True).tolist() == [0, 1, 3, 6, 10, 15]


def test_cumprod_exclusive_starts_at_one() -> None:
    x = np.array([2.0, 3.0, 4.0], np.float32)
    np.testing.assert_array_equal(run("cumprod", x, axis=0), [2.0, 6.0, 24.0])
    np.testing.assert_array_equal(run("cumprod", x, axis=0, exclusive=True), [1.0, 2.0, 6.0])


def test_exclusive_none_means_inclusive() -> None:
    x = np.array([1, 2, 3], np.int32)
    assert run("cumsum", x, exclusive=None).tolist() == [1, 3, 6]


def test_dtype_converts_before_accumulating() -> None:
    x = np.array([100, 100, -7], np.int8)
    assert run("cumsum", x, axis=0).tolist() == [100, -56, -63]  # wraps in int8
    out = run("cumsum", x, axis=0, dtype="int32")
    assert out.dtype == np.int32 and out.tolist() == [100, 200, 193]
    assert infer("cumsum", TensorType((3,), "bool"), axis=0, dtype="int64") == TensorType((3,), "int64")


def test_scans_reject_bad_axes_dtypes_and_scalars() -> None:
    with pytest.raises(TypeRelationError, match="cumsum: axis 2 is out of range for rank 2"):
        infer("cumsum", TensorType((2, 3), "float32"), axis=2)
    with pytest.raises(TypeRelationError, match='cumprod: unknown dtype "int3"'):
        infer("cumprod", TensorType((2, 3), "float32"), dtype="int3")
    with pytest.raises(TypeRelationError, match="cumsum: cannot accumulate in bool"):
        infer("cumsum", TensorType((2,), "bool"))
    with pytest.raises(TypeRelationError, match="cumprod: axis=None flattens the data, which needs rank >= 1"):
        infer("cumprod", TensorType((), "float32"))


@pytest.mark.parametrize("name", SCANS)
def test_domain_draws_type_check(name: str) -> None:
    drawn = check_domain_draws(ops.get(name))
    assert {sample.attrs["exclusive"] for sample in drawn} == {False, True, None}
    assert any(sample.attrs["axis"] is None for sample in drawn)


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32], %n: Tensor[(5), int8]) {
  %0 = cumsum(%x, axis=1);
  %1 = cumprod(%x, exclusive=True);
  %2 = cumsum(%n, dtype="int32", exclusive=True);
  %3 = cumprod(%x, axis=-1, dtype="float64");
  (%0, %1, %2, %3)
}
"""


def test_text_model_of_scans_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(0.8, 1.2, (2, 3, 4)).astype(np.float32)
    n = np.array([100, 100, 100, -5, 1], np.int8)
    out = check_text_model(MODEL, {"x": x, "n": n}, tmp_path)
    np.testing.assert_allclose(out[0], np.cumsum(x, axis=1), rtol=1e-6)
    assert out[2].tolist() == [0, 100, 200, 300, 295]
    assert out[3].dtype == np.float64
