"""`relaycc interpret` on whole models gives the numpy answer."""

import subprocess
import sys

import numpy as np
import pytest

from compiler.parser import parse_file
from compiler.runtime.interpreter import run_main
from tests.e2e import models


@pytest.mark.parametrize("name", sorted(models.CASES))
def test_interpreter_matches_numpy(name):
    make_inputs, reference = models.CASES[name]
    inputs = make_inputs()
    outputs = run_main(parse_file(models.path(name)), inputs)
    expected = reference(**inputs)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_interpreter_takes_the_else_branch_when_flag_is_false():
    inputs = models.control_flow_inputs(flag=False)
    outputs = run_main(parse_file(models.path("control_flow")), inputs)
    np.testing.assert_allclose(outputs[0], models.control_flow_numpy(**inputs)[0], rtol=1e-6)


@pytest.mark.parametrize("name", ["mlp", "cnn", "attention"])
def test_relaycc_interpret_cli_matches_numpy(name, tmp_path):
    make_inputs, reference = models.CASES[name]
    inputs = make_inputs(seed=1)
    np.savez(tmp_path / "in.npz", **inputs)
    result = subprocess.run(
        [sys.executable, "-m", "compiler", "interpret", str(models.path(name)),
         "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(out["out0"], reference(**inputs)[0], rtol=1e-4, atol=1e-5)


def test_interpret_with_params_binds_weights_by_name(tmp_path):
    inputs = models.mlp_inputs()
    params = {k: inputs.pop(k) for k in ["w1", "b1", "w2", "b2"]}
    outputs = run_main(parse_file(models.path("mlp")), inputs, params)
    np.testing.assert_allclose(outputs[0], models.mlp_numpy(**inputs, **params)[0], rtol=1e-4)
