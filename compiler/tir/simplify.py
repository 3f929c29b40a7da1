"""Arithmetic simplification of loop-level IR.

Expressions: constant folding (integers wrap to their dtype; floats are computed in their own
dtype through numpy, so a folded float32 is what the C code would have computed), the usual
integer identities, and index arithmetic that knows loop ranges: `(i*8 + j) // 8 -> i` and
`(i*8 + j) % 8 -> j` when `0 <= j < 8`, which is what row-major reshapes and tilings produce.
Float identities are limited to the ones that hold for every IEEE value (x*1, x/1, x-0).

Statements: loops of extent 0 disappear, loops of extent 1 become their body with the loop
variable replaced by `begin`, constant conditions pick their branch, empty Allocates, Ifs and
Seqs vanish, and nested Seqs are flattened. An emptied statement is `Seq(())`.

`const_int_bound` is the interval analysis the rules (and the C code generator, to pick plain
`/` and `%` for non-negative operands) rely on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from compiler.tir.analysis import ExprRewriter, expr_equal, post_order
from compiler.tir.expr import COMPARE_OPS, Binary, Cast, Const, ExprLike, Intrin, PrimExpr, Select, Unary, Var, as_expr
from compiler.tir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, LetStmt, Seq, Stmt, Store

IntBound = tuple[int | None, int | None]
UNBOUNDED: IntBound = (None, None)

EMPTY = Seq(())


def is_int_dtype(dtype: str) -> bool:
    return dtype.startswith("int") or dtype.startswith("uint")


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _wrap(value: int, dtype: str) -> int:
    info = np.iinfo(dtype)
    span = int(info.max) - int(info.min) + 1
    return (value - int(info.min)) % span + int(info.min)


def _int_const(e: PrimExpr) -> int | None:
    if isinstance(e, Const) and is_int_dtype(e.dtype) and not isinstance(e.value, bool):
        return int(e.value)
    return None


def _is_const(e: PrimExpr, value: float) -> bool:
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == value


def _bool_const(e: PrimExpr) -> bool | None:
    if isinstance(e, Const) and e.dtype == "bool":
        return bool(e.value)
    return None


# -- constant folding ----------------------------------------------------------------------------

_NP_BINARY = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide,
    "//": np.floor_divide, "%": np.remainder, "tmod": np.fmod, "min": np.minimum, "max": np.maximum,
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
    "==": np.equal, "!=": np.not_equal,
}


def _trunc_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _fold_int(op: str, x: int, y: int) -> int | bool | None:
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op in ("/", "tdiv"):
        return _trunc_div(x, y) if y != 0 else None
    if op == "tmod":
        return x - _trunc_div(x, y) * y if y != 0 else None
    if op == "//":
        return x // y if y != 0 else None
    if op == "%":
        return x % y if y != 0 else None
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    compare = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}
    return compare.get(op)


def _py(value: object) -> int | float | bool:
    item = np.asarray(value).item()
    assert isinstance(item, (int, float, bool))
    return item


def _fold_binary(node: Binary) -> Const | None:
    a, b = node.a, node.b
    if not (isinstance(a, Const) and isinstance(b, Const)):
        return None
    if node.op in ("&&", "||"):
        x, y = bool(a.value), bool(b.value)
        return Const(x and y if node.op == "&&" else x or y, "bool")
    if is_int_dtype(a.dtype) and is_int_dtype(b.dtype):
        folded = _fold_int(node.op, int(a.value), int(b.value))
        if folded is None:
            return None
        if isinstance(folded, bool):
            return Const(folded, "bool")
        return Const(_wrap(folded, node.dtype), node.dtype)
    if not (_is_float(a.dtype) and a.dtype == b.dtype):
        return None
    x, y = np.array(a.value, a.dtype), np.array(b.value, b.dtype)
    with np.errstate(all="ignore"):
        if node.op == "tdiv":
            result = np.trunc(np.true_divide(x, y))
        elif node.op in _NP_BINARY:
            result = _NP_BINARY[node.op](x, y)
        else:
            return None
    return Const(_py(result.astype(node.dtype)), node.dtype)


def _np_erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(math.erf(float(x)), x.dtype)


def _np_round(x: np.ndarray) -> np.ndarray:
    """C's round: halves away from zero (np.round rounds them to even)."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(x.dtype)


