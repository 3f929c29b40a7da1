"""compiler.frontend.onnx.ops_shape: data movement and value makers, interpreted against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from compiler.ir.types import ANY
from compiler.parser.printer import astext
from tests.compiler.frontend.onnx.onnx_models import interpret, model, single_node, tensor

RNG = np.random.default_rng(6)
X = RNG.standard_normal((2, 3, 4)).astype("float32")


def _i64(*values: int) -> np.ndarray:
    return np.array(values, dtype="int64")


def test_reshape_copies_zero_dims_and_infers_minus_one() -> None:
    m = single_node("Reshape", {"x": X}, initializers={"s": _i64(0, -1)})
    np.testing.assert_array_equal(interpret(m, {"x": X})[0], X.reshape(2, 12))


def test_reshape_with_allowzero_keeps_a_zero_dim() -> None:
    empty = np.zeros((0, 3), dtype="float32")
    m = single_node("Reshape", {"x": empty}, initializers={"s": _i64(3, 0)}, opset=14, allowzero=1)
    assert interpret(m, {"x": empty})[0].shape == (3, 0)


def test_reshape_with_a_runtime_shape_is_unsupported_naming_the_input() -> None:
    feeds = {"x": X, "shape": _i64(6, 4)}
    with pytest.raises(UnsupportedError, match=r"shape \(input 1, 'shape'\) must be a constant"):
        from_onnx(single_node("Reshape", feeds))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten_at_axis(axis: int) -> None:
    (got,) = interpret(single_node("Flatten", {"x": X}, axis=axis), {"x": X})
    a = axis % 3
    np.testing.assert_array_equal(got, X.reshape(int(np.prod(X.shape[:a])), -1))


def test_flatten_of_a_dynamic_batch_keeps_it_dynamic() -> None:
    m = model([helper.make_node("Flatten", ["x"], ["y"])], [tensor("x", "float32", ["n", 3, 4])],
              [tensor("y", "float32", ["n", 12])])
    assert from_onnx(m).module.main.body.checked_type.shape == (ANY, 12)
    np.testing.assert_array_equal(interpret(m, {"x": X})[0], X.reshape(2, 12))


def test_transpose_defaults_to_reversed_axes() -> None:
    np.testing.assert_array_equal(interpret(single_node("Transpose", {"x": X}), {"x": X})[0], X.T)
    (got,) = interpret(single_node("Transpose", {"x": X}, perm=[1, 0, 2]), {"x": X})
    np.testing.assert_array_equal(got, X.transpose(1, 0, 2))


def test_squeeze_and_unsqueeze_with_negative_axes() -> None:
    x = X.reshape(2, 1, 3, 1, 4)
    m = single_node("Squeeze", {"x": x}, initializers={"axes": _i64(1, -2)})
    np.testing.assert_array_equal(interpret(m, {"x": x})[0], X)
    m = single_node("Unsqueeze", {"x": X}, initializers={"axes": _i64(-1, 1)})
    np.testing.assert_array_equal(interpret(m, {"x": X})[0], X.reshape(2, 1, 3, 4, 1))


def test_concat_along_a_negative_axis() -> None:
    feeds = {"a": X, "b": X[:, :, :2]}
    (got,) = interpret(single_node("Concat", feeds, axis=-1), feeds)
    np.testing.assert_array_equal(got, np.concatenate([X, X[:, :, :2]], axis=-1))


def test_split_by_sizes_and_into_equal_parts() -> None:
    m = single_node("Split", {"x": X}, n_out=2, initializers={"split": _i64(1, 3)}, axis=2)
    a, b = interpret(m, {"x": X})
    np.testing.assert_array_equal(a, X[:, :, :1])
    np.testing.assert_array_equal(b, X[:, :, 1:])
    parts = interpret(single_node("Split", {"x": X}, n_out=3, axis=1), {"x": X})
    for k, part in enumerate(parts):
        np.testing.assert_array_equal(part, X[:, k:k + 1])


def test_split_into_uneven_parts_by_num_outputs() -> None:
    x = np.arange(7, dtype="float32")
    parts = interpret(single_node("Split", {"x": x}, n_out=3, opset=18, num_outputs=3), {"x": x})
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize(("starts", "ends", "axes", "steps"), [
    ((0, 1), (2, 3), (0, 2), (1, 1)),
    ((-3,), (10**9,), (2,), (1,)),
    ((3,), (-10**9,), (2,), (-1,)),
    ((2, 0), (0, 3), (1, 2), (-1, 2)),
])
def test_slice_clamps_and_steps_as_numpy(starts: tuple[int, ...], ends: tuple[int, ...], axes: tuple[int, ...],
                                         steps: tuple[int, ...]) -> None:
    init = {"starts": _i64(*starts), "ends": _i64(*ends), "axes": _i64(*axes), "steps": _i64(*steps)}
    (got,) = interpret(single_node("Slice", {"x": X}, initializers=init), {"x": X})
    index = [slice(None)] * 3
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a] = slice(s, e, st)
    np.testing.assert_array_equal(got, X[tuple(index)])


def test_gather_with_negative_indices() -> None:
    idx = _i64(0, -1, 1)
    m = single_node("Gather", {"x": X}, initializers={"i": idx}, axis=1)
    np.testing.assert_array_equal(interpret(m, {"x": X})[0], np.take(X, [0, 2, 1], axis=1))
    feeds = {"x": X, "i": idx}
    np.testing.assert_array_equal(interpret(single_node("Gather", feeds, axis=2), feeds)[0],
                                  np.take(X, [0, 3, 1], axis=2))


def test_gather_elements_picks_along_an_axis() -> None:
    idx = RNG.integers(-3, 3, size=(2, 2, 4)).astype("int64")
    feeds = {"x": X, "i": idx}
    (got,) = interpret(single_node("GatherElements", feeds, axis=1), feeds)
    np.testing.assert_array_equal(got, np.take_along_axis(X, np.where(idx < 0, idx + 3, idx), axis=1))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_modes(mode: str) -> None:
    pads = _i64(0, 1, 2, 0, 2, 1)
    init = {"pads": pads, "value": np.array(1.5, dtype="float32")} if mode == "constant" else {"pads": pads}
    (got,) = interpret(single_node("Pad", {"x": X}, initializers=init, mode=mode), {"x": X})
    width = [(0, 0), (1, 2), (2, 1)]
    want = np.pad(X, width, mode="constant", constant_values=1.5) if mode == "constant" else np.pad(X, width, mode=mode)
    np.testing.assert_array_equal(got, want)


def test_pad_with_negative_pads_crops() -> None:
    init = {"pads": _i64(0, -1, 1, 0, 0, -2)}
    (got,) = interpret(single_node("Pad", {"x": X}, initializers=init), {"x": X})
    np.testing.assert_array_equal(got, np.pad(X, [(0, 0), (0, 0), (1, 0)])[:, 1:, :-2])


def test_pad_mode_wrap_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="pad mode 'wrap'"):
        from_onnx(single_node("Pad", {"x": X}, initializers={"pads": _i64(0, 0, 1, 0, 0, 1)}, opset=19, mode="wrap"))


def test_shape_of_a_static_tensor_is_a_constant_and_honours_start_end() -> None:
    (got,) = interpret(single_node("Shape", {"x": X}), {"x": X})
    np.testing.assert_array_equal(got, _i64(2, 3, 4))
    (got,) = interpret(single_node("Shape", {"x": X}, opset=15, start=1, end=-1), {"x": X})
    np.testing.assert_array_equal(got, _i64(3))


def test_shape_of_a_dynamic_tensor_is_computed_at_run_time() -> None:
    m = model([helper.make_node("Shape", ["x"], ["s"])], [tensor("x", "float32", ["n", 3, 4])],
              [tensor("s", "int64", [3])])
    np.testing.assert_array_equal(interpret(m, {"x": X})[0], _i64(2, 3, 4))


def test_constant_and_constant_of_shape() -> None:
    m = model([helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0]),
               helper.make_node("ConstantOfShape", ["shape"], ["z"],
                                value=helper.make_tensor("v", 7, [1], [3])),
               helper.make_node("Add", ["x", "c"], ["y"])],
              [tensor("x", "float32", [2])], [tensor("y", "float32", [2]), tensor("z", "int64", [2, 2])],
              {"shape": _i64(2, 2)})
    y, z = interpret(m, {"x": np.zeros(2, dtype="float32")})
    np.testing.assert_array_equal(y, [1.0, 2.0])
    np.testing.assert_array_equal(z, np.full((2, 2), 3))


def test_expand_broadcasts_both_ways_and_tile_repeats() -> None:
    x = X[:, :1, :]
    m = single_node("Expand", {"x": x}, initializers={"s": _i64(3, 1)})
    np.testing.assert_array_equal(interpret(m, {"x": x})[0], x * np.ones((3, 1), dtype="float32"))
    m = single_node("Tile", {"x": X}, initializers={"r": _i64(1, 2, 1)})
    np.testing.assert_array_equal(interpret(m, {"x": X})[0], np.tile(X, (1, 2, 1)))


def test_range_of_constants() -> None:
    m = model([helper.make_node("Range", ["a", "b", "d"], ["r"])], [], [tensor("r", "float32", [4])],
              {"a": np.array(1.0, dtype="float32"), "b": np.array(3.0, dtype="float32"),
               "d": np.array(0.5, dtype="float32")})
    np.testing.assert_array_equal(interpret(m, {})[0], np.arange(1.0, 3.0, 0.5, dtype="float32"))


def test_range_takes_one_element_tensors_as_its_scalars() -> None:
    m = model([helper.make_node("Range", ["a", "b", "d"], ["r"])], [], [tensor("r", "int64", [3])],
              {"a": np.array([0]), "b": np.array([6]), "d": np.array([2])})
    np.testing.assert_array_equal(interpret(m, {})[0], [0, 2, 4])


def test_depth_to_space_in_both_modes_and_space_to_depth() -> None:
    x = np.arange(2 * 8 * 2 * 3, dtype="float32").reshape(2, 8, 2, 3)
    for mode in ("DCR", "CRD"):
        (got,) = interpret(single_node("DepthToSpace", {"x": x}, blocksize=2, mode=mode), {"x": x})
        if mode == "DCR":
            want = x.reshape(2, 2, 2, 2, 2, 3).transpose(0, 3, 4, 1, 5, 2).reshape(2, 2, 4, 6)
        else:
            want = x.reshape(2, 2, 2, 2, 2, 3).transpose(0, 1, 4, 2, 5, 3).reshape(2, 2, 4, 6)
        np.testing.assert_array_equal(got, want)
    y = x.reshape(2, 2, 4, 6)
    (got,) = interpret(single_node("SpaceToDepth", {"y": y}, blocksize=2), {"y": y})
    np.testing.assert_array_equal(got, y.reshape(2, 2, 2, 2, 3, 2).transpose(0, 3, 5, 1, 2, 4).reshape(2, 8, 2, 3))


def test_one_hot_with_negative_indices() -> None:
    idx = _i64(0, 2, -1)
    m = single_node("OneHot", {"i": idx}, initializers={"depth": _i64(4), "values": np.array([0.0, 5.0], dtype="float32")})
    np.testing.assert_array_equal(interpret(m, {"i": idx})[0], np.eye(4, dtype="float32")[[0, 2, 3]] * 5)


def test_cumsum_exclusive_and_reverse() -> None:
    x = np.array([1.0, 2.0, 3.0], dtype="float32")
    m = single_node("CumSum", {"x": x}, initializers={"axis": _i64(0)}, exclusive=1, reverse=1)
    np.testing.assert_array_equal(interpret(m, {"x": x})[0], [5.0, 3.0, 0.0])


def test_scatter_elements_with_add_reduction() -> None:
    data = np.zeros((2, 3), dtype="float32")
    idx = np.array([[0, 0], [2, -1]], dtype="int64")
    upd = np.array([[1.0, 2.0], [3.0, 4.0]], dtype="float32")
    feeds = {"d": data, "i": idx, "u": upd}
    (got,) = interpret(single_node("ScatterElements", feeds, opset=18, axis=1, reduction="add"), feeds)
    np.testing.assert_array_equal(got, [[3.0, 0.0, 0.0], [0.0, 0.0, 7.0]])


def test_gather_nd_takes_index_tuples_from_the_last_axis() -> None:
    idx = np.array([[0, 1], [1, 2]], dtype="int64")
    feeds = {"x": X, "i": idx}
    np.testing.assert_array_equal(interpret(single_node("GatherND", feeds), feeds)[0], X[[0, 1], [1, 2]])


def test_einsum_of_a_batched_product() -> None:
    b = RNG.standard_normal((2, 4, 5)).astype("float32")
    feeds = {"a": X, "b": b}
    (got,) = interpret(single_node("Einsum", feeds, equation="bij, bjk -> bik"), feeds)
    np.testing.assert_allclose(got, np.einsum("bij,bjk->bik", X, b), rtol=1e-5)


def test_window_functions_are_constants_of_their_size() -> None:
    m = model([helper.make_node("HannWindow", ["n"], ["w"], periodic=0)], [], [tensor("w", "float32", [5])],
              {"n": _i64(5)})
    np.testing.assert_allclose(interpret(m, {})[0], np.hanning(5), atol=1e-6)


def test_eye_like_with_a_diagonal_offset() -> None:
    x = np.zeros((3, 4), dtype="int32")
    (got,) = interpret(single_node("EyeLike", {"x": x}, k=1), {"x": x})
    np.testing.assert_array_equal(got, np.eye(3, 4, k=1, dtype="int32"))


def test_reverse_sequence_reverses_each_batch_entry_up_to_its_length() -> None:
    x = np.arange(12, dtype="float32").reshape(4, 3)  # (time, batch)
    lens = _i64(4, 2, 1)
    feeds = {"x": x, "lens": lens}
    (got,) = interpret(single_node("ReverseSequence", feeds, time_axis=0, batch_axis=1), feeds)
    want = x.copy()
    for b, n in enumerate(lens):
        want[:n, b] = x[:n, b][::-1]
    np.testing.assert_array_equal(got, want)


def test_slice_ending_at_a_dim_known_at_run_time_takes_a_prefix() -> None:
    # BERT's position_ids[:, :input_ids.size(1)] with a dynamic sequence length.
    n = helper.make_node
    nodes = [n("Shape", ["ids"], ["s"]), n("Gather", ["s", "one"], ["len"], axis=0),
             n("Unsqueeze", ["len", "zero"], ["end"]), n("Slice", ["pos", "zero", "end", "one1"], ["y"])]
    pos = np.arange(16, dtype="int64").reshape(1, 16)
    init = {"pos": pos, "one": np.array(1, dtype="int64"), "zero": _i64(0), "one1": _i64(1)}
    m = model(nodes, [tensor("ids", "int64", ["b", "s"])], [tensor("y", "int64", [1, "s"])], init)
    assert from_onnx(m).module.main.body.checked_type.shape == (1, ANY)  # type: ignore[attr-defined]
    for length in (5, 20):  # past the end, clamped as numpy's slices are
        ids = np.zeros((2, length), dtype="int64")
        np.testing.assert_array_equal(interpret(m, {"ids": ids})[0], pos[:, :length])


def test_slice_of_a_static_axis_of_a_dynamic_tensor_is_a_split() -> None:
    # torch's chunk on channels with a dynamic batch: strided_slice's kernel takes static shapes.
    m = single_node("Slice", {"x": X}, initializers={"st": _i64(1), "en": _i64(3), "ax": _i64(1)})
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    assert "split(" in astext(from_onnx(m).module)
    np.testing.assert_array_equal(interpret(m, {"x": X})[0], X[:, 1:3])
