"""Loop-level scalar expressions.

A closed set of node kinds, so the C code generator is one table and never changes when an
operator is added: constants, variables, binary and unary operators, select, cast, math
intrinsics and buffer loads. Python operators build nodes (`i * 4 + j`), folding constants on
the fly so index arithmetic stays readable in the generated C.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Union

_ids = itertools.count()

# Binary operators: arithmetic, comparisons (bool result), logical. `//` and `%` are floor
# division and floor modulo, as TVM's index arithmetic uses; `tdiv`/`tmod` truncate like C.
ARITH_OPS = ("+", "-", "*", "/", "//", "%", "tdiv", "tmod", "min", "max")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("&&", "||")
# Bitwise operators on integers (and bools); shifts are C's, their amount in [0, bits).
BITWISE_OPS = ("&", "|", "^", "<<", ">>")
BINARY_OPS = ARITH_OPS + COMPARE_OPS + LOGIC_OPS + BITWISE_OPS
UNARY_OPS = ("neg", "!", "~")
# Math intrinsics available to computes; each maps to a C math.h function per dtype.
INTRINSICS = (
    "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "fabs", "floor", "ceil", "round",
    "pow", "isnan", "isinf", "fmod",
    "sin", "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
    "log2", "log10", "trunc",
    # The argument's bits read as `dtype` (a type of the same width).
    "reinterpret",
)


class PrimExpr:
    """Base of scalar expressions; `dtype` is a Relay dtype string ("float32", "int32", "bool")."""

    dtype: str

    def __repr__(self) -> str:
        # Expressions are DAGs with heavy sharing: a full tree repr can be exponential in size.
        # compiler.tir.printer.expr_text prints one readably.
        return f"<{type(self).__name__} {self.dtype}>"

    def __add__(self, other: ExprLike) -> PrimExpr:
        return binary("+", self, other)

    def __radd__(self, other: ExprLike) -> PrimExpr:
        return binary("+", other, self)

    def __sub__(self, other: ExprLike) -> PrimExpr:
        return binary("-", self, other)

    def __rsub__(self, other: ExprLike) -> PrimExpr:
        return binary("-", other, self)

    def __mul__(self, other: ExprLike) -> PrimExpr:
        return binary("*", self, other)

    def __rmul__(self, other: ExprLike) -> PrimExpr:
        return binary("*", other, self)

    def __truediv__(self, other: ExprLike) -> PrimExpr:
        return binary("/", self, other)

    def __floordiv__(self, other: ExprLike) -> PrimExpr:
        return binary("//", self, other)

    def __mod__(self, other: ExprLike) -> PrimExpr:
        return binary("%", self, other)

    def __neg__(self) -> PrimExpr:
        return unary("neg", self)

    def __lt__(self, other: ExprLike) -> PrimExpr:  # type: ignore[override]  # builds IR, not bool
        return binary("<", self, other)

    def __le__(self, other: ExprLike) -> PrimExpr:  # type: ignore[override]  # builds IR, not bool
        return binary("<=", self, other)

    def __gt__(self, other: ExprLike) -> PrimExpr:  # type: ignore[override]  # builds IR, not bool
        return binary(">", self, other)

    def __ge__(self, other: ExprLike) -> PrimExpr:  # type: ignore[override]  # builds IR, not bool
        return binary(">=", self, other)


ExprLike = Union[PrimExpr, int, float, bool]


@dataclass(frozen=True, eq=False, repr=False)
class Const(PrimExpr):
    value: int | float | bool
    dtype: str = "int32"


@dataclass(frozen=True, eq=False, repr=False)
class Var(PrimExpr):
    """A scalar variable: a loop index, a let-bound value, or a symbolic dimension."""

    name: str
    dtype: str = "int32"
    uid: int = field(default_factory=lambda: next(_ids), repr=False)


@dataclass(frozen=True, eq=False, repr=False)
class Binary(PrimExpr):
    op: str
    a: PrimExpr
    b: PrimExpr
    dtype: str = "int32"


@dataclass(frozen=True, eq=False, repr=False)
class Unary(PrimExpr):
    op: str
    a: PrimExpr
    dtype: str = "int32"


@dataclass(frozen=True, eq=False, repr=False)
class Select(PrimExpr):
    """`cond ? t : f`. Only the chosen side is evaluated (codegen keeps both inside C's `?:`),
    so a side may load out of bounds when it is not chosen (padding, concatenate rely on it)."""

    cond: PrimExpr
    t: PrimExpr
    f: PrimExpr
    dtype: str = "float32"


@dataclass(frozen=True, eq=False, repr=False)
class Cast(PrimExpr):
    value: PrimExpr
    dtype: str = "float32"


@dataclass(frozen=True, eq=False, repr=False)
class Intrin(PrimExpr):
    """A math intrinsic from INTRINSICS, computed in `dtype`."""

    name: str
    args: tuple[PrimExpr, ...]
    dtype: str = "float32"


@dataclass(frozen=True, eq=False, repr=False)
class Load(PrimExpr):
    """`buffer[indices]`, one index per buffer dimension (row-major)."""

    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    dtype: str = "float32"


@dataclass(frozen=True, eq=False, repr=False)
class CallExtern(PrimExpr):
    """A call of an external C function by name; `args` may include buffers (pointers)."""

    name: str
    args: tuple[object, ...]
    dtype: str = "int32"


@dataclass(frozen=True, eq=False)
class Buffer:
    """A row-major n-d array in memory. `scope`: "global" (a parameter or planned workspace
    memory), "local" (a small array on the stack, e.g. an accumulator tile) or "heap" (a
    temporary of `?` shape the kernel allocates itself while its Allocate's body runs).

    Dimensions are ints or PrimExprs (dynamic shapes). `name` is the C identifier of the data
    pointer.
    """

    name: str
    shape: tuple[PrimExpr | int, ...]
    dtype: str = "float32"
    scope: str = "global"
    uid: int = field(default_factory=lambda: next(_ids), repr=False)

    def __getitem__(self, indices: ExprLike | tuple[ExprLike, ...]) -> Load:
        idx = indices if isinstance(indices, tuple) else (indices,)
        if len(idx) != len(self.shape):
            raise ValueError(f"buffer {self.name} has {len(self.shape)} dims, indexed with {len(idx)}")
        return Load(self, tuple(as_expr(i) for i in idx), self.dtype)

    @property
    def num_elements(self) -> PrimExpr | int:
        n: PrimExpr | int = 1
        for d in self.shape:
            n = n * d if isinstance(n, int) and isinstance(d, int) else as_expr(n) * d
        return n

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def nbytes(self) -> int:
        from compiler.tir.dtypes import itemsize

        n = self.num_elements
        if not isinstance(n, int):
            raise ValueError(f"buffer {self.name} has a dynamic size")
        return n * itemsize(self.dtype)


def const(value: int | float | bool, dtype: str | None = None) -> Const:
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32"
    return Const(value, dtype)


def as_expr(value: ExprLike) -> PrimExpr:
    if isinstance(value, PrimExpr):
        return value
    return const(value)


def _result_dtype(op: str, a: PrimExpr, b: PrimExpr) -> str:
    if op in COMPARE_OPS or op in LOGIC_OPS:
        return "bool"
    return a.dtype


def _fold(op: str, x: int | float, y: int | float) -> int | float | None:
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "//" and y != 0:
        return x // y
    if op == "%" and y != 0:
        return x % y
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    return None


def binary(op: str, a: ExprLike, b: ExprLike) -> PrimExpr:
    """Build `a op b`, folding integer constants and the identities x+0, x*1, x*0, x//1."""
    if op not in BINARY_OPS:
        raise ValueError(f"unknown binary op {op}")
    ea, eb = as_expr(a), as_expr(b)
    if op in BITWISE_OPS and ea.dtype.startswith("float"):
        raise ValueError(f"bitwise operator {op} on {ea.dtype} operands")
    # Python literals take the dtype of the other operand, so `x * 2.0` stays float32.
    if not isinstance(a, PrimExpr) and isinstance(b, PrimExpr):
        ea = Const(a, eb.dtype) if not isinstance(a, bool) else ea
    if not isinstance(b, PrimExpr) and isinstance(a, PrimExpr):
        eb = Const(b, ea.dtype) if not isinstance(b, bool) else eb
    int_consts = (
        isinstance(ea, Const) and isinstance(eb, Const) and ea.dtype.startswith("int") and eb.dtype.startswith("int")
    )
    if int_consts:
        folded = _fold(op, ea.value, eb.value)  # type: ignore[arg-type]  # ints checked above
        if folded is not None:
            return Const(int(folded), ea.dtype)
    is_int = ea.dtype.startswith("int")
    if is_int and op in ("+", "-") and isinstance(eb, Const) and eb.value == 0:
        return ea
    if is_int and op == "+" and isinstance(ea, Const) and ea.value == 0:
        return eb
    if is_int and op == "*":
        for x, y in ((ea, eb), (eb, ea)):
            if isinstance(y, Const) and y.value == 1:
                return x
            if isinstance(y, Const) and y.value == 0:
                return Const(0, ea.dtype)
    if is_int and op in ("//", "tdiv") and isinstance(eb, Const) and eb.value == 1:
        return ea
    return Binary(op, ea, eb, _result_dtype(op, ea, eb))


def unary(op: str, a: ExprLike) -> PrimExpr:
    if op not in UNARY_OPS:
        raise ValueError(f"unknown unary op {op}")
    ea = as_expr(a)
    if op == "~" and ea.dtype.startswith("float"):
        raise ValueError(f"bitwise operator ~ on a {ea.dtype} operand")
    return Unary(op, ea, "bool" if op == "!" else ea.dtype)


def select(cond: ExprLike, t: ExprLike, f: ExprLike) -> PrimExpr:
    et, ef = as_expr(t), as_expr(f)
    if not isinstance(t, PrimExpr) and isinstance(f, PrimExpr):
        et = Const(t, ef.dtype)  # type: ignore[arg-type]  # t is a Python scalar here
    if not isinstance(f, PrimExpr) and isinstance(t, PrimExpr):
        ef = Const(f, et.dtype)  # type: ignore[arg-type]  # f is a Python scalar here
    return Select(as_expr(cond), et, ef, et.dtype)


def cast(dtype: str, value: ExprLike) -> PrimExpr:
    ev = as_expr(value)
    if ev.dtype == dtype:
        return ev
    if isinstance(ev, Const) and not dtype.startswith("float") and dtype != "bool" and isinstance(ev.value, int):
        return Const(ev.value, dtype)
    return Cast(ev, dtype)


def intrin(name: str, *args: ExprLike, dtype: str | None = None) -> PrimExpr:
    if name not in INTRINSICS:
        raise ValueError(f"unknown intrinsic {name}")
    exprs = tuple(as_expr(a) for a in args)
    return Intrin(name, exprs, dtype or exprs[0].dtype)


def minimum(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary("min", a, b)


def maximum(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary("max", a, b)


def logical_and(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary("&&", a, b)


def logical_or(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary("||", a, b)


def eq(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary("==", a, b)


def ne(a: ExprLike, b: ExprLike) -> PrimExpr:
    return binary("!=", a, b)
