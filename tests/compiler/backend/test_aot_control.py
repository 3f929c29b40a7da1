"""@main with control flow compiled to C (compiler/backend/aot_control.py): `if`, while loops as
TVM prints them, local functions; every run checked against the interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.diagnostics import UnsupportedError
from compiler.driver import build
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

MODELS = Path(__file__).parents[2] / "models"


def compiled(path: Path, outdir: Path) -> tuple[str, CompiledModule]:
    text = path.read_text()
    build(text, outdir, source_name=str(path))
    return text, CompiledModule(outdir)


def assert_runs_like_the_interpreter(text: str, module: CompiledModule, inputs: dict[str, np.ndarray]) -> None:
    got = module.run(inputs).outputs
    want = run_main(parse(text), inputs)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_if_on_an_input_flag_takes_either_branch(tmp_path):
    text, module = compiled(MODELS / "control_flow.relay", tmp_path)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 4, 6)).astype("float32")
    for flag in (True, False):
        assert_runs_like_the_interpreter(text, module, {"a": a, "b": b, "flag": np.array(flag)})


def test_data_dependent_if_with_a_local_function_called_in_both_branches(tmp_path):
    text, module = compiled(MODELS / "control" / "data_dependent_if.relay", tmp_path)
    w = np.random.default_rng(1).standard_normal((3, 5)).astype("float32")
    for sign in (1.0, -1.0):
        x = sign * np.abs(np.random.default_rng(2).standard_normal((4, 5))).astype("float32")
        assert_runs_like_the_interpreter(text, module, {"x": x, "w": w})


@pytest.mark.parametrize("limit", [0, 1, 7])
def test_while_loop_as_tvm_prints_it_runs_its_iterations(limit, tmp_path):
    text, module = compiled(MODELS / "control" / "while_loop_tvm_printed.relay", tmp_path)
    x = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    assert_runs_like_the_interpreter(text, module, {"x": x, "limit": np.array(limit, "int32")})


def test_loop_carried_tensor_of_growing_shape(tmp_path):
    text, module = compiled(MODELS / "control" / "growing_loop.relay", tmp_path)
    x = np.arange(6, dtype="float32").reshape(2, 3) - 2
    for n in (0, 3):
        count, grown = module.run({"x": x, "n": np.array(n, "int32")}).outputs
        assert count == n and grown.shape == (2 + 2 * n, 3)
        assert_runs_like_the_interpreter(text, module, {"x": x, "n": np.array(n, "int32")})


def test_report_says_the_values_live_on_the_heap(tmp_path):
    _, module = compiled(MODELS / "control" / "growing_loop.relay", tmp_path)
    assert module.report["interface"]["dynamic"] is True
    assert module.report["memory"]["arena"]["size"].startswith("no arena: @main has control flow")


def test_function_passed_as_a_value_is_refused_where_it_is_passed(tmp_path):
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  let %f = fn (%y: Tensor[(2), float32]) { exp(%y) };
  let %apply = fn (%g: fn (Tensor[(2), float32]) -> Tensor[(2), float32], %z: Tensor[(2), float32]) { %g(%z) };
  %apply(%f, %x)
}
"""
    with pytest.raises(UnsupportedError, match="cannot pass one as a value") as err:
        build(text, tmp_path)
    assert err.value.span is not None and err.value.span.line == 5


def test_recursion_that_is_not_a_tail_call_is_refused(tmp_path):
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32], %n: int32) {
  let %f = fn (%i: int32) -> Tensor[(2), float32] {
    if (less(%i, %n)) { exp(%f(add(%i, 1))) } else { %x }
  };
  %f(0)
}
"""
    with pytest.raises(UnsupportedError, match="calls itself other than as its last action"):
        build(text, tmp_path)
