"""Loop-level expressions as C: literals, the `code_for_op` table, and the expression emitter.

Every emitted expression is an *operand-safe* string: a name, a literal, a call or a
subscript, or wrapped in parentheses, so table entries can splice operands without thinking
about precedence.

Semantics follow numpy, which the reference interpreter uses:
* `//` and `%` are floor division and modulo, `/` (on integers), `tdiv` and `tmod` truncate.
  Integer divisions go through static inline helpers in which division by zero gives 0 like
  numpy and `MIN / -1` wraps, where C would trap; floor forms of floats reproduce numpy's
  `divmod` (the helpers are in `c_helpers`). When the divisor is a constant other than 0 and
  -1 (and, for the floor forms, both operands are provably non-negative) C's `/` and `%` are
  used directly, which keeps index arithmetic cheap and vectorizable.
* `min`/`max` on floats propagate NaN like `np.minimum`/`np.maximum` (C's fminf/fmaxf do not).
* `round` is C's `round`, which rounds halves away from zero, like TVM (and unlike numpy).
* Float constants are printed so that the C compiler reads back exactly the value numpy holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from compiler.backend.c_helpers import HELPER_PREFIX, helper_suffix
from compiler.backend.c_math import VECTOR_MATH_F32
from compiler.tir.analysis import expr_children
from compiler.tir.dtypes import c_type
from compiler.tir.expr import (
    BINARY_OPS,
    INTRINSICS,
    UNARY_OPS,
    Binary,
    Buffer,
    CallExtern,
    Cast,
    Const,
    Intrin,
    Load,
    PrimExpr,
    Select,
    Unary,
    Var,
    as_expr,
)
from compiler.tir.simplify import ExprSimplifier, is_int_dtype

# An op's C form from its operands' C code and the operands' dtype.
OpCode = Callable[[Sequence[str], str], str]


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _signed_int(dtype: str) -> bool:
    return dtype.startswith("int")


# -- literals ------------------------------------------------------------------------------------


def c_literal(value: int | float | bool, dtype: str) -> str:
    """`value` as a C literal of `dtype`, exact for every representable value."""
    if dtype == "bool" or isinstance(value, bool):
        return "1" if value else "0"
    if _is_float(dtype):
        x = float(value)
        if math.isnan(x):
            text = "NAN"
        elif math.isinf(x):
            text = "INFINITY" if x > 0 else "(-INFINITY)"
        elif dtype == "float64":
            text = repr(x)
        elif dtype == "float16":
            # Every float16 is exactly a float32, so the conversion in C is exact.
            text = f"((_Float16){float(np.float16(x))!r}f)"
        else:
            # The shortest decimal that reads back as this float32 in numpy.
            text = str(np.float32(x)) + "f"
        return f"({text})" if text.startswith("-") else text
    v = int(value)
    info = np.iinfo(dtype)
    if not int(info.min) <= v <= int(info.max):
        # A constant its dtype cannot hold (e.g. a 2**32 loop extent typed int32): keep the value.
        dtype = "int64" if v < 2**63 else "uint64"
        info = np.iinfo(dtype)
    if info.bits >= 32 and v == int(info.min) and v < 0:
        return f"INT{info.bits}_MIN"
    if info.bits == 64 or dtype == "uint32":
        text = ("UINT" if dtype.startswith("uint") else "INT") + f"{info.bits}_C({v})"
    elif info.bits == 32:
        text = str(v)
    else:
        text = f"(({c_type(dtype)}){v})"
    return f"({text})" if text.startswith("-") else text


def strip_parens(text: str, keep_if: str = "") -> str:
    """`text` without one pair of parentheses enclosing all of it, if there is one and the
    inside has no top-level comma (or character of `keep_if`), which would change meaning."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for k, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0 and k < len(text) - 1:
                return text
        elif depth == 1 and (ch == "," or ch in keep_if):
            return text
    return text[1:-1]


# -- the op table --------------------------------------------------------------------------------


def _infix(symbol: str) -> OpCode:
    return lambda a, dtype: f"({a[0]} {symbol} {a[1]})"


def _call_args(args: Sequence[str]) -> str:
    return ", ".join(strip_parens(x) for x in args)


def _helper_call(name: str) -> Callable[[Sequence[str], str], str]:
    return lambda a, dtype: f"{HELPER_PREFIX}{name}_{helper_suffix(dtype)}({_call_args(a)})"


