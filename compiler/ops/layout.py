"""Layout strings such as NCHW, OIHW, HWIO or NCHW4c, shared by conv, pool and layout_transform.

An upper-case letter names a primal axis. A lower-case letter preceded by a factor (`4c`) is a
sub-axis: it splits the primal axis of the same letter, so in NCHW4c the channel `C` is stored
as C/4 outer blocks (the `C` axis) of 4 inner channels (the `c` axis), and channel
`c_full = C_outer * 4 + c_inner`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.ir.types import ANY, Dim
from compiler.ops.registry import TypeRelationError


@dataclass(frozen=True)
class Layout:
    """A parsed layout: one (letter, factor) per axis; factor is None for primal axes."""

    name: str
    axes: tuple[tuple[str, int | None], ...]

    @property
    def primal(self) -> str:
        """The primal letters in storage order (NCHW4c -> "NCHW")."""
        return "".join(letter for letter, factor in self.axes if factor is None)

    def index(self, letter: str) -> int:
        for i, (name, _) in enumerate(self.axes):
            if name == letter:
                return i
        raise KeyError(letter)

    def factor(self, primal: str) -> int | None:
        """The split factor of a primal axis (its sub-axis size), or None when it is not split."""
        for name, factor in self.axes:
            if factor is not None and name == primal.lower():
                return factor
        return None


def parse_layout(text: str, op: str) -> Layout:
    """Parse `text`, raising a TypeRelationError that names `op` when it is malformed."""
    axes: list[tuple[str, int | None]] = []
    digits = ""
    for ch in text:
        if ch.isdigit():
            digits += ch
        elif ch.isascii() and ch.isupper():
            if digits:
                raise TypeRelationError(f"{op}: layout {text!r} gives a factor to primal axis {ch}")
            axes.append((ch, None))
        elif ch.isascii() and ch.islower():
            if not digits or int(digits) <= 0:
                raise TypeRelationError(f"{op}: layout {text!r} needs a positive factor before sub-axis {ch}")
            axes.append((ch, int(digits)))
            digits = ""
        else:
            raise TypeRelationError(f"{op}: layout {text!r} has an unexpected character {ch!r}")
    if digits:
        raise TypeRelationError(f"{op}: layout {text!r} ends with a dangling factor")
    letters = [name for name, _ in axes]
    if not axes or len(set(letters)) != len(letters):
        raise TypeRelationError(f"{op}: layout {text!r} must name each axis exactly once")
    primal = {name for name, factor in axes if factor is None}
    for name, factor in axes:
        if factor is not None and name.upper() not in primal:
            raise TypeRelationError(
                f"{op}: layout {text!r} splits axis {name.upper()}, which it does not contain"
            )
    return Layout(text, tuple(axes))


def plain_positions(text: str, letters: str, op: str, attr: str) -> tuple[int, ...]:
    """Where each of `letters` sits in `text`, which must be a permutation of exactly them.

    `plain_positions("NHWC", "NCHW", ...)` is (0, 3, 1, 2): transposing an NHWC array by it gives
    NCHW, and `shape[p] for p in positions` reads an NHWC shape in NCHW order.
    """
    layout = parse_layout(text, op)
    if any(factor is not None for _, factor in layout.axes) or sorted(layout.primal) != sorted(letters):
        raise TypeRelationError(f"{op}: unsupported {attr} {text!r}; expected a permutation of {letters}")
    return tuple(text.index(letter) for letter in letters)


def to_canonical(shape: Sequence[Dim], positions: Sequence[int]) -> tuple[Dim, ...]:
    return tuple(shape[p] for p in positions)


def from_canonical(dims: Sequence[Dim], positions: Sequence[int]) -> tuple[Dim, ...]:
    out: list[Dim] = [0] * len(dims)
    for i, p in enumerate(positions):
        out[p] = dims[i]
    return tuple(out)


def transform_shape(shape: Sequence[Dim], src: Layout, dst: Layout, op: str) -> tuple[Dim, ...]:
    """The shape of a `src`-laid-out tensor after re-laying it out as `dst`."""
    if sorted(src.primal) != sorted(dst.primal):
        raise TypeRelationError(f"{op}: layouts {src.name} and {dst.name} do not have the same primal axes")
    if len(shape) != len(src.axes):
        raise TypeRelationError(
            f"{op}: layout {src.name} has {len(src.axes)} axes but the tensor has rank {len(shape)}"
        )
    totals: dict[str, Dim] = {}
    for letter in src.primal:
        outer = shape[src.index(letter)]
        factor = src.factor(letter)
        if factor is None:
            totals[letter] = outer
            continue
        inner = shape[src.index(letter.lower())]
        if inner is not ANY and inner != factor:
            raise TypeRelationError(
                f"{op}: axis {letter.lower()} of layout {src.name} has size {inner}, expected {factor}"
            )
        totals[letter] = ANY if outer is ANY else outer * factor
    out: list[Dim] = []
    for letter, factor in dst.axes:
        if factor is not None:
            out.append(factor)
            continue
        total = totals[letter]
        split = dst.factor(letter)
        if split is None or total is ANY:
            out.append(total)
        elif total % split:
            raise TypeRelationError(
                f"{op}: axis {letter} of size {total} cannot be split by {split} for {dst.name}"
            )
        else:
            out.append(total // split)
    return tuple(out)


def transform_array(array: np.ndarray, src: Layout, dst: Layout) -> np.ndarray:
    """Re-lay out an array: merge src's sub-axes into their primal axes, then split for dst."""
    # Bring each split primal axis next to its sub-axis and merge the pair.
    order: list[int] = []
    merged_shape: list[int] = []
    for letter in src.primal:
        outer = src.index(letter)
        order.append(outer)
        size = array.shape[outer]
        if src.factor(letter) is not None:
            inner = src.index(letter.lower())
            order.append(inner)
            size *= array.shape[inner]
        merged_shape.append(size)
    primal = np.transpose(array, order).reshape(merged_shape)
    # Reorder to dst's primal order, split, then move sub-axes to their dst positions.
    primal = np.transpose(primal, [src.primal.index(letter) for letter in dst.primal])
    split_shape: list[int] = []
    split_names: list[str] = []
    for letter, size in zip(dst.primal, primal.shape):
        factor = dst.factor(letter)
        if factor is None:
            split_shape.append(size)
            split_names.append(letter)
        else:
            split_shape.extend((size // factor, factor))
            split_names.extend((letter, letter.lower()))
    split = primal.reshape(split_shape)
    return np.transpose(split, [split_names.index(name) for name, _ in dst.axes])


def pool_layout(text: str, letters: str, op: str, attr: str) -> Layout:
    """A pool's layout: its primal axes are `letters` (N, C, then the pooled axes) in any order,
    and, as TVM allows, any axis but the pooled ones may be split into blocks (NCHW8c): the
    blocks ride along while the window moves over the pooled axes."""
    layout = parse_layout(text, op)
    if sorted(layout.primal) != sorted(letters):
        raise TypeRelationError(
            f"{op}: unsupported {attr} {text!r}; expected a permutation of {letters}, "
            f"whose {letters[:2]} may be split into blocks ({letters}8c)"
        )
    for letter in letters[2:]:
        if layout.factor(letter) is not None:
            raise TypeRelationError(
                f"{op}: {attr} {text!r} splits the pooled axis {letter}, which cannot be split"
            )
    return layout
