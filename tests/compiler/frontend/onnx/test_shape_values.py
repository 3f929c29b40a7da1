"""compiler.frontend.onnx.shape_values: shapes computed from `?` dims (Shape → Gather →
Unsqueeze → Concat) known element by element, so a Reshape of a model exported with a dynamic
batch states its target; and the function-level rules on their own."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from compiler.frontend.onnx.shape_values import DimOf, ShapeValue, of_shape, propagate, reshape_target
from compiler.ir.types import ANY
from compiler.parser.printer import astext
from tests.compiler.frontend.onnx.onnx_models import interpret, model, tensor

RNG = np.random.default_rng(31)


def _dims_of(source: str, picks: list[int], extra: list[str]) -> list[object]:
    """Shape(source) → Gather(k) → Unsqueeze for each pick, then Concat with `extra` constants."""
    n = helper.make_node
    nodes = [n("Shape", [source], ["s"])]
    parts = []
    for k in picks:
        nodes += [n("Gather", ["s", f"i{k}"], [f"g{k}"], axis=0), n("Unsqueeze", [f"g{k}", "zero"], [f"u{k}"])]
        parts.append(f"u{k}")
    nodes.append(n("Concat", [*parts, *extra], ["target"], axis=0))
    return nodes


def _channel_shuffle(groups: int = 2) -> object:
    """torch's x.view(n, g, c // g, h, w).transpose(1, 2).view(n, c, h, w) with `?` batch n."""
    n = helper.make_node
    nodes = _dims_of("x", [0, 1, 2, 3], [])
    # The first view's target: [n, g, c // g, h, w], c // g computed from the static channel dim.
    nodes = nodes[:-1] + [
        n("Div", ["g1", "groups"], ["cg"]), n("Unsqueeze", ["cg", "zero"], ["ucg"]),
        n("Concat", ["u0", "groups1", "ucg", "u2", "u3"], ["t5"], axis=0),
        n("Reshape", ["x", "t5"], ["r5"]),
        n("Transpose", ["r5"], ["tr"], perm=[0, 2, 1, 3, 4]),
        # The second view's target reuses x's dims: n is not the transposed tensor's own.
        n("Concat", ["u0", "u1", "u2", "u3"], ["t4"], axis=0),
        n("Reshape", ["tr", "t4"], ["y"]),
    ]
    init = {f"i{k}": np.array(k, dtype="int64") for k in range(4)}
    init |= {"zero": np.array([0], dtype="int64"), "groups": np.array(groups, dtype="int64"),
             "groups1": np.array([groups], dtype="int64")}
    return model(nodes, [tensor("x", "float32", ["n", 6, 2, 3])], [tensor("y", "float32", ["n", 6, 2, 3])], init)


def test_reshape_of_a_dynamic_batch_copies_it_or_infers_it() -> None:
    m = _channel_shuffle()
    text = astext(from_onnx(m).module)
    assert "newshape=[0, 2, 3, 2, 3]" in text  # x's own `?` dim at its own place: copied
    assert "newshape=[-1, 6, 2, 3]" in text  # another tensor's `?` dim, the only unknown: inferred
    for batch in (1, 3):
        x = RNG.standard_normal((batch, 6, 2, 3)).astype("float32")
        want = x.reshape(batch, 2, 3, 2, 3).transpose(0, 2, 1, 3, 4).reshape(batch, 6, 2, 3)
        np.testing.assert_array_equal(interpret(m, {"x": x})[0], want)


def test_static_dims_picked_from_a_dynamic_shape_fold_to_constants() -> None:
    # Gather(Shape(x), 1) of x: (?, 6, 2, 3) is 6, so Div by the groups folds at import.
    result = from_onnx(_channel_shuffle())
    assert "shape_of" not in astext(result.module)
    assert result.module.main.body.checked_type.shape == (ANY, 6, 2, 3)  # type: ignore[attr-defined]


def test_reshape_with_two_dims_unknown_at_import_is_unsupported_naming_the_input() -> None:
    # x.view(n, s * 2, -1) from y's dims: two elements no rule states.
    nodes = _dims_of("y", [0, 1], ["minus1"])
    nodes.append(helper.make_node("Reshape", ["x", "target"], ["out"]))
    init = {"i0": np.array(0, dtype="int64"), "i1": np.array(1, dtype="int64"),
            "zero": np.array([0], dtype="int64"), "minus1": np.array([-1], dtype="int64")}
    m = model(nodes, [tensor("x", "float32", ["a", "b", 4]), tensor("y", "float32", ["c", "d"])],
              [tensor("out", "float32", ["p", "q", "r"])], init)
    with pytest.raises(UnsupportedError, match=r"Reshape .*shape \(input 1, 'target'\) must be a constant"):
        from_onnx(m)


