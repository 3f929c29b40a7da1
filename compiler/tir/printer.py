"""A readable text form of loop-level IR, for debugging and the artifacts' lowered listing.

    primfn add(A: float32[8], B: float32[8]) -> (C: float32[8]) {
      parallel for i in [0, 8) {
        C[i] = (A[i] + B[i])
      }
    }

Distinct variables or buffers that share a name are told apart by a `_1`, `_2` suffix. The text
is not meant to be parsed back.
"""

from __future__ import annotations

from compiler.tir.expr import (
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
from compiler.tir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, LetStmt, PrimFunc, Seq, Stmt, Store

_INDENT = "  "


class _Names:
    """Display names by identity, suffixed when two objects share one."""

    def __init__(self) -> None:
        self._by_id: dict[int, str] = {}
        self._taken: set[str] = set()
        self._keep: list[object] = []

    def __call__(self, obj: Var | Buffer) -> str:
        name = self._by_id.get(id(obj))
        if name is None:
            name, n = obj.name, 0
            while name in self._taken:
                n += 1
                name = f"{obj.name}_{n}"
            self._taken.add(name)
            self._by_id[id(obj)] = name
            self._keep.append(obj)
        return name


def _const_text(c: Const) -> str:
    if isinstance(c.value, bool):
        return "True" if c.value else "False"
    text = repr(c.value)
    return text if c.dtype in ("int32", "float32") else f"{c.dtype}({text})"


def _dim_text(d: PrimExpr | int, names: _Names) -> str:
    return str(d) if isinstance(d, int) else expr_text(d, names)


def _buffer_type(b: Buffer, names: _Names) -> str:
    dims = ", ".join(_dim_text(d, names) for d in b.shape)
    return f"{b.dtype}[{dims}]"


def expr_text(e: PrimExpr, names: _Names | None = None) -> str:
    """An expression as infix text; shared sub-expressions are printed at each use.

    Pieces are written left to right from an explicit stack, so deep chains print in time
    proportional to the text.
    """
    names = names if names is not None else _Names()
    out: list[str] = []
    stack: list[str | PrimExpr] = [e]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        else:
            stack.extend(reversed(_pieces(item, names)))
    return "".join(out)


def _joined(items: list[str | PrimExpr]) -> list[str | PrimExpr]:
    pieces: list[str | PrimExpr] = []
    for k, item in enumerate(items):
        if k:
            pieces.append(", ")
        pieces.append(item)
    return pieces


def _pieces(e: PrimExpr, names: _Names) -> list[str | PrimExpr]:
    if isinstance(e, Const):
        return [_const_text(e)]
    if isinstance(e, Var):
        return [names(e)]
    if isinstance(e, Binary):
        if e.op.isalpha():
            return [f"{e.op}(", e.a, ", ", e.b, ")"]
        return ["(", e.a, f" {e.op} ", e.b, ")"]
    if isinstance(e, Unary):
        return ["(-" if e.op == "neg" else "(!", e.a, ")"]
    if isinstance(e, Select):
        return ["select(", e.cond, ", ", e.t, ", ", e.f, ")"]
    if isinstance(e, Cast):
        return [f"{e.dtype}(", e.value, ")"]
    if isinstance(e, Intrin):
        return [f"{e.name}(", *_joined(list(e.args)), ")"]
    if isinstance(e, Load):
        return [f"{names(e.buffer)}[", *_joined(list(e.indices)), "]"]
    if isinstance(e, CallExtern):
        args: list[str | PrimExpr] = []
        for a in e.args:
            if isinstance(a, PrimExpr):
                args.append(a)
            elif isinstance(a, Buffer):
                args.append(names(a))
            else:
                args.append(repr(a))
        return [f"call_extern({e.name!r}", *[p for a in args for p in (", ", a)], ")"]
    raise TypeError(f"unknown loop-level expression {type(e).__name__}")


def _stmt_lines(s: Stmt, depth: int, names: _Names, out: list[str]) -> None:
    pad = _INDENT * depth
    if isinstance(s, Seq):
        for item in s.stmts:
            _stmt_lines(item, depth, names, out)
    elif isinstance(s, For):
        kind = "" if s.kind is ForKind.SERIAL else f"{s.kind.value} "
        begin = expr_text(as_expr(s.begin), names)
        end = expr_text(as_expr(s.begin) + s.extent, names)
        out.append(f"{pad}{kind}for {names(s.var)} in [{begin}, {end}) {{")
        _stmt_lines(s.body, depth + 1, names, out)
        out.append(f"{pad}}}")
    elif isinstance(s, Store):
        idx = ", ".join(expr_text(as_expr(i), names) for i in s.indices)
        out.append(f"{pad}{names(s.buffer)}[{idx}] = {expr_text(as_expr(s.value), names)}")
    elif isinstance(s, Allocate):
        b = s.buffer
        out.append(f"{pad}allocate {names(b)}: {_buffer_type(b, names)} {b.scope}")
        _stmt_lines(s.body, depth, names, out)
    elif isinstance(s, LetStmt):
        out.append(f"{pad}let {names(s.var)}: {s.var.dtype} = {expr_text(as_expr(s.value), names)}")
        _stmt_lines(s.body, depth, names, out)
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if {expr_text(as_expr(s.cond), names)} {{")
        _stmt_lines(s.then_case, depth + 1, names, out)
        if s.else_case is not None:
            out.append(f"{pad}}} else {{")
            _stmt_lines(s.else_case, depth + 1, names, out)
        out.append(f"{pad}}}")
    elif isinstance(s, Evaluate):
        out.append(f"{pad}{expr_text(as_expr(s.value), names)}")
    else:
        raise TypeError(f"unknown loop-level statement {type(s).__name__}")


def stmt_text(s: Stmt) -> str:
    out: list[str] = []
    _stmt_lines(s, 0, _Names(), out)
    return "\n".join(out)


def tir_text(func: PrimFunc) -> str:
    """`func` as pseudo-code: signature with shapes, then the loop nest."""
    names = _Names()
    inputs = ", ".join(f"{names(b)}: {_buffer_type(b, names)}" for b in func.inputs)
    outputs = ", ".join(f"{names(b)}: {_buffer_type(b, names)}" for b in func.outputs)
    scalars = "".join(f", {names(v)}: {v.dtype}" for v in func.scalar_params)
    lines = [f"primfn {func.name}({inputs}{scalars}) -> ({outputs}) {{"]
    _stmt_lines(func.body, 1, names, lines)
    lines.append("}")
    return "\n".join(lines) + "\n"
