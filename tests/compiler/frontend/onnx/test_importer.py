"""compiler.frontend.onnx.importer: whole models built with onnx.helper, imported, compiled
(target c), run and compared with onnxruntime; graph inputs, initializers, names, `?` dims and
the errors a model we cannot take produces."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.diagnostics import InputError, UnsupportedError
from compiler.frontend.onnx import from_onnx, load_model
from compiler.ir.types import ANY
from compiler.parser import parse
from compiler.parser.printer import astext
from tests.compiler.frontend.onnx.onnx_models import compile_and_run, interpret, model, run_ort, tensor

RNG = np.random.default_rng(12)


def _w(*shape: int, scale: float = 0.2) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype("float32")


def _mlp() -> object:
    nodes = [
        helper.make_node("Gemm", ["gpu_0/data_0", "fc1.w", "fc1.b"], ["h1"], transB=1),
        helper.make_node("Relu", ["h1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "fc2.w"], ["m2"]),
        helper.make_node("Add", ["m2", "fc2.b"], ["h2"]),
        helper.make_node("Softmax", ["h2"], ["prob"], axis=-1),
    ]
    init = {"fc1.w": _w(32, 16), "fc1.b": _w(32), "fc2.w": _w(32, 10), "fc2.b": _w(10)}
    return model(nodes, [tensor("gpu_0/data_0", "float32", ["batch", 16])],
                 [tensor("prob", "float32", ["batch", 10])], init)


def _cnn() -> object:
    nodes = [
        helper.make_node("Conv", ["input.1", "c1.w", "c1.b"], ["c1"], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn.s", "bn.b", "bn.m", "bn.v"], ["b1"], epsilon=1e-3),
        helper.make_node("Relu", ["b1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p1", "c2.w"], ["c2"], auto_pad="SAME_UPPER", strides=[2, 2], group=2),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1),
    ]
    init = {
        "c1.w": _w(8, 3, 3, 3), "c1.b": _w(8),
        "bn.s": (1 + _w(8)).astype("float32"), "bn.b": _w(8), "bn.m": _w(8),
        "bn.v": (1 + np.abs(_w(8))).astype("float32"),
        "c2.w": _w(12, 4, 3, 3), "fc.w": _w(5, 12), "fc.b": _w(5),
    }
    return model(nodes, [tensor("input.1", "float32", [2, 3, 15, 15])], [tensor("logits", "float32", [2, 5])], init)


def _encoder_layer(seq: int = 6, d: int = 16, heads: int = 2, ffn: int = 32) -> object:
    hd = d // heads
    init = {
        "wq": _w(d, d), "wk": _w(d, d), "wv": _w(d, d), "wo": _w(d, d),
        "ln1.g": (1 + _w(d)).astype("float32"), "ln1.b": _w(d),
        "ln2.g": (1 + _w(d)).astype("float32"), "ln2.b": _w(d),
        "w1": _w(d, ffn), "b1": _w(ffn), "w2": _w(ffn, d), "b2": _w(d),
        "heads_shape": np.array([0, seq, heads, hd], dtype="int64"),
        "merge_shape": np.array([0, seq, d], dtype="int64"),
        "scale": np.array(1.0 / math.sqrt(hd), dtype="float32"),
        "sqrt2": np.array(math.sqrt(2.0), dtype="float32"),
        "one": np.array(1.0, dtype="float32"), "half": np.array(0.5, dtype="float32"),
    }
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "wq"], ["q0"]), n("MatMul", ["x", "wk"], ["k0"]), n("MatMul", ["x", "wv"], ["v0"]),
        n("Reshape", ["q0", "heads_shape"], ["q1"]), n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        n("Reshape", ["k0", "heads_shape"], ["k1"]), n("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        n("Reshape", ["v0", "heads_shape"], ["v1"]), n("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        n("MatMul", ["q", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
        n("Softmax", ["s1"], ["a"], axis=-1),
        n("MatMul", ["a", "v"], ["c0"]), n("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["c1", "merge_shape"], ["c2"]), n("MatMul", ["c2", "wo"], ["o"]),
        n("Add", ["x", "o"], ["res1"]),
        n("LayerNormalization", ["res1", "ln1.g", "ln1.b"], ["h1"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h1", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f1"]),
        # GELU in its Erf form, as exporters before opset 20 write it.
        n("Div", ["f1", "sqrt2"], ["g0"]), n("Erf", ["g0"], ["g1"]), n("Add", ["g1", "one"], ["g2"]),
        n("Mul", ["f1", "g2"], ["g3"]), n("Mul", ["g3", "half"], ["g4"]),
        n("MatMul", ["g4", "w2"], ["f2"]), n("Add", ["f2", "b2"], ["f3"]),
        n("Add", ["h1", "f3"], ["res2"]),
        n("LayerNormalization", ["res2", "ln2.g", "ln2.b"], ["y"], axis=-1, epsilon=1e-5),
    ]
    return model(nodes, [tensor("x", "float32", [2, seq, d])], [tensor("y", "float32", [2, seq, d])], init)


def _assert_compiled_matches_ort(m: object, feeds: dict[str, np.ndarray], outdir: Path) -> None:
    want = run_ort(m, feeds)  # type: ignore[arg-type]
    got = compile_and_run(m, feeds, outdir)  # type: ignore[arg-type]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_mlp_compiles_and_matches_onnxruntime(tmp_path: Path) -> None:
    x = RNG.standard_normal((3, 16)).astype("float32")
    _assert_compiled_matches_ort(_mlp(), {"gpu_0/data_0": x}, tmp_path)


def test_cnn_with_batch_norm_and_pools_compiles_and_matches_onnxruntime(tmp_path: Path) -> None:
    x = RNG.standard_normal((2, 3, 15, 15)).astype("float32")
    _assert_compiled_matches_ort(_cnn(), {"input.1": x}, tmp_path)


def test_transformer_encoder_layer_compiles_and_matches_onnxruntime(tmp_path: Path) -> None:
    x = RNG.standard_normal((2, 6, 16)).astype("float32")
    _assert_compiled_matches_ort(_encoder_layer(), {"x": x}, tmp_path)


def test_graph_inputs_become_main_params_with_sanitized_names_and_dim_param_as_any() -> None:
    result = from_onnx(_mlp())
    (param,) = result.module.main.params
    assert param.name_hint == "gpu_0_data_0"
    assert param.type_annotation.shape == (ANY, 16)
    assert result.onnx_names == {"gpu_0_data_0": "gpu_0/data_0"}
    assert result.params == {}


def test_imported_module_prints_as_relay_text_that_parses_back() -> None:
    m = _mlp()
    text = astext(from_onnx(m).module)
    assert "%gpu_0_data_0: Tensor[(?, 16), float32]" in text
    x = RNG.standard_normal((2, 16)).astype("float32")
    from compiler.runtime.interpreter import run_main

    (got,) = run_main(parse(text), {"gpu_0_data_0": x})
    (want,) = run_ort(m, {"gpu_0/data_0": x})  # type: ignore[arg-type]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_keep_params_leaves_initializers_as_params_except_values_read_at_import() -> None:
    m = _encoder_layer()
    result = from_onnx(m, keep_params=True)
    names = [p.name_hint for p in result.module.main.params]
    assert names[0] == "x"
    # Reshape's target shapes are read at import time; they are not runtime tensors.
    assert "heads_shape" not in names and "merge_shape" not in names
    assert {"wq", "ln1_g", "w1"} <= set(names)
    assert set(result.params) == set(names[1:])
    assert result.onnx_names["ln1_g"] == "ln1.g"
    np.testing.assert_array_equal(result.params["ln1_g"], numpy_helper.to_array(m.graph.initializer[4]))
    x = RNG.standard_normal((2, 6, 16)).astype("float32")
    from compiler.runtime.interpreter import run_main

    (got,) = run_main(result.module, {"x": x}, result.params)
    (want,) = run_ort(m, {"x": x})  # type: ignore[arg-type]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_names_that_collide_after_sanitizing_stay_distinct() -> None:
    nodes = [helper.make_node("Add", ["a.b", "a/b"], ["y"])]
    m = model(nodes, [tensor("a.b", "float32", [2]), tensor("a/b", "float32", [2])], [tensor("y", "float32", [2])])
    result = from_onnx(m)
    assert [p.name_hint for p in result.module.main.params] == ["a_b", "a_b_1"]
    assert result.onnx_names == {"a_b": "a.b", "a_b_1": "a/b"}


def test_several_graph_outputs_become_a_tuple_in_order() -> None:
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Abs", ["x"], ["a"])]
    m = model(nodes, [tensor("x", "float32", [3])], [tensor("a", "float32", [3]), tensor("n", "float32", [3])])
    x = np.array([-1.0, 2.0, -3.0], dtype="float32")
    got = interpret(m, {"x": x})
    np.testing.assert_array_equal(got[0], np.abs(x))
    np.testing.assert_array_equal(got[1], -x)


def test_shape_arithmetic_folds_to_constants_at_import() -> None:
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "zero"], ["batch"], axis=0),
        n("Unsqueeze", ["batch", "axes0"], ["b1"]),
        n("Concat", ["b1", "minus1"], ["target"], axis=0),
        n("Reshape", ["x", "target"], ["y"]),
    ]
    init = {"zero": np.array(0, dtype="int64"), "axes0": np.array([0], dtype="int64"),
            "minus1": np.array([-1], dtype="int64")}
    m = model(nodes, [tensor("x", "float32", [2, 3, 4])], [tensor("y", "float32", [2, 12])], init)
    text = astext(from_onnx(m).module)
    assert "reshape(%x, newshape=[2, -1])" in text
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_array_equal(interpret(m, {"x": x})[0], x.reshape(2, 12))


def test_unsupported_operators_are_listed_together_with_node_names_and_opset() -> None:
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["r"]),
        n("NonZero", ["r"], ["nz"], name="find"),
        n("Det", ["x"], ["d"], name="determinant"),
        n("Relu", ["d"], ["y"]),
    ]
    m = model(nodes, [tensor("x", "float32", [3, 3])], [tensor("y", "float32", []), tensor("nz", "int64", [2, None])])
    with pytest.raises(UnsupportedError) as err:
        from_onnx(m)
    message = err.value.message
    assert "2 unsupported operator nodes" in message
    assert "NonZero (node 'find', opset 17)" in message
    assert "Det (node 'determinant', opset 17)" in message


def test_operator_of_another_domain_is_unsupported() -> None:
    node = helper.make_node("FusedGemm", ["x"], ["y"], domain="com.microsoft")
    m = helper.make_model(
        helper.make_graph([node], "g", [tensor("x", "float32", [2])], [tensor("y", "float32", [2])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    with pytest.raises(UnsupportedError, match="com.microsoft.FusedGemm .*another domain"):
        from_onnx(m)


def test_opset_older_than_13_is_converted_by_onnx_version_converter() -> None:
    # Squeeze took its axes as an attribute until opset 13, as an input since.
    node = helper.make_node("Squeeze", ["x"], ["y"], axes=[1])
    m = helper.make_model(
        helper.make_graph([node], "g", [tensor("x", "float32", [2, 1])], [tensor("y", "float32", [2])]),
        opset_imports=[helper.make_opsetid("", 11)],
    )
    x = np.array([[1.5], [-2.0]], dtype=np.float32)
    np.testing.assert_array_equal(interpret(m, {"x": x})[0], x[:, 0])


def test_old_opset_the_converter_cannot_adapt_is_unsupported_with_its_reason() -> None:
    node = helper.make_node("Scatter", ["x"], ["y"])
    m = helper.make_model(
        helper.make_graph([node], "g", [tensor("x", "float32", [2])], [tensor("y", "float32", [2])]),
        opset_imports=[helper.make_opsetid("", 9)],
    )
    with pytest.raises(UnsupportedError, match=r"opset 9 is older than 13.*could not bring the model to opset 13: "
                       r"Scatter in opset 10 needs to have at least 3 inputs") as err:
        from_onnx(m)
    assert "/project/" not in err.value.message


def test_non_model_argument_is_an_input_error() -> None:
    with pytest.raises(InputError, match="expected an ONNX ModelProto, got str"):
        from_onnx("model.onnx")


def test_bytes_that_are_not_a_model_are_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"def @main() { 1 }")
    with pytest.raises(InputError, match="bad.onnx: not an ONNX model"):
        load_model(path)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_model(tmp_path / "absent.onnx")


def test_graph_input_of_a_dtype_we_lack_is_unsupported() -> None:
    node = helper.make_node("Identity", ["x"], ["y"])
    vi = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])
    m = helper.make_model(helper.make_graph([node], "g", [vi], [vi]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError, match="graph input 'x': ONNX element type BFLOAT16"):
        from_onnx(m)
