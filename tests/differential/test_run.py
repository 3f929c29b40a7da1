"""The fuzz-diff summary: its counts line, and the coverage line with BYOC regions."""

from __future__ import annotations

from tests.differential.run import Tally


def _result(seed: int, kind: str = "matched", regions: dict[str, int] | None = None) -> dict[str, object]:
    return {"seed": seed, "kind": kind, "stage": "", "ops": ["nn.relu"], "fusion": ["ELEMWISE"],
            "plan": True, "target": "c", "opt_level": 0, "regions": regions or {}}


def test_the_coverage_line_counts_models_with_regions_of_each_codegen() -> None:
    tally = Tally(4)
    tally.results = {r["seed"]: r for r in (  # type: ignore[misc]
        _result(1, regions={"acme_npu": 2}),
        _result(2, regions={"acme_npu": 1, "cblas": 3}),
        _result(3),
        _result(4, "crashed"),
    )}
    first, coverage = tally.summary()[:2]
    assert first == "fuzz-diff: 4 generated, 3 compiled, 3 matched, 0 mismatched, 1 crashed"
    assert coverage.startswith("coverage: 1 of ")
    assert coverage.endswith("; models with BYOC regions: acme_npu 2 (3 functions), cblas 1 (3 functions)")


def test_a_run_without_regions_says_so() -> None:
    tally = Tally(1)
    tally.results = {1: _result(1)}
    assert tally.summary()[1].endswith("; models with BYOC regions: none")
