"""compiler.frontend.onnx.context: what converters see of a node."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.frontend.onnx.context import NeedsConstant, NodeContext, normalize_axis
from compiler.ir.expr import Var
from compiler.ir.types import TensorType
from compiler.passes.infer_type import infer_expr


def _ctx() -> NodeContext:
    x = Var("x", TensorType((2, 3), "float32"))
    infer_expr(x)
    return NodeContext(op_type="Reshape", name="r", opset=17, since=14, attrs={"allowzero": 1},
                       inputs=[x, None], values=[None, None], input_names=["x", "shape"], num_outputs=1)


def test_a_required_value_that_is_not_known_names_the_input() -> None:
    with pytest.raises(NeedsConstant) as err:
        _ctx().const_input(1, "shape")
    assert err.value.input_name == "shape"
    assert "ONNX Reshape node 'r' (opset 17): shape (input 1, 'shape') must be a constant" in err.value.message


def test_op_builds_a_typed_call() -> None:
    ctx = _ctx()
    call = ctx.op("reshape", ctx.input(0), newshape=(3, 2))
    assert call.checked_type == TensorType((3, 2), "float32")
    assert ctx.int_attr("allowzero", 0) == 1 and ctx.shape(0) == (2, 3)
    assert ctx.const(np.arange(3)).checked_type == TensorType((3,), "int64")


def test_normalize_axis_counts_negative_axes_from_the_back() -> None:
    assert normalize_axis(-1, 4) == 3 and normalize_axis(2, 4) == 2