def _floor_op(name: str) -> OpCode:
    """Floor division or modulo: a helper for floats and signed ints; for unsigned ints floor
    is truncation (still guarded against a zero divisor)."""
    trunc = "truncdiv" if name == "floordiv" else "truncmod"

    def emit(a: Sequence[str], dtype: str) -> str:
        if _is_float(dtype) or _signed_int(dtype):
            return _helper_call(name)(a, dtype)
        return _helper_call(trunc)(a, dtype)

    return emit


def _float_or_int(float_code: OpCode, int_code: OpCode) -> OpCode:
    return lambda a, dtype: float_code(a, dtype) if _is_float(dtype) else int_code(a, dtype)


def _math_call(fname: str, args: Sequence[str], dtype: str) -> str:
    """`fname` from math.h in the precision of `dtype` (float16 computes in float, integers in
    double, each converted back); float32 exp, erf and tanh are our own, which vectorize."""
    if dtype == "float32":
        if fname in VECTOR_MATH_F32:
            return f"{HELPER_PREFIX}{fname}_f32({_call_args(args)})"
        return f"{fname}f({_call_args(args)})"
    if dtype == "float64":
        return f"{fname}({_call_args(args)})"
    if dtype == "float16":
        return f"((_Float16){fname}f({', '.join(f'(float){x}' for x in args)}))"
    return f"(({c_type(dtype)}){fname}({', '.join(f'(double){x}' for x in args)}))"


def _math(fname: str) -> OpCode:
    return lambda a, dtype: _math_call(fname, a, dtype)


def _float_math(fname: str, int_code: OpCode) -> OpCode:
    """A math.h function for floats; integers use `int_code` (e.g. floor of an int is itself)."""
    return _float_or_int(_math(fname), int_code)


def _identity(a: Sequence[str], dtype: str) -> str:
    return a[0]


def _never(a: Sequence[str], dtype: str) -> str:
    return f"((void){a[0]}, 0)"


def _int_abs(a: Sequence[str], dtype: str) -> str:
    return a[0] if dtype.startswith("uint") or dtype == "bool" else _helper_call("abs")(a, dtype)


def _float_one(dtype: str) -> str:
    """The literal 1 in the precision of `dtype` (integers and float16 let C convert)."""
    return {"float32": "1.0f", "float64": "1.0"}.get(dtype, "1")


def _rsqrt(a: Sequence[str], dtype: str) -> str:
    return f"({_float_one(dtype)} / {_math_call('sqrt', a, dtype)})"


def _sigmoid(a: Sequence[str], dtype: str) -> str:
    one = _float_one(dtype)
    return f"({one} / ({one} + {_math_call('exp', [f'-{a[0]}'], dtype)}))"


def _needs_result_dtype(a: Sequence[str], dtype: str) -> str:
    raise AssertionError("reinterpret is emitted by ExprEmitter, which knows the result dtype")


def reinterpret_code(operand: str, from_dtype: str, to_dtype: str) -> str:
    """The bits of `operand` read as `to_dtype`: a union compound literal, which C99 defines
    (a pointer cast would break strict aliasing)."""
    return (f"(((union {{ {c_type(from_dtype)} in; {c_type(to_dtype)} out; }}){{ .in = {strip_parens(operand)} }})"
            ".out)")


code_for_op: dict[str, OpCode] = {
    "+": _infix("+"),
    "-": _infix("-"),
    "*": _infix("*"),
    "/": _float_or_int(_infix("/"), _helper_call("truncdiv")),
    "//": _floor_op("floordiv"),
    "%": _floor_op("floormod"),
    "tdiv": _float_or_int(lambda a, dtype: _math_call("trunc", [f"{a[0]} / {a[1]}"], dtype),
                          _helper_call("truncdiv")),
    "tmod": _float_or_int(_math("fmod"), _helper_call("truncmod")),
    "min": _helper_call("min"),
    "max": _helper_call("max"),
    "<": _infix("<"),
    "<=": _infix("<="),
    ">": _infix(">"),
    ">=": _infix(">="),
    "==": _infix("=="),
    "!=": _infix("!="),
    "&&": _infix("&&"),
    "||": _infix("||"),
    "&": _infix("&"),
    "|": _infix("|"),
    "^": _infix("^"),
    "<<": _infix("<<"),
    ">>": _infix(">>"),
    "~": lambda a, dtype: f"(!{a[0]})" if dtype == "bool" else f"(~{a[0]})",
    "neg": lambda a, dtype: f"(-{a[0]})",
    "!": lambda a, dtype: f"(!{a[0]})",
    "exp": _math("exp"),
    "log": _math("log"),
    "sqrt": _math("sqrt"),
    "rsqrt": _rsqrt,
    "tanh": _math("tanh"),
    "sigmoid": _sigmoid,
    "erf": _math("erf"),
    "fabs": _float_math("fabs", _int_abs),
    "floor": _float_math("floor", _identity),
    "ceil": _float_math("ceil", _identity),
    "round": _float_math("round", _identity),
    "pow": _math("pow"),
    "fmod": _float_or_int(_math("fmod"), _helper_call("truncmod")),
    "isnan": _float_or_int(lambda a, dtype: f"isnan({strip_parens(a[0])})", _never),
    "isinf": _float_or_int(lambda a, dtype: f"isinf({strip_parens(a[0])})", _never),
    **{name: _math(name) for name in (
        "sin", "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "log2", "log10",
    )},
    "trunc": _float_math("trunc", _identity),
    "reinterpret": _needs_result_dtype,
}

