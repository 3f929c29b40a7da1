"""Relay dtypes as C types."""

from __future__ import annotations

import numpy as np

C_TYPES = {
    "float32": "float",
    "float64": "double",
    "float16": "_Float16",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "bool": "uint8_t",
}


def c_type(dtype: str) -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise ValueError(f"no C type for dtype {dtype}") from None


def itemsize(dtype: str) -> int:
    return 1 if dtype == "bool" else np.dtype(dtype).itemsize


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def min_value(dtype: str) -> float | int:
    if is_float(dtype):
        return float("-inf")
    if dtype == "bool":
        return 0
    return int(np.iinfo(dtype).min)


def max_value(dtype: str) -> float | int:
    if is_float(dtype):
        return float("inf")
    if dtype == "bool":
        return 1
    return int(np.iinfo(dtype).max)
