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
