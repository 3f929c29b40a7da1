"""ONNX element types ↔ our dtypes."""

from __future__ import annotations

from compiler.diagnostics import UnsupportedError
from compiler.ir.types import DTYPES, EXTRA_DTYPES

# TensorProto.DataType numbers (onnx.proto), those we have a dtype for.
_BY_CODE = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
}
_NAMES = {
    0: "UNDEFINED", 8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16",
    17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ",
    21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1",
}
assert all(d in DTYPES or d in EXTRA_DTYPES for d in _BY_CODE.values())


def dtype_of_code(code: int, what: str) -> str:
    """Our dtype for ONNX element type `code`; `what` names the tensor in the error."""
    dtype = _BY_CODE.get(code)
    if dtype is None:
        raise UnsupportedError(f"{what}: ONNX element type {_NAMES.get(code, code)} has no relaycc dtype")
    return dtype
