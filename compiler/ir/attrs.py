"""Immutable attribute mappings for calls and functions.

Values are ints, floats, bools, strings, None, nested tuples of those, and (for call_lowered
metadata) IR objects such as GlobalVars and other Attrs. Lists are frozen to tuples on entry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

AttrValue = object


def freeze(value: AttrValue) -> AttrValue:
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict) and not isinstance(value, Attrs):
        return Attrs(value)
    return value


class Attrs(Mapping[str, AttrValue]):
    """An ordered, immutable str -> value mapping; keys are also readable as attributes."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[str, AttrValue] | None = None, **kwargs: AttrValue):
        merged: dict[str, AttrValue] = {}
        for source in (items or {}, kwargs):
            for k, v in source.items():
                merged[str(k)] = freeze(v)
        object.__setattr__(self, "_items", merged)
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key: str) -> AttrValue:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __getattr__(self, key: str) -> AttrValue:
        try:
            return self._items[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: AttrValue) -> None:
        raise AttributeError("Attrs are immutable; use with_attr")

    def with_attr(self, key: str, value: AttrValue) -> Attrs:
        items = dict(self._items)
        items[key] = value
        return Attrs(items)

    def without(self, *keys: str) -> Attrs:
        return Attrs({k: v for k, v in self._items.items() if k not in keys})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attrs):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(tuple(self._items.items())))
        return self._hash  # type: ignore[return-value]  # set on the line above

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._items.items())
        return f"Attrs({inner})"


EMPTY_ATTRS = Attrs()
