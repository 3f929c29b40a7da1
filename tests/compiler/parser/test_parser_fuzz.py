"""The parser and type checker as a property, on a bounded sample (`make fuzz` runs 10^6
inputs): every text, well-typed or mutated, ends in a module or a located CompileError; never
another exception. Here the outcome class is checked in-process; the deadline and memory limit
are the fuzz driver's (compiler/testing/fuzz_driver.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from compiler.testing.relay_text import LOCATED_ERROR, MODULE, mutants, outcome_of, relay_texts, well_typed_programs

FUZZ_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ_SETTINGS
@given(relay_texts())
def test_any_text_ends_in_a_module_or_a_located_error(text: str) -> None:
    outcome = outcome_of(text)
    assert outcome.kind in (MODULE, LOCATED_ERROR), f"{outcome.kind}: {outcome.detail}\n{text[:3000]}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(well_typed_programs())
def test_well_typed_programs_parse_and_type_check(text: str) -> None:
    outcome = outcome_of(text)
    assert outcome.kind == MODULE, f"{outcome.detail}\n{text}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutants().map(lambda text: text.encode("utf-8", "surrogatepass")))
def test_mutated_bytes_end_in_a_module_or_a_located_error(data: bytes) -> None:
    # Bytes go through parse_bytes, as a file does: a lone surrogate is not UTF-8.
    outcome = outcome_of(data)
    assert outcome.kind in (MODULE, LOCATED_ERROR), f"{outcome.kind}: {outcome.detail}\n{data[:3000]!r}"
