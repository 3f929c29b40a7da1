"""compiler.frontend.onnx.dtypes: ONNX element types to ours."""

from __future__ import annotations

import pytest
from onnx import TensorProto

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx.dtypes import dtype_of_code


@pytest.mark.parametrize(("code", "dtype"), [
    (TensorProto.FLOAT, "float32"), (TensorProto.INT64, "int64"), (TensorProto.BOOL, "bool"),
    (TensorProto.FLOAT16, "float16"), (TensorProto.UINT8, "uint8"), (TensorProto.DOUBLE, "float64"),
])
def test_element_types_we_have(code: int, dtype: str) -> None:
    assert dtype_of_code(code, "x") == dtype


@pytest.mark.parametrize(("code", "name"), [(TensorProto.BFLOAT16, "BFLOAT16"), (TensorProto.STRING, "STRING"),
                                            (TensorProto.FLOAT8E4M3FN, "FLOAT8E4M3FN")])
def test_element_types_we_lack_are_unsupported_by_name(code: int, name: str) -> None:
    with pytest.raises(UnsupportedError, match=f"input 'x': ONNX element type {name} has no relaycc dtype"):
        dtype_of_code(code, "input 'x'")
