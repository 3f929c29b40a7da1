"""The read-only constant pool: where each constant of @main lives and how the pool is written
in C.

Constants are laid out in order of first use, each at a multiple of the pool's alignment;
identical constants (same dtype, shape and bytes) share one slot. The pool is emitted as one
`static const uint8_t` array initialized from a string literal of escaped bytes: for
megabytes of weights a C compiler parses that far faster than a list of numeric literals.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

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
    def __init__(self, alignment: int = 16):
        if alignment <= 0:
            raise ValueError(f"constant alignment must be positive, got {alignment}")
        self.alignment = alignment
        self._arrays: list[np.ndarray] = []
        self._offsets: list[int] = []
        self._end = 0
        self._by_content: dict[tuple[str, tuple[int, ...], bytes], int] = {}

    @staticmethod
    def _key(array: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
        return (str(array.dtype), tuple(array.shape), array.tobytes())

    def index_of(self, array: np.ndarray) -> int | None:
        """The index of an identical array already in the pool, if any."""
        return self._by_content.get(self._key(np.ascontiguousarray(array)))

    def offset(self, index: int) -> int:
        return self._offsets[index]

    def add(self, array: np.ndarray) -> int:
        """The index of `array` in the pool, adding it unless an identical one is there."""
        array = np.ascontiguousarray(array)
        key = self._key(array)
        index = self._by_content.get(key)
        if index is None:
            index = self._by_content[key] = len(self._arrays)
            offset = align_up(self._end, self.alignment)
            self._arrays.append(array)
            self._offsets.append(offset)
            self._end = offset + array.nbytes
        return index

    def build(self) -> ConstantPool:
        return ConstantPool(tuple(self._arrays), tuple(self._offsets), self._end, self.alignment)


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


def emit_pool(symbol: str, pool: ConstantPool) -> list[str]:
    """The C definition of the pool, or nothing when there are no constants. A pool of empty
    constants only is still defined (one NUL byte): their pointers point into it."""
    if not pool.arrays:
        return []
    lines = [
        # One more byte than the pool holds: the string literal's terminating NUL.
        f"static const uint8_t {symbol}[{pool.total_bytes} + 1] __attribute__((aligned({pool.alignment}))) ="
    ]
    literal = list(c_string_lines(pool.data())) or ['""']
    lines += [f"  {line}" for line in literal]
    lines[-1] += ";"
    return lines
