"""What every printed-model test module checks, shared by the tvm_printed_* test modules: the
text parses and round-trips through our printer, the `ty=` comments are what InferType gives,
and `relaycc compile` + `relaycc run` agree with the reference interpreter."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.parser.printer import astext
from compiler.runtime.interpreter import run_main
from tests.e2e.tvm_printed import Printed
from tests.e2e.cli_runner import relaycc




def call_types(text: str) -> list[str]:
    """The `ty=` comments of the operator-call lines (not tuples or projections), sorted."""
    body = text.split("#[metadata]")[0]
    return sorted(re.findall(r"^  (?:%\d+ = )?[a-z][\w.]*\(.*/\* ty=(.*?)(?: span=\S+)? \*/;?$", body, re.M))


def assert_round_trips_with_printed_types(printed: Printed) -> None:
    module = parse(printed.text, printed.name)
    assert structural_equal(module, parse(astext(module), printed.name))
    assert call_types(astext(module, show_types=True)) == call_types(printed.text)


def interpret(printed: Printed, d: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Write the model and its inputs to d and run it in the reference interpreter (in this
    process: what `relaycc interpret` runs), outputs named as `relaycc run` names them."""
    (d / "model.relay").write_text(printed.text)
    np.savez(d / "in.npz", **inputs)
    outputs = run_main(parse(printed.text, printed.name), inputs)
    return {f"out{k}": np.asarray(v) for k, v in enumerate(outputs)}


def compile_and_run(d: Path, target: str) -> dict[str, np.ndarray]:
    """Compile d/model.relay for `target` and run it on d/in.npz (after `interpret`)."""
    out = d / ("build_" + re.sub(r"\W+", "_", target))
    result = relaycc("compile", str(d / "model.relay"), "-o", str(out), "--target", target)
    assert result.returncode == 0, result.stderr
    result = relaycc("run", str(out), "--inputs", str(d / "in.npz"), "-o", str(out / "got.npz"))
    assert result.returncode == 0, result.stderr
    return dict(np.load(out / "got.npz"))


def assert_outputs_match(got: dict[str, np.ndarray], want: dict[str, np.ndarray], rtol: float = 1e-4) -> None:
    """Integer outputs bit for bit; float outputs within rtol of the output's largest magnitude."""
    assert sorted(got) == sorted(want)
    for key, expected in want.items():
        actual = got[key]
        assert actual.shape == expected.shape and actual.dtype == expected.dtype, key
        if expected.dtype.kind in "iub":
            np.testing.assert_array_equal(actual, expected, err_msg=key)
        else:
            scale = max(float(np.abs(expected).max()), 1e-6)
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale, err_msg=key)