assert set(code_for_op) == set(BINARY_OPS) | set(UNARY_OPS) | set(INTRINSICS)

_INT_DIVISIONS = ("/", "//", "%", "tdiv", "tmod")
_INT32_LIMIT = 2**31
# Longer sub-expressions become named temporaries, so deep chains cost linear time and the C
# stays readable.
_LONG_EXPRESSION = 2000
# Intrinsics whose result is not a value of the argument dtype.
_PREDICATES = ("isnan", "isinf")


# -- the emitter ---------------------------------------------------------------------------------


class CScope(Protocol):
    """What the expression emitter needs from the function being emitted."""

    def var_name(self, var: Var) -> str:
        """The C name of a bound variable (marks it used)."""

    def buffer_name(self, buffer: Buffer) -> str:
        """The C name of a buffer's data pointer (marks it used)."""

    def flat_index(self, buffer: Buffer, indices: Sequence[PrimExpr], simplifier: ExprSimplifier) -> PrimExpr:
        """The row-major element offset of `buffer[indices]`."""

    def fresh(self, base: str) -> str:
        """A new C identifier."""

    def note_call(self, call: CallExtern) -> None:
        """Records an external call so that it can be declared."""

    def index_var(self, var: Var) -> str | None:
        """What C holds for a loop or let variable whose range is known to hold its values:
        "exact", or "huge" for an int32 loop beyond int32's range; None for any other variable.
        int32 variables with a kind are int64_t in C."""


