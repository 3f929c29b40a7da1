from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from compiler.diagnostics import InputError
from service.arrays import TooManyElements, decode_b64_npz, decode_npz, encode_b64_npz, encode_npz, from_json, to_json


def test_npz_round_trip_keeps_names_dtypes_and_values() -> None:
    arrays = {"x": np.arange(6, dtype="float32").reshape(2, 3), "flag": np.array(True)}

    decoded = decode_b64_npz(encode_b64_npz(arrays), "inputs", max_elements=100)

    assert sorted(decoded) == ["flag", "x"]
    np.testing.assert_array_equal(decoded["x"], arrays["x"])
    assert decoded["x"].dtype == np.float32


def test_decode_refuses_more_elements_than_allowed_before_reading_data() -> None:
    data = encode_npz({"a": np.zeros(60, "float32"), "b": np.zeros(60, "float32")})

    with pytest.raises(TooManyElements, match="more than 100 elements"):
        decode_npz(data, "params", max_elements=100)


def test_decode_refuses_a_header_that_declares_a_huge_array() -> None:
    # A few bytes declaring 10^12 elements: refused by its header, nothing is allocated.
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("x.npy", header.getvalue())

    with pytest.raises(TooManyElements):
        decode_npz(archive.getvalue(), "inputs", max_elements=1000)


def test_decode_refuses_pickled_objects() -> None:
    data = encode_npz({"o": np.array([{"a": 1}], dtype=object)})

    with pytest.raises(InputError, match="Python objects"):
        decode_npz(data, "inputs", max_elements=100)


@pytest.mark.parametrize(
    ("text", "message"),
    [("not base64!", "not valid base64"), ("aGVsbG8=", "cannot read arrays")],
)
def test_decode_reports_bad_archives_as_input_errors(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        decode_b64_npz(text, "params", max_elements=100)


def test_a_bare_npy_file_is_not_an_archive() -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.zeros(3))

    with pytest.raises(InputError, match="cannot read arrays"):
        decode_npz(buffer.getvalue(), "inputs", max_elements=100)


def test_json_tensors_take_the_given_dtype() -> None:
    array = from_json([[1, 2], [3, 4]], "float32", "input x")

    assert array.dtype == np.float32 and array.shape == (2, 2)


def test_ragged_json_is_an_input_error() -> None:
    with pytest.raises(InputError, match="input x"):
        from_json([[1, 2], [3]], "float32", "input x")


def test_non_finite_floats_travel_as_strings_and_come_back() -> None:
    array = np.array([[1.5, np.nan], [np.inf, -np.inf]], dtype="float32")

    data = to_json(array)

    assert data == [[1.5, "NaN"], ["Infinity", "-Infinity"]]
    back = from_json(data, "float32", "out0")
    np.testing.assert_array_equal(back, array)


def test_finite_arrays_become_plain_nested_lists() -> None:
    assert to_json(np.array([[1, 2]], dtype="int32")) == [[1, 2]]
    assert to_json(np.float32(2.5)) == 2.5
