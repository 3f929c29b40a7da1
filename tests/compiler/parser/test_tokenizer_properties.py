"""The tokenizer as a property: any sequence of tokens, written out with any mix of whitespace
and comments between them, lexes back to exactly those tokens. A lexer bug (a token split in
two, two merged, a comment eating code) is silent until a model means something else."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.diagnostics import Source
from compiler.parser.tokenizer import tokenize

NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
KEYWORDS = ("fn", "def", "let", "if", "else", "type", "match", "ref", "free_var")


@st.composite
def tokens(draw: st.DrawFn) -> tuple[str, str]:
    kind = draw(st.sampled_from(("local", "dotted", "graph", "global", "ident", "int", "float", "string", "punct")))
    if kind == "local":
        return "local", "%" + draw(NAME)
    if kind == "dotted":  # PyTorch-style parameter names are one local name
        return "local", "%" + ".".join(draw(st.lists(NAME, min_size=2, max_size=3)))
    if kind == "graph":
        return "graph", f"%{draw(st.integers(0, 10**6))}"
    if kind == "global":
        return "global", "@" + draw(NAME)
    if kind == "ident":
        word = draw(NAME | st.sampled_from(KEYWORDS))
        if word in ("True", "False"):
            return "bool", word
        if word in ("inf", "nan") or word.startswith(("inff", "nanf")):
            word = "x" + word
        return "ident", word
    if kind == "int":
        return "number", f"{draw(st.integers(0, 127))}{draw(st.sampled_from(('', 'i', 'i16', 'i32', 'i64')))}"
    if kind == "float":
        mantissa = f"{draw(st.integers(0, 99))}.{draw(st.integers(0, 999))}"
        exponent = draw(st.sampled_from(("", "e1", "e-3", "E+2")))
        return "number", mantissa + exponent + draw(st.sampled_from(("f", "f16", "f32", "f64")))
    if kind == "string":
        return "string", '"' + draw(st.from_regex(r"[A-Za-z0-9 _.,:;=+*/()\[\]-]{0,8}", fullmatch=True)) + '"'
    word = draw(st.sampled_from(("->", "==", "!=", "<=", ">=", "(", ")", "{", "}", "[", "]", ",", ";", ":", "=", "?", "*", "<", ">")))
    return word, word


SEPARATORS = st.sampled_from((" ", "\n", "\t", "  \n  ", " /* a comment */ ", " /* a /* nested */ one */ ", " // to the end\n"))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(tokens(), SEPARATORS), max_size=40))
def test_written_tokens_lex_back_to_themselves(pieces: list[tuple[tuple[str, str], str]]) -> None:
    text = "".join(word + separator for (_, word), separator in pieces)
    lexed = [t for t in tokenize(Source("<generated>", text)).tokens if t.kind != "eof"]
    assert [(t.kind, t.text) for t in lexed] == [token for token, _ in pieces], text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(tokens(), SEPARATORS), min_size=1, max_size=20))
def test_token_offsets_point_at_their_text(pieces: list[tuple[tuple[str, str], str]]) -> None:
    text = "".join(word + separator for (_, word), separator in pieces)
    for token in tokenize(Source("<generated>", text)).tokens:
        if token.kind != "eof":
            assert text[token.offset : token.offset + len(token.text)] == token.text