class ExprEmitter:
    """Turns the expressions of one statement into C.

    Sub-expressions used more than once (by identity), and very long ones, are hoisted into
    `const` locals emitted before the statement, which keeps the C linear in the size of the
    expression DAG. Nodes under a select branch stay inline: C's `?:` evaluates only the chosen
    branch, and a load there may be out of bounds when the branch is not taken.
    """

    def __init__(self, scope: CScope, simplifier: ExprSimplifier):
        self.scope = scope
        self.simp = simplifier
        self._flat: dict[int, PrimExpr] = {}
        self._keep: list[PrimExpr] = []
        # int32 nodes whose C text is int64_t (loop variables and arithmetic on them), the
        # nodes whose bound holds for their int32 value (nothing below them wrapped) and the
        # nodes depending on a loop beyond int32's range.
        self._wide: set[int] = set()
        self._exact: set[int] = set()
        self._huge: set[int] = set()
        self.wide_roots: list[str | None] = []  # each root's `CScope.index_var` kind

    def _children(self, e: PrimExpr) -> tuple[PrimExpr, ...]:
        if isinstance(e, Load):
            flat = self._flat.get(id(e))
            if flat is None:
                flat = self.scope.flat_index(e.buffer, e.indices, self.simp)
                self._flat[id(e)] = flat
                self._keep.append(e)
            return (flat,)
        return expr_children(e)

    def _walk(self, roots: Sequence[PrimExpr]) -> list[PrimExpr]:
        order: list[PrimExpr] = []
        done: set[int] = set()
        for root in roots:
            stack: list[tuple[PrimExpr, bool]] = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                if id(node) in done:
                    continue
                if expanded:
                    done.add(id(node))
                    order.append(node)
                    continue
                stack.append((node, True))
                stack.extend((k, False) for k in reversed(self._children(node)) if id(k) not in done)
        return order

    def _guarded(self, order: list[PrimExpr]) -> set[int]:
        """Ids of nodes reachable from a select branch."""
        guarded: set[int] = set()
        stack = [k for e in order if isinstance(e, Select) for k in (e.t, e.f)]
        while stack:
            node = stack.pop()
            if id(node) not in guarded:
                guarded.add(id(node))
                stack.extend(self._children(node))
        return guarded

    def emit(self, roots: Sequence[PrimExpr]) -> tuple[list[str], list[str]]:
        """(declarations to place before the statement, one C expression per root)."""
        order = self._walk(roots)
        uses: dict[int, int] = {}
        for node in order:
            for kid in self._children(node):
                uses[id(kid)] = uses.get(id(kid), 0) + 1
        for root in roots:
            uses[id(root)] = uses.get(id(root), 0) + 1
        guarded = self._guarded(order) if any(isinstance(e, Select) for e in order) else set()
        root_ids = {id(r) for r in roots if uses[id(r)] == 1}
        text: dict[int, str] = {}
        decls: list[str] = []
        for node in order:
            code = self._node(node, text)
            worth_naming = (uses[id(node)] > 1 and not self._cheap(node)) or len(code) > _LONG_EXPRESSION
            hoist = (worth_naming and id(node) not in guarded and id(node) not in root_ids
                     and node.dtype != "void")
            if hoist:
                name = self.scope.fresh("cse")
                ctype = "int64_t" if id(node) in self._wide else c_type(node.dtype)
                decls.append(f"const {ctype} {name} = {strip_parens(code)};")
                code = name
            text[id(node)] = code
        self.wide_roots = [None if id(r) not in self._wide else "huge" if id(r) in self._huge else "exact"
                           for r in roots]
        return decls, [text[id(r)] for r in roots]

    def _widen(self, e: PrimExpr, code: str) -> str:
        """Loops count in int64_t, which gcc can vectorize and strength-reduce under -fwrapv
        (int32 counters that may wrap defeat both); int32 index arithmetic on them is then
        computed in int64. That is exact while the value fits int32, which the node's bound
        shows; otherwise the value is truncated back to int32_t here, so it wraps as the IR
        says."""
        kids = (e.t, e.f) if isinstance(e, Select) else self._children(e)
        if e.dtype == "bool":
            self._exact.add(id(e))
        elif is_int_dtype(e.dtype) and all(id(k) in self._exact or not is_int_dtype(k.dtype) for k in kids):
            if _fits_int32(self.simp.bound(e)):
                self._exact.add(id(e))
        if e.dtype != "int32" or not any(id(k) in self._wide for k in kids):
            return code
        if any(id(k) in self._huge for k in kids):
            self._huge.add(id(e))
        elif id(e) not in self._exact:
            return f"((int32_t){code})"
        self._wide.add(id(e))
        return code

    def _cheap(self, e: PrimExpr) -> bool:
        """One operation on names and literals (`i + 8`, `x[i]`): repeating it costs nothing."""
        return all(isinstance(k, (Const, Var)) for k in self._children(e))

    def _int_division(self, e: Binary, operands: list[str]) -> str:
        """Plain C `/` and `%` where they agree with the IR's semantics and cannot trap: floor
        forms need non-negative operands, and the divisor must be a constant other than 0, -1."""
        op = e.op
        if op in ("//", "%") and self._int_nonneg(e.a) and self._int_nonneg(e.b):
            op = "tdiv" if op == "//" else "tmod"
        divisor = e.b.value if isinstance(e.b, Const) else None
        if op in ("/", "tdiv", "tmod") and isinstance(divisor, int) and divisor not in (0, -1):
            return f"({operands[0]} {'%' if op == 'tmod' else '/'} {operands[1]})"
        return code_for_op[op](operands, e.a.dtype)

    def _int_nonneg(self, e: PrimExpr) -> bool:
        lo = self.simp.bound(e)[0]
        return lo is not None and lo >= 0

    def _node(self, e: PrimExpr, text: dict[int, str]) -> str:
        if isinstance(e, Const):
            self._exact.add(id(e))
            return c_literal(e.value, e.dtype)
        if isinstance(e, Var):
            kind = self.scope.index_var(e)
            if kind is not None and e.dtype == "int32":
                self._wide.add(id(e))
            if kind == "huge":
                self._huge.add(id(e))
            elif kind == "exact" and _fits_int32(self.simp.bound(e)):
                self._exact.add(id(e))
            return self.scope.var_name(e)
        if isinstance(e, Binary):
            operands = [text[id(e.a)], text[id(e.b)]]
            if e.op in _INT_DIVISIONS and is_int_dtype(e.a.dtype):
                return self._widen(e, _wrap_narrow(self._int_division(e, operands), e.dtype))
            if e.op in ("min", "max") and e.a.dtype in _FLOAT_MINMAX and _not_nan_constant(e.b):
                return _helper_call(f"{e.op}k")(operands, e.a.dtype)
            return self._widen(e, _wrap_narrow(code_for_op[e.op](operands, e.a.dtype), e.dtype))
        if isinstance(e, Unary):
            return self._widen(e, _wrap_narrow(code_for_op[e.op]([text[id(e.a)]], e.a.dtype), e.dtype))
        if isinstance(e, Select):
            return self._widen(e, f"({text[id(e.cond)]} ? {text[id(e.t)]} : {text[id(e.f)]})")
        if isinstance(e, Cast):
            value = text[id(e.value)]
            if e.dtype == "bool":
                return f"({value} != 0)"
            if e.dtype == "float32" and e.value.dtype == "float16":
                # Vectorizable conversions (c_helpers): a float16 rounding of a float32 value,
                # and a float16 load.
                inner = e.value
                if isinstance(inner, Cast) and inner.value.dtype == "float32":
                    if _half_exact(inner.value):
                        return text[id(inner.value)]  # nothing to round: relu of a rounded value
                    return f"{HELPER_PREFIX}halfround_f32({strip_parens(text[id(inner.value)])})"
                if isinstance(inner, Load):
                    return f"{HELPER_PREFIX}halfload_f32(&{value})"
            return f"(({c_type(e.dtype)}){value})"
        if isinstance(e, Intrin):
            arg_dtype = e.args[0].dtype
            if e.name == "reinterpret":
                return reinterpret_code(text[id(e.args[0])], arg_dtype, e.dtype)
            code = code_for_op[e.name]([text[id(a)] for a in e.args], arg_dtype)
            if e.name not in _PREDICATES and e.dtype != arg_dtype:
                code = f"(({c_type(e.dtype)}){code})"
            return code
        if isinstance(e, Load):
            return f"{self.scope.buffer_name(e.buffer)}[{strip_parens(text[id(self._children(e)[0])])}]"
        if isinstance(e, CallExtern):
            self.scope.note_call(e)
            return f"{e.name}({', '.join(self._call_arg(a, text) for a in e.args)})"
        raise TypeError(f"unknown loop-level expression {type(e).__name__}")

    def _call_arg(self, a: object, text: dict[int, str]) -> str:
        if isinstance(a, PrimExpr):
            return strip_parens(text[id(a)])
        if isinstance(a, Buffer):
            return self.scope.buffer_name(a)
        if isinstance(a, (bool, int, float)):
            return c_literal(a, as_expr(a).dtype)
        raise TypeError(f"call_extern argument {a!r} is neither an expression nor a buffer")


