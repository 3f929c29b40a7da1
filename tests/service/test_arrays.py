from __future__ import annotations

import io
import re
import zipfile

import numpy as np
import pytest

from compiler.diagnostics import InputError
from service.arrays import (
    TooManyBytes,
    TooManyElements,
    decode_b64_npz,
    decode_npz,
    encode_b64_npz,
    encode_npz,
    from_json,
    over_limit_problem,
    to_json,
)


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


def _npy(descr: str, shape: tuple[int, ...], data: bytes = b"", fortran: bool = False) -> bytes:
    """An .npy member written by hand: a header that may claim anything, followed by `data`."""
    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, {"descr": descr, "fortran_order": fortran, "shape": shape})
    return member.getvalue() + data


def _zip(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return archive.getvalue()


def test_void_dtype_is_refused_by_its_header_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    # The shape of the attack: one element of 512 MiB. Its data is never read: a read would fail.
    data = _zip({"x.npy": _npy("|V536870912", (1,))})
    monkeypatch.setattr(zipfile.ZipExtFile, "readinto", lambda *args: pytest.fail("data was read"))

    with pytest.raises(InputError, match=r"array 'x' has dtype '\|V536870912'"):
        decode_npz(data, "inputs_npz", max_elements=100)


@pytest.mark.parametrize(
    "array",
    [
        np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]),
        np.array(["text"]),
        np.array([b"bytes"]),
        np.array(["2024-01-01"], dtype="datetime64[D]"),
        np.array([1], dtype="timedelta64[s]"),
        np.array([1 + 2j]),
    ],
    ids=["structured", "unicode", "bytes", "datetime", "timedelta", "complex"],
)
def test_arrays_that_are_not_bool_or_numeric_are_refused_naming_member_and_dtype(array: np.ndarray) -> None:
    with pytest.raises(InputError, match=re.escape(f"array 'a' has dtype '{array.dtype.str}'")):
        decode_npz(encode_npz({"a": array}), "params", max_elements=100)


def test_bytes_count_item_size_against_the_byte_limit() -> None:
    # 100 float64 elements are within an element limit of 1000 but hold 800 bytes.
    data = encode_npz({"w": np.zeros(100, "float64")})

    with pytest.raises(TooManyBytes, match=r"800 bytes in all \(array 'w': 100 elements of 8 bytes\); the limit is 799"):
        decode_npz(data, "params", max_elements=1000, max_bytes=799)
    assert decode_npz(data, "params", max_elements=1000, max_bytes=800)["w"].nbytes == 800


def test_byte_limit_sums_over_all_members() -> None:
    data = encode_npz({"a": np.zeros(60, "int32"), "b": np.zeros(60, "int32")})

    with pytest.raises(TooManyBytes):
        decode_npz(data, "inputs_npz", max_bytes=400)


def test_over_limit_errors_name_their_environment_variable() -> None:
    assert TooManyElements.setting == "RELAYCC_MAX_TENSOR_ELEMENTS"
    assert TooManyBytes.setting == "RELAYCC_MAX_TENSOR_BYTES"
    problem = over_limit_problem(TooManyBytes("inputs: too big")).problem
    assert problem["type"] == "https://relaycc.dev/problems/model-too-large"
    assert problem["status"] == 413
    assert problem["detail"] == "inputs: too big (RELAYCC_MAX_TENSOR_BYTES)"


def test_a_zip_bomb_is_refused_by_its_declared_size_before_inflating(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 MiB of zeros deflate to a few tens of KiB; the zip directory declares the real size.
    bomb = _zip({"z.npy": _npy("<f4", (1 << 24,), bytes(64 << 20))}, zipfile.ZIP_DEFLATED)
    assert len(bomb) < 1 << 20
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *args, **kwargs: pytest.fail("a member was opened"))

    with pytest.raises(TooManyBytes, match="declares"):
        decode_npz(bomb, "params", max_bytes=1 << 20)


def test_a_member_is_read_no_further_than_its_header_declares() -> None:
    # The zip entry holds 8 MiB of zeros but the header declares 4 floats: only those are read,
    # however much the member would inflate to.
    data = _zip({"x.npy": _npy("<f4", (4,), bytes(8 << 20))}, zipfile.ZIP_DEFLATED)
    reads: list[int] = []
    original = zipfile.ZipExtFile.read

    def counting_read(self: zipfile.ZipExtFile, n: int = -1) -> bytes:
        chunk = original(self, n)
        reads.append(len(chunk))
        return chunk

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(zipfile.ZipExtFile, "read", counting_read)
        arrays = decode_npz(data, "inputs_npz", max_bytes=16 << 20)

    np.testing.assert_array_equal(arrays["x"], np.zeros(4, "float32"))
    assert sum(reads) < 64 * 1024


def test_a_member_shorter_than_its_header_is_refused_before_allocating() -> None:
    # The header claims 1 MiB of data; the member holds 8 bytes.
    data = _zip({"x.npy": _npy("<f8", (1 << 17,), bytes(8))})

    with pytest.raises(InputError, match="declares 1048576 bytes of data but its member holds 8"):
        decode_npz(data, "inputs_npz", max_bytes=16 << 20)


def test_a_negative_dimension_is_refused() -> None:
    data = _zip({"x.npy": _npy("<f4", (-1, 4))})

    with pytest.raises(InputError, match="negative dimension"):
        decode_npz(data, "inputs_npz")


def test_fortran_order_and_big_endian_arrays_keep_their_values() -> None:
    fortran = np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3))

    decoded = decode_npz(encode_npz({"f": fortran}), "inputs_npz", max_elements=6, max_bytes=24)["f"]

    np.testing.assert_array_equal(decoded, fortran)
    assert decoded.dtype == np.dtype(">i4")


def test_decoded_arrays_are_writable() -> None:
    decoded = decode_npz(encode_npz({"x": np.ones(3, "float32")}), "inputs_npz")["x"]

    decoded[0] = 5
    assert decoded.tolist() == [5, 1, 1]
