"""Tokenizer for Relay text.

Turns a `Source` into a flat list of significant tokens (whitespace and comments dropped) plus
the raw text of a trailing `#[metadata]` section. Scanning is a loop over one master regular
expression, so input of any length or comment nesting depth never recurses. Tokens carry only
their offset; `Lexed.span(token)` turns it into a line and column when someone needs one, which
keeps large models (hundreds of thousands of tokens) quick to lex.

Where TVM's lexer has traps we are more forgiving, without changing the meaning of anything TVM
accepts:
* a `-` directly before a digit is part of a negative literal only where an operand is expected,
  so `%x -1` and `2-1` are subtractions (TVM rejects both);
* after a `.` only digits are read, so `%t.0.1` is two projections (TVM reads `0.1`);
* `%name.with.dots` is one local name (PyTorch-style), and so is `%layer1.0.conv1.weight`: a
  `.<digits>` part belongs to a local name when a `.<letter>` part follows it, as in the
  parameter names from_pytorch prints for `nn.Sequential` children; a trailing `.<digits>` is
  a projection (`%t.0.1` is two projections, `%layer1.0.weight.0` projects `%layer1.0.weight`);
* a decimal literal without a suffix (`0.5`) is lexed as a "bare decimal": the parser accepts
  it as an attribute value and rejects it as an expression, where TVM needs `0.5f`.
"""

from __future__ import annotations

import bisect
import re
import sys
from dataclasses import dataclass, field

from compiler.diagnostics import ParseError, Source, Span

SUPPORTED_VERSION = '"0.0.5"'

_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z_][A-Za-z0-9_]*)*"
# Numeric parts only between named parts, so a name never swallows a projection `.0`.
_LOCAL_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:(?:[./]\d+)*[./][A-Za-z_][A-Za-z0-9_]*)*"
_NUMBER = r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:[A-Za-z_][A-Za-z0-9_]*)?"
# Leading whitespace is folded into each match; `other` catches any stray character.
_MASTER = re.compile(
    r"[ \t\r\n]*(?:"
    r"(?P<punct>->|==|!=|<=|>=|[-(){}\[\],;:=.?!+*<>]|/(?![/*]))"
    r"|(?P<graph>%\d+)"
    rf"|(?P<local>%{_LOCAL_NAME})"
    r"|(?P<meta>meta\[)"
    rf"|(?P<ident>{_NAME})"
    rf"|(?P<number>{_NUMBER})"
    # A block comment without nested `/*` in one match; nested or unterminated ones by hand.
    r"|(?P<comment>/\*[^*/]*(?:(?:\*(?!/)|/(?!\*))[^*/]*)*\*/|//[^\n]*)"
    r"|(?P<nested_comment>/\*)"
    rf"|(?P<global>@{_NAME})"
    r"|(?P<string>\"[^\"\n]*\")"
    # TVM's debug printer writes a global named in an attribute value as 'name'.
    rf"|(?P<quoted_global>'{_NAME}')"
    r"|(?P<bad_string>\")"
    r"|(?P<hash>\#\[)"
    r"|(?P<other>[^ \t\r\n]))"
)
_NUMBER_PARTS = re.compile(r"(\d+)(\.\d+)?([eE][+-]?\d+)?([A-Za-z_][A-Za-z0-9_]*)?")
_DIGITS = re.compile(r"\d+")
_META = re.compile(r"meta\[([A-Za-z_][A-Za-z0-9_.]*)\]\[(\d+)\]")
_COMMENT_MARK = re.compile(r"/\*|\*/")

# Tokens after which a `-` is an infix minus rather than the sign of a literal.
_OPERAND_END = frozenset({"number", "bool", "local", "graph", "global", "meta", "ident", ")", "]", "}"})