_NP_INTRIN = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "fabs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "round": _np_round, "isnan": np.isnan, "isinf": np.isinf,
    "rsqrt": lambda x: np.asarray(1, x.dtype) / np.sqrt(x),
    "sigmoid": lambda x: np.asarray(1, x.dtype) / (np.asarray(1, x.dtype) + np.exp(-x)),
    "erf": _np_erf, "pow": np.power, "fmod": np.fmod,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "log2": np.log2, "log10": np.log10,
    "trunc": np.trunc,
}


def _fold_intrin(node: Intrin) -> Const | None:
    if node.name not in _NP_INTRIN:
        return None  # reinterpret: left to the C compiler
    args = []
    for a in node.args:
        if not (isinstance(a, Const) and _is_float(a.dtype)):
            return None
        args.append(np.array(a.value, a.dtype))
    with np.errstate(all="ignore"):
        result = np.asarray(_NP_INTRIN[node.name](*args))
    return Const(_py(result.astype(node.dtype)), node.dtype)


def _fold_cast(node: Cast) -> Const | None:
    v = node.value
    if not isinstance(v, Const):
        return None
    if node.dtype == "bool":
        return Const(bool(v.value), "bool")
    if _is_float(node.dtype):
        return Const(_py(np.array(v.value).astype(node.dtype)), node.dtype)
    if is_int_dtype(node.dtype):
        if isinstance(v.value, float) and not math.isfinite(v.value):
            return None  # undefined in C; leave it to run time
        return Const(_wrap(int(v.value), node.dtype), node.dtype)
    return None


def _fold_unary(node: Unary) -> PrimExpr | None:
    a = node.a
    if node.op == "~":
        if isinstance(a, Const) and is_int_dtype(a.dtype):
            return Const(_wrap(~int(a.value), a.dtype), a.dtype)
        return a.a if isinstance(a, Unary) and a.op == "~" else None
    if isinstance(a, Const):
        if node.op == "!":
            return Const(not a.value, "bool")
        if is_int_dtype(a.dtype):
            return Const(_wrap(-int(a.value), a.dtype), a.dtype)
        if _is_float(a.dtype):
            return Const(_py(-np.array(a.value, a.dtype)), a.dtype)
    if isinstance(a, Unary) and a.op == node.op:
        return a.a
    return None


# -- integer bounds ------------------------------------------------------------------------------


def _add(x: int | None, y: int | None) -> int | None:
    return None if x is None or y is None else x + y


def _dtype_bound(dtype: str) -> IntBound:
    if dtype == "bool":
        return (0, 1)
    if dtype.startswith("uint"):
        return (0, None)
    return UNBOUNDED


def _mul_bound(a: IntBound, b: IntBound) -> IntBound:
    alo, ahi = a
    blo, bhi = b
    if alo is not None and ahi is not None and blo is not None and bhi is not None:
        corners = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
        return (min(corners), max(corners))
    if b[0] is not None and b[0] == b[1]:
        c = b[0]
        lo, hi = (a[0], a[1]) if c >= 0 else (a[1], a[0])
        return (None if lo is None else lo * c, None if hi is None else hi * c)
    if a[0] is not None and a[0] == a[1]:
        return _mul_bound(b, a)
    if a[0] is not None and b[0] is not None and a[0] >= 0 and b[0] >= 0:
        return (a[0] * b[0], None)
    return UNBOUNDED