def test_of_shape_names_the_dynamic_dims_and_keeps_the_static_ones() -> None:
    assert of_shape("x", (ANY, 3, ANY), 0, 3) == ShapeValue((DimOf("x", 0), 3, DimOf("x", 2)), 1)
    assert of_shape("x", (ANY, 3, ANY), 1, 2) == ShapeValue((3,), 1)


def test_propagate_follows_gather_unsqueeze_concat_and_slice() -> None:
    shape = ShapeValue((DimOf("x", 0), 8, 4), 1)
    gathered = propagate("Gather", {"axis": 0}, [shape, np.array(0)])
    assert gathered == ShapeValue((DimOf("x", 0),), 0)
    unsqueezed = propagate("Unsqueeze", {}, [gathered, np.array([0])])
    assert propagate("Concat", {"axis": 0}, [unsqueezed, np.array([-1, 2])]) == \
        ShapeValue((DimOf("x", 0), -1, 2), 1)
    assert propagate("Slice", {}, [shape, np.array([1]), np.array([3])]) == ShapeValue((8, 4), 1)
    assert propagate("Softmax", {}, [shape]) is None


def test_shape_value_is_a_tensor_only_when_every_element_is_a_number() -> None:
    np.testing.assert_array_equal(ShapeValue((8,), 0).value("int64"), np.array(8, dtype="int64"))
    assert ShapeValue((DimOf("x", 0), 8), 1).value("int64") is None


def test_reshape_target_copies_own_dims_and_infers_a_single_other() -> None:
    own = ShapeValue((DimOf("x", 0), DimOf("x", 1), 2, 8), 1)
    assert reshape_target(own, "x", (ANY, ANY, 16)) == (0, 0, 2, 8)
    other = ShapeValue((DimOf("y", 0), 16), 1)
    assert reshape_target(other, "x", (ANY, 4, 4)) == (-1, 16)
    assert reshape_target(ShapeValue((DimOf("y", 0), -1), 1), "x", (ANY, 4)) is None
    assert reshape_target(ShapeValue((DimOf("y", 0), DimOf("y", 1)), 1), "x", (ANY, 4)) is None


def test_arithmetic_on_a_run_time_dim_leaves_an_element_reshape_infers() -> None:
    # torch's MultiheadAttention: q.view(tgt_len, bsz * num_heads, head_dim) with `?` bsz.
    n = helper.make_node
    nodes = _dims_of("x", [0], [])[:-1] + [
        n("Mul", ["g0", "heads"], ["bh"]), n("Unsqueeze", ["bh", "zero"], ["ubh"]),
        n("Concat", ["len", "ubh", "hd"], ["target"], axis=0), n("Reshape", ["x", "target"], ["y"]),
    ]
    init = {"i0": np.array(0, dtype="int64"), "zero": np.array([0], dtype="int64"),
            "heads": np.array(2, dtype="int64"), "len": np.array([5], dtype="int64"),
            "hd": np.array([4], dtype="int64")}
    m = model(nodes, [tensor("x", "float32", ["b", 5, 8])], [tensor("y", "float32", [5, "bh", 4])], init)
    x = RNG.standard_normal((3, 5, 8)).astype("float32")
    np.testing.assert_array_equal(interpret(m, {"x": x})[0], x.reshape(5, 6, 4))


def test_arithmetic_and_casts_on_shape_values() -> None:
    batch = ShapeValue((DimOf("x", 0), 7), 1)
    assert propagate("Mul", {}, [batch, np.array(2)]) == ShapeValue((None, 14), 1)
    assert propagate("Div", {}, [ShapeValue((-7, DimOf("x", 1)), 1), np.array([2, 2])]) == ShapeValue((-3, None), 1)
    assert propagate("Cast", {"to": 6}, [batch]) == batch  # to int32
    assert propagate("Cast", {"to": 1}, [batch]) is None  # to float: arithmetic after it is a float's
