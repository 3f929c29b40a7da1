"""compiler.frontend.onnx.registry: converters are found by op type and schema version."""

from __future__ import annotations

import onnx
import pytest

from compiler.frontend.onnx import importer  # noqa: F401  registers the converters
from compiler.frontend.onnx.registry import CONVERTERS, converter, lookup

# The operators issue 12 lists; each must have a converter for its schema at opset 13 to 21.
LISTED = """Conv ConvTranspose Gemm MatMul Add Sub Mul Div Pow Relu LeakyRelu Sigmoid Tanh Erf Gelu Softmax
LogSoftmax BatchNormalization LayerNormalization MaxPool AveragePool GlobalAveragePool Flatten Reshape
Transpose Squeeze Unsqueeze Concat Split Slice Gather ReduceMean ReduceSum ReduceMax ReduceMin Cast Clip Pad
Identity Dropout Constant Shape Where Equal Less Greater Sqrt Exp Log Neg Abs Min Max""".split()


@pytest.mark.parametrize("op_type", LISTED)
def test_every_listed_operator_converts_at_each_opset_from_13_to_21(op_type: str) -> None:
    for opset in range(13, 22):
        try:
            since = onnx.defs.get_schema(op_type, opset, "").since_version
        except onnx.defs.SchemaError:
            continue  # not defined yet at this opset (Gelu before 20)
        assert lookup(op_type, since) is not None, (op_type, opset, since)


def test_a_schema_version_not_listed_is_not_converted() -> None:
    assert lookup("Relu", 13) is not None
    assert lookup("Relu", 6) is None
    assert lookup("NoSuchOp", 13) is None


def test_registering_an_op_type_twice_is_refused() -> None:
    with pytest.raises(AssertionError, match="two converters for ONNX Relu"):
        converter("Relu", (13,))(lambda ctx: ctx.input(0))
    assert "Relu" in CONVERTERS
