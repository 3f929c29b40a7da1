"""The text form of dataflow patterns, as written in codegen JSON documents.

    nn.relu(nn.bias_add(nn.dense(*, *), *))        an operator call; `*` matches anything
    nn.conv2d(*, const)                             `const` matches a constant (embedded by
                                                    MergeComposite instead of becoming a param)
    nn.relu(nn.conv2d(*, *)) | nn.conv2d(*, *)      alternatives, lowest precedence
    nn.relu((add(*, *) | subtract(*, *)))           parentheses group
    nn.conv2d(*, *){data_layout="NCHW", strides=[1, 1]}
                                                    attribute constraints on the call before
    (*, *)   (*,)   split(*, indices_or_sections=2).0
                                                    tuples and tuple projections

Grammar:

    pattern  := alt EOF
    alt      := postfix ('|' postfix)*
    postfix  := primary ('.' INT | '{' attr (',' attr)* '}')*
    primary  := '*' | 'const' | NAME '(' [alt (',' alt)*] ')' | '(' alt ')' | '(' alt ',' ... ')'
    attr     := NAME '=' value ;  value := INT | FLOAT | STRING | True | False | '[' value, ... ']'

Operator and attribute names are checked against the operator registry. Every error is a
ParseError located (line and column) inside the pattern text, whose source name is given by the
caller, e.g. "<pattern dense_bias_relu>".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from compiler.byoc.pattern import (
    MAX_PATTERN_DEPTH,
    CallPattern,
    ConstantPattern,
    OperatorPattern,
    Pattern,
    PatternError,
    TupleGetItemPattern,
    TuplePattern,
    WildcardPattern,
)
from compiler.diagnostics import ParseError, Source, Span

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<float>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)f?)
  | (?P<int>-?\d+)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<string>"[^"\n]*")
  | (?P<punct>[*|(),{}\[\]=.])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # "float", "int", "name", "string", a punctuation character, or "end"
    text: str
    offset: int


def parse_pattern(text: str, source_name: str = "<pattern>") -> Pattern:
    """The pattern written in `text`; raises ParseError located inside `text`."""
    source = Source(source_name, text)
    return _Parser(source, _tokenize(source)).pattern()


def _span(source: Source, offset: int, length: int = 1) -> Span:
    line = source.text.count("\n", 0, offset) + 1
    line_start = source.text.rfind("\n", 0, offset) + 1
    column = offset - line_start + 1
    return Span(source, line, column, column + max(1, length))


def _tokenize(source: Source) -> list[_Token]:
    tokens: list[_Token] = []
    text, pos = source.text, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"unexpected character {text[pos]!r} in pattern", _span(source, pos))
        kind = m.lastgroup
        assert kind is not None
        if kind == "punct":
            tokens.append(_Token(m.group(), m.group(), pos))
        elif kind != "space":
            tokens.append(_Token(kind, m.group(), pos))
        pos = m.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


def _describe(token: _Token) -> str:
    return "end of pattern" if token.kind == "end" else f"`{token.text}`"


class _Parser:
    def __init__(self, source: Source, tokens: list[_Token]):
        self.source = source
        self.tokens = tokens
        self.pos = 0
        self.nesting = 0

    # -- token helpers ---------------------------------------------------------------------

    @property
    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def advance(self) -> _Token:
        token = self.tokens[self.pos]
        if token.kind != "end":
            self.pos += 1
        return token

    def accept(self, kind: str) -> _Token | None:
        if self.peek.kind == kind:
            return self.advance()
        return None

    def expect(self, kind: str, what: str) -> _Token:
        token = self.accept(kind)
        if token is None:
            raise self.error(f"expected {what}, found {_describe(self.peek)}", self.peek)
        return token

    def error(self, message: str, token: _Token) -> ParseError:
        return ParseError(message, _span(self.source, token.offset, len(token.text)))

    def build(self, token: _Token, make: Callable[..., Pattern], *args: object) -> Pattern:
        """`make(*args)`, with pattern-construction errors located at `token`."""
        try:
            return make(*args)
        except PatternError as err:
            raise self.error(str(err), token) from None

    # -- grammar -----------------------------------------------------------------------------

    def pattern(self) -> Pattern:
        if self.peek.kind == "end":
            raise self.error("empty pattern", self.peek)
        result = self.alt()
        if self.peek.kind != "end":
            raise self.error(f"unexpected {_describe(self.peek)} after the pattern", self.peek)
        return result

    def alt(self) -> Pattern:
        self.nesting += 1
        if self.nesting > MAX_PATTERN_DEPTH:
            raise self.error(f"pattern is nested more than {MAX_PATTERN_DEPTH} levels deep", self.peek)
        left = self.postfix()
        while (bar := self.accept("|")) is not None:
            right = self.postfix()
            left = self.build(bar, _alt, left, right)
        self.nesting -= 1
        return left

    def postfix(self) -> Pattern:
        result = self.primary()
        while True:
            if self.accept(".") is not None:
                index = self.expect("int", "a tuple index after `.`")
                if index.text.startswith("-"):
                    raise self.error("a tuple index cannot be negative", index)
                result = self.build(index, TupleGetItemPattern, result, int(index.text))
            elif (brace := self.accept("{")) is not None:
                if not (isinstance(result, CallPattern) and isinstance(result.op, OperatorPattern)):
                    raise self.error("attribute constraints `{...}` must follow an operator call", brace)
                result = self.attrs(result)
            else:
                return result

    def primary(self) -> Pattern:
        token = self.peek
        if self.accept("*") is not None:
            return WildcardPattern()
        if token.kind == "name":
            self.advance()
            if token.text == "const":
                return ConstantPattern()
            op = self.build(token, OperatorPattern, token.text)
            self.expect("(", f"`(` after operator {token.text}")
            args = self.items(")")
            return self.build(token, CallPattern, op, tuple(args))
        if self.accept("(") is not None:
            first = self.alt()
            if self.accept(")") is not None:
                return first
            self.expect(",", "`,` or `)`")
            rest = self.items(")")
            return self.build(token, TuplePattern, (first, *rest))
        raise self.error(f"expected a pattern (`*`, `const`, an operator call or `(`), found {_describe(token)}", token)

    def items(self, close: str) -> list[Pattern]:
        """Comma-separated patterns up to `close` (a trailing comma is allowed)."""
        found: list[Pattern] = []
        while self.accept(close) is None:
            found.append(self.alt())
            if self.accept(",") is None:
                self.expect(close, f"`,` or `{close}`")
                break
        return found

    def attrs(self, call: CallPattern) -> Pattern:
        given: dict[str, object] = {}
        while True:
            key = self.expect("name", "an attribute name")
            if key.text in given:
                raise self.error(f"attribute {key.text} is constrained twice", key)
            self.expect("=", f"`=` after attribute {key.text}")
            value_token = self.peek
            value = self.value()
            try:
                call.has_attr({key.text: value})
            except PatternError as err:
                culprit = key if "has no attribute" in str(err) else value_token
                raise self.error(str(err), culprit) from None
            given[key.text] = value
            if self.accept(",") is None:
                break
        self.expect("}", "`,` or `}` after the attributes")
        return call.has_attr(given)

    def value(self) -> object:
        token = self.advance()
        if token.kind == "int":
            return int(token.text)
        if token.kind == "float":
            return float(token.text.rstrip("f"))
        if token.kind == "string":
            return token.text[1:-1]
        if token.kind == "name" and token.text in ("True", "true", "False", "false"):
            return token.text in ("True", "true")
        if token.kind == "[":
            items: list[object] = []
            while self.accept("]") is None:
                items.append(self.value())
                if self.accept(",") is None:
                    self.expect("]", "`,` or `]`")
                    break
            return tuple(items)
        raise self.error(f"expected an attribute value, found {_describe(token)}", token)


def _alt(left: Pattern, right: Pattern) -> Pattern:
    return left | right
