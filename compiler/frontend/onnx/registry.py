"""The converter table: ONNX op type → the function that expresses it with our operators.

An entry names the schema versions ("since" versions, as `onnx.defs` numbers them) whose
semantics its converter follows. A model's opset picks one schema per op type; a schema version
not in the entry (a later change of semantics) makes the op unsupported rather than silently
converted under the older meaning. Versions that only widened the accepted types are listed
too: a dtype we do not have is refused where tensors are typed (dtypes.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compiler.frontend.onnx.context import NodeContext, Converted


@dataclass(frozen=True)
class Converter:
    op_type: str
    since: frozenset[int]
    convert: Callable[[NodeContext], Converted]


CONVERTERS: dict[str, Converter] = {}


def converter(op_type: str, since: tuple[int, ...]) -> Callable[[Callable[[NodeContext], Converted]], Callable[[NodeContext], Converted]]:
    """Register the decorated function for `op_type` at the schema versions `since`."""

    def register(fn: Callable[[NodeContext], Converted]) -> Callable[[NodeContext], Converted]:
        if op_type in CONVERTERS:
            raise AssertionError(f"two converters for ONNX {op_type}")
        CONVERTERS[op_type] = Converter(op_type, frozenset(since), fn)
        return fn

    return register


def lookup(op_type: str, since_version: int) -> Converter | None:
    entry = CONVERTERS.get(op_type)
    if entry is None or since_version not in entry.since:
        return None
    return entry
