"""compiler.testing.onnx_conformance: the ONNX backend node tests of the operators issue 12
lists, imported, compiled in batches (one C build per batch) and compared with their reference
outputs; `make conformance` runs all 1,884."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler.testing import onnx_conformance as conformance
from tests.compiler.frontend.onnx.test_registry import LISTED

# Known and understood mismatches (none today).
KNOWN_FAILURES: set[str] = set()

# What a listed operator's case may be unsupported for: types, modes and outputs we lack.
UNSUPPORTED_REASONS = ("has no relaycc dtype", "training mode", "older than 13", "sequence_type",
                       "optional_type", "Indices output", "storage_order", "pad mode 'wrap'")


@pytest.fixture(scope="module")
def results() -> list[conformance.CaseResult]:
    return conformance.run(conformance.collect(LISTED), batch_size=64, jobs=2)


def test_every_case_of_the_listed_operators_passes_or_is_unsupported_for_a_known_reason(
    results: list[conformance.CaseResult],
) -> None:
    failed = {r.name: r.reason for r in results if r.status == conformance.FAILED}
    assert set(failed) <= KNOWN_FAILURES, failed
    odd = {r.name: r.reason for r in results if r.status == conformance.UNSUPPORTED
           and not any(reason in r.reason for reason in UNSUPPORTED_REASONS)}
    assert not odd
    passed = [r for r in results if r.status == conformance.PASSED]
    # 431 pass today (of 500); fewer means a converter or a kernel regressed.
    assert len(passed) >= 431, conformance.summary(results)


def test_summary_counts_and_groups_reasons() -> None:
    results = [conformance.CaseResult("a", conformance.PASSED),
               conformance.CaseResult("b", conformance.UNSUPPORTED,
                                      "the ONNX model uses 1 unsupported operator node: Det (node '#0', opset 22): not converted"),
               conformance.CaseResult("c", conformance.FAILED, "output 0: mismatch")]
    text = conformance.summary(results)
    assert "passed: 1\nfailed: 1\nunsupported: 1\ntotal: 3 (33.3% passed)" in text
    assert "unsupported ops: Det" in text


def _case(name: str, node: object, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> object:
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, a.shape) for k, a in enumerate(inputs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, outputs[0].shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    class Case:
        pass

    case = Case()
    case.name, case.model, case.data_sets, case.rtol, case.atol = name, model, [(inputs, outputs)], 1e-5, 1e-6  # type: ignore[attr-defined]
    return case


def test_a_wrong_reference_fails_only_its_own_case_in_a_shared_batch() -> None:
    x = np.array([1.0, -2.0], dtype="float32")
    cases = [
        _case("good", helper.make_node("Neg", ["x0"], ["y"]), [x], [-x]),
        _case("wrong", helper.make_node("Abs", ["x0"], ["y"]), [x], [x]),
        _case("unsupported", helper.make_node("Det", ["x0"], ["y"]), [x], [x]),
    ]
    results = {r.name: r for r in conformance.run(cases, batch_size=8, jobs=1)}
    assert results["good"].status == conformance.PASSED
    assert results["wrong"].status == conformance.FAILED and "mismatch" in results["wrong"].reason
    assert results["unsupported"].status == conformance.UNSUPPORTED


def test_a_shape_computed_from_integer_graph_inputs_is_bound_from_the_data() -> None:
    # Expand's shape is `n + 1`: a value of the graph input `n`, which the case feeds as data.
    nodes = [helper.make_node("Add", ["n", "one"], ["shape"]), helper.make_node("Expand", ["x", "shape"], ["y"])]
    graph = helper.make_graph(
        nodes, "expand_by_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("one", TensorProto.INT64, [], [1])],
    )

    class Case:
        name = "expand_by_input"
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        data_sets = [([np.array([[2.5]], dtype="float32"), np.array([1, 2])], [np.full((2, 3), 2.5, dtype="float32")])]
        rtol, atol = 1e-5, 1e-6

    (result,) = conformance.run([Case()], batch_size=8, jobs=1)
    assert result.status == conformance.PASSED, result.reason