_INT_RANGES = {
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
_FLOAT_MAX = {"float16": 65504.0, "float32": 3.4028234663852886e38, "float64": sys.float_info.max}
_FLOAT_SUFFIX = {"f": "float32", "f16": "float16", "f32": "float32", "f64": "float64"}
_INT_SUFFIX = {"i": "int32", "i16": "int16", "i32": "int32", "i64": "int64"}
_INF_NAMES = {"inff": "float32", "inff16": "float16", "inff32": "float32", "inff64": "float64"}


@dataclass(frozen=True, slots=True)
class Literal:
    """A number literal. `bare_decimal` marks `0.5`-style floats written without a suffix."""

    value: int | float
    dtype: str
    bare_decimal: bool = False

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith("float")


@dataclass(slots=True)
class Token:
    """A significant token. `kind` is a word (`ident`, `number`, ...) or the punctuation itself."""

    kind: str
    text: str
    offset: int
    literal: Literal | None = None

    def describe(self) -> str:
        if self.kind == "eof":
            return "end of input"
        shown = self.text if len(self.text) <= 30 else self.text[:27] + "..."
        return f"`{shown}`"


@dataclass
class Lexed:
    """The tokens of a source (ending with `eof` tokens) and the text after `#[metadata]`, if any."""

    source: Source
    tokens: list[Token]
    metadata_text: str | None = None
    metadata_token: Token | None = None
    _line_starts: list[int] = field(default_factory=list, repr=False)

    def location(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        if not self._line_starts:
            self._line_starts.append(0)
            self._line_starts.extend(m.end() for m in re.finditer("\n", self.source.text))
        line = bisect.bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def span(self, token: Token) -> Span:
        line, column = self.location(token.offset)
        return Span(self.source, line, column, column + max(1, len(token.text)))


def tokenize(source: Source) -> Lexed:
    return _Scanner(source).run()


class _Scanner:
    def __init__(self, source: Source):
        self.text = source.text
        self.lexed = Lexed(source, [])
        self.tokens = self.lexed.tokens

    def error(self, message: str, offset: int, length: int = 1) -> ParseError:
        where = Token("", self.text[offset : offset + max(1, length)], offset)
        return ParseError(message, self.lexed.span(where))

    def run(self) -> Lexed:
        pos: int | None = 0
        while pos is not None:
            pos = self.scan_from(pos)
        eof = Token("eof", "", len(self.text))
        # Padding lets the parser look ahead without bounds checks.
        self.tokens.extend((eof, eof, eof))
        return self.lexed

    def scan_from(self, pos: int) -> int | None:
        """Lex from `pos` until the end (None) or until a token that resumes elsewhere (its end)."""
        text, tokens = self.text, self.tokens
        append = tokens.append
        for match in _MASTER.finditer(text, pos):
            kind = match.lastgroup
            assert kind is not None
            word = match.group(kind)
            start = match.start(kind)
            if kind == "punct":
                append(Token(word, word, start))
            elif kind == "ident":
                if word in _INF_NAMES:
                    self.number_token(start, start + len(word), Literal(float("inf"), _INF_NAMES[word]))
                else:
                    append(Token("bool" if word in ("True", "False") else "ident", word, start))
            elif kind == "comment":
                continue
            elif kind == "number":
                if tokens and tokens[-1].kind == "." and not word.isdigit():
                    # A projection index: `%t.0.1` is two projections, not the number 0.1.
                    digits = _DIGITS.match(text, start)
                    assert digits is not None
                    self.number_token(start, digits.end(), None)
                    return digits.end()
                self.number_token(start, start + len(word), None)
            elif kind in ("local", "graph", "global", "string", "quoted_global"):
                if kind == "graph" and len(word) > _MAX_INT_DIGITS + 1:
                    raise self.error(f"graph variable `{_shorten(word)}` has too many digits", start, len(word))
                append(Token(kind, word, start))
            elif kind == "nested_comment":
                return self.skip_block_comment(start)
            elif kind == "meta":
                return self.meta(start)
            elif kind == "hash":
                return self.hash_attribute(start)
            elif kind == "bad_string":
                message = "unterminated string literal (strings end at the next `\"` on the same line)"
                raise self.error(message, start)
            else:
                raise self.error(f"unexpected character {word!r}", start)
        return None

    def number_token(self, start: int, end: int, literal: Literal | None) -> None:
        """Append a number, folding in a `-` just before it where an operand is expected."""
        tokens = self.tokens
        negative = (
            len(tokens) >= 1
            and tokens[-1].kind == "-"
            and tokens[-1].offset == start - 1
            and (len(tokens) < 2 or tokens[-2].kind not in _OPERAND_END)
        )
        if negative:
            tokens.pop()
            start -= 1
        if literal is None:
            literal = self.make_literal(start, end, negative)
        elif negative:
            literal = Literal(-literal.value, literal.dtype)
        tokens.append(Token("number", self.text[start:end], start, literal))

    def make_literal(self, start: int, end: int, negative: bool) -> Literal:
        text = self.text[start:end]
        parts = _NUMBER_PARTS.fullmatch(self.text, start + 1 if negative else start, end)
        assert parts is not None
        whole, fraction, exponent, suffix = parts.groups()
        sign = -1 if negative else 1
        decimal = whole + (fraction or "") + (exponent or "")
        has_point = bool(fraction or exponent)
        if suffix is None and has_point:
            bare = sign * float(decimal)
            if abs(bare) > _FLOAT_MAX["float64"]:
                raise self.error(f"float literal `{_shorten(text)}` is out of range for float64", start, len(text))
            return Literal(bare, "float32", bare_decimal=True)
        if suffix is None or suffix in _INT_SUFFIX:
            if has_point:
                message = f"invalid integer literal `{text}`: integers have no fraction or exponent"
                raise self.error(message, start, len(text))
            if len(whole.lstrip("0")) > _MAX_INT_DIGITS:
                # Out of range for any dtype; int() would refuse more than 4300 digits anyway.
                raise self.error(f"integer literal `{_shorten(text)}` is out of range for int64", start, len(text))
            value = sign * int(whole)
            dtype = _INT_SUFFIX[suffix] if suffix else ("int32" if _fits(value, "int32") else "int64")
            if not _fits(value, dtype):
                raise self.error(f"integer literal `{_shorten(text)}` is out of range for {dtype}", start, len(text))
            return Literal(value, dtype)
        if suffix in _FLOAT_SUFFIX:
            dtype = _FLOAT_SUFFIX[suffix]
            real = sign * float(decimal)
            if abs(real) > _FLOAT_MAX[dtype]:
                raise self.error(f"float literal `{_shorten(text)}` is out of range for {dtype}", start, len(text))
            return Literal(real, dtype)
        hint = " (float16 literals are written like `1f16`)" if suffix.startswith("h") else ""
        raise self.error(
            f"unknown literal suffix `{suffix}` in `{text}`: use f, f16, f32, f64, i, i16, i32 or i64{hint}",
            start,
            len(text),
        )

    def skip_block_comment(self, start: int) -> int:
        depth = 0
        for mark in _COMMENT_MARK.finditer(self.text, start):
            depth += 1 if mark.group() == "/*" else -1
            if depth == 0:
                return mark.end()
        raise self.error("unterminated block comment: missing `*/`", start, 2)

    def meta(self, start: int) -> int:
        match = _META.match(self.text, start)
        if match is None:
            raise self.error("malformed meta reference: expected meta[<type key>][<index>]", start, 5)
        if len(match.group(2)) > _MAX_INT_DIGITS:
            raise self.error(f"meta reference `{_shorten(match.group())}`: the index is out of range", start, len(match.group()))
        self.tokens.append(Token("meta", match.group(), start))
        return match.end()

    def hash_attribute(self, start: int) -> int | None:
        """Lex `#[version = "..."]`, or `#[metadata]` which ends the token stream."""
        close = self.text.find("]", start)
        newline = self.text.find("\n", start)
        if close < 0 or (0 <= newline < close):
            raise self.error("unterminated `#[`: expected `]` on the same line", start, 2)
        content = self.text[start + 2 : close].strip()
        token = Token("", self.text[start : close + 1], start)
        if content == "metadata":
            token.kind = "metadata"
            self.tokens.append(token)
            self.lexed.metadata_token = token
            self.lexed.metadata_text = self.text[close + 1 :]
            return None
        if content.startswith("version"):
            rest = content[len("version") :].strip()
            if not rest.startswith("="):
                message = 'malformed version header: expected #[version = "0.0.5"]'
                raise self.error(message, start, len(token.text))
            version = rest[1:].strip()
            if version != SUPPORTED_VERSION:
                raise self.error(
                    f"unsupported Relay text version {version}: only {SUPPORTED_VERSION} is understood",
                    start,
                    len(token.text),
                )
            token.kind = "version"
            self.tokens.append(token)
            return close + 1
        message = f'unknown header `#[{content}]`: only #[version = "0.0.5"] and #[metadata] exist'
        raise self.error(message, start, len(token.text))


# int64's limits have 19 digits: a longer literal is out of range without converting it.
_MAX_INT_DIGITS = 20


def _shorten(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:18]}...{text[-18:]} ({len(text)} characters)"


def _fits(value: int, dtype: str) -> bool:
    low, high = _INT_RANGES[dtype]
    return low <= value <= high
