"""Relay text printer: IRModules and expressions as Relay text v0.0.5 that TVM's parser accepts.

Bodies are written in graph form. Every call, tuple, projection, `if`, `fn` literal and nested
`let` gets its own `%N = ...;` line, except a node used exactly once as the result of a block
(function body, `if` branch, `let` body) or as the value of a `let`: that one is written in
place. A node used several times is written once and referred to by its `%N`, so sharing
survives a print/parse round trip. `%N` numbers come from one counter for the whole module
because TVM's parser keeps a single table of them for the whole file.

A binding line goes into the innermost block that holds every use of its node (the lowest
common ancestor of its uses in the tree of `{ }` blocks), so a value shared by both branches of
an `if`, or by a `fn` literal and its surroundings, is defined before the `if` or the `fn` and
never inside one branch only. Within a block, lines appear in evaluation order, which keeps
every line after the `let` lines whose variables it uses.

A `let` that is the result of its block continues that block (`let %x = v;` then the body); a
`let` anywhere else is wrapped in parentheses, as TVM's printer does.

Variable names are made unique per definition (`%x`, `%x1`, ...); names that do not start with a
letter or `_` get a `v` prefix, and characters the tokenizer would not keep in a name (such as
`.` in `%dense.weight`) become `_`, so that every printed module parses again.

Scalars of int32/int16/int64/float16/float32/float64/bool are written as literals whose digits
round-trip exactly; every other constant becomes `meta[relay.Constant][k]` (k by first use) and
the text ends with a `#[metadata]` section.

`astext(expr)` prints a standalone expression the same way, without the version header: one
`free_var %x: T;` line per free variable (in first-use order, typed by its annotation or else its
inferred type), then its binding lines, then its result, so that `parse_expr` reads it back.

A NaN float attribute is refused with a ValueError naming the attribute: the text format has no
NaN literal, and writing text the parser rejects would only move the failure further away.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Sequence
from typing import TextIO, Union

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.device import VirtualDevice
from compiler.ir.expr import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    TypeData,
    Var,
    children,
    pattern_vars,
)
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, Type, type_text
from compiler.ir.visitor import free_vars, post_order
from compiler.parser.metadata import write_metadata

VERSION_HEADER = '#[version = "0.0.5"]'


__all__ = ["astext", "write_text", "format_attr_value", "scalar_literal", "type_text"]


def astext(obj: IRModule | Expr, show_types: bool = False) -> str:
    """`obj` as Relay text; `show_types` adds `/* ty=... */` after calls whose type is known."""
    out = io.StringIO()
    write_text(out, obj, show_types)
    return out.getvalue()


def write_text(stream: TextIO, obj: IRModule | Expr, show_types: bool = False) -> None:
    """`astext(obj)` written to `stream`, the metadata section's constants streamed: a model's
    weights in base64 are never held in memory as one text."""
    printer = _Printer(show_types)
    if isinstance(obj, IRModule):
        text = printer.module(obj)
    elif isinstance(obj, Expr):
        text = printer.expression(obj)
    else:
        raise TypeError(f"cannot print {type(obj).__name__} as Relay text")
    stream.write(text)
    printer.write_metadata_section(stream)


# ----------------------------------------------------------------------------------------------
# Values: attribute values and scalar constants


def format_attr_value(value: object, meta: Callable[[object], str] | None = None) -> str:
    """An attribute value as the parser reads it back (`1e-05f`, `"NCHW"`, `[1, 2]`, `@f`).

    `meta` writes values that live in the metadata section (VirtualDevices, and Constants such
    as memory.alloc_tensor's const_shape) as `meta[...]`.
    """
    if isinstance(value, (VirtualDevice, Constant)):
        if meta is None:
            raise TypeError(f"a {type(value).__name__} attribute needs a printer with a metadata section")
        return meta(value)
    if value is None:
        return "None"
    if value is ANY:
        return "?"
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return _float_attr_text(float(value))
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_attr_value(v, meta) for v in value) + "]"
    if isinstance(value, Attrs):
        return "{" + ", ".join(f"{k}={format_attr_value(v, meta)}" for k, v in value.items()) + "}"
    if isinstance(value, GlobalVar):
        return f"@{value.name_hint}"
    if isinstance(value, Op):
        return value.name
    if isinstance(value, Type):
        return type_text(value)
    raise TypeError(f"cannot print attribute value {value!r}")


def _float_attr_text(value: float) -> str:
    # Attribute floats are doubles; repr gives the shortest digits that read back to the same one.
    if math.isinf(value):
        return "inff" if value > 0 else "-inff"
    if math.isnan(value):
        raise ValueError("NaN has no literal in Relay text")
    return repr(value) + "f"


def _attr_texts(
    items: Sequence[tuple[str, object]], owner: str, meta: Callable[[object], str] | None = None
) -> list[str]:
    """`key=value` for each attribute of `owner`, naming the attribute when a value cannot be written."""
    texts: list[str] = []
    for key, value in items:
        try:
            texts.append(f"{key}={format_attr_value(value, meta)}")
        except ValueError as error:
            raise ValueError(f"cannot print attribute {key} of {owner}: {error}") from None
    return texts


_SCALAR_SUFFIX = {"int32": "", "int16": "i16", "int64": "i64", "float32": "f", "float16": "f16", "float64": "f64"}


def scalar_literal(data: np.ndarray) -> str | None:
    """The literal for a rank-0 array of a dtype the text format has literals for, else None."""
    if data.ndim != 0:
        return None
    dtype = str(data.dtype)
    if dtype == "bool":
        return "True" if bool(data) else "False"
    suffix = _SCALAR_SUFFIX.get(dtype)
    if suffix is None:
        return None
    if dtype.startswith("int"):
        return f"{int(data)}{suffix}"
    value = data[()]
    if math.isnan(value):
        return None
    if math.isinf(value):
        # The tokenizer knows `inff`/`-inff` for float32 only; other widths go to metadata.
        if dtype != "float32":
            return None
        return "inff" if value > 0 else "-inff"
    return _float_digits(value) + suffix


def _float_digits(value: np.floating) -> str:
    """The shortest digits that read back (through a double) to exactly `value`."""
    if isinstance(value, np.float64):
        return repr(float(value))
    short = str(value)
    if type(value)(float(short)) == value:
        return short
    # The double holding `value` is exact, so its repr always reads back to it.
    return repr(float(value))


# ----------------------------------------------------------------------------------------------
# Layout: which block each compound node is bound in, and which nodes are written in place

Piece = Union[str, "_Block"]

_TAIL = 0  # the result of a block
_LET_VALUE = 1  # the value of a let
_OPERAND = 2  # anything else

_COMPOUND = (Call, Tuple, TupleGetItem, If, Let, Function, Match, RefCreate, RefRead, RefWrite)
_REF_KEYWORD = {RefCreate: "ref", RefRead: "ref_read", RefWrite: "ref_write"}


class _Block:
    """A sequence of binding lines and a result, written between `open` and `close`."""

    __slots__ = ("parent", "depth", "open", "close", "lines", "tail")

    def __init__(self, parent: _Block | None, open_: str = "{", close: str = "}"):
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.open = open_
        self.close = close
        self.lines: list[list[Piece]] = []
        self.tail: list[Piece] = []


def _common_block(a: _Block, b: _Block) -> _Block:
    while a is not b:
        if a.depth >= b.depth:
            assert a.parent is not None
            a = a.parent
        else:
            assert b.parent is not None
            b = b.parent
    return a


def _uses(node: Expr) -> list[tuple[Expr, int]]:
    """The operands of `node` with how each is used; bound variables are not uses."""
    if isinstance(node, Call):
        return [(node.op, _OPERAND)] + [(a, _OPERAND) for a in node.args]
    if isinstance(node, Tuple):
        return [(f, _OPERAND) for f in node.fields]
    if isinstance(node, TupleGetItem):
        return [(node.tuple_value, _OPERAND)]
    if isinstance(node, If):
        return [(node.cond, _OPERAND), (node.true_branch, _TAIL), (node.false_branch, _TAIL)]
    if isinstance(node, Let):
        return [(node.value, _LET_VALUE), (node.body, _TAIL)]
    if isinstance(node, Function):
        return [(node.body, _TAIL)]
    if isinstance(node, Match):
        return [(node.data, _OPERAND)] + [(c.rhs, _TAIL) for c in node.clauses]
    if isinstance(node, (RefCreate, RefRead, RefWrite)):
        return [(child, _OPERAND) for child in children(node)]
    return []


class _Layout:
    """Placement of the compound nodes of one body rooted at `root`, printed into `block`."""

    def __init__(self, root: Expr, block: _Block):
        nodes = list(post_order(root))
        count: dict[Expr, int] = {root: 1}
        last_use: dict[Expr, int] = {root: _TAIL}
        for node in nodes:
            for child, use in _uses(node):
                count[child] = count.get(child, 0) + 1
                last_use[child] = use
        self.inline: set[Expr] = {
            n
            for n in nodes
            if isinstance(n, _COMPOUND) and count[n] == 1 and last_use[n] in (_TAIL, _LET_VALUE)
        }
        # A let written in place as a block result continues that block; any other let opens
        # a parenthesised block of its own.
        self.merged_lets: set[Let] = {
            n for n in self.inline if isinstance(n, Let) and last_use[n] == _TAIL
        }
        self.home: dict[Expr, _Block] = {root: block}
        # Blocks a node opens: a Function's body, an If's two branches, a Let's bindings.
        self.opened: dict[Expr, tuple[_Block, ...]] = {}
        # Parents come before children in reverse post order, so each home is final when read.
        for node in reversed(nodes):
            if not isinstance(node, _COMPOUND):
                continue
            home = self.home[node]
            targets = self._open_blocks(node, home)
            for child, target in targets:
                if not isinstance(child, _COMPOUND):
                    continue
                known = self.home.get(child)
                self.home[child] = target if known is None else _common_block(known, target)

    def _open_blocks(self, node: Expr, home: _Block) -> list[tuple[Expr, _Block]]:
        """Open the blocks of `node` and say in which block each of its operands is used."""
        if isinstance(node, If):
            then, other = _Block(home), _Block(home)
            self.opened[node] = (then, other)
            return [(node.cond, home), (node.true_branch, then), (node.false_branch, other)]
        if isinstance(node, Function):
            body = _Block(home)
            self.opened[node] = (body,)
            return [(node.body, body)]
        if isinstance(node, Match):
            arms = tuple(_Block(home) for _ in node.clauses)
            self.opened[node] = arms
            return [(node.data, home)] + [(c.rhs, arm) for c, arm in zip(node.clauses, arms)]
        if isinstance(node, Let):
            inner = home if node in self.merged_lets else _Block(home, "(", ")")
            self.opened[node] = (inner,)
            return [(node.value, inner), (node.body, inner)]
        return [(child, home) for child, _ in _uses(node)]


# ----------------------------------------------------------------------------------------------
# Printing

_ENTER, _EXIT, _BIND = range(3)
_NAME_CHAR = re.compile(r"[^A-Za-z0-9_]")


class _Names:
    """Unique printed names for the variables of one definition."""

    def __init__(self) -> None:
        self.of: dict[Var, str] = {}
        self._counters: dict[str, int] = {}

    def bind(self, var: Var) -> str:
        name = _NAME_CHAR.sub("_", var.name_hint)
        if not name or not (name[0].isalpha() or name[0] == "_"):
            name = "v" + name
        if name in self._counters:
            base = name
            while name in self._counters:
                self._counters[base] += 1
                name = f"{base}{self._counters[base]}"
        self._counters[name] = 0
        printed = "%" + name
        self.of[var] = printed
        return printed

    def get(self, var: Var) -> str:
        name = self.of.get(var)
        return name if name is not None else self.bind(var)


class _Printer:
    def __init__(self, show_types: bool):
        self.show_types = show_types
        self.counter = 0
        self.meta: list[np.ndarray] = []
        self.meta_index: dict[Constant, int] = {}
        self.devices: list[VirtualDevice] = []
        self.names = _Names()

    # --- entry points ---

    def module(self, mod: IRModule) -> str:
        parts = [VERSION_HEADER + "\n"]
        types = [mod.type_definitions[name] for name in sorted(mod.type_definitions)]
        for i, data in enumerate(d for d in types if not d.extern):
            # A blank line between definitions, types included, as TVM prints a module.
            parts.append(("\n" if i else "") + _type_definition(data))
        for i, (gv, definition) in enumerate(mod.items()):
            if i or any(not data.extern for data in types):
                parts.append("\n")
            if isinstance(definition, Function):
                self.names = _Names()
                header = self._signature(f"def @{gv.name_hint}(", definition)
                block = self._body(definition.body, _Block(None))
                parts.append(_render([header, block]) + "\n")
            else:
                parts.append(_foreign_definition(gv.name_hint, definition))
        # TVM's parser reads no definition after an `extern type` (it stops there), so these
        # come last, where TVM's parser accepts them as well as ours.
        for data in types:
            if data.extern:
                params = f"[{', '.join(p.name for p in data.type_params)}]" if data.type_params else ""
                parts.append(f"extern type {data.name}{params}\n")
        return "".join(parts)

    def expression(self, expr: Expr) -> str:
        self.names = _Names()
        block = _Block(None, "", "")
        # Free variables are named first so that inner lets and params with the same name give way.
        for var in free_vars(expr):
            block.lines.append(self._free_var_line(var))
        block = self._body(expr, block)
        return _render_lines(block) + "\n"

    def write_metadata_section(self, stream: TextIO) -> None:
        if not self.meta and not self.devices:
            return
        stream.write("#[metadata]\n")
        write_metadata(stream, self.meta, self.devices)  # JSON text, which never ends in a newline
        stream.write("\n")

    # --- bodies ---

    def _body(self, root: Expr, block: _Block) -> _Block:
        """Fill `block` with the binding lines of `root` and its result."""
        layout = _Layout(root, block)
        refs: dict[Expr, list[Piece]] = {}
        stack: list[tuple[Expr, int]] = [(root, _ENTER)]
        while stack:
            node, step = stack.pop()
            if step == _ENTER:
                if node in refs or not isinstance(node, _COMPOUND):
                    continue
                stack.append((node, _EXIT))
                if isinstance(node, Let):
                    self.names.bind(node.var)
                    stack += [(node.body, _ENTER), (node, _BIND), (node.value, _ENTER)]
                    continue
                if isinstance(node, Function):
                    for param in node.params:
                        self.names.bind(param)
                elif isinstance(node, Match):
                    for clause in node.clauses:
                        for var in pattern_vars(clause.lhs):
                            self.names.bind(var)
                stack += [(child, _ENTER) for child, _ in reversed(_uses(node))]
            elif step == _BIND:
                assert isinstance(node, Let)
                decl = self._var_decl(node.var)
                inner = layout.opened[node][0]
                inner.lines.append(["let ", decl, " = ", *self._ref(node.value, refs), ";"])
            else:
                text = self._text(node, layout, refs)
                if node in layout.inline:
                    refs[node] = text
                else:
                    temp = f"%{self.counter}"
                    self.counter += 1
                    layout.home[node].lines.append([temp, " = ", *text, ";"])
                    refs[node] = [temp]
        block.tail = self._ref(root, refs)
        return block

    def _ref(self, node: Expr, refs: dict[Expr, list[Piece]]) -> list[Piece]:
        if isinstance(node, _COMPOUND):
            return refs[node]
        if isinstance(node, Var):
            return [self.names.get(node)]
        if isinstance(node, GlobalVar):
            return [f"@{node.name_hint}"]
        if isinstance(node, (Op, Constructor)):
            return [node.name]
        if isinstance(node, Constant):
            return [self._constant(node)]
        raise TypeError(f"cannot print {node!r}")

    def _one(self, node: Expr, refs: dict[Expr, list[Piece]]) -> str:
        """The reference to an operand, which is always a single piece of text."""
        piece = self._ref(node, refs)
        assert len(piece) == 1 and isinstance(piece[0], str), f"{node!r} was written in place"
        return piece[0]

    def _text(self, node: Expr, layout: _Layout, refs: dict[Expr, list[Piece]]) -> list[Piece]:
        """The text of a compound node whose operands are all printed."""
        if isinstance(node, Call):
            args = [self._one(a, refs) for a in node.args]
            args += _attr_texts(self._call_attrs(node), f"call to {self._one(node.op, refs)}", self._device_ref)
            text = f"{self._one(node.op, refs)}({', '.join(args)})"
            if self.show_types and node.has_type:
                text += f" /* ty={type_text(node.checked_type)} */"
            return [text]
        if isinstance(node, Tuple):
            fields = [self._one(f, refs) for f in node.fields]
            return ["(" + fields[0] + ",)"] if len(fields) == 1 else ["(" + ", ".join(fields) + ")"]
        if isinstance(node, TupleGetItem):
            return [f"{self._one(node.tuple_value, refs)}.{node.index}"]
        if isinstance(node, If):
            then, other = layout.opened[node]
            then.tail = self._ref(node.true_branch, refs)
            other.tail = self._ref(node.false_branch, refs)
            return [f"if ({self._one(node.cond, refs)}) ", then, " else ", other]
        if isinstance(node, Function):
            (body,) = layout.opened[node]
            body.tail = self._ref(node.body, refs)
            return [self._signature("fn (", node), body]
        if isinstance(node, Match):
            return self._match_text(node, layout, refs)
        if isinstance(node, (RefCreate, RefRead, RefWrite)):
            operands = ", ".join(self._one(child, refs) for child in children(node))
            return [f"{_REF_KEYWORD[type(node)]}({operands})"]
        assert isinstance(node, Let)
        if node in layout.merged_lets:
            return self._ref(node.body, refs)
        (inner,) = layout.opened[node]
        inner.tail = self._ref(node.body, refs)
        return [inner]

    def _match_text(self, node: Match, layout: _Layout, refs: dict[Expr, list[Piece]]) -> list[Piece]:
        """`match (x) {` one `pattern => { ... },` line per clause `}`."""
        keyword = "match" if node.complete else "match?"
        clauses = _Block(None, "{", "}")
        lines: list[list[Piece]] = []
        for clause, arm in zip(node.clauses, layout.opened[node]):
            arm.tail = self._ref(clause.rhs, refs)
            lines.append([self._pattern(clause.lhs), " => ", arm, ","])
        if lines:
            clauses.lines, clauses.tail = lines[:-1], lines[-1]
        return [f"{keyword} ({self._one(node.data, refs)}) ", clauses]

    def _pattern(self, pattern: Pattern) -> str:
        if isinstance(pattern, PatternVar):
            return self._var_decl(pattern.var)
        if isinstance(pattern, PatternConstructor):
            if not pattern.patterns:
                return pattern.constructor.name
            inner = ", ".join(self._pattern(p) for p in pattern.patterns)
            return f"{pattern.constructor.name}({inner})"
        if isinstance(pattern, PatternTuple):
            inner = ", ".join(self._pattern(p) for p in pattern.patterns)
            return f"({inner},)" if len(pattern.patterns) == 1 else f"({inner})"
        return "_"

    def _signature(self, prefix: str, func: Function) -> str:
        """`prefix` + params and attrs + `) -> T ` for a def or a fn literal."""
        params = [self._var_decl(p) for p in func.params]
        params += _attr_texts(list(func.attrs.items()), "a function", self._device_ref)
        if func.type_params:
            # `def @f(` becomes `def @f[A, B](`, `fn (` becomes `fn [A, B](`.
            type_params = "[" + ", ".join(t.name for t in func.type_params) + "]("
            prefix = prefix[:-1].rstrip() + (" " if prefix.startswith("fn") else "") + type_params
        text = prefix + ", ".join(params) + ") "
        ret = func.ret_type
        if ret is None and func.has_type and isinstance(func.checked_type, FuncType):
            ret = func.checked_type.ret_type
        if ret is not None:
            text += f"-> {type_text(ret)} "
        return text

    def _device_ref(self, device: object) -> str:
        if isinstance(device, Constant):
            return self._meta_constant(device)
        assert isinstance(device, VirtualDevice)
        if device not in self.devices:
            self.devices.append(device)
        return f"meta[VirtualDevice][{self.devices.index(device)}]"

    def _var_decl(self, var: Var) -> str:
        name = self.names.get(var)
        if var.virtual_device is not None:
            name += f" {{virtual_device={self._device_ref(var.virtual_device)}}}"
        if var.type_annotation is None:
            return name
        return f"{name}: {type_text(var.type_annotation)}"

    def _free_var_line(self, var: Var) -> list[Piece]:
        # Unlike a param or let, a free var has no binding to infer its type from when read
        # back, so its inferred type is written when it carries no annotation.
        name = self.names.get(var)
        ty = var.type_annotation
        if ty is None and var.has_type:
            ty = var.checked_type
        decl = name if ty is None else f"{name}: {type_text(ty)}"
        return [f"free_var {decl};"]

    def _call_attrs(self, call: Call) -> Sequence[tuple[str, object]]:
        if not call.attrs:
            return ()
        if isinstance(call.op, Op):
            return call.op.printed_attrs(call.attrs)
        return list(call.attrs.items())

    def _constant(self, const: Constant) -> str:
        literal = scalar_literal(const.data)
        if literal is not None:
            return literal
        return self._meta_constant(const)

    def _meta_constant(self, const: Constant) -> str:
        index = self.meta_index.get(const)
        if index is None:
            index = self.meta_index[const] = len(self.meta)
            self.meta.append(const.data)
        return f"meta[relay.Constant][{index}]"


def _type_definition(data: TypeData) -> str:
    """`type List[A] {` one `Cons(A, List[A]),` line per constructor `}`, as TVM prints it."""
    params = f"[{', '.join(p.name for p in data.type_params)}]" if data.type_params else ""
    lines = [f"type {data.name}{params} {{"]
    for ctor in data.constructors:
        fields = f"({', '.join(type_text(t) for t in ctor.inputs)})" if ctor.inputs else ""
        lines.append(f"  {ctor.name}{fields},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _foreign_definition(name: str, definition: object) -> str:
    """A non-Relay definition (e.g. a loop-level PrimFunc) as a comment the parser skips."""
    text = str(definition).replace("/*", "/ *").replace("*/", "* /")
    return f"/* @{name} = {type(definition).__name__}:\n{text}\n*/\n"


# ----------------------------------------------------------------------------------------------
# Rendering pieces and blocks to text, iteratively (blocks nest as deep as the program does)

_NEWLINE = object()


def _render(pieces: Sequence[Piece]) -> str:
    out: list[str] = []
    stack: list[tuple[object, int]] = [(p, 0) for p in reversed(pieces)]
    while stack:
        item, indent = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif item is _NEWLINE:
            out.append("\n" + "  " * indent)
        else:
            assert isinstance(item, _Block)
            inner = indent + 1
            stack.append((item.close, indent))
            stack.append((_NEWLINE, indent))
            stack += [(p, inner) for p in reversed(item.tail)]
            stack.append((_NEWLINE, inner))
            for line in reversed(item.lines):
                stack += [(p, inner) for p in reversed(line)]
                stack.append((_NEWLINE, inner))
            stack.append((item.open, indent))
    return "".join(out)


def _render_lines(block: _Block) -> str:
    """A top-level block without its delimiters: one line per binding, then the result."""
    lines = [_render(line) for line in block.lines]
    lines.append(_render(block.tail))
    return "\n".join(lines)



# `str(module)` and `module.astext()` print through the text format without the IR importing it.
IRModule.text_printer = astext
