"""compiler.frontend.onnx.names: ONNX names as Relay identifiers."""

from __future__ import annotations

import pytest

from compiler.frontend.onnx.names import relay_identifier


@pytest.mark.parametrize(("onnx_name", "relay"), [
    ("data", "data"), ("gpu_0/data_0", "gpu_0_data_0"), ("input.1", "input_1"), ("0", "v0"),
    ("", "input"), ("x:0", "x_0"),
])
def test_names_become_identifiers(onnx_name: str, relay: str) -> None:
    assert relay_identifier(onnx_name, set()) == relay


def test_a_taken_name_gets_a_numbered_suffix() -> None:
    taken = {"a_b"}
    assert relay_identifier("a.b", taken) == "a_b_1"
    assert relay_identifier("a/b", taken) == "a_b_2"
    assert taken == {"a_b", "a_b_1", "a_b_2"}
