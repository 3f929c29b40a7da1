"""Dataflow patterns: describe a small subgraph by its operators and match it against Relay.

    dense = is_op("nn.dense")(wildcard(), wildcard())
    dense_bias_relu = is_op("nn.relu")(is_op("nn.bias_add")(dense, wildcard()))
    conv = is_op("nn.conv2d")(wildcard(), is_constant()).has_attr({"data_layout": "NCHW"})
    conv_relu = conv.optional(lambda p: is_op("nn.relu")(p))      # conv alone, or relu(conv)

Patterns are immutable and compared by identity. Operator names and attribute names are checked
against the operator registry when the pattern is built, so a misspelled name is an error
instead of a pattern that silently never matches.

Matching (`pattern.match(expr)`, `find_match(pattern, expr)`) follows the graph from `expr`
towards its inputs:
* a call pattern needs the same number of arguments, each matching in order; for `add` and
  `multiply` the two arguments are also tried swapped;
* `p | q` tries `p`, then `q`;
* a pattern node used twice must match the same expression node both times (sharing), so
  `is_op("add")(w, w)` with one wildcard `w` matches `add(%x, %x)` but not `add(%x, %y)`;
* `has_attr` compares operator call attributes (absent ones take the operator's default) or a
  function's attributes.
Whether a match may be fused (sharing of interior nodes, overlap) is MergeComposite's concern.

Pattern depth is bounded (MAX_PATTERN_DEPTH) so the matcher's recursion follows the pattern,
never the expression graph.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from compiler import ops
from compiler.ir.attrs import Attrs, freeze
from compiler.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from compiler.ir.structural import structural_equal
from compiler.ops.registry import REQUIRED, AttrError

MAX_PATTERN_DEPTH = 100
COMMUTATIVE_OPS = frozenset({"add", "multiply"})


class PatternError(ValueError):
    """A pattern that cannot be built: unknown operator or attribute, bad value, too deep."""


class Pattern:
    """Base of all patterns. Subclasses are frozen dataclasses with a `depth` field."""

    depth: int

    def children(self) -> tuple[Pattern, ...]:
        return ()

    def __call__(self, *args: Pattern) -> CallPattern:
        return CallPattern(self, tuple(args))

    def __or__(self, other: Pattern) -> AltPattern:
        return AltPattern(self, other)

    def optional(self, wrap: Callable[[Pattern], Pattern]) -> AltPattern:
        """This pattern alone, or `wrap(this pattern)`."""
        return self | wrap(self)

    def has_attr(self, attrs: Mapping[str, object]) -> AttrPattern:
        return AttrPattern(self, _checked_attrs(self, attrs))

    def match(self, expr: Expr) -> bool:
        return find_match(self, expr) is not None

    def __add__(self, other: Pattern) -> CallPattern:
        return is_op("add")(self, other)

    def __sub__(self, other: Pattern) -> CallPattern:
        return is_op("subtract")(self, other)

    def __mul__(self, other: Pattern) -> CallPattern:
        return is_op("multiply")(self, other)

    def __truediv__(self, other: Pattern) -> CallPattern:
        return is_op("divide")(self, other)

    def __str__(self) -> str:
        return pattern_text(self)


def _depth_of(*children: Pattern) -> int:
    for child in children:
        if not isinstance(child, Pattern):
            raise PatternError(f"expected a pattern, got {child!r}")
    depth = 1 + max((c.depth for c in children), default=0)
    if depth > MAX_PATTERN_DEPTH:
        raise PatternError(f"pattern is nested more than {MAX_PATTERN_DEPTH} levels deep")
    return depth


@dataclass(frozen=True, eq=False)
class WildcardPattern(Pattern):
    """Matches any expression."""

    depth: int = field(default=1, init=False)


@dataclass(frozen=True, eq=False)
class OperatorPattern(Pattern):
    """Matches the operator itself (the callee of a call); call it to get a call pattern."""

    name: str
    depth: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        if ops.lookup(self.name) is None:
            raise PatternError(unknown_operator_message(self.name))


@dataclass(frozen=True, eq=False)
class ConstantPattern(Pattern):
    depth: int = field(default=1, init=False)


@dataclass(frozen=True, eq=False)
class VarPattern(Pattern):
    """Matches a variable; with a name, only a variable of that name."""

    name: str = ""
    depth: int = field(default=1, init=False)


@dataclass(frozen=True, eq=False)
class ExprPattern(Pattern):
    """Matches expressions structurally equal to `expr`."""

    expr: Expr
    depth: int = field(default=1, init=False)


@dataclass(frozen=True, eq=False)
class CallPattern(Pattern):
    op: Pattern
    args: tuple[Pattern, ...]
    depth: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "depth", _depth_of(self.op, *self.args))
        if isinstance(self.op, OperatorPattern):
            expected = ops.get(self.op.name).num_inputs
            if expected is not None and expected != len(self.args):
                raise PatternError(f"{self.op.name} takes {expected} arguments, the pattern gives {len(self.args)}")

    def children(self) -> tuple[Pattern, ...]:
        return (self.op, *self.args)


@dataclass(frozen=True, eq=False)
class TuplePattern(Pattern):
    fields: tuple[Pattern, ...]
    depth: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "depth", _depth_of(*self.fields))

    def children(self) -> tuple[Pattern, ...]:
        return self.fields


@dataclass(frozen=True, eq=False)
class TupleGetItemPattern(Pattern):
    """Matches `t.index` where `t` matches `tuple`; index None matches any index."""

    tuple: Pattern
    index: int | None = None
    depth: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(self.tuple))

    def children(self) -> tuple[Pattern, ...]:
        return (self.tuple,)


@dataclass(frozen=True, eq=False)
class AltPattern(Pattern):
    left: Pattern
    right: Pattern
    depth: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(self.left, self.right))

    def children(self) -> tuple[Pattern, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, eq=False)
class AttrPattern(Pattern):
    """Matches what `pattern` matches when the call's (or function's) attributes agree."""

    pattern: Pattern
    attrs: Attrs
    depth: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "depth", _depth_of(self.pattern))

    def children(self) -> tuple[Pattern, ...]:
        return (self.pattern,)


def wildcard() -> WildcardPattern:
    return WildcardPattern()


def is_op(name: str) -> OperatorPattern:
    return OperatorPattern(name)


def is_constant() -> ConstantPattern:
    return ConstantPattern()


def is_var(name: str = "") -> VarPattern:
    return VarPattern(name)


def is_expr(expr: Expr) -> ExprPattern:
    return ExprPattern(expr)


def is_tuple(fields: Sequence[Pattern]) -> TuplePattern:
    return TuplePattern(tuple(fields))


def is_tuple_get_item(tuple_pattern: Pattern, index: int | None = None) -> TupleGetItemPattern:
    return TupleGetItemPattern(tuple_pattern, index)


def unknown_operator_message(name: str) -> str:
    names = [op.name for op in ops.all_ops() if not op.extras.get("internal")]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown operator {name}{hint}"


def _checked_attrs(pattern: Pattern, attrs: Mapping[str, object]) -> Attrs:
    """Attribute constraints; on an operator call they are validated like parsed call attrs."""
    if isinstance(pattern, OperatorPattern):
        # The Op node itself has no attributes to compare: such a pattern could never match.
        raise PatternError(
            f"attributes constrain calls: write is_op({pattern.name!r})(args...).has_attr(...)"
        )
    if isinstance(pattern, CallPattern) and isinstance(pattern.op, OperatorPattern):
        opdef = ops.get(pattern.op.name)
        specs = {s.name: s for s in opdef.attrs}
        checked: dict[str, object] = {}
        for key, value in attrs.items():
            spec = specs.get(key)
            if spec is None:
                known = ", ".join(specs) or "none"
                raise PatternError(f"operator {opdef.name} has no attribute {key} (known: {known})")
            try:
                checked[key] = spec.coerce(freeze(value))
            except AttrError as err:
                raise PatternError(str(err)) from None
        return Attrs(checked)
    return Attrs(dict(attrs))


# ----------------------------------------------------------------------------------------------
# Matching


@dataclass
class Match:
    """A successful match: the root expression and what each pattern node matched."""

    root: Expr
    bindings: dict[Pattern, Expr]


def find_match(pattern: Pattern, expr: Expr) -> Match | None:
    matcher = _Matcher()
    if matcher.visit(pattern, expr):
        return Match(expr, matcher.bindings)
    return None


class _Matcher:
    def __init__(self) -> None:
        self.bindings: dict[Pattern, Expr] = {}
        # Patterns in the order they were bound, so a failed branch can forget its bindings.
        self.trail: list[Pattern] = []

    def undo(self, mark: int) -> None:
        for p in self.trail[mark:]:
            del self.bindings[p]
        del self.trail[mark:]

    def visit(self, pattern: Pattern, expr: Expr) -> bool:
        bound = self.bindings.get(pattern)
        if bound is not None:
            return bound is expr
        mark = len(self.trail)
        if self.dispatch(pattern, expr):
            self.bindings[pattern] = expr
            self.trail.append(pattern)
            return True
        self.undo(mark)
        return False

    def all(self, patterns: Sequence[Pattern], exprs: Sequence[Expr]) -> bool:
        if len(patterns) != len(exprs):
            return False
        mark = len(self.trail)
        if all(self.visit(p, e) for p, e in zip(patterns, exprs)):
            return True
        self.undo(mark)
        return False

    def dispatch(self, pattern: Pattern, expr: Expr) -> bool:
        if isinstance(pattern, WildcardPattern):
            return True
        if isinstance(pattern, OperatorPattern):
            return isinstance(expr, Op) and expr.name == pattern.name
        if isinstance(pattern, ConstantPattern):
            return isinstance(expr, Constant)
        if isinstance(pattern, VarPattern):
            return isinstance(expr, Var) and (not pattern.name or expr.name_hint == pattern.name)
        if isinstance(pattern, ExprPattern):
            return structural_equal(pattern.expr, expr)
        if isinstance(pattern, CallPattern):
            return self.call(pattern, expr)
        if isinstance(pattern, TuplePattern):
            return isinstance(expr, Tuple) and self.all(pattern.fields, expr.fields)
        if isinstance(pattern, TupleGetItemPattern):
            return (
                isinstance(expr, TupleGetItem)
                and (pattern.index is None or pattern.index == expr.index)
                and self.visit(pattern.tuple, expr.tuple_value)
            )
        if isinstance(pattern, AltPattern):
            return self.visit(pattern.left, expr) or self.visit(pattern.right, expr)
        if isinstance(pattern, AttrPattern):
            return self.visit(pattern.pattern, expr) and attrs_match(pattern.attrs, expr)
        raise TypeError(f"unknown pattern {pattern!r}")

    def call(self, pattern: CallPattern, expr: Expr) -> bool:
        if not isinstance(expr, Call) or not self.visit(pattern.op, expr.op):
            return False
        if self.all(pattern.args, expr.args):
            return True
        op = pattern.op
        if isinstance(op, OperatorPattern) and op.name in COMMUTATIVE_OPS and len(pattern.args) == 2:
            return self.all(pattern.args[::-1], expr.args)
        return False


def attrs_match(expected: Attrs, expr: Expr) -> bool:
    if isinstance(expr, Call):
        defaults: dict[str, object] = {}
        if isinstance(expr.op, Op):
            opdef = ops.lookup(expr.op.name)
            if opdef is not None:
                defaults = {s.name: s.default for s in opdef.attrs if s.default is not REQUIRED}
        for key, want in expected.items():
            if key in expr.attrs:
                have = expr.attrs[key]
            elif key in defaults:
                have = defaults[key]
            else:
                return False
            if have != want:
                return False
        return True
    if isinstance(expr, Function):
        return all(key in expr.attrs and expr.attrs[key] == want for key, want in expected.items())
    return False


def pattern_post_order(root: Pattern) -> list[Pattern]:
    """Every pattern node reachable from `root`, children (callee first, then arguments) first."""
    order: list[Pattern] = []
    done: set[Pattern] = set()
    stack: list[tuple[Pattern, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in done:
            continue
        if expanded:
            done.add(node)
            order.append(node)
            continue
        stack.append((node, True))
        for child in reversed(node.children()):
            if child not in done:
                stack.append((child, False))
    return order


# ----------------------------------------------------------------------------------------------
# Text form (the inverse of compiler/byoc/pattern_text.py where that language reaches)


def pattern_text(pattern: Pattern) -> str:
    if isinstance(pattern, WildcardPattern):
        return "*"
    if isinstance(pattern, ConstantPattern):
        return "const"
    if isinstance(pattern, OperatorPattern):
        return pattern.name
    if isinstance(pattern, VarPattern):
        return f"var({pattern.name})" if pattern.name else "var"
    if isinstance(pattern, ExprPattern):
        return f"expr({type(pattern.expr).__name__})"
    if isinstance(pattern, CallPattern):
        return f"{_operand_text(pattern.op)}({', '.join(pattern_text(a) for a in pattern.args)})"
    if isinstance(pattern, TuplePattern):
        inner = ", ".join(pattern_text(f) for f in pattern.fields)
        return f"({inner},)" if len(pattern.fields) == 1 else f"({inner})"
    if isinstance(pattern, TupleGetItemPattern):
        index = "*" if pattern.index is None else str(pattern.index)
        return f"{_operand_text(pattern.tuple)}.{index}"
    if isinstance(pattern, AltPattern):
        return f"{pattern_text(pattern.left)} | {pattern_text(pattern.right)}"
    if isinstance(pattern, AttrPattern):
        attrs = ", ".join(f"{k}={_value_text(v)}" for k, v in pattern.attrs.items())
        return f"{_operand_text(pattern.pattern)}{{{attrs}}}"
    raise TypeError(f"unknown pattern {pattern!r}")


def _operand_text(pattern: Pattern) -> str:
    text = pattern_text(pattern)
    return f"({text})" if isinstance(pattern, AltPattern) else text


def _value_text(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    return repr(value)
