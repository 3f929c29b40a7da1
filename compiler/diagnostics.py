"""Source locations and the errors the compiler reports to users.

Every user-facing error is a `CompileError` carrying an optional `Span`. The span points into a
`Source`, so an error can always show the offending line with a caret under the column, the same
text in the CLI and in the service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, eq=False)
class Source:
    """A named piece of text the parser read; spans point into it."""

    name: str
    text: str
    _lines: list[str] = field(default_factory=list, repr=False)

    def line(self, number: int) -> str:
        """Line `number` (1-based) without its newline, or '' when out of range."""
        if not self._lines:
            self._lines.extend(self.text.split("\n"))
        if 1 <= number <= len(self._lines):
            return self._lines[number - 1].rstrip("\r")
        return ""


@dataclass(frozen=True)
class Span:
    """A position in a source: 1-based line and column, optionally an end column on that line."""

    source: Source | None
    line: int
    column: int
    end_column: int | None = None

    @property
    def source_name(self) -> str:
        return self.source.name if self.source is not None else "<unknown>"

    def source_line(self) -> str:
        return self.source.line(self.line) if self.source is not None else ""

    def __str__(self) -> str:
        return f"{self.source_name}:{self.line}:{self.column}"


# Source lines longer than this are shown as a window around the error's column.
RENDER_WIDTH = 120
# Messages longer than this keep their start and end: a message that quotes a 4 MiB name or
# prints a type with a million fields would otherwise be megabytes on stderr and in the service.
MAX_MESSAGE = 2000


def elide(message: str, limit: int = MAX_MESSAGE) -> str:
    """`message` cut to about `limit` characters, the middle replaced by a note."""
    if len(message) <= limit:
        return message
    keep = limit // 2
    return f"{message[:keep]} ...({len(message) - 2 * keep:,} characters)... {message[-keep:]}"


class CompileError(Exception):
    """An error in the user's model or options, reported with its location when one is known."""

    kind = "compile_error"
    title = "Compile error"

    def __init__(self, message: str, span: Span | None = None):
        message = elide(message)
        super().__init__(message)
        self.message = message
        self.span = span

    @property
    def line(self) -> int | None:
        return self.span.line if self.span else None

    @property
    def column(self) -> int | None:
        return self.span.column if self.span else None

    @property
    def source_line(self) -> str | None:
        return self.span.source_line() if self.span else None

    def one_line(self) -> str:
        """`file:line:col: message`, the form the CLI prints on stderr."""
        if self.span is None:
            return f"error: {self.message}"
        return f"{self.span}: error: {self.message}"

    def render(self) -> str:
        """The one-line message followed by the source line and a caret under the column.

        A line longer than RENDER_WIDTH (generated models can put a whole graph on one line) is
        shown as a window around the column, elided with `...` on the cut sides."""
        text = self.one_line()
        if self.span is None or not self.source_line:
            return text
        line = self.source_line
        column = self.span.column
        width = max(1, (self.span.end_column or column + 1) - column)
        if len(line) > RENDER_WIDTH:
            start = max(0, min(column - 1 - RENDER_WIDTH // 2, len(line) - RENDER_WIDTH))
            end = start + RENDER_WIDTH
            prefix = "..." if start > 0 else ""
            line = prefix + line[start:end] + ("..." if end < len(line) else "")
            column = column - start + len(prefix)
            width = min(width, RENDER_WIDTH)
        caret = " " * (column - 1) + "^" + "~" * (width - 1)
        return f"{text}\n  {line}\n  {caret}"

    def __str__(self) -> str:
        return self.render()


class ParseError(CompileError):
    kind = "parse_error"
    title = "Relay text does not parse"


class TypeCheckError(CompileError):
    """A type error: names the expression and, where two types disagree, both of them."""

    kind = "type_error"
    title = "Relay program is ill-typed"


class UnsupportedError(CompileError):
    kind = "unsupported"
    title = "Construct not supported"


class InputError(CompileError):
    """Bad runtime inputs or options (missing input, wrong shape or dtype, bad file)."""

    kind = "input_error"
    title = "Bad input"


def read_json_file(path: Path, kind: str) -> object:
    """The JSON document in the file at `path`; InputError naming the file, and the line and
    column of a syntax error, with `kind` saying what the file was to hold ("codegen")."""
    import json

    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such {kind} file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {err}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}:{err.colno}: invalid {kind} JSON: {err.msg}") from None
