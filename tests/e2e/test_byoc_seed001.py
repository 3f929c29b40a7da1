"""Seed 001: composites lowered to external calls with planned intermediate buffers.

The partitioned perceptron of the story (tests/models/seed001_mlp_partitioned.relay) and the
toy_cg_thflow codegen (tests/codegens/toy_cg_thflow: JSON + a small DLTensor C library) compile,
run and match numpy; the generated C calls the library one composite after another through a
buffer the static memory planner placed.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent.parent
TOY_DIR = TESTS / "codegens" / "toy_cg_thflow"
TOY_JSON = TOY_DIR / "toy_cg_thflow.json"
PARTITIONED = TESTS / "models" / "seed001_mlp_partitioned.relay"
UNPARTITIONED = TESTS / "models" / "seed001_mlp.relay"
TARGET = "toy_cg_thflow, c"
SYMBOL = "tvmgen_default_toy_cg_thflow_main_0"


def relaycc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compiler", *map(str, args)], capture_output=True, text=True,
                          check=False)


def mlp_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((8, 64)).astype("float32"),
        "w1": (rng.standard_normal((32, 64)) * 0.2).astype("float32"),
        "b1": rng.standard_normal(32).astype("float32"),
        "w2": (rng.standard_normal((10, 32)) * 0.2).astype("float32"),
        "b2": rng.standard_normal(10).astype("float32"),
    }


def mlp_numpy(x, w1, b1, w2, b2):
    hidden = np.maximum(x @ w1.T + b1, 0.0)
    return hidden @ w2.T + b2


def run(outdir: Path, inputs: dict[str, np.ndarray], work: Path) -> np.ndarray:
    np.savez(work / "inputs.npz", **inputs)
    result = relaycc("run", outdir, "--inputs", work / "inputs.npz", "-o", work / "outputs.npz")
    assert result.returncode == 0, result.stderr
    return np.load(work / "outputs.npz")["out0"]


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("seed001") / "out"
    result = relaycc("compile", PARTITIONED, "-o", outdir, "--target", TARGET, "--codegen", TOY_JSON)
    assert result.returncode == 0, result.stderr
    return outdir


def test_partitioned_mlp_runs_and_matches_numpy(partitioned, tmp_path):
    inputs = mlp_inputs()
    np.testing.assert_allclose(run(partitioned, inputs, tmp_path), mlp_numpy(**inputs), rtol=1e-4, atol=1e-4)


def test_c_calls_the_composites_in_sequence_through_an_intermediate_buffer(partitioned):
    text = (partitioned / "src" / "toy_cg_thflow_extern_calls.c").read_text()
    calls = re.findall(r"(\w+)\((&\w+(?:, &\w+)*)\);", text)
    assert [name for name, _ in calls] == ["dense_bias_relu", "dense_bias"]
    first, second = ([a.strip("&") for a in args.split(", ")] for _, args in calls)
    assert first[-1] == second[0] == "buf0"  # the first's output is the second's input
    assert first[:3] == ["i0", "i1", "i2"] and second[1:] == ["i3", "i4", "out0"]
    assert not re.search(r"dense_bias\w*\([^;]*dense_bias", text)  # never nested
    # The buffer is memory the executor passes in (the planned workspace), not the stack.
    assert re.search(r"float\* buf0_data = \(float\*\)\(workspace \+ 0\);", text)


def test_intermediate_lives_in_the_workspace_plan(partitioned):
    report = json.loads((partitioned / "metadata.json").read_text())
    [call] = report["calls"]
    assert (call["callee"], call["kind"], call["target"], call["compiler"]) == (SYMBOL, "extern", "toy_cg_thflow",
                                                                                "toy_cg_thflow")
    function = report["functions"][SYMBOL]
    assert function["kind"] == "extern" and function["workspace_bytes"] >= 8 * 32 * 4
    buffers = report["memory"]["buffers"]
    assert any(b["bytes"] >= 8 * 32 * 4 for b in buffers)
    assert report["memory"]["workspace_bytes"] >= 8 * 32 * 4
    assert report["target"] == {"host": "c", "external": ["toy_cg_thflow"]}
    [module] = report["external_modules"]
    assert module["name"] == "toy_cg_thflow" and module["symbols"] == [SYMBOL]
    assert module["sources"] == ["src/toy_cg_thflow_extern_calls.c", "src/toy_cg_thflow/toy_cg_thflow.c"]
    assert (partitioned / "include" / "relaycc_dlpack.h").exists()


def test_report_names_the_intermediate_between_the_composites(partitioned):
    report = json.loads((partitioned / "metadata.json").read_text())
    [workspace] = [b for b in report["memory"]["buffers"] if b["name"] == "workspace_0"]
    assert set(workspace) >= {"name", "offset", "bytes", "first_use", "last_use"}  # the design's keys stay
    # dense_bias_relu writes the 8x32 float hidden layer that dense_bias reads: buf0 of the call.
    assert workspace["allocations"] == [{"name": f"{SYMBOL}/buf0", "offset": workspace["offset"], "bytes": 8 * 32 * 4}]
    assert workspace["offset"] % 64 == 0


def test_unpartitioned_mlp_is_partitioned_by_the_codegens_patterns(tmp_path):
    outdir = tmp_path / "out"
    result = relaycc("compile", UNPARTITIONED, "-o", outdir, "--target", TARGET, "--codegen", TOY_JSON)
    assert result.returncode == 0, result.stderr
    inputs = mlp_inputs(seed=1)
    np.testing.assert_allclose(run(outdir, inputs, tmp_path), mlp_numpy(**inputs), rtol=1e-4, atol=1e-4)
    report = json.loads((outdir / "metadata.json").read_text())
    assert [(c["callee"], c["kind"]) for c in report["calls"]] == [(SYMBOL, "extern")]
    text = (outdir / "src" / "toy_cg_thflow_extern_calls.c").read_text()
    assert text.index("dense_bias_relu(&i0") < text.index("dense_bias(&buf0")


def test_weights_given_as_params_are_passed_from_the_constant_pool(tmp_path):
    inputs = mlp_inputs(seed=2)
    params = {k: v for k, v in inputs.items() if k != "x"}
    np.savez(tmp_path / "params.npz", **params)
    outdir = tmp_path / "out"
    result = relaycc("compile", UNPARTITIONED, "-o", outdir, "--codegen", TOY_JSON, "--params", tmp_path / "params.npz")
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(run(outdir, {"x": inputs["x"]}, tmp_path), mlp_numpy(**inputs), rtol=1e-4, atol=1e-4)
    report = json.loads((outdir / "metadata.json").read_text())
    assert report["memory"]["constant_bytes"] >= sum(p.nbytes for p in params.values())


def test_a_failing_library_call_fails_the_run(tmp_path):
    (tmp_path / "failing.c").write_text((TOY_DIR / "toy_cg_thflow.c").read_text().replace(
        "return dense_bias_impl(data, weight, bias, out, 0);", "(void)dense_bias_impl; return 7;"))
    spec = json.loads(TOY_JSON.read_text())
    spec["library"]["sources"] = ["failing.c"]
    (tmp_path / "failing.json").write_text(json.dumps(spec))
    outdir = tmp_path / "out"
    assert relaycc("compile", PARTITIONED, "-o", outdir, "--codegen", tmp_path / "failing.json").returncode == 0
    np.savez(tmp_path / "inputs.npz", **mlp_inputs())
    result = relaycc("run", outdir, "--inputs", tmp_path / "inputs.npz", "-o", tmp_path / "outputs.npz")
    assert result.returncode == 1
    assert "failed" in result.stderr and "Traceback" not in result.stderr


def write_codegen(tmp_path: Path, **changes) -> Path:
    doc = json.loads(TOY_JSON.read_text())
    doc.update(changes)
    (tmp_path / "toy_cg_thflow.c").write_text((TOY_DIR / "toy_cg_thflow.c").read_text())
    path = tmp_path / "codegen.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"patterns": [{"name": "dense_bias", "pattern": "nn.bias_add(nn.dense(*, *) *)"}]},
         "codegen toy_cg_thflow: pattern dense_bias: expected `,` or `)`, found `*` at column 28"),
        ({"library": {"sources": ["missing.c"]}},
         "codegen toy_cg_thflow: library source 'missing.c' not found"),
        ({"patterns": [{"name": "dense_bias_tanh", "pattern": "tanh(nn.bias_add(nn.dense(*, *), *))"}]},
         "codegen toy_cg_thflow: symbol dense_bias_tanh is not defined by its library (toy_cg_thflow.c)"),
    ],
)
def test_bad_codegens_fail_on_one_line_before_anything_runs(tmp_path, changes, message):
    outdir = tmp_path / "out"
    result = relaycc("compile", UNPARTITIONED, "-o", outdir, "--codegen", write_codegen(tmp_path, **changes))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not outdir.exists()


def test_composite_symbol_missing_from_the_library_of_partitioned_input(tmp_path):
    path = write_codegen(tmp_path, patterns=[])
    (tmp_path / "toy_cg_thflow.c").write_text((TOY_DIR / "toy_cg_thflow.c").read_text().replace(
        "int32_t dense_bias(", "int32_t dense_bias_v2("))
    result = relaycc("lower", PARTITIONED, "-o", tmp_path / "out", "--codegen", path)
    assert result.returncode == 1
    assert "codegen toy_cg_thflow: composite toy_cg_thflow.dense_bias calls dense_bias, which its library does " \
           "not define" in result.stderr


def test_unknown_codegen_in_the_target_lists_the_known_ones(tmp_path):
    result = relaycc("compile", UNPARTITIONED, "-o", tmp_path / "out", "--target", "acme_npu, c",
                     "--codegen", TOY_JSON)
    assert result.returncode == 1
    assert "unknown external codegen 'acme_npu'" in result.stderr and "toy_cg_thflow" in result.stderr


def test_partitioned_input_without_its_codegen_is_reported(tmp_path):
    result = relaycc("compile", PARTITIONED, "-o", tmp_path / "out")
    assert result.returncode == 1
    assert 'the model has functions for Compiler="toy_cg_thflow"' in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
