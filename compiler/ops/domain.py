"""Operator domains: how to draw a valid call of an op, declared beside the op.

A domain is a function from a `Draw` to a `Sample` (input types or arrays, attrs and value
ranges). Writing it against the small `Draw` interface, rather than against numpy's or
hypothesis's random API, lets the same declaration serve three users:

* the property tests, which draw through hypothesis (so failures shrink) or through a seeded
  numpy generator (so a batch of calls can be compiled in one C build);
* the random model generator, whose `Draw` prefers shapes and dtypes of values the model
  already has, so that drawn calls connect into a graph;
* a person reading the op, who sees its legal inputs and its edge cases in one place.

A domain should reach the attributes' edge values with a fair probability (`ceil_mode` with
windows that do and do not divide, strides larger than the window, negative axes, every
padding form): `Draw.choice` over a short list of cases does that better than wide ranges.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from compiler.ops.registry import Sample

T = TypeVar("T")

FLOAT_DTYPES = ("float32", "float64", "float16")
INT_DTYPES = ("int32", "int8", "int64", "uint8", "int16")
# Dtypes the model generator and most domains draw from first; the others are edge cases.
COMMON_FLOAT = "float32"


class Draw(ABC):
    """The random choices a domain may make. Bounds are inclusive."""

    @abstractmethod
    def integer(self, low: int, high: int) -> int: ...

    @abstractmethod
    def choice(self, options: Sequence[T]) -> T: ...

    def boolean(self) -> bool:
        return self.choice((False, True))

    def shape(self, min_rank: int = 1, max_rank: int = 4, min_dim: int = 1, max_dim: int = 5) -> tuple[int, ...]:
        rank = self.integer(min_rank, max_rank)
        return tuple(self.integer(min_dim, max_dim) for _ in range(rank))

    def dtype(self, options: Sequence[str]) -> str:
        return self.choice(options)

    def axis(self, rank: int, negative: bool = True) -> int:
        """An axis of a rank-`rank` tensor, written negatively half the time when allowed."""
        axis = self.integer(0, rank - 1)
        return axis - rank if negative and self.boolean() else axis

    def subset(self, items: Sequence[T], min_size: int = 0) -> tuple[T, ...]:
        """A sub-sequence of `items`, in their order, with at least `min_size` elements."""
        while True:
            picked = tuple(item for item in items if self.boolean())
            if len(picked) >= min_size:
                return picked
            min_size = min(min_size, len(items))

    def broadcastable(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts with `shape`: some dims set to 1, possibly fewer dims."""
        drop = self.integer(0, len(shape))
        kept = shape[drop:]
        return tuple(1 if self.integer(0, 3) == 0 else d for d in kept)


class RandomDraw(Draw):
    """Draws from a seeded numpy generator: reproducible from the seed alone."""

    def __init__(self, rng: np.random.Generator | int):
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

    def integer(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high + 1))

    def choice(self, options: Sequence[T]) -> T:
        return options[int(self.rng.integers(0, len(options)))]


@dataclass(frozen=True)
class Domain:
    """An op's domain: `draw` makes one valid call. `ulps` bounds the error of the compiled op
    against the float64-accurate numpy reference, in units of the output dtype's epsilon, for
    each element relative to max(1, |expected|) (or to the largest |expected| when
    `accumulates`: a sum that cancels near zero is only accurate to its terms' scale).
    Integer results are always compared bit-exactly."""

    draw: Callable[[Draw], Sample]
    ulps: float = 8.0
    accumulates: bool = False

    def tolerance(self, dtype: np.dtype) -> float:
        return self.ulps * float(np.finfo(dtype).eps)


