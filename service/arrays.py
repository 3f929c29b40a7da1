"""Arrays on the wire: base64 of an .npz archive, or JSON nested lists.

An .npz from a client is checked before it is decoded: only bool, integer and float arrays, and
their elements and bytes (item size included) against the service's limits, read from the zip
directory and the .npy headers; data is then read no further than the headers declare.

JSON has no NaN or infinity, so non-finite floats travel as the strings "NaN", "Infinity" and
"-Infinity" (the spelling JavaScript and JSON5 use); numpy reads those strings back.
Pickled objects are never loaded.

It stays at the top of service/, like problems.py, because every layer uses it: the API
(admission, running), the jobs (the worker, the work, the sandbox's entry) and the store.
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
from service.problems import ProblemError

# A JSON tensor: a number, a bool, one of the non-finite spellings, or a list of those.
JSONTensor = float | int | bool | str | list["JSONTensor"]

_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
# The limit for archives the service wrote itself (stored params, run results).
NO_LIMIT = sys.maxsize
# Array kinds that travel: bool, signed and unsigned integers, floats. Everything else (void,
# structured and subarray dtypes, objects, strings, datetimes, complex) is refused by its header.
_PLAIN_KINDS = "biuf"
# Bytes an .npy member may hold besides its data: the magic string and the header, which numpy
# itself caps at 10000 bytes unless told otherwise.
_NPY_OVERHEAD = 16 * 1024
# Members are read this much at a time into their arrays, never more than the header declares.
_CHUNK = 1 << 20


class OverLimit(InputError):
    """Arrays whose headers declare more than the caller allows; `setting` is the environment
    variable of the limit."""

    setting = ""


class TooManyElements(OverLimit):
    setting = "RELAYCC_MAX_TENSOR_ELEMENTS"


class TooManyBytes(OverLimit):
    setting = "RELAYCC_MAX_TENSOR_BYTES"


def over_limit_problem(err: OverLimit) -> ProblemError:
    """The answer to arrays over a limit: 413 `model-too-large`, naming the limit's variable."""
    return ProblemError.of("model-too-large", f"{err.message} ({err.setting})")


def decode_npz(data: bytes, what: str, max_elements: int = NO_LIMIT, max_bytes: int = NO_LIMIT) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive by name; anything else is an InputError naming `what`.

    Nothing is decompressed or allocated before the archive has been checked against the limits:
    first the sizes the zip directory declares, then every member's .npy header (its dtype must
    be plain bool or numeric, its elements and bytes, item size included, count against
    `max_elements` and `max_bytes` summed over all members). Each member is then read in chunks
    up to the size its header declares, so a member that holds more (or inflates to more) than
    it says never costs more memory than the limits allow. Pickles are never loaded.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            _check_declared_sizes(members, what, max_bytes)
            headers = [_checked_header(archive, info, what) for info in members]
            _check_totals(headers, what, max_elements, max_bytes)
            for header in headers:
                _check_complete(header, what)
            return {header.name: _read_data(archive, header, what) for header in headers}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError, RuntimeError) as err:
        raise InputError(f"{what}: cannot read arrays: {err}") from None


class _Member:
    __slots__ = ("info", "name", "shape", "fortran", "dtype", "elements", "nbytes", "offset")

    def __init__(self, info: zipfile.ZipInfo, name: str, shape: tuple[int, ...], fortran: bool,
                 dtype: np.dtype, offset: int):
        self.info = info
        self.name = name
        self.shape = shape
        self.fortran = fortran
        self.dtype = dtype
        self.elements = math.prod(shape)
        self.nbytes = self.elements * dtype.itemsize
        self.offset = offset  # where the data starts: the length of magic string and header


def _check_declared_sizes(members: list[zipfile.ZipInfo], what: str, max_bytes: int) -> None:
    """The zip directory's uncompressed sizes, before any member is opened: a member (or all of
    them) declaring more than the byte limit allows is refused without inflating anything."""
    if max_bytes >= NO_LIMIT:
        return
    allowed = max_bytes + _NPY_OVERHEAD * max(len(members), 1)
    declared = sum(info.file_size for info in members)
    if declared > allowed:
        raise TooManyBytes(
            f"{what}: the archive declares {declared} uncompressed bytes; the limit is {max_bytes} "
            "bytes of array data in all"
        )


def _checked_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo, what: str) -> _Member:
    if not info.filename.endswith(".npy"):
        raise InputError(f"{what}: unexpected member {info.filename!r} in the .npz archive")
    name = info.filename[: -len(".npy")]
    with archive.open(info) as member:
        shape, fortran, dtype = _npy_header(member)
        offset = member.tell()
    if dtype.hasobject:
        raise InputError(f"{what}: array {name!r} holds Python objects (dtype {dtype.str}); pickles are never loaded")
    if dtype.kind not in _PLAIN_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise InputError(
            f"{what}: array {name!r} has dtype {dtype.str!r}; only bool, integer and float arrays are accepted"
        )
    if any(dim < 0 for dim in shape):
        raise InputError(f"{what}: array {name!r} declares a negative dimension in shape {shape}")
    return _Member(info, name, shape, fortran, dtype, offset)


def _check_totals(headers: list[_Member], what: str, max_elements: int, max_bytes: int) -> None:
    elements = sum(header.elements for header in headers)
    if elements > max_elements:
        raise TooManyElements(f"{what}: more than {max_elements} elements in all")
    nbytes = sum(header.nbytes for header in headers)
    if nbytes > max_bytes:
        largest = max(headers, key=lambda header: header.nbytes)
        raise TooManyBytes(
            f"{what}: the arrays hold {nbytes} bytes in all (array {largest.name!r}: {largest.elements} "
            f"elements of {largest.dtype.itemsize} bytes); the limit is {max_bytes} bytes"
        )


def _check_complete(header: _Member, what: str) -> None:
    # A member shorter than its header says is refused before anything is allocated.
    if header.info.file_size < header.offset + header.nbytes:
        raise InputError(
            f"{what}: array {header.name!r} declares {header.nbytes} bytes of data but its member "
            f"holds {max(header.info.file_size - header.offset, 0)}"
        )


def _read_data(archive: zipfile.ZipFile, header: _Member, what: str) -> np.ndarray:
    buffer = bytearray(header.nbytes)
    view = memoryview(buffer)
    with archive.open(header.info) as member:
        member.read(header.offset)
        filled = 0
        while filled < header.nbytes:
            count = member.readinto(view[filled : filled + _CHUNK])
            if not count:
                raise InputError(
                    f"{what}: array {header.name!r} ends after {filled} of its {header.nbytes} bytes"
                )
            filled += count
    array = np.frombuffer(buffer, dtype=header.dtype)
    return array.reshape(header.shape, order="F" if header.fortran else "C")


def _npy_header(stream: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f".npy format version {version} is not supported")
    return tuple(shape), bool(fortran), dtype


def decode_b64_npz(
    text: str, what: str, max_elements: int = NO_LIMIT, max_bytes: int = NO_LIMIT
) -> dict[str, np.ndarray]:
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"{what}: not valid base64") from None
    return decode_npz(data, what, max_elements, max_bytes)


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
