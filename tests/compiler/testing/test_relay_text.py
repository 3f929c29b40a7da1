"""The Relay text strategies, the outcome classes and the isolated worker of the parser fuzzing."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.diagnostics import CompileError
from compiler.parser import parse
from compiler.testing import relay_text
from compiler.testing.relay_text import (
    CRASH,
    HANG,
    LOCATED_ERROR,
    MEMORY,
    MODULE,
    UNLOCATED_ERROR,
    IsolatedParser,
    Outcome,
    generated_text,
    grammar_programs,
    let_chain,
    mutants,
    outcome_of,
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammar_programs())
def test_grammar_programs_are_well_typed_modules(text: str) -> None:
    assert parse(text).main.checked_type is not None


def test_generated_texts_are_the_generator_models_printed() -> None:
    text = generated_text(3)
    assert text.startswith('#[version = "0.0.5"]\ndef @main(')
    assert generated_text(3) is text  # cached


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutants_of_a_program_are_usually_other_texts(data: st.DataObject) -> None:
    program = generated_text(5)
    texts = {data.draw(mutants(st.just(program))) for _ in range(5)}
    assert texts - {program}


def test_a_located_error_and_a_module_are_the_clean_outcomes() -> None:
    assert outcome_of(let_chain(3)) == Outcome(MODULE)
    located = outcome_of("def @main() { %nope }", "m.relay")
    assert located == Outcome(LOCATED_ERROR, "m.relay:1:15: error: undefined variable %nope")
    assert located.clean


def test_an_error_without_a_location_and_any_other_exception_break_the_property(monkeypatch) -> None:
    def unlocated(text: str, source_name: str) -> None:
        raise CompileError("somewhere")

    def crashing(text: str, source_name: str) -> None:
        [][1]

    monkeypatch.setattr("compiler.parser.parse", unlocated)
    assert outcome_of("x") == Outcome(UNLOCATED_ERROR, "CompileError: somewhere")
    monkeypatch.setattr("compiler.parser.parse", crashing)
    outcome = outcome_of("x")
    assert outcome.kind == CRASH and outcome.detail.startswith("IndexError: list index out of range (test_relay_text.py:")
    assert not outcome.clean


def _sleep_forever(data: object) -> Outcome:
    while True:
        time.sleep(60)


def _allocate(data: object) -> Outcome:
    block = bytearray(1 << 30)
    return Outcome(MODULE, str(len(block)))


def _parse_or_allocate(data: str | bytes) -> Outcome:
    return _allocate(data) if data == "allocate" else outcome_of(data)


def test_an_input_past_the_deadline_is_a_hang_and_the_worker_is_replaced() -> None:
    with IsolatedParser(deadline=0.5, check=lambda data: _sleep_forever(data) if data == "sleep" else outcome_of(data)) as worker:
        assert worker.outcome("sleep") == Outcome(HANG, "no result within 0.5 s")
        assert worker.outcome(let_chain(2)) == Outcome(MODULE)


def test_an_input_past_the_memory_limit_is_a_memory_overrun_and_the_worker_is_replaced() -> None:
    with IsolatedParser(memory_limit=512 << 20, check=_parse_or_allocate) as worker:
        assert worker.outcome("allocate") == Outcome(MEMORY, "MemoryError")
        assert worker.outcome(let_chain(2)) == Outcome(MODULE)


def test_the_worker_reports_what_the_parser_says() -> None:
    with IsolatedParser() as worker:
        assert worker.outcome(b"def @main() { 1\xff }").kind == LOCATED_ERROR
        assert worker.outcome(let_chain(2)).kind == MODULE


def test_the_full_corpus_is_the_suite_corpus_at_full_size(monkeypatch) -> None:
    monkeypatch.setattr(relay_text, "LET_BINDINGS_UNDER_MAKE_FUZZ", 7)
    small, full = relay_text.hostile_corpus(), relay_text.hostile_corpus(full=True)
    assert set(full) - set(small) == {"4 MiB single line of bindings"}
    assert full["let bindings"] == let_chain(7)


@pytest.mark.parametrize("count", [1, 3])
def test_a_let_chain_has_count_bindings(count: int) -> None:
    assert let_chain(count).count("let %v") == count
