"""The read-only constant pool: where each constant of @main lives and how the pool is written
in C.

Constants are laid out in order of first use, each at a multiple of the pool's alignment;
identical constants (same dtype, shape and bytes) share one slot. The pool is emitted as one
`static const uint8_t` array initialized from a string literal of escaped bytes: for
megabytes of weights a C compiler parses that far faster than a list of numeric literals.

A pool of `SEPARATE_POOL_BYTES` or more is not written into the executor's C: the executor
only declares it (hidden, so the library does not export it) and the driver writes its
definition to a C file of its own with `write_pool_source`, formatted by numpy a block at a
time, and builds its object from the raw bytes (`write_pool_bytes`) instead of making the C
compiler parse four characters per byte (a 100 MB pool: 18 s and 1.7 GB in gcc).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import blake3
import numpy as np

from compiler.backend.memory_planner import align_up


@dataclass(frozen=True)
class ConstantPool:
    arrays: tuple[np.ndarray, ...]
    offsets: tuple[int, ...]
    total_bytes: int
    alignment: int

    def data(self) -> bytes:
        """The pool's bytes: every array at its offset, zeros in between."""
        pool = bytearray(self.total_bytes)
        for array, offset in zip(self.arrays, self.offsets):
            raw = array.tobytes()
            pool[offset : offset + len(raw)] = raw
        return bytes(pool)


class ConstantPoolBuilder:
    """Lays out constants, sharing one slot between identical ones. Identity is found through a
    digest of the bytes (then confirmed byte for byte), not by keeping the bytes as a key: a
    GPT-2's weights would otherwise be held twice while the executor is generated."""

    def __init__(self, alignment: int = 16):
        if alignment <= 0:
            raise ValueError(f"constant alignment must be positive, got {alignment}")
        self.alignment = alignment
        self._arrays: list[np.ndarray] = []
        self._offsets: list[int] = []
        self._end = 0
        self._by_digest: dict[tuple[str, tuple[int, ...], bytes], list[int]] = {}
        # The same array object asked about again (the report names every use of a constant)
        # is found without hashing its bytes again; the object is kept so its id stays its own.
        self._by_identity: dict[int, tuple[np.ndarray, int | None]] = {}

    @staticmethod
    def _key(array: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
        digest = blake3.blake3(memoryview(array.reshape(-1).view(np.uint8))).digest(16)
        return (str(array.dtype), tuple(array.shape), digest)

    def _find(self, array: np.ndarray) -> tuple[tuple[str, tuple[int, ...], bytes], int | None]:
        key = self._key(array)
        for index in self._by_digest.get(key, ()):
            if _same_bytes(self._arrays[index], array):
                return key, index
        return key, None

    def index_of(self, array: np.ndarray) -> int | None:
        """The index of an identical array already in the pool, if any."""
        known = self._by_identity.get(id(array))
        if known is not None and known[0] is array and known[1] is not None:
            return known[1]
        index = self._find(np.ascontiguousarray(array))[1]
        self._by_identity[id(array)] = (array, index)
        return index

    def offset(self, index: int) -> int:
        return self._offsets[index]

    def add(self, array: np.ndarray) -> int:
        """The index of `array` in the pool, adding it unless an identical one is there."""
        known = self._by_identity.get(id(array))
        if known is not None and known[0] is array and known[1] is not None:
            return known[1]
        original = array
        array = np.ascontiguousarray(array)
        key, index = self._find(array)
        if index is None:
            index = len(self._arrays)
            self._by_digest.setdefault(key, []).append(index)
            offset = align_up(self._end, self.alignment)
            self._arrays.append(array)
            self._offsets.append(offset)
            self._end = offset + array.nbytes
        self._by_identity[id(original)] = (original, index)
        return index

    def build(self) -> ConstantPool:
        return ConstantPool(tuple(self._arrays), tuple(self._offsets), self._end, self.alignment)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(
        np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))


# Every byte as a three-digit octal escape: four characters, whatever the byte. Uniform width
# lets numpy escape megabytes at once, and an octal escape never absorbs the next character
# (`\x` escapes are greedy) nor forms a `??` trigraph.
_OCTAL = np.array([b"\\%03o" % byte for byte in range(256)], dtype="S4")
_LINES_PER_BLOCK = 4096


def c_string_lines(data: bytes, bytes_per_line: int = 32) -> Iterator[str]:
    """`data` as adjacent C string literals, one line per `bytes_per_line` bytes."""
    raw = np.frombuffer(data, np.uint8)
    block = bytes_per_line * _LINES_PER_BLOCK
    width = 4 * bytes_per_line
    for start in range(0, len(raw), block):
        escaped = _OCTAL[raw[start : start + block]].tobytes().decode("ascii")
        for k in range(0, len(escaped), width):
            yield '"' + escaped[k : k + width] + '"'


