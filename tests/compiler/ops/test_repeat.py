"""tile, repeat, reverse and reverse_sequence (compiler/ops/repeat.py)."""

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
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

F32 = "float32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    a = op.make_attrs(attrs)
    ty = op.type_rel([TensorType(x.shape, str(x.dtype)) for x in arrays], a)
    out = op.reference(list(arrays), a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


X = np.arange(6, dtype=F32).reshape(2, 3)


def test_tile_pads_the_shorter_of_shape_and_reps_with_ones() -> None:
    assert infer("tile", t(2, 3), reps=[2, 1, 2]) == t(2, 2, 6)
    assert infer("tile", t(2, 1, 3), reps=[4]) == t(2, 1, 12)
    np.testing.assert_array_equal(run("tile", X, reps=[2, 1, 2]), np.tile(X, (2, 1, 2)))
    np.testing.assert_array_equal(run("tile", X, reps=[3]), np.hstack([X, X, X]))


def test_tile_keeps_unknown_dims_unknown() -> None:
    assert infer("tile", t("?", 3), reps=[2, 2]) == t("?", 6)


def test_repeat_repeats_each_element_in_place() -> None:
    by_column = run("repeat", X, repeats=2, axis=1)
    np.testing.assert_array_equal(by_column, [[0, 0, 1, 1, 2, 2], [3, 3, 4, 4, 5, 5]])
    by_row = run("repeat", X, repeats=2, axis=-2)
    np.testing.assert_array_equal(by_row, [[0, 1, 2], [0, 1, 2], [3, 4, 5], [3, 4, 5]])
    assert infer("repeat", t("?", 3), repeats=3, axis=0) == t("?", 3)


def test_reverse_flips_one_axis() -> None:
    np.testing.assert_array_equal(run("reverse", X, axis=1), X[:, ::-1])
    np.testing.assert_array_equal(run("reverse", X, axis=-2), X[::-1])


def test_reverse_sequence_flips_each_rows_prefix_and_clamps_long_lengths() -> None:
    data = np.arange(12, dtype=F32).reshape(3, 4)
    lengths = np.array([2, 9, 0], dtype="int32")
    # Written out as TVM's topi defines it: a length <= 1 keeps the row, a length past the axis
    # flips the whole row, otherwise the first `length` elements are flipped.
    expected = np.array([[1, 0, 2, 3], [7, 6, 5, 4], [8, 9, 10, 11]], dtype=F32)
    np.testing.assert_array_equal(run("reverse_sequence", data, lengths), expected)


def test_reverse_sequence_with_seq_axis_before_batch_axis_and_negative_lengths() -> None:
    data = np.arange(12, dtype="int32").reshape(4, 3)
    lengths = np.array([3, -2, 1], dtype="int64")
    out = run("reverse_sequence", data, lengths, seq_axis=0, batch_axis=-1)
    expected = data.copy()
    expected[:3, 0] = data[2::-1, 0]
    np.testing.assert_array_equal(out, expected)


def test_repeat_family_patterns_follow_tvm() -> None:
    assert ops.get("tile").pattern is OpPattern.BROADCAST
    assert ops.get("repeat").pattern is OpPattern.BROADCAST
    assert ops.get("reverse").pattern is OpPattern.INJECTIVE
    assert ops.get("reverse_sequence").pattern is OpPattern.INJECTIVE
    attrs = ops.get("reverse_sequence").make_attrs({})
    assert (attrs["seq_axis"], attrs["batch_axis"]) == (1, 0)


@pytest.mark.parametrize(
    ("name", "types", "attrs", "message"),
    [
        ("tile", [t(2, 3)], {"reps": [2, 0]}, r"tile: reps \[2, 0\] must all be positive"),
        ("repeat", [t(2, 3)], {"repeats": 0, "axis": 0}, "repeat: repeats must be at least 1"),
        ("repeat", [t(2, 3)], {"repeats": 2, "axis": 2}, "repeat: axis 2 is out of range"),
        ("reverse", [t(2, 3)], {"axis": -3}, "reverse: axis -3 is out of range"),
        ("reverse_sequence", [t(2, 3), t(2, dtype="float32")], {}, "seq_lengths must be a 1-D tensor"),
        ("reverse_sequence", [t(2, 3), t(3, dtype="int32")], {}, "one length per batch"),
        ("reverse_sequence", [t(2, 3), t(2, dtype="int32")], {"seq_axis": 2}, "axis 2 is out of range"),
    ],
)
def test_repeat_family_misuse_is_a_type_error(
    name: str, types: list[Type], attrs: dict, message: str
) -> None:
    with pytest.raises(TypeRelationError, match=message):
        infer(name, *types, **attrs)


def test_repeat_and_reverse_need_their_axis() -> None:
    with pytest.raises(AttrError, match="requires attribute axis"):
        ops.get("reverse").make_attrs({})
    with pytest.raises(AttrError, match="requires attribute repeats"):
        ops.get("repeat").make_attrs({"axis": 0})


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %len: Tensor[(2), int32]) {
  %0 = tile(%x, reps=[2, 1]);
  %1 = repeat(%0, repeats=2, axis=-1);
  %2 = reverse(%1, axis=0);
  %3 = reverse_sequence(%x, %len, seq_axis=1, batch_axis=0);
  %4 = exp(%2);
  (%4, %3)
}
"""


def test_repeat_family_parses_prints_and_compiles_end_to_end(tmp_path: Path) -> None:
    mod = parse(MODEL)
    assert structural_equal(parse(astext(mod)), mod)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(F32)
    inputs = {"x": x, "len": np.array([3, 2], "int32")}
    expected = run_main(mod, inputs)
    export(lower(mod), tmp_path, MODEL)
    got = CompiledModule(tmp_path).run(inputs).outputs
    assert len(got) == len(expected) == 2
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5)
    np.testing.assert_allclose(got[0], np.exp(np.repeat(np.tile(x, (2, 1)), 2, axis=1)[::-1]), rtol=1e-5)