def _div_bound(a: IntBound, c: int) -> IntBound:
    return (None if a[0] is None else a[0] // c, None if a[1] is None else a[1] // c)


def _bound_of(e: PrimExpr, bound: Mapping[int, IntBound], ranges: Mapping[Var, IntBound]) -> IntBound:
    if isinstance(e, Const):
        if isinstance(e.value, bool) or is_int_dtype(e.dtype):
            return (int(e.value), int(e.value))
        return UNBOUNDED
    if isinstance(e, Var):
        return ranges.get(e, _dtype_bound(e.dtype))
    if e.dtype == "bool":
        return (0, 1)
    if not is_int_dtype(e.dtype):
        return UNBOUNDED
    if isinstance(e, Binary):
        a, b = bound[id(e.a)], bound[id(e.b)]
        if e.op == "+":
            return (_add(a[0], b[0]), _add(a[1], b[1]))
        if e.op == "-":
            return (_add(a[0], None if b[1] is None else -b[1]), _add(a[1], None if b[0] is None else -b[0]))
        if e.op == "*":
            return _mul_bound(a, b)
        c = b[0] if b[0] is not None and b[0] == b[1] else None
        nonneg = a[0] is not None and a[0] >= 0
        if c is not None and c > 0 and (e.op == "//" or (e.op in ("tdiv", "/") and nonneg)):
            return _div_bound(a, c)
        if c is not None and c > 0 and (e.op == "%" or (e.op == "tmod" and nonneg)):
            if a[0] is not None and a[1] is not None and a[0] // c == a[1] // c:
                k = a[0] // c * c
                return (a[0] - k, a[1] - k)
            return (0, c - 1)
        if e.op in ("min", "max"):
            pick = min if e.op == "min" else max
            # min: the lower end needs both lows, the upper end either high; max the reverse.
            strict, loose = (0, 1) if e.op == "min" else (1, 0)
            ends: list[int | None] = [None, None]
            if a[strict] is not None and b[strict] is not None:
                ends[strict] = pick(a[strict], b[strict])
            known = [x for x in (a[loose], b[loose]) if x is not None]
            ends[loose] = pick(known) if known else None
            return (ends[0], ends[1])
        return _dtype_bound(e.dtype)
    if isinstance(e, Unary) and e.op == "neg":
        a = bound[id(e.a)]
        return (None if a[1] is None else -a[1], None if a[0] is None else -a[0])
    if isinstance(e, Select):
        t, f = bound[id(e.t)], bound[id(e.f)]
        lo = None if t[0] is None or f[0] is None else min(t[0], f[0])
        hi = None if t[1] is None or f[1] is None else max(t[1], f[1])
        return (lo, hi)
    if isinstance(e, Cast) and is_int_dtype(e.value.dtype):
        return bound[id(e.value)]
    return _dtype_bound(e.dtype)


class _Bounds:
    """Memoized `_bound_of` over a DAG; keeps the nodes it has seen alive."""

    def __init__(self, ranges: Mapping[Var, IntBound]):
        self.ranges = ranges
        self.memo: dict[int, IntBound] = {}
        self.done: set[int] = set()
        self.keep: list[PrimExpr] = []

    def __call__(self, e: PrimExpr) -> IntBound:
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit
        for node in post_order(e, self.done):
            self.memo[id(node)] = _bound_of(node, self.memo, self.ranges)
            self.keep.append(node)
        return self.memo[id(e)]


def const_int_bound(e: PrimExpr, ranges: Mapping[Var, IntBound] | None = None) -> IntBound:
    """An interval `(lo, hi)` (None: unbounded) containing every value of the integer `e`,
    given inclusive ranges of some variables."""
    return _Bounds(ranges or {})(e)


# -- rewrite rules -------------------------------------------------------------------------------


def _terms(e: PrimExpr) -> list[PrimExpr]:
    """The operands of a chain of integer `+` (an `x - c` contributes `x` and `-c`)."""
    out: list[PrimExpr] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Binary) and x.op == "+":
            stack.extend((x.b, x.a))
        elif isinstance(x, Binary) and x.op == "-" and (k := _int_const(x.b)) is not None:
            stack.append(Const(-k, x.b.dtype))
            stack.append(x.a)
        else:
            out.append(x)
    return out


