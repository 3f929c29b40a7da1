from compiler.diagnostics import CompileError, ParseError, Source, Span, TypeCheckError


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


def test_a_very_long_line_is_shown_as_a_window_around_the_column():
    from compiler.diagnostics import RENDER_WIDTH

    line = "a" * 50_000 + "BAD" + "b" * 50_000
    err = ParseError("unexpected BAD", Span(Source("m.relay", line), 1, 50_001, 50_004))
    _, shown, caret = str(err).split("\n")
    assert len(shown) < RENDER_WIDTH + 10 and shown.strip().startswith("...") and shown.endswith("...")
    assert shown[caret.index("^"):caret.index("^") + 3] == "BAD"
    assert caret.strip() == "^~~"


def test_a_long_line_near_its_start_keeps_the_start():
    line = "BAD" + "x" * 1000
    err = ParseError("unexpected BAD", Span(Source("m.relay", line), 1, 1, 4))
    _, shown, caret = str(err).split("\n")
    assert shown.startswith("  BAD") and shown.endswith("...")
    assert caret == "  ^~~"


def test_a_message_quoting_megabytes_keeps_its_start_and_end():
    error = CompileError("undefined variable %" + "a" * (4 << 20) + " here")
    assert len(error.message) < 2100
    assert error.message.startswith("undefined variable %aaa")
    assert error.message.endswith("aaa here")
    assert "characters)..." in error.message


def test_a_message_within_the_limit_is_kept_whole():
    message = "x" * 2000
    assert CompileError(message).message == message
