from compiler.diagnostics import ParseError, Source, Span, TypeCheckError


def test_error_renders_location_source_line_and_caret():
    src = Source("model.relay", "line one\n  add(%x, %y)\n")
    err = ParseError("undefined variable %y", Span(src, 2, 11, 13))
    assert err.one_line() == "model.relay:2:11: error: undefined variable %y"
    lines = str(err).split("\n")
    assert lines[1] == "    add(%x, %y)"
    assert lines[2] == "  " + " " * 10 + "^~"
    assert (err.line, err.column, err.source_line) == (2, 11, "  add(%x, %y)")


def test_error_without_span_is_one_line():
    err = TypeCheckError("bad")
    assert str(err) == "error: bad"
    assert err.line is None and err.kind == "type_error"
