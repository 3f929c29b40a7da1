"""Recursive-descent parser from Relay text tokens to an IRModule or an expression.

Nesting (parentheses, calls, `fn`, `if`, types, attribute lists) recurses, bounded by
MAX_NESTING so that deep input gives a located ParseError instead of a RecursionError.
Sequences (`%N = ...;`, `let ...;`) and chains of infix operators are handled with loops, so
50,000 bindings parse without recursing. Parser methods come in pairs where useful:
`accept(kind)` returns None when the token is absent, `expect(kind)` raises a located error.

Scoping: `%N` graph bindings are scoped per `def`/`fn` body (a later `%N` is the same Expr
object); `let` variables and parameters are lexically scoped; globals may be used before the
`def` that defines them and are checked once all definitions are read.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar as GenericVar

import numpy as np

from compiler import ops
from compiler.diagnostics import ParseError, Source, Span
from compiler.ir.attrs import EMPTY_ATTRS, Attrs
from compiler.ir.device import VirtualDevice
from compiler.ir.expr import (
    Call,
    Clause,
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
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    TypeData,
    Var,
)
from compiler.ir.module import IRModule
from compiler.ir.types import (
    ANY,
    MAX_RANK,
    Dim,
    FuncType,
    IncompleteType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
    is_valid_dtype,
    unsupported_dtype_reason,
)
from compiler.parser.metadata import MetaTable
from compiler.parser.tokenizer import Lexed, Token, tokenize

MAX_NESTING = 500
# Python frames used per nesting level in the worst path (fn -> body -> ... -> fn), with margin.
_FRAMES_PER_LEVEL = 8

# Infix sugar: token -> (precedence, operator). All left-associative.
BINARY_OPERATORS = {
    "*": (12, "multiply"),
    "/": (12, "divide"),
    "+": (10, "add"),
    "-": (10, "subtract"),
    "<": (8, "less"),
    "<=": (8, "less_equal"),
    ">": (8, "greater"),
    ">=": (8, "greater_equal"),
    "==": (7, "equal"),
    "!=": (7, "not_equal"),
}
# `ref(e)`, `ref_read(r)`, `ref_write(r, v)`: keyword -> number of operands.
_REF_KEYWORDS = {"ref": 1, "ref_read": 1, "ref_write": 2}
# Ops whose first argument is a lowered function (a PrimFunc global after LowerTE).
_CALLS_LOWERED = ("call_lowered", "vm.invoke_tvm_op", "vm.shape_func")
_NO_VALUE_KEYWORDS = ("let", "def", "else", "free_var", "None", "nullptr", "type", "extern")
# In a bare type position only these words name dtypes (as in TVM); others are ADTs or type vars.
_BITLESS_DTYPES = {"int": "int32", "uint": "uint32", "float": "float32"}
_DTYPE_PREFIXES = ("int", "uint", "float", "bfloat", "bool", "handle")
AttrValue = object
_T = GenericVar("_T")
# The key under which call_arguments keeps a `meta[relay.attrs.X][i]` reference.
META_ATTRS = "meta[relay.attrs]"


def _meta_field(spec: ops.AttrSpec | None, text: str, resolve: Callable[[str], object]) -> object:
    """One field of a metadata attributes node, read by the kind of the attribute: TVM writes
    plain fields (int, bool, double, DataType, std::string) as text and object fields (arrays,
    optional or expression ints, String) as node indices."""
    if spec is None:
        return text  # an unknown attribute: make_attrs names it
    kind, nullable = spec.kind, spec.optional or spec.default is None
    if kind == "bool":
        return bool(int(text))
    if kind == "dtype":
        return text
    if kind in ("int", "float") and not nullable:
        return int(text) if kind == "int" else float(text)
    if kind == "str":
        if text.isdigit():
            try:
                value = resolve(text)
            except ValueError:
                return text
            return value if value is None or isinstance(value, str) else text
        return text
    return resolve(text)


def parse_module(source: Source) -> IRModule:
    with _parsing():
        return _Parser(tokenize(source)).module()


def parse_expression(source: Source) -> Expr:
    with _parsing():
        return _Parser(tokenize(source)).expression()


@contextmanager
def _parsing() -> Iterator[None]:
    """Room on the Python stack for MAX_NESTING levels, and no cyclic GC while parsing.

    Tokens and IR nodes form no reference cycles, and a large model allocates hundreds of
    thousands of them: pausing the collector makes parsing about a third faster.
    """
    old_limit = sys.getrecursionlimit()
    wanted = old_limit + MAX_NESTING * _FRAMES_PER_LEVEL
    sys.setrecursionlimit(wanted)
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
        if sys.getrecursionlimit() == wanted:
            sys.setrecursionlimit(old_limit)


class _Parser:
    def __init__(self, lexed: Lexed):
        self.lexed = lexed
        self.tokens = lexed.tokens
        self.pos = 0
        self.depth = 0
        # Local names map to a stack of Vars (innermost last); each scope frame lists its names.
        self.locals: dict[str, list[Var]] = {}
        self.local_frames: list[list[str]] = []
        # `%N` -> stack of bound expressions; each frame (a def/fn body) maps N -> its token.
        self.graph: dict[int, list[Expr]] = {}
        self.graph_frames: list[dict[int, Token]] = []
        self.globals: dict[str, GlobalVar] = {}
        self.global_uses: dict[str, Token] = {}
        # Globals named as the callee of call_lowered / vm.invoke_tvm_op (name -> op), or in an
        # attribute value: when undefined, they are the PrimFuncs of an already lowered module.
        self.lowered_callees: dict[str, str] = {}
        self.definitions: dict[str, Token] = {}
        # Algebraic data types: name -> (its token, number of type params), then the parsed ones.
        self.type_names: dict[str, tuple[Token, int]] = {}
        self.type_definitions: dict[str, TypeData] = {}
        self.constructors: dict[str, Constructor] = {}
        # Type variables in scope (type params of enclosing definitions), innermost last.
        self.type_vars: list[dict[str, TypeVar]] = []
        section = lexed.metadata_token
        self.meta = MetaTable(lexed.metadata_text, self.span(section) if section else None)

    # -- token helpers (the token list ends with several `eof`s, so look-ahead never overruns) --

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[self.pos + ahead]

    def advance(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind != "eof":
            self.pos += 1
        return token

    def at(self, kind: str) -> bool:
        return self.tokens[self.pos].kind == kind

    def at_keyword(self, word: str) -> bool:
        token = self.tokens[self.pos]
        return token.kind == "ident" and token.text == word

    def accept(self, kind: str) -> Token | None:
        token = self.tokens[self.pos]
        if token.kind != kind:
            return None
        self.pos += 1
        return token

    def expect(self, kind: str, what: str | None = None) -> Token:
        token = self.tokens[self.pos]
        if token.kind == kind:
            if kind != "eof":
                self.pos += 1
            return token
        raise self.error(f"expected {what or '`' + kind + '`'}, found {token.describe()}", token)

    def error(self, message: str, token: Token) -> ParseError:
        return ParseError(message, self.span(token))

    def span(self, token: Token) -> Span:
        return self.lexed.span(token)

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"input nests deeper than {MAX_NESTING} levels", self.peek())

    def leave(self) -> None:
        self.depth -= 1

    def at_attribute(self) -> bool:
        return self.at("ident") and self.peek(1).kind == "="

    def separated(self, item: Callable[[], _T], closing: str, what: str) -> tuple[list[_T], bool]:
        """Comma-separated items up to and including `closing`; also whether a comma came last."""
        items: list[_T] = []
        trailing_comma = False
        while not self.at(closing):
            items.append(item())
            trailing_comma = self.accept(",") is not None
            if not trailing_comma:
                break
        self.expect(closing, what)
        return items, trailing_comma

    # -- scopes --------------------------------------------------------------------------------

    def push_locals(self) -> None:
        self.local_frames.append([])

    def bind_local(self, var: Var) -> None:
        self.locals.setdefault(var.name_hint, []).append(var)
        self.local_frames[-1].append(var.name_hint)

    def pop_locals(self) -> None:
        for name in self.local_frames.pop():
            self.locals[name].pop()

    def push_graph(self) -> None:
        self.graph_frames.append({})

    def pop_graph(self) -> None:
        for number in self.graph_frames.pop():
            self.graph[number].pop()

    # -- module and definitions ----------------------------------------------------------------

    def module(self) -> IRModule:
        # Optional: a module without the header is read as version 0.0.5.
        self.accept("version")
        # Type definitions may come in any order and after the defs that use them: read them all
        # first, then the defs, skipping over the type definitions.
        type_ends = self.type_definitions_first()
        functions: dict[GlobalVar, Function] = {}
        while not self.at("eof") and not self.at("metadata"):
            token = self.peek()
            if self.at_keyword("extern"):
                if not (self.peek(1).kind == "ident" and self.peek(1).text == "type"):
                    raise self.error(f"expected `type` after `extern`, found {self.peek(1).describe()}", self.peek(1))
                self.advance()
            if self.at_keyword("type"):
                self.pos = type_ends[self.pos]
                continue
            if not self.at_keyword("def"):
                message = f"expected `def`, `type`, `extern type` or end of input, found {token.describe()}"
                raise self.error(message, token)
            gv, func = self.definition()
            functions[gv] = func
        self.finish()
        return IRModule(functions, type_definitions=self.type_definitions)

    def type_definitions_first(self) -> dict[int, int]:
        """Parse every top-level `type` definition; returns where each starts and ends."""
        starts: list[int] = []
        depth = 0
        for i in range(self.pos, len(self.tokens)):
            token = self.tokens[i]
            if token.kind in ("(", "[", "{"):
                depth += 1
            elif token.kind in (")", "]", "}"):
                depth -= 1
            elif token.kind == "metadata":
                break
            elif depth == 0 and token.kind == "ident" and token.text == "type":
                starts.append(i)
        for start in starts:
            name = self.tokens[start + 1]
            if name.kind != "ident":
                raise self.error(f"expected a type name after `type`, found {name.describe()}", name)
            if name.text in self.type_names:
                first = self.type_names[name.text][0]
                message = f"duplicate definition of type {name.text} (first defined on line {self.span(first).line})"
                raise self.error(message, name)
            arity = 0
            if self.tokens[start + 2].kind == "[":
                i = start + 3
                while self.tokens[i].kind not in ("]", "eof"):
                    arity += self.tokens[i].kind == "ident"
                    i += 1
            self.type_names[name.text] = (name, arity)
        ends: dict[int, int] = {}
        resume = self.pos
        for start in starts:
            self.pos = start
            previous = self.tokens[start - 1] if start else None
            extern = previous if previous is not None and previous.kind == "ident" and previous.text == "extern" else None
            data = self.type_definition(extern)
            self.type_definitions[data.name] = data
            ends[start] = self.pos
        self.pos = resume
        return ends

    def type_definition(self, extern: Token | None = None) -> TypeData:
        """`type Name[params] { constructors }`, or after `extern` a `type Name[params]` without any."""
        start = self.advance()
        name = self.advance()
        params = self.type_parameters() if self.at("[") else []
        self.type_vars.append({p.name: p for p in params})
        constructors: list[Constructor] = []

        def constructor() -> None:
            token = self.expect("ident", "a constructor name")
            if token.text in self.constructors:
                raise self.error(f"duplicate constructor {token.text}", token)
            inputs: list[Type] = []
            if self.accept("("):
                inputs, _ = self.separated(self.type, ")", "`,` or `)` in the constructor's fields")
            made = Constructor(token.text, tuple(inputs), name.text, len(constructors), self.span(token))
            self.constructors[token.text] = made
            constructors.append(made)

        brace = self.accept("{")
        if brace is not None:
            self.separated(constructor, "}", "`,` or `}` after a constructor")
        self.type_vars.pop()
        if extern is not None and constructors:
            raise self.error(f"an external type may not have any constructors (extern type {name.text})", brace or start)
        span = self.span(extern or start)
        return TypeData(name.text, tuple(params), tuple(constructors), span, extern is not None)

    def type_parameters(self) -> list[TypeVar]:
        """`[A, B]` after a type or function name."""
        self.expect("[")
        seen: set[str] = set()

        def parameter() -> TypeVar:
            token = self.expect("ident", "a type parameter name")
            if token.text in seen:
                raise self.error(f"duplicate type parameter {token.text}", token)
            seen.add(token.text)
            return TypeVar(token.text)

        params, _ = self.separated(parameter, "]", "`,` or `]` after a type parameter")
        return params

    def expression(self) -> Expr:
        self.accept("version")
        self.push_graph()
        expr = self.sequence()
        self.pop_graph()
        self.finish()
        return expr

    def finish(self) -> None:
        self.accept("metadata")
        self.expect("eof", "end of input")
        undefined = [(t, name) for name, t in self.global_uses.items() if name not in self.definitions]
        if undefined:
            first, name = min(undefined, key=lambda u: u[0].offset)
            raise self.error(self.undefined_global_message(name, first), first)
        self.meta.validate()

    def undefined_global_message(self, name: str, token: Token) -> str:
        user = self.lowered_callees.get(name)
        if user is None and token.kind not in ("quoted_global", "meta"):
            return f"undefined global @{name}"
        where = f"{user} refers to" if user is not None else "an attribute names"
        return (
            f"{where} @{name}, a PrimFunc the text does not contain: Relay text cannot carry PrimFuncs "
            "(TVM prints them apart from the module, or not at all); give the module as it was before LowerTE"
        )

    def definition(self) -> tuple[GlobalVar, Function]:
        def_token = self.advance()
        name_token = self.expect("global", "a global name like @main after `def`")
        name = name_token.text[1:]
        if name in self.definitions:
            first = self.definitions[name]
            message = f"duplicate definition of @{name} (first defined on line {self.span(first).line})"
            raise self.error(message, name_token)
        self.definitions[name] = name_token
        gv = self.globals.setdefault(name, GlobalVar(name, self.span(name_token)))
        return gv, self.function_rest(def_token)

    def function_rest(self, start: Token) -> Function:
        """Parameters, attributes, optional return type and body after `def @f` or `fn`."""
        type_params = self.type_parameters() if self.at("[") else []
        self.type_vars.append({p.name: p for p in type_params})
        self.expect("(")
        self.push_locals()
        self.push_graph()
        params: list[Var] = []
        attrs: dict[str, AttrValue] = {}

        def parameter_or_attribute() -> None:
            token = self.peek()
            if token.kind == "local":
                if attrs:
                    raise self.error("parameters must come before function attributes", token)
                params.append(self.parameter(params))
            elif self.at_attribute():
                self.attribute(attrs, {})
            else:
                raise self.error(f"expected a parameter or an attribute, found {token.describe()}", token)

        self.separated(parameter_or_attribute, ")", "`)` after the parameters")
        ret_type = self.type() if self.accept("->") else None
        self.expect("{", "`{` to start the function body")
        body = self.sequence()
        self.expect("}", "`}` to end the function body")
        self.pop_graph()
        self.pop_locals()
        self.type_vars.pop()
        return Function(tuple(params), body, ret_type, Attrs(attrs), self.span(start), tuple(type_params))

    def parameter(self, previous: list[Var]) -> Var:
        token = self.advance()
        name = token.text[1:]
        if any(p.name_hint == name for p in previous):
            raise self.error(f"duplicate parameter {token.text}", token)
        device = self.parameter_device() if self.at("{") else None
        # Without an annotation the type is inferred from the uses (InferType).
        annotation = self.type() if self.accept(":") else None
        var = Var(name, annotation, self.span(token), virtual_device=device)
        self.bind_local(var)
        return var

    def parameter_device(self) -> VirtualDevice:
        """`{virtual_device=meta[VirtualDevice][i]}` after a parameter's name."""
        self.advance()
        attrs: dict[str, AttrValue] = {}
        keys: dict[str, Token] = {}

        def entry() -> None:
            if not self.at_attribute():
                raise self.error(f"expected virtual_device=..., found {self.peek().describe()}", self.peek())
            self.attribute(attrs, keys)

        self.separated(entry, "}", "`,` or `}` after the parameter's attributes")
        for key, token in keys.items():
            if key != "virtual_device":
                raise self.error(f"a parameter takes only virtual_device, not {key}", token)
        device = attrs.get("virtual_device")
        if not isinstance(device, VirtualDevice):
            raise self.error("virtual_device must be meta[VirtualDevice][i]", keys.get("virtual_device", self.peek()))
        return device

    # -- expressions ---------------------------------------------------------------------------

    def sequence(self) -> Expr:
        """Bindings and `;`-separated expressions up to the final result, without recursion."""
        self.enter()
        self.push_locals()
        lets: list[tuple[Var, Expr, Token]] = []
        while True:
            token = self.peek()
            if self.at_keyword("let"):
                self.advance()
                var, value = self.let_binding()
                lets.append((var, value, token))
            elif token.kind == "graph" and self.peek(1).kind == "=":
                self.graph_binding()
            elif self.at_keyword("free_var"):
                self.advance()
                self.bind_local(self.free_var())
            else:
                value = self.binary()
                if not self.accept(";"):
                    result = value
                    break
                lets.append((Var("_", None, self.span(token)), value, token))
        self.pop_locals()
        for var, value, token in reversed(lets):
            result = Let(var, value, result, self.span(token))
        self.leave()
        return result

    def let_binding(self) -> tuple[Var, Expr]:
        token = self.peek()
        if token.kind != "local":
            raise self.error(f"`let` binds a local variable like %x, found {token.describe()}", token)
        self.advance()
        annotation = self.type() if self.accept(":") else None
        self.expect("=", "`=` in the let binding")
        var = Var(token.text[1:], annotation, self.span(token))
        if self.at_keyword("fn"):
            # A let-bound function sees its own name, so it can call itself (a loop).
            self.push_locals()
            self.bind_local(var)
            value = self.binary()
            self.pop_locals()
        else:
            value = self.binary()
        self.expect(";", "`;` after the let binding")
        self.bind_local(var)
        return var, value

    def graph_binding(self) -> None:
        token = self.advance()
        self.advance()
        number = int(token.text[1:])
        frame = self.graph_frames[-1]
        if number in frame:
            message = f"{token.text} is already bound in this function (line {self.span(frame[number]).line})"
            raise self.error(message, token)
        value = self.binary()
        self.expect(";", f"`;` after the binding of {token.text}")
        frame[number] = token
        self.graph.setdefault(number, []).append(value)

    def free_var(self) -> Var:
        token = self.expect("local", "a variable like %x after `free_var`")
        annotation = self.type() if self.accept(":") else None
        self.accept(";")
        return Var(token.text[1:], annotation, self.span(token))

    def binary(self) -> Expr:
        """Infix operators by precedence climbing with explicit stacks."""
        operands = [self.postfix()]
        pending: list[tuple[int, str, Token]] = []
        while self.peek().kind in BINARY_OPERATORS:
            token = self.advance()
            precedence, name = BINARY_OPERATORS[token.kind]
            while pending and pending[-1][0] >= precedence:
                self.reduce(operands, pending)
            pending.append((precedence, name, token))
            operands.append(self.postfix())
        while pending:
            self.reduce(operands, pending)
        return operands[0]

    def reduce(self, operands: list[Expr], pending: list[tuple[int, str, Token]]) -> None:
        _, name, token = pending.pop()
        rhs, lhs = operands.pop(), operands.pop()
        operands.append(self.call(self.operator(name, token), [lhs, rhs], {}, {}, token))

    def postfix(self) -> Expr:
        start = self.peek()
        expr = self.atom()
        while True:
            if self.at("("):
                args, attrs, keys = self.call_arguments()
                expr = self.call(expr, args, attrs, keys, start)
            elif self.accept("."):
                index = self.peek()
                if index.kind != "number" or not index.text.isdigit():
                    raise self.error(f"expected a tuple index after `.`, found {index.describe()}", index)
                self.advance()
                expr = TupleGetItem(expr, int(index.text), self.span(start))
            elif isinstance(expr, Op):
                # Ops are interned and carry no span: the type checker could not say where.
                raise self.error(f"operator {expr.name} used as a value; call it instead", start)
            else:
                return expr

    def call_arguments(self) -> tuple[list[Expr], dict[str, AttrValue], dict[str, Token]]:
        """Arguments, then attributes: `key=value`s, or one `meta[relay.attrs.X][i]` (kept as
        the reference token under the key META_ATTRS until the callee is known)."""
        self.enter()
        self.expect("(")
        args: list[Expr] = []
        attrs: dict[str, AttrValue] = {}
        keys: dict[str, Token] = {}

        def argument_or_attribute() -> None:
            if self.at("meta") and self.peek().text.startswith("meta[relay.attrs."):
                if attrs:
                    raise self.error("attributes are given twice", self.peek())
                keys[META_ATTRS] = self.advance()
                attrs[META_ATTRS] = None
            elif self.at_attribute():
                if META_ATTRS in attrs:
                    raise self.error("attributes are given twice", self.peek())
                self.attribute(attrs, keys)
            elif attrs:
                raise self.error("positional arguments must come before attributes", self.peek())
            else:
                args.append(self.binary())

        self.separated(argument_or_attribute, ")", "`,` or `)` in the argument list")
        self.leave()
        return args, attrs, keys

    def call(
        self, callee: Expr, args: list[Expr], attrs: dict[str, AttrValue], keys: dict[str, Token], start: Token
    ) -> Call:
        if not isinstance(callee, Op):
            if attrs:
                first = min(keys.values(), key=lambda t: t.offset)
                raise self.error("only operator calls take attributes", first)
            return Call(callee, tuple(args), EMPTY_ATTRS, self.span(start))
        opdef = ops.get(callee.name)
        if opdef.num_inputs is not None and len(args) != opdef.num_inputs:
            raise self.error(f"{callee.name} takes {opdef.num_inputs} arguments, got {len(args)}", start)
        if META_ATTRS in keys:
            reference = keys[META_ATTRS]
            attrs = self.meta_call_attrs(opdef, reference)
            keys = {name: reference for name in attrs}
        if args and isinstance(args[0], GlobalVar) and callee.name in _CALLS_LOWERED:
            self.lowered_callees.setdefault(args[0].name_hint, callee.name)
        if opdef.extras.get("any_attrs") and set(attrs) == {"__dict__"} and isinstance(attrs["__dict__"], Attrs):
            # TVM prints DictAttrs of an op call as `__dict__={...}` (or `__dict__=meta[Map][i]`).
            attrs = dict(attrs["__dict__"])
        try:
            made = opdef.make_attrs(attrs)
        except ops.AttrError as exc:
            raise self.error(str(exc), keys.get(exc.key, start) if exc.key else start) from None
        return Call(callee, tuple(args), made, self.span(start))

    def meta_call_attrs(self, opdef: ops.OpDef, reference: Token) -> dict[str, AttrValue]:
        """Decode `meta[relay.attrs.X][i]` for `opdef`: each field by the kind of its AttrSpec
        (fields TVM keeps as objects are node references; the rest are text)."""
        node = self.meta.call_attrs(reference.text, self.span(reference))
        specs = {spec.name: spec for spec in opdef.attrs}
        out: dict[str, AttrValue] = {}
        for name, text in node.fields.items():
            spec = specs.get(name)
            try:
                out[name] = _meta_field(spec, text, node.resolve)  # type: ignore[assignment]
            except (ValueError, ParseError) as exc:
                detail = exc.message if isinstance(exc, ParseError) else str(exc)
                raise self.error(f"{reference.text} field {name}: {detail}", reference) from None
        return out

    def operator(self, name: str, token: Token) -> Op:
        if ops.lookup(name) is None:
            raise self.error(f"unknown operator `{name}`", token)
        return Op.get(name)

    def atom(self) -> Expr:
        token = self.peek()
        kind = token.kind
        if kind == "number":
            return self.number_constant(self.advance())
        if kind == "bool":
            self.advance()
            return Constant(np.array(token.text == "True"), self.span(token))
        if kind == "local":
            return self.local(self.advance())
        if kind == "graph":
            self.advance()
            bound = self.graph.get(int(token.text[1:]))
            if not bound:
                raise self.error(f"{token.text} is not bound (bind it with `{token.text} = ...;` first)", token)
            return bound[-1]
        if kind == "global":
            return self.global_ref(self.advance())
        if kind == "meta":
            self.advance()
            return self.meta.constant(token.text, self.span(token))
        if kind == "(":
            return self.tuple_or_group()
        if kind == "{":
            self.advance()
            body = self.sequence()
            self.expect("}", "`}` to end the block")
            return body
        if kind == "ident":
            return self.word(token)
        if kind == "string":
            raise self.error("a string is only allowed as an attribute value", token)
        if kind == "-":
            raise self.error("there is no unary minus; write negative(x), or a literal such as -1f", token)
        raise self.error(f"expected an expression, found {token.describe()}", token)

    def word(self, token: Token) -> Expr:
        text = token.text
        if text == "fn":
            self.advance()
            return self.function_rest(token)
        if text == "if":
            return self.conditional()
        if text == "match":
            return self.match()
        if text in _REF_KEYWORDS:
            return self.reference(text)
        constructor = self.constructors.get(text)
        if constructor is not None:
            self.advance()
            return constructor
        if text in _NO_VALUE_KEYWORDS:
            raise self.error(f"expected an expression, found `{text}`", token)
        self.advance()
        return self.operator(text, token)

    def number_constant(self, token: Token) -> Constant:
        literal = token.literal
        assert literal is not None
        if literal.bare_decimal:
            hint = f"a floating-point literal needs a suffix, e.g. `{token.text}f`"
            raise self.error(f"invalid number `{token.text}`: {hint}", token)
        return Constant(np.array(literal.value, dtype=literal.dtype), self.span(token))

    def local(self, token: Token) -> Var:
        bound = self.locals.get(token.text[1:])
        if not bound:
            raise self.error(f"undefined variable {token.text}", token)
        return bound[-1]

    def global_ref(self, token: Token, name: str | None = None) -> GlobalVar:
        name = name if name is not None else token.text[1:]
        self.global_uses.setdefault(name, token)
        return self.globals.setdefault(name, GlobalVar(name, self.span(token)))

    def tuple_or_group(self) -> Expr:
        start = self.advance()
        if self.at_keyword("let") or (self.peek().kind == "graph" and self.peek(1).kind == "="):
            # A whole binding sequence in parentheses, as TVM prints a let used as an operand.
            result = self.sequence()
            self.expect(")", "`)` after the parenthesized sequence")
            return result
        self.enter()
        fields, trailing_comma = self.separated(self.binary, ")", "`,` or `)`")
        self.leave()
        if len(fields) == 1 and not trailing_comma:
            return fields[0]
        return Tuple(tuple(fields), self.span(start))

    def conditional(self) -> If:
        start = self.advance()
        self.expect("(", "`(` after `if`")
        # The branches are sequences, which count their own nesting; the condition is not.
        self.enter()
        cond = self.binary()
        self.leave()
        self.expect(")", "`)` after the condition")
        self.expect("{", "`{` to start the then-branch")
        then = self.sequence()
        self.expect("}", "`}` to end the then-branch")
        if not self.at_keyword("else"):
            raise self.error(f"expected `else`, found {self.peek().describe()}", self.peek())
        self.advance()
        self.expect("{", "`{` to start the else-branch")
        otherwise = self.sequence()
        self.expect("}", "`}` to end the else-branch")
        return If(cond, then, otherwise, self.span(start))

    def reference(self, keyword: str) -> Expr:
        start = self.advance()
        self.expect("(", f"`(` after {keyword}")
        self.enter()
        operands, _ = self.separated(self.binary, ")", f"`,` or `)` after the operands of {keyword}")
        self.leave()
        wanted = _REF_KEYWORDS[keyword]
        if len(operands) != wanted:
            raise self.error(f"{keyword} takes {wanted} operand{'s' if wanted > 1 else ''}, got {len(operands)}", start)
        span = self.span(start)
        if keyword == "ref":
            return RefCreate(operands[0], span)
        if keyword == "ref_read":
            return RefRead(operands[0], span)
        return RefWrite(operands[0], operands[1], span)

    def match(self) -> Match:
        start = self.advance()
        question = self.peek()
        complete = not (question.kind == "?" and question.offset == start.offset + len(start.text))
        if not complete:
            self.advance()
        self.enter()
        data = self.postfix()
        self.expect("{", "`{` to start the match clauses")
        clauses, _ = self.separated(self.clause, "}", "`,` or `}` after a match clause")
        self.leave()
        return Match(data, tuple(clauses), complete, self.span(start))

    def clause(self) -> Clause:
        self.push_locals()
        lhs = self.pattern(set())
        arrow = self.peek()
        if not (arrow.kind == "=" and self.peek(1).kind == ">"):
            raise self.error(f"expected `=>` after the pattern, found {arrow.describe()}", arrow)
        self.pos += 2
        rhs = self.binary()
        self.pop_locals()
        return Clause(lhs, rhs)

    def pattern(self, bound: set[str]) -> Pattern:
        token = self.peek()
        self.enter()
        result: Pattern
        if token.kind == "ident" and token.text == "_":
            self.advance()
            result = PatternWildcard(self.span(token))
        elif token.kind == "local":
            self.advance()
            name = token.text[1:]
            if name in bound:
                raise self.error(f"{token.text} is bound twice in this pattern", token)
            bound.add(name)
            annotation = self.type() if self.accept(":") else None
            var = Var(name, annotation, self.span(token))
            self.bind_local(var)
            result = PatternVar(var, self.span(token))
        elif token.kind == "(":
            self.advance()
            subs, _ = self.separated(lambda: self.pattern(bound), ")", "`,` or `)` in the tuple pattern")
            result = PatternTuple(tuple(subs), self.span(token))
        elif token.kind == "ident" and token.text in self.constructors:
            self.advance()
            constructor = self.constructors[token.text]
            subs = []
            if self.accept("("):
                subs, _ = self.separated(lambda: self.pattern(bound), ")", "`,` or `)` in the pattern")
            if len(subs) != len(constructor.inputs):
                message = f"constructor {token.text} has {len(constructor.inputs)} fields, the pattern gives {len(subs)}"
                raise self.error(message, token)
            result = PatternConstructor(constructor, tuple(subs), self.span(token))
        elif token.kind == "ident":
            raise self.error(f"unknown constructor `{token.text}` in pattern", token)
        else:
            raise self.error(f"expected a pattern (`_`, %x, a constructor or a tuple), found {token.describe()}", token)
        self.leave()
        return result

    # -- attributes ----------------------------------------------------------------------------

    def attribute(self, attrs: dict[str, AttrValue], keys: dict[str, Token]) -> None:
        key = self.advance()
        self.advance()  # `=`
        name = key.text[1:-1] if key.kind == "string" else key.text
        if name in attrs:
            raise self.error(f"attribute {name} is given twice", key)
        attrs[name] = self.attribute_value()
        keys[name] = key

    def attribute_value(self) -> AttrValue:
        token = self.peek()
        kind = token.kind
        if kind == "number":
            self.advance()
            assert token.literal is not None
            return token.literal.value
        if kind == "bool":
            self.advance()
            return token.text == "True"
        if kind == "string":
            self.advance()
            return token.text[1:-1]
        if kind == "ident" and token.text in ("None", "nullptr"):
            self.advance()
            return None
        if kind == "global":
            return self.global_ref(self.advance())
        if kind == "quoted_global":
            return self.global_ref(self.advance(), token.text[1:-1])
        if kind == "?":
            self.advance()
            return ANY
        if kind in ("[", "("):
            return self.attribute_list()
        if kind == "{":
            return self.attribute_map()
        if kind == "meta" and token.text.startswith("meta[VirtualDevice]"):
            self.advance()
            return self.meta.virtual_device(token.text, self.span(token))
        if kind == "meta" and token.text.startswith("meta[relay.Constant]"):
            # memory.alloc_tensor's const_shape.
            self.advance()
            return self.meta.constant(token.text, self.span(token))
        if kind == "meta" and token.text.startswith(("meta[Map]", "meta[DictAttrs]", "meta[Array]")):
            # TVM's astext() keeps map-valued attributes in the metadata section.
            self.advance()
            return self.meta.attribute(token.text, self.span(token), lambda name: self.global_ref(token, name))
        if kind == "meta":
            raise self.error("meta[...] references are not supported as attribute values", token)
        raise self.error(f"expected an attribute value, found {token.describe()}", token)

    def attribute_list(self) -> AttrValue:
        """`[a, b]` is a list; `(a)` is just `a`, `(a, b)` a list."""
        closing = "]" if self.advance().kind == "[" else ")"
        self.enter()
        items, trailing_comma = self.separated(self.attribute_value, closing, f"`,` or `{closing}` in the list")
        self.leave()
        if closing == ")" and len(items) == 1 and not trailing_comma:
            return items[0]
        return tuple(items)

    def attribute_map(self) -> Attrs:
        self.advance()
        self.enter()
        attrs: dict[str, AttrValue] = {}

        def entry() -> None:
            if not (self.at_attribute() or (self.at("string") and self.peek(1).kind == "=")):
                raise self.error(f"expected key=value, found {self.peek().describe()}", self.peek())
            self.attribute(attrs, {})

        self.separated(entry, "}", "`,` or `}` in the attribute map")
        if set(attrs) == {"__dict__"} and isinstance(attrs["__dict__"], Attrs):
            # TVM's debug printer writes DictAttrs (call_lowered's relay_attrs) as {__dict__={...}}.
            attrs = dict(attrs["__dict__"])
        self.leave()
        return Attrs(attrs)

    # -- types ---------------------------------------------------------------------------------

    def type(self) -> Type:
        token = self.peek()
        self.enter()
        if self.at_keyword("Tensor"):
            self.advance()
            self.expect("[", "`[` after Tensor")
            shape = self.shape()
            self.expect(",", "`,` between the shape and the dtype")
            dtype = self.dtype(self.expect("ident", "a dtype such as float32"))
            self.expect("]", "`]` to close the tensor type")
            result: Type = TensorType(shape, dtype)
        elif self.at_keyword("ref"):
            self.advance()
            self.expect("(", "`(` after ref")
            value = self.type()
            self.expect(")", "`)` to close the reference type")
            result = RefType(value)
        elif self.at_keyword("fn"):
            self.advance()
            # `fn [A](A) -> A`: a polymorphic function type binds its own type variables.
            type_params = self.type_parameters() if self.at("[") else []
            self.type_vars.append({p.name: p for p in type_params})
            self.expect("(", "`(` after fn")
            args, _ = self.separated(self.type, ")", "`,` or `)` in the argument types")
            self.expect("->", "`->` and the result type")
            result = FuncType(tuple(args), self.type(), tuple(type_params))
            self.type_vars.pop()
        elif self.at("("):
            self.advance()
            fields, trailing_comma = self.separated(self.type, ")", "`,` or `)` in the tuple type")
            # `(T)` is just T; a one-field tuple type is written `(T,)`.
            result = fields[0] if len(fields) == 1 and not trailing_comma else TupleType(tuple(fields))
        elif token.kind == "ident" and token.text == "_":
            self.advance()
            result = IncompleteType()
        elif token.kind == "ident":
            result = self.named_type(self.advance())
        else:
            raise self.error(f"expected a type, found {token.describe()}", token)
        self.leave()
        return result

    def named_type(self, token: Token) -> Type:
        """A type variable, an ADT (`List[float32]`, `Nat`) or a dtype (a rank-0 tensor)."""
        for scope in reversed(self.type_vars):
            if token.text in scope:
                return scope[token.text]
        known = self.type_names.get(token.text)
        if known is not None:
            args: list[Type] = []
            if self.accept("["):
                args, _ = self.separated(self.type, "]", "`,` or `]` in the type arguments")
            if len(args) != known[1]:
                raise self.error(f"type {token.text} takes {known[1]} type arguments, {len(args)} given", token)
            return TypeCall(token.text, tuple(args))
        if not token.text.startswith(_DTYPE_PREFIXES):
            raise self.error(f"unknown type `{token.text}`", token)
        return TensorType((), self.dtype(token))

    def shape(self) -> tuple[Dim, ...]:
        start = self.expect("(", "a shape such as (1, 3)")
        dims, _ = self.separated(self.dimension, ")", "`,` or `)` in the shape")
        if len(dims) > MAX_RANK:
            raise self.error(f"a tensor type of rank {len(dims)}: the maximum rank is {MAX_RANK}", start)
        return tuple(dims)

    def dimension(self) -> Dim:
        token = self.advance()
        if token.kind == "?":
            return ANY
        if token.kind != "number" or token.literal is None or token.literal.is_float:
            raise self.error(f"expected a dimension (an integer or ?), found {token.describe()}", token)
        if int(token.literal.value) < 0:
            raise self.error(f"dimension {token.text} is negative", token)
        return int(token.literal.value)

    def dtype(self, token: Token) -> str:
        # TVM reads a kind without bits as 32 bits (`def @main(%x: int)` in its pass tests).
        if token.text in _BITLESS_DTYPES:
            return _BITLESS_DTYPES[token.text]
        if not is_valid_dtype(token.text):
            reason = unsupported_dtype_reason(token.text)
            raise self.error(reason or f"unknown type or dtype `{token.text}`", token)
        return token.text
