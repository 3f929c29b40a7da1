import ast
import io

import numpy as np
import pytest

from compiler.backend.constants import (
    SEPARATE_POOL_BYTES,
    ConstantPoolBuilder,
    c_string_lines,
    emit_pool,
    is_separate,
    write_pool_bytes,
    write_pool_source,
)
from compiler.runtime.build import compile_check


def test_constants_are_placed_at_aligned_offsets_in_first_use_order():
    pool = ConstantPoolBuilder(alignment=16)
    assert pool.add(np.ones(3, "float32")) == 0
    assert pool.add(np.zeros(5, "int8")) == 1
    assert pool.add(np.ones(1, "float64")) == 2
    built = pool.build()
    assert built.offsets == (0, 16, 32)
    assert built.total_bytes == 40


def test_identical_constants_share_a_slot_but_equal_bytes_of_other_types_do_not():
    pool = ConstantPoolBuilder()
    a = np.arange(4, dtype="int32")
    assert pool.add(a) == pool.add(a.copy()) == 0
    assert pool.add(a.view("float32")) == 1
    assert pool.add(a.reshape(2, 2)) == 2
    assert pool.index_of(a.copy()) == 0
    assert pool.index_of(np.arange(5, dtype="int32")) is None


def test_pool_bytes_hold_every_array_at_its_offset():
    pool = ConstantPoolBuilder(alignment=8)
    pool.add(np.array([1, 2, 3], "uint8"))
    pool.add(np.array([1.5], "float32"))
    data = pool.build().data()
    assert data[:3] == b"\x01\x02\x03" and data[3:8] == bytes(5)
    assert np.frombuffer(data[8:12], "float32")[0] == 1.5


@pytest.mark.parametrize("data", [bytes(range(256)), b'??=?"\\0123', b"", b"\x00" * 200])
def test_string_literal_encodes_every_byte(data):
    lines = list(c_string_lines(data, bytes_per_line=64))
    assert len(lines) == (len(data) + 63) // 64
    # C and Python agree on octal escapes and plain characters, so Python can decode it.
    decoded = b"".join(ast.literal_eval("b" + line) for line in lines)
    assert decoded == data
    assert all("??" not in line for line in lines)


def test_pool_definition_compiles_without_warnings():
    pool = ConstantPoolBuilder()
    pool.add(np.linspace(-1, 1, 100).astype("float32"))
    lines = emit_pool("pool", pool.build())
    source = "#include <stdint.h>\n" + "\n".join(lines) + "\nconst uint8_t* get(void) { return pool; }\n"
    assert compile_check(source) == []


def test_empty_pool_emits_nothing():
    assert emit_pool("pool", ConstantPoolBuilder().build()) == []


def test_alignment_must_be_positive():
    with pytest.raises(ValueError):
        ConstantPoolBuilder(alignment=0)


def mixed_pool():
    pool = ConstantPoolBuilder(alignment=64)
    pool.add(np.arange(1000, dtype="float32") * 0.5)
    pool.add(np.array([True, False, True]))
    pool.add(np.arange(70, dtype="int8"))  # more than two lines, the last one short
    return pool.build()


def test_pool_bytes_are_the_pool_and_the_literal_terminator():
    pool = mixed_pool()
    stream = io.BytesIO()
    write_pool_bytes(stream, pool)
    assert stream.getvalue() == pool.data() + b"\0"


def test_a_separate_pool_source_holds_exactly_the_pool_bytes():
    pool = mixed_pool()
    stream = io.BytesIO()
    write_pool_source(stream, "pool", pool)
    text = stream.getvalue().decode("ascii")
    head, _, body = text.partition("=\n")
    assert f"const uint8_t pool[{pool.total_bytes} + 1]" in head and 'visibility("hidden")' in head
    literals = [line.strip().rstrip(";") for line in body.splitlines()]
    assert b"".join(ast.literal_eval("b" + line) for line in literals) == pool.data()
    assert "??" not in text


def test_a_separate_pool_source_compiles_without_warnings():
    stream = io.BytesIO()
    write_pool_source(stream, "pool", mixed_pool())
    assert compile_check(stream.getvalue().decode()) == []


def test_only_a_large_pool_is_left_to_its_own_file():
    small = mixed_pool()
    assert emit_pool("pool", small, separable=True) == emit_pool("pool", small)
    builder = ConstantPoolBuilder(alignment=64)
    builder.add(np.zeros(SEPARATE_POOL_BYTES, "uint8"))
    large = builder.build()
    assert is_separate(large) and not is_separate(small)
    assert emit_pool("pool", large, separable=True) == [
        f'extern const uint8_t pool[{SEPARATE_POOL_BYTES} + 1] __attribute__((visibility("hidden"), aligned(64)));'
    ]
    assert emit_pool("pool", large)[0].startswith("static const uint8_t pool[")


def test_a_strided_view_shares_the_slot_of_its_contiguous_equal():
    pool = ConstantPoolBuilder()
    matrix = np.arange(12, dtype="float32").reshape(3, 4)
    assert pool.add(np.ascontiguousarray(matrix.T)) == 0
    assert pool.add(matrix.T) == 0
    assert pool.index_of(matrix.T) == 0
    assert pool.build().arrays[0].flags.c_contiguous


def test_arrays_of_the_same_digest_key_but_other_bytes_get_their_own_slots():
    pool = ConstantPoolBuilder()
    first = np.zeros(1000, "uint8")
    second = first.copy()
    second[999] = 1
    assert pool.add(first) == 0
    assert pool.add(second) == 1
    np.testing.assert_array_equal(pool.build().arrays[1], second)


def test_asking_again_about_the_same_array_object_gives_the_same_answer():
    pool = ConstantPoolBuilder()
    weights = np.arange(6, dtype="int16")
    absent = np.arange(7, dtype="int16")
    assert pool.index_of(weights) is None
    assert pool.add(weights) == 0
    assert pool.index_of(weights) == 0
    assert pool.index_of(absent) is None
    assert pool.index_of(absent) is None