_FLOAT_MINMAX = ("float32", "float64")


def _not_nan_constant(e: PrimExpr) -> bool:
    """Whether `e` is a float constant other than NaN (min/max with it take one comparison:
    c_helpers' `mink`/`maxk`)."""
    return isinstance(e, Const) and e.value == e.value


def _half_exact(e: PrimExpr) -> bool:
    """Whether float32 `e` certainly holds a float16 value (or NaN), so rounding it to float16
    changes nothing: a float16 rounding or load, a constant that is one, min/max of such."""
    if isinstance(e, Cast):
        return e.value.dtype == "float16"
    if isinstance(e, Const):
        value = float(e.value)
        with np.errstate(over="ignore"):
            return value != value or float(np.float16(value)) == value
    if isinstance(e, Binary) and e.op in ("min", "max"):
        return _half_exact(e.a) and _half_exact(e.b)
    return False


def _fits_int32(bound: tuple[int | None, int | None]) -> bool:
    lo, hi = bound
    return lo is not None and hi is not None and -_INT32_LIMIT <= lo and hi < _INT32_LIMIT


_NARROW_INTS = ("int8", "int16", "uint8", "uint16")


def _wrap_narrow(code: str, dtype: str) -> str:
    """C computes narrow integers in `int`; cast each result back so it wraps like the dtype."""
    return f"(({c_type(dtype)}){code})" if dtype in _NARROW_INTS else code