def _offset(e: PrimExpr) -> int | None:
    """`c` when `e` is `x + c` or `-c` when it is `x - c` (integer constant c)."""
    if isinstance(e, Binary) and e.op in ("+", "-"):
        k = _int_const(e.b)
        if k is not None:
            return k if e.op == "+" else -k
    return None


def _multiple_of(e: PrimExpr, c: int) -> PrimExpr | None:
    """`e / c` when `e` is syntactically a multiple of `c` (`x * k*c` or a constant)."""
    k = _int_const(e)
    if k is not None:
        return Const(k // c, e.dtype) if k % c == 0 else None
    if isinstance(e, Binary) and e.op == "*":
        m = _int_const(e.b)
        if m is not None and m % c == 0:
            return e.a if m == c else Binary("*", e.a, Const(m // c, e.b.dtype), e.dtype)
    return None


class ExprSimplifier:
    """Simplifies expressions under known inclusive ranges of loop variables.

    One instance memoizes by identity; use a fresh one whenever the ranges change meaning.
    """

    def __init__(self, ranges: Mapping[Var, IntBound] | None = None):
        self.ranges: Mapping[Var, IntBound] = ranges if ranges is not None else {}
        self.bound = _Bounds(self.ranges)
        self._rewriter = ExprRewriter(self._rewrite)

    def __call__(self, e: PrimExpr) -> PrimExpr:
        return self._rewriter(e)

    def _rewrite(self, e: PrimExpr) -> PrimExpr:
        # A rule may expose another one at the same node; a few rounds reach the fixed point.
        for _ in range(8):
            new = self._rewrite_once(e)
            if new is None or new is e:
                return e
            e = new
        return e

    def _rewrite_once(self, e: PrimExpr) -> PrimExpr | None:
        if isinstance(e, Binary):
            return _fold_binary(e) or self._binary(e)
        if isinstance(e, Unary):
            return _fold_unary(e)
        if isinstance(e, Cast):
            return e.value if e.value.dtype == e.dtype else _fold_cast(e)
        if isinstance(e, Intrin):
            return _fold_intrin(e)
        if isinstance(e, Select):
            cond = _bool_const(e.cond)
            if cond is None and isinstance(e.cond, Const):
                cond = bool(e.cond.value)
            if cond is not None:
                return e.t if cond else e.f
            return e.t if expr_equal(e.t, e.f) else None
        return None

    def _simplified(self, op: str, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        """A new node built from simplified parts, itself simplified."""
        return self._rewrite(Binary(op, a, b, dtype))

    def _add_const(self, x: PrimExpr, c: int) -> PrimExpr:
        if c == 0:
            return x
        if c < 0:
            return self._simplified("-", x, Const(-c, x.dtype), x.dtype)
        return self._simplified("+", x, Const(c, x.dtype), x.dtype)

    def _binary(self, e: Binary) -> PrimExpr | None:
        op, a, b = e.op, e.a, e.b
        if op in ("&&", "||"):
            return self._logic(op, a, b)
        if is_int_dtype(a.dtype) and is_int_dtype(b.dtype):
            return self._int_binary(e)
        if _is_float(e.dtype):
            if (op == "*" and _is_const(b, 1)) or (op == "/" and _is_const(b, 1)) or (op == "-" and _is_const(b, 0)):
                return a
            if op == "*" and _is_const(a, 1):
                return b
            if op in ("min", "max") and expr_equal(a, b):
                return a
        return None

    def _logic(self, op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
        for x, y in ((a, b), (b, a)):
            known = _bool_const(x)
            if known is None:
                continue
            if op == "&&":
                return y if known else Const(False, "bool")
            return Const(True, "bool") if known else y
        return a if expr_equal(a, b) else None

    def _int_binary(self, e: Binary) -> PrimExpr | None:
        op, a, b = e.op, e.a, e.b
        ca, cb = _int_const(a), _int_const(b)
        if op in ("+", "*", "min", "max") and ca is not None and cb is None:
            return Binary(op, b, a, e.dtype)  # constants to the right
        if op == "+":
            return self._plus(a, b, cb)
        if op == "-":
            if cb == 0:
                return a
            if cb is not None and cb < 0:
                return self._add_const(a, -cb)
            if expr_equal(a, b):
                return Const(0, e.dtype)
            inner = _offset(a)
            if cb is not None and inner is not None and isinstance(a, Binary):
                return self._add_const(a.a, inner - cb)
            return None
        if op == "*":
            if cb == 1:
                return a
            if cb == 0:
                return Const(0, e.dtype)
            factor = _int_const(a.b) if isinstance(a, Binary) and a.op == "*" else None
            if cb is not None and factor is not None and isinstance(a, Binary):
                return self._simplified("*", a.a, Const(factor * cb, e.dtype), e.dtype)
            return None
        if op in ("//", "%", "tdiv", "tmod", "/"):
            return self._division(e, cb)
        if op in ("min", "max"):
            if expr_equal(a, b):
                return a
            ba, bb = self.bound(a), self.bound(b)
            a_below = ba[1] is not None and bb[0] is not None and ba[1] <= bb[0]
            b_below = bb[1] is not None and ba[0] is not None and bb[1] <= ba[0]
            if a_below:
                return a if op == "min" else b
            if b_below:
                return b if op == "min" else a
            return None
        if op not in COMPARE_OPS:
            return None  # bitwise operators: no rules
        return self._compare(e)

    def _plus(self, a: PrimExpr, b: PrimExpr, cb: int | None) -> PrimExpr | None:
        if cb == 0:
            return a
        inner = _offset(a)
        if cb is not None and inner is not None and isinstance(a, Binary):
            return self._add_const(a.a, inner + cb)
        if cb is not None and cb < 0:
            return Binary("-", a, Const(-cb, b.dtype), a.dtype)
        return None

    def _division(self, e: Binary, c: int | None) -> PrimExpr | None:
        op, a = e.op, e.a
        is_mod = op in ("%", "tmod")
        if c == 1:
            return Const(0, e.dtype) if is_mod else a
        if c is None or c <= 0:
            return None
        lo, hi = self.bound(a)
        if op in ("tdiv", "tmod", "/"):
            if lo is None or lo < 0:
                return None
            # Truncation and floor agree on non-negative values; the floor rules below apply.
            return Binary("%" if is_mod else "//", a, e.b, e.dtype)
        if lo is not None and hi is not None and lo // c == hi // c:
            k = lo // c
            return self._add_const(a, -k * c) if is_mod else Const(k, e.dtype)
        terms = _terms(a)
        whole = [(t, _multiple_of(t, c)) for t in terms]
        divisible = [q for _, q in whole if q is not None]
        rest = [t for t, q in whole if q is None]
        if divisible:
            rest_sum = self._sum(rest, e.dtype)
            if is_mod:
                if rest_sum is None:
                    return Const(0, e.dtype)
                return self._simplified("%", rest_sum, e.b, e.dtype)
            quotient = self._sum(divisible, e.dtype)
            assert quotient is not None
            if rest_sum is None:
                return quotient
            return self._simplified("+", quotient, self._simplified("//", rest_sum, e.b, e.dtype), e.dtype)
        inner_c = _int_const(a.b) if isinstance(a, Binary) else None
        if isinstance(a, Binary) and inner_c is not None and inner_c > 0:
            if op == "//" and a.op == "//":
                return self._simplified("//", a.a, Const(inner_c * c, e.dtype), e.dtype)
            if op == "%" and a.op == "%" and inner_c % c == 0:
                return self._simplified("%", a.a, e.b, e.dtype)
        return None

    def _sum(self, terms: list[PrimExpr], dtype: str) -> PrimExpr | None:
        if not terms:
            return None
        total = terms[0]
        for t in terms[1:]:
            total = self._simplified("+", total, t, dtype)
        return total

    def _compare(self, e: Binary) -> PrimExpr | None:
        op, a, b = e.op, e.a, e.b
        if expr_equal(a, b):
            return Const(op in ("==", "<=", ">="), "bool")
        (alo, ahi), (blo, bhi) = self.bound(a), self.bound(b)

        def lt(x: int | None, y: int | None) -> bool:
            return x is not None and y is not None and x < y

        def le(x: int | None, y: int | None) -> bool:
            return x is not None and y is not None and x <= y

        apart = lt(ahi, blo) or lt(bhi, alo)
        always, never = {
            "<": (lt(ahi, blo), le(bhi, alo)),
            "<=": (le(ahi, blo), lt(bhi, alo)),
            ">": (lt(bhi, alo), le(ahi, blo)),
            ">=": (le(bhi, alo), lt(ahi, blo)),
            "==": (False, apart),
            "!=": (apart, False),
        }.get(op, (False, False))
        if always or never:
            return Const(always, "bool")
        return None


def simplify_expr(e: PrimExpr, ranges: Mapping[Var, IntBound] | None = None) -> PrimExpr:
    """`e` simplified; `ranges` gives inclusive integer ranges of variables where known."""
    return ExprSimplifier(ranges)(e)


def split_constant_offset(e: PrimExpr) -> tuple[PrimExpr | None, int]:
    """`e` as `(rest, c)` with `e == rest + c` in `e`'s integer dtype (wrapping, as the C is built
    with -fwrapv): the constants of its sums and differences, scaled by the constant factors
    around them, gathered into `c`; `rest` is None when `e` is a constant. Operands of another
    dtype (under a cast) and everything but `+`, `-` and `*` by a constant stay whole."""
    k = _int_const(e)
    if k is not None:
        return None, k
    if not (isinstance(e, Binary) and is_int_dtype(e.dtype) and e.a.dtype == e.b.dtype == e.dtype):
        return e, 0
    if e.op in ("+", "-"):
        (ra, ca), (rb, cb) = split_constant_offset(e.a), split_constant_offset(e.b)
        c = _wrap(ca + cb if e.op == "+" else ca - cb, e.dtype)
        if rb is None:
            return ra, c
        if ra is None:
            return (rb, c) if e.op == "+" else (e, 0)  # a constant minus a term stays as written
        return Binary(e.op, ra, rb, e.dtype), c
    if e.op == "*":
        factor, other = (_int_const(e.b), e.a) if _int_const(e.b) is not None else (_int_const(e.a), e.b)
        if factor is None:
            return e, 0
        rest, c = split_constant_offset(other)
        return (None if rest is None else Binary("*", rest, Const(factor, e.dtype), e.dtype)), _wrap(c * factor, e.dtype)
    return e, 0


# -- statements ----------------------------------------------------------------------------------


def _is_empty(s: Stmt) -> bool:
    return isinstance(s, Seq) and not s.stmts


def loop_range(begin: PrimExpr, extent: PrimExpr, bound: _Bounds) -> IntBound:
    """Inclusive range of a loop variable running over `[begin, begin + extent)`."""
    b, n = bound(begin), bound(extent)
    hi = None if b[1] is None or n[1] is None else b[1] + n[1] - 1
    return (b[0], hi)


class _StmtSimplifier:
    def __init__(self, ranges: Mapping[Var, IntBound] | None):
        self.ranges: dict[Var, IntBound] = dict(ranges or {})
        # Variables with one value in scope (a loop of one iteration, a let of a constant),
        # replaced in each expression as it is simplified: substituting into the whole body
        # at each such loop rewrote a deep nest once per level (a fifth of ResNet-50's C
        # emission). The values are final (simplified under the outer ones), so one pass with
        # all of them gives the expressions the nested substitutions gave.
        self.values: dict[Var, PrimExpr] = {}
        self._substitute: ExprRewriter | None = None

    def exprs(self) -> ExprSimplifier:
        # Fresh per statement: memoized results are only valid for the ranges in scope now.
        return ExprSimplifier(self.ranges)

    def sub(self, e: ExprLike) -> PrimExpr:
        """`e` with the variables of `values` replaced."""
        e = as_expr(e)
        return e if self._substitute is None else self._substitute(e)

    def with_value(self, var: Var, value: PrimExpr, body: Stmt) -> Stmt:
        """`body` simplified with `var` replaced by `value`."""
        saved = self.values, self._substitute
        values = self.values = {**self.values, var: value}
        self._substitute = ExprRewriter(lambda e: values.get(e, e) if isinstance(e, Var) else e)
        try:
            return self.stmt(body)
        finally:
            self.values, self._substitute = saved

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Seq):
            return self.seq(s)
        if isinstance(s, For):
            return self.loop(s)
        if isinstance(s, Store):
            simp = self.exprs()
            indices = tuple(simp(self.sub(i)) for i in s.indices)
            value = simp(self.sub(s.value))
            if value is s.value and all(x is y for x, y in zip(indices, s.indices)):
                return s
            return Store(s.buffer, indices, value)
        if isinstance(s, Allocate):
            body = self.stmt(s.body)
            if _is_empty(body):
                return EMPTY
            return s if body is s.body else Allocate(s.buffer, body)
        if isinstance(s, LetStmt):
            simp = self.exprs()
            value = simp(self.sub(s.value))
            if isinstance(value, Const):
                return self.with_value(s.var, value, s.body)
            self.ranges[s.var] = simp.bound(value)
            body = self.stmt(s.body)
            del self.ranges[s.var]
            if _is_empty(body):
                return EMPTY
            return s if value is s.value and body is s.body else LetStmt(s.var, value, body)
        if isinstance(s, IfThenElse):
            return self.branch(s)
        if isinstance(s, Evaluate):
            value = self.exprs()(self.sub(s.value))
            if isinstance(value, (Const, Var)):
                return EMPTY
            return s if value is s.value else Evaluate(value)
        raise TypeError(f"unknown loop-level statement {type(s).__name__}")

    def seq(self, s: Seq) -> Stmt:
        items: list[Stmt] = []
        changed = False
        for item in s.stmts:
            new = self.stmt(item)
            changed = changed or new is not item
            if isinstance(new, Seq):
                changed = True
                items.extend(new.stmts)
            else:
                items.append(new)
        if not changed:
            return s
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def loop(self, s: For) -> Stmt:
        simp = self.exprs()
        begin, extent = simp(self.sub(s.begin)), simp(self.sub(s.extent))
        n = _int_const(extent)
        if n is not None and n <= 0:
            return EMPTY
        if n == 1 and s.kind is not ForKind.CLAIMED:  # a claimed iteration runs once, not once per thread
            return self.with_value(s.var, begin, s.body)
        self.ranges[s.var] = loop_range(begin, extent, simp.bound)
        body = self.stmt(s.body)
        del self.ranges[s.var]
        if _is_empty(body):
            return EMPTY
        if begin is s.begin and extent is s.extent and body is s.body:
            return s
        return For(s.var, begin, extent, body, s.kind)

    def branch(self, s: IfThenElse) -> Stmt:
        cond = self.exprs()(self.sub(s.cond))
        known = _bool_const(cond)
        if known is None and isinstance(cond, Const):
            known = bool(cond.value)
        if known is not None:
            chosen = s.then_case if known else s.else_case
            return EMPTY if chosen is None else self.stmt(chosen)
        then = self.stmt(s.then_case)
        other = None if s.else_case is None else self.stmt(s.else_case)
        if other is not None and _is_empty(other):
            other = None
        if _is_empty(then):
            if other is None:
                return EMPTY
            return IfThenElse(Unary("!", cond, "bool"), other, None)
        if cond is s.cond and then is s.then_case and other is s.else_case:
            return s
        return IfThenElse(cond, then, other)


def simplify(stmt: Stmt, ranges: Mapping[Var, IntBound] | None = None) -> Stmt:
    """`stmt` simplified; returns `stmt` itself when nothing changed, `Seq(())` when nothing is
    left. `ranges` gives inclusive ranges of variables bound outside `stmt`."""
    return _StmtSimplifier(ranges).stmt(stmt)

