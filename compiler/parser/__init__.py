"""The Relay text format (`#[version = "0.0.5"]`): tokenizer, parser, printer and #[metadata] section.

`parse` reads a whole module and, by default, type-checks it (as TVM's parser does), so a parse
can also fail with a TypeCheckError. `parse_expr` reads a single expression.
"""

from __future__ import annotations

from compiler.diagnostics import InputError, Source, Span
from compiler.ir.expr import Expr
from compiler.ir.module import IRModule
from compiler.parser.parser import MAX_NESTING, parse_expression, parse_module
from compiler.parser.printer import astext

__all__ = ["MAX_NESTING", "astext", "decode_source", "parse", "parse_bytes", "parse_expr", "parse_file"]


def parse(text: str, source_name: str = "<string>", infer_types: bool = True) -> IRModule:
    """Parse a module; raises ParseError (or TypeCheckError when inferring types)."""
    mod = parse_module(Source(source_name, text))
    if infer_types:
        from compiler.passes.infer_type import InferType  # the pass imports the IR, not the parser

        mod = InferType()(mod)
    return mod


def parse_file(path: str, infer_types: bool = True) -> IRModule:
    """Parse the module in the file at `path`; errors name the path as given."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_bytes(data, source_name=path, infer_types=infer_types)


def parse_bytes(data: bytes, source_name: str = "<bytes>", infer_types: bool = True) -> IRModule:
    """Parse a module given as UTF-8 bytes; bytes that are not UTF-8 are an InputError located
    at the line and column of the first bad byte."""
    return parse(decode_source(data, source_name), source_name=source_name, infer_types=infer_types)


def decode_source(data: bytes, source_name: str) -> str:
    """The text of a model file's bytes; an InputError at the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(source_name, data, exc) from None


def _not_utf8(source_name: str, data: bytes, exc: UnicodeDecodeError) -> InputError:
    before = data[: exc.start].decode("utf-8", errors="replace")
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    shown = Source(source_name, data.decode("utf-8", errors="replace"))
    message = f"cannot read {source_name}: not UTF-8 text ({exc.reason} at byte {exc.start})"
    return InputError(message, Span(shown, line, column))


def parse_expr(text: str, source_name: str = "<string>") -> Expr:
    """Parse one expression; the version header is optional."""
    return parse_expression(Source(source_name, text))