SEPARATE_POOL_BYTES = 1 << 20


def is_separate(pool: ConstantPool) -> bool:
    """Whether `emit_pool(..., separable=True)` leaves `pool`'s definition to its own file."""
    return pool.total_bytes >= SEPARATE_POOL_BYTES


def emit_pool(symbol: str, pool: ConstantPool, *, separable: bool = False) -> list[str]:
    """The C definition of the pool, or nothing when there are no constants. A pool of empty
    constants only is still defined (one NUL byte): their pointers point into it. With
    `separable`, a large pool is only declared (see the module docstring)."""
    if not pool.arrays:
        return []
    if separable and is_separate(pool):
        return [f"extern const uint8_t {symbol}[{pool.total_bytes} + 1] {pool_attributes(pool)};"]
    lines = [
        # One more byte than the pool holds: the string literal's terminating NUL.
        f"static const uint8_t {symbol}[{pool.total_bytes} + 1] __attribute__((aligned({pool.alignment}))) ="
    ]
    literal = list(c_string_lines(pool.data())) or ['""']
    lines += [f"  {line}" for line in literal]
    lines[-1] += ";"
    return lines


def pool_attributes(pool: ConstantPool, section: str | None = None) -> str:
    """The attributes of a separate pool's declaration and definition: hidden, since the
    pool belongs to one library, and aligned as the executor assumes."""
    placed = f", section(\"{section}\")" if section else ""
    return f'__attribute__((visibility("hidden"), aligned({pool.alignment}){placed}))'


def pool_segments(pool: ConstantPool) -> Iterator[np.ndarray]:
    """The pool's `total_bytes` as uint8 arrays in order: the constants themselves (not
    copies) and the zeros between them."""
    end = 0
    for array, offset in zip(pool.arrays, pool.offsets):
        if offset > end:
            yield np.zeros(offset - end, np.uint8)
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        yield raw
        end = offset + raw.size
    if pool.total_bytes > end:
        yield np.zeros(pool.total_bytes - end, np.uint8)


def write_pool_bytes(stream: BinaryIO, pool: ConstantPool) -> None:
    """The `total_bytes + 1` bytes the pool's symbol holds (the last is the NUL that ends the
    string literal of its C definition)."""
    for segment in pool_segments(pool):
        stream.write(memoryview(segment))
    stream.write(b"\0")


# The octal escapes as a (256, 4) table of ASCII codes, and the pieces around a line.
_OCTAL_CODES = np.frombuffer(_OCTAL.tobytes(), np.uint8).reshape(256, 4)
# The same table one word per escape: gathering 4-byte words is several times faster in numpy
# than gathering rows of four bytes (a 500 MB pool: 2 s rather than 15).
_OCTAL_WORDS = _OCTAL_CODES.copy().view(np.uint32).reshape(256)
_LINE_START = np.frombuffer(b'  "', np.uint8)
_LINE_END = np.frombuffer(b'"\n', np.uint8)
_BYTES_PER_LINE = 32
_BLOCK_LINES = 1 << 15  # about 4 MiB of text at a time


def write_pool_source(stream: BinaryIO, symbol: str, pool: ConstantPool, comment: str = "") -> None:
    """A C file defining the pool (the definition `emit_pool(separable=True)` declares), written
    a block of lines at a time: its text is four times the pool's size and is never held whole."""
    head = [f"/* {comment} */" if comment else "/* Read-only constant pool, generated by relaycc. */",
            "#include <stdint.h>", "",
            f"{pool_attributes(pool)} const uint8_t {symbol}[{pool.total_bytes} + 1] ="]
    stream.write(("\n".join(head) + "\n").encode())
    width = 4 * _BYTES_PER_LINE
    for data in pool_segments(pool):
        for start in range(0, data.size, _BLOCK_LINES * _BYTES_PER_LINE):
            block = data[start : start + _BLOCK_LINES * _BYTES_PER_LINE]
            full = block.size // _BYTES_PER_LINE
            text = np.empty((full, width + 5), np.uint8)
            text[:, :3] = _LINE_START
            escaped = _OCTAL_WORDS[block[: full * _BYTES_PER_LINE]]
            text[:, 3 : 3 + width] = escaped.view(np.uint8).reshape(full, width)
            text[:, 3 + width :] = _LINE_END
            stream.write(memoryview(text.reshape(-1)))
            rest = block[full * _BYTES_PER_LINE :]
            if rest.size:
                stream.write(b'  "' + _OCTAL_CODES[rest].tobytes() + b'"\n')
    stream.write(b'  "";\n')
