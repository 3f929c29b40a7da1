"""Hypothesis strategies for the generic op tests.

`HypothesisDraw` lets an op's domain (compiler/ops/domain.py) draw through hypothesis: each
choice a domain makes becomes one `data.draw`, so a failing call shrinks towards small shapes,
early options and low integers like any other hypothesis example.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from hypothesis import strategies as st

from compiler.ops.domain import Draw

T = TypeVar("T")


class HypothesisDraw(Draw):
    """A `Draw` whose choices come from hypothesis's interactive `data` object."""

    def __init__(self, data: st.DataObject):
        self.data = data

    def integer(self, low: int, high: int) -> int:
        return self.data.draw(st.integers(low, high))

    def choice(self, options: Sequence[T]) -> T:
        return self.data.draw(st.sampled_from(options))

    def subset(self, items: Sequence[T], min_size: int = 0) -> tuple[T, ...]:
        """Draw's subset without its retry loop: hypothesis's simplest example picks nothing,
        so retrying until `min_size` items are picked ran each example out of data (a minute per
        op of `any`, `variance`, `slice_like`, `nn.l2_normalize`). Too few picked items are made
        up from the first ones left out, which is also where shrinking goes."""
        picked = [self.boolean() for _ in items]
        missing = min(min_size, len(items)) - sum(picked)
        for k in range(len(items)):
            if missing <= 0:
                break
            if not picked[k]:
                picked[k] = True
                missing -= 1
        return tuple(item for item, keep in zip(items, picked) if keep)
