"""compiler.frontend.onnx.ops_control: If and Scan with their subgraphs inlined."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from tests.compiler.frontend.onnx.onnx_models import compile_and_run, interpret, model, tensor


def _branch(name: str, op: str, out: str) -> object:
    # Each branch reads the enclosing graph's `x`, as ONNX scoping allows.
    node = helper.make_node(op, ["x"], [out])
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [3])])


def _if_model(cond_as_input: bool) -> object:
    node = helper.make_node("If", ["c"], ["y"], then_branch=_branch("then", "Neg", "t"),
                            else_branch=_branch("else", "Abs", "e"))
    inputs = [tensor("x", "float32", [3])] + ([tensor("c", "bool", [1])] if cond_as_input else [])
    init = {} if cond_as_input else {"c": np.array([True])}
    return model([node], inputs, [tensor("y", "float32", [3])], init)


X = np.array([1.5, -2.0, 0.25], dtype="float32")


def test_if_on_a_runtime_condition_compiles_to_both_arms(tmp_path: Path) -> None:
    m = _if_model(cond_as_input=True)
    np.testing.assert_array_equal(compile_and_run(m, {"x": X, "c": np.array([True])}, tmp_path / "t")[0], -X)
    np.testing.assert_array_equal(compile_and_run(m, {"x": X, "c": np.array([False])}, tmp_path / "f")[0], np.abs(X))


def test_if_on_a_known_condition_keeps_only_its_branch() -> None:
    imported = from_onnx(_if_model(cond_as_input=False))
    assert "abs" not in str(imported.module["main"].body.op)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(interpret(_if_model(cond_as_input=False), {"x": X})[0], -X)


def test_if_whose_branches_differ_in_type_is_unsupported() -> None:
    shorter = helper.make_graph([helper.make_node("Slice", ["x", "s", "e"], ["o"])], "else", [],
                                [helper.make_tensor_value_info("o", TensorProto.FLOAT, [2])],
                                [helper.make_tensor("s", TensorProto.INT64, [1], [0]),
                                 helper.make_tensor("e", TensorProto.INT64, [1], [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=_branch("then", "Neg", "t"), else_branch=shorter)
    m = model([node], [tensor("x", "float32", [3]), tensor("c", "bool", [])], [tensor("y", "float32", [3])])
    with pytest.raises(UnsupportedError, match=r"If .*output 0 is Tensor\[\(3\), float32\] in then_branch "
                       r"and Tensor\[\(2\), float32\] in else_branch"):
        from_onnx(m)


def test_scan_carries_its_state_and_stacks_reversed_outputs() -> None:
    # body: state' = state + row; out = state' * 2, scanned from the last row, stacked in reverse.
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "row"], ["s2"]), helper.make_node("Mul", ["s2", "two"], ["o"])], "body",
        [tensor("s", "float32", [2]), tensor("row", "float32", [2])],
        [tensor("s2", "float32", [2]), tensor("o", "float32", [2])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    node = helper.make_node("Scan", ["s0", "xs"], ["final", "outs"], body=body, num_scan_inputs=1,
                            scan_input_directions=[1], scan_output_directions=[1])
    m = model([node], [tensor("s0", "float32", [2]), tensor("xs", "float32", [4, 2])],
              [tensor("final", "float32", [2]), tensor("outs", "float32", [4, 2])], opset=17)
    s0 = np.array([1.0, -1.0], dtype="float32")
    xs = np.arange(8, dtype="float32").reshape(4, 2)
    final, outs = interpret(m, {"s0": s0, "xs": xs})
    running = s0 + np.cumsum(xs[::-1], axis=0)
    np.testing.assert_allclose(final, running[-1])
    np.testing.assert_allclose(outs, (running * 2)[::-1])


def test_unsupported_ops_inside_a_subgraph_are_listed_with_the_rest() -> None:
    inner = helper.make_graph([helper.make_node("NonZero", ["x"], ["nz"])], "then", [],
                              [helper.make_tensor_value_info("nz", TensorProto.INT64, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner)
    m = model([node, helper.make_node("Det", ["x"], ["d"])], [tensor("x", "float32", [3]), tensor("c", "bool", [])],
              [tensor("y", "int64", [1, 3]), tensor("d", "float32", [])])
    with pytest.raises(UnsupportedError, match="uses 3 unsupported operator nodes: NonZero .*NonZero .*Det"):
        from_onnx(m)