def within_ulps(actual: np.ndarray, expected: np.ndarray, domain: Domain) -> np.ndarray:
    """Mask of the elements of a float result that are within the domain's bound (NaN matches
    NaN and infinities must match exactly)."""
    actual64 = actual.astype(np.float64)
    expected64 = expected.astype(np.float64)
    scale = np.maximum(np.abs(expected64), 1.0)
    if domain.accumulates and expected64.size:
        finite = np.abs(expected64[np.isfinite(expected64)])
        scale = np.maximum(scale, finite.max() if finite.size else 1.0)
    with np.errstate(invalid="ignore"):
        close = np.abs(actual64 - expected64) <= domain.tolerance(actual.dtype) * scale
    # Infinities and NaNs match only themselves (inf - inf is within any scaled tolerance).
    close &= np.isfinite(actual64) & np.isfinite(expected64)
    same_special = (np.isnan(actual64) & np.isnan(expected64)) | (actual64 == expected64)
    return close | same_special


# --- helpers the families' domains share ------------------------------------------------------------

# Weighted towards float32, the dtype of most models; the others are edge cases.
FLOAT_CHOICES = (COMMON_FLOAT,) * 3 + ("float64", "float16")
INT_CHOICES = INT_DTYPES


def kind_dtype(d: Draw, kinds: frozenset[str] | Sequence[str]) -> str:
    """A dtype of one of the dtype classes `kinds` ("float", "int", "bool"), floats most often."""
    options = [k for k in ("float", "float", "int", "bool") if k in kinds]
    kind = d.choice(options)
    if kind == "float":
        return d.dtype(FLOAT_CHOICES)
    if kind == "int":
        return d.dtype(INT_CHOICES)
    return "bool"


def tensor_shape(
    d: Draw, min_rank: int = 0, max_rank: int = 4, min_dim: int = 1, max_dim: int = 5, empty: bool = False
) -> tuple[int, ...]:
    """A shape; with `empty`, one dim is 0 now and then (only for ops that allow empty tensors)."""
    shape = d.shape(min_rank, max_rank, min_dim, max_dim)
    if empty and shape and d.integer(0, 9) == 0:
        at = d.integer(0, len(shape) - 1)
        shape = shape[:at] + (0,) + shape[at + 1 :]
    return shape


def int_values(d: Draw, shape: Sequence[int], dtype: str, low: int, high: int) -> np.ndarray:
    """An integer array of `dtype` with values in [low, high] (clamped to the dtype's range).

    Samples fill integer tensors with small non-negative values; a domain that needs negative
    values, extremes or non-zero divisors draws the array itself, from a drawn seed."""
    info = np.iinfo(dtype)
    low, high = max(low, int(info.min)), min(high, int(info.max))
    rng = np.random.default_rng(d.integer(0, 2**32 - 1))
    return np.asarray(rng.integers(low, high, size=tuple(shape), endpoint=True)).astype(dtype)


def int_range(d: Draw, dtype: str) -> tuple[int, int]:
    """A value range for integer inputs: small and signed, or the whole range of a narrow dtype
    (whose arithmetic C does in int and truncates on the store, so wrapping is well defined)."""
    if np.iinfo(dtype).bits <= 16 and d.boolean():
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    return -9, 9


def float_values(d: Draw, shape: Sequence[int], dtype: str, low: float, high: float) -> np.ndarray:
    """A float array of `dtype` with values uniform in [low, high], from a drawn seed: for an
    input whose range differs from the other inputs' (an exponent, a divisor)."""
    rng = np.random.default_rng(d.integer(0, 2**32 - 1))
    return np.asarray(rng.uniform(low, high, size=tuple(shape))).astype(dtype)


def away_from_zero(values: np.ndarray, least: float | int) -> np.ndarray:
    """`values` with every element smaller in magnitude than `least` replaced by `least`."""
    return np.where(np.abs(values) < least, np.asarray(least, dtype=values.dtype), values).astype(values.dtype)


def broadcast_pair(d: Draw, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast to `shape` (or to a shape with 1s where both have 1): either
    side may miss leading dims or have 1s."""
    full = shape
    other = d.broadcastable(shape)
    return (full, other) if d.boolean() else (other, full)
