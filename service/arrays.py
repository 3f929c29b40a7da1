"""Arrays on the wire: base64 of an .npz archive, or JSON nested lists.

JSON has no NaN or infinity, so non-finite floats travel as the strings "NaN", "Infinity" and
"-Infinity" (the spelling JavaScript and JSON5 use); numpy reads those strings back.
Pickled objects are never loaded.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import sys
import zipfile
from collections.abc import Mapping
from typing import IO

import numpy as np

from compiler.diagnostics import InputError

# A JSON tensor: a number, a bool, one of the non-finite spellings, or a list of those.
JSONTensor = float | int | bool | str | list["JSONTensor"]

_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
# The element limit for archives the service wrote itself (stored params, run results).
NO_LIMIT = sys.maxsize


class TooManyElements(InputError):
    """Arrays whose headers declare more elements than the caller allows."""


def decode_npz(data: bytes, what: str, max_elements: int) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive by name; anything else is an InputError naming `what`.

    Every member's header is read before its data, so an archive declaring more than
    `max_elements` elements in all is refused (TooManyElements) before anything is allocated.
    """
    arrays: dict[str, np.ndarray] = {}
    total = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    raise InputError(f"{what}: unexpected member {info.filename!r} in the .npz archive")
                name = info.filename[: -len(".npy")]
                with archive.open(info) as member:
                    shape, dtype = _npy_header(member)
                if dtype.hasobject:
                    raise InputError(f"{what}: array {name!r} holds Python objects")
                total += math.prod(shape)
                if total > max_elements:
                    raise TooManyElements(f"{what}: more than {max_elements} elements in all")
                with archive.open(info) as member:
                    arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise InputError(f"{what}: cannot read arrays: {err}") from None
    return arrays


def _npy_header(stream: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f".npy format version {version} is not supported")
    return tuple(shape), dtype


def decode_b64_npz(text: str, what: str, max_elements: int) -> dict[str, np.ndarray]:
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"{what}: not valid base64") from None
    return decode_npz(data, what, max_elements)


def encode_npz(arrays: Mapping[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return buffer.getvalue()


def encode_b64_npz(arrays: Mapping[str, np.ndarray]) -> str:
    return base64.b64encode(encode_npz(arrays)).decode("ascii")


def from_json(value: JSONTensor, dtype: str, what: str) -> np.ndarray:
    """A JSON tensor as an array of `dtype`; ragged or non-numeric data is an InputError."""
    try:
        return np.asarray(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as err:
        raise InputError(f"{what}: cannot read as a {dtype} tensor: {err}") from None


def to_json(array: np.ndarray) -> JSONTensor:
    """Nested lists of Python numbers; non-finite floats become their string spellings."""
    array = np.asarray(array)
    if array.dtype.kind in "fc" and not np.all(np.isfinite(array)):
        return _with_non_finite(array.astype(object).tolist())
    return array.tolist()


def _with_non_finite(value: JSONTensor) -> JSONTensor:
    # Iterative: a tensor's nesting is its rank, but results may be wide; a stack keeps it flat.
    if not isinstance(value, list):
        return _spell(value)
    root: list[JSONTensor] = value
    stack = [root]
    while stack:
        items = stack.pop()
        for index, item in enumerate(items):
            if isinstance(item, list):
                stack.append(item)
            else:
                items[index] = _spell(item)
    return root


def _spell(value: JSONTensor) -> JSONTensor:
    if isinstance(value, float) and not np.isfinite(value):
        return _NON_FINITE[str(value)]
    return value
