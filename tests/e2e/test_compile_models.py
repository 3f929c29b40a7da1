"""`relaycc compile` + `relaycc run` on whole models agree with the interpreter and numpy."""

import json
import tarfile

import numpy as np
import pytest

from compiler.parser import parse_file
from compiler.runtime.build import compile_check
from compiler.runtime.interpreter import run_main
from tests.e2e import models
from tests.e2e.cli_runner import relaycc




@pytest.fixture(scope="module", params=models.COMPILED)
def compiled(request, tmp_path_factory):
    name = request.param
    outdir = tmp_path_factory.mktemp(name)
    result = relaycc("compile", str(models.path(name)), "-o", str(outdir / "out"))
    assert result.returncode == 0, result.stderr
    return name, outdir


def test_compiled_model_matches_interpreter_and_numpy(compiled):
    name, outdir = compiled
    make_inputs, reference = models.CASES[name]
    inputs = make_inputs(seed=3)
    np.savez(outdir / "in.npz", **inputs)
    result = relaycc("run", str(outdir / "out"), "--inputs", str(outdir / "in.npz"), "-o", str(outdir / "o.npz"))
    assert result.returncode == 0, result.stderr
    got = np.load(outdir / "o.npz")
    interpreted = run_main(parse_file(models.path(name)), inputs)
    expected = reference(**inputs)
    assert got.files == [f"out{i}" for i in range(len(expected))]
    for i, (want_interp, want_np) in enumerate(zip(interpreted, expected)):
        np.testing.assert_allclose(got[f"out{i}"], want_interp, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[f"out{i}"], want_np, rtol=1e-4, atol=1e-5)


def test_metadata_lists_every_lowered_call(compiled):
    _, outdir = compiled
    report = json.loads((outdir / "out" / "metadata.json").read_text())
    lowered = (outdir / "out" / "lowered.relay").read_text()
    assert report["format"] == "relaycc.metadata/1"
    assert len(report["calls"]) == lowered.count("call_lowered(")
    for call in report["calls"]:
        assert call["callee"] in report["functions"]
        assert set(call["metadata"]) >= {"relay_attrs", "all_prim_fn_vars"}
        assert call["metadata"]["all_prim_fn_vars"] == [call["callee"]]
    # Device placement is stripped and unsupported constructs refused before any optimization.
    # The call_lowered and memory ops of modules TVM printed after lowering are undone first too.
    assert [p["name"] for p in report["passes"]][:6] == [
        "StripDevices", "UnwrapCallLowered", "UndoManifestAlloc", "InferType", "CheckCompilable", "InlineGlobals"
    ]


def test_generated_c_compiles_without_warnings(compiled):
    _, outdir = compiled
    out = outdir / "out"
    for source in sorted((out / "src").glob("*.c")):
        assert compile_check(source.read_text(), ["-I", str(out / "include")]) == []


def test_artifacts_follow_the_outdir_layout(compiled):
    _, outdir = compiled
    out = outdir / "out"
    for path in ["metadata.json", "lowered.relay", "include/tvmgen_default.h", "libdefault.so", "default.tar"]:
        assert (out / path).is_file(), path
    with tarfile.open(out / "default.tar") as tar:
        names = set(tar.getnames())
        mlf = json.load(tar.extractfile("./metadata.json"))
    assert {"./metadata.json", "./src/relay.txt", "./codegen/host/include/tvmgen_default.h",
            "./codegen/host/src/default_lib0.c", "./parameters/default.params"} <= names
    assert mlf["version"] == 7 and mlf["modules"]["default"]["executors"] == ["aot"]


def test_identical_primitives_share_one_prim_func(tmp_path):
    result = relaycc("compile", str(models.path("shared_primitives")), "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "metadata.json").read_text())
    callees = [c["callee"] for c in report["calls"]]
    assert callees == ["tvmgen_default_fused_nn_dense_nn_relu"] * 2
    assert list(report["functions"]) == ["tvmgen_default_fused_nn_dense_nn_relu"]


def test_run_repeat_prints_timing_json(tmp_path):
    assert relaycc("compile", str(models.path("mlp")), "-o", str(tmp_path / "m")).returncode == 0
    np.savez(tmp_path / "in.npz", **models.mlp_inputs())
    result = relaycc("run", str(tmp_path / "m"), "--inputs", str(tmp_path / "in.npz"),
                     "-o", str(tmp_path / "o.npz"), "--repeat", "3")
    assert result.returncode == 0, result.stderr
    timing = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(timing) == {"median_us", "min_us"} and 0 < timing["min_us"] <= timing["median_us"]


def test_params_are_bound_as_constants(tmp_path):
    inputs = models.mlp_inputs()
    params = {k: inputs.pop(k) for k in ["w1", "b1", "w2", "b2"]}
    np.savez(tmp_path / "p.npz", **params)
    np.savez(tmp_path / "in.npz", **inputs)
    assert relaycc("compile", str(models.path("mlp")), "-o", str(tmp_path / "m"),
                   "--params", str(tmp_path / "p.npz")).returncode == 0
    report = json.loads((tmp_path / "m" / "metadata.json").read_text())
    assert report["memory"]["constant_bytes"] >= sum(v.nbytes for v in params.values())
    assert [t["name"] for t in report["interface"]["inputs"]] == ["x"]
    result = relaycc("run", str(tmp_path / "m"), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"))
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["out0"], models.mlp_numpy(**inputs, **params)[0],
                               rtol=1e-4, atol=1e-5)


def test_lower_writes_report_and_ir_without_c(tmp_path):
    result = relaycc("lower", str(models.path("mlp")), "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "metadata.json").is_file() and (tmp_path / "lowered.relay").is_file()
    assert not (tmp_path / "src").exists() and not (tmp_path / "libdefault.so").exists()


def test_lower_reports_shape_functions_for_dynamic_calls(tmp_path):
    model = tmp_path / "dyn.relay"
    model.write_text("""#[version = "0.0.5"]
def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(?, ?), float32] { @my_dyn(%a, %a) }
def @my_dyn(%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Extern=1) -> Tensor[(?, ?), float32] {
  add(%x, %y)
}
""")
    result = relaycc("lower", str(model), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    (call,) = json.loads((tmp_path / "out" / "metadata.json").read_text())["calls"]
    assert call["kind"] == "extern"
    assert call["metadata"]["prim_shape_fn_var"] == "shape_func_add"
    assert call["metadata"]["prim_shape_fn_states"] == [2, 2]


def test_compile_error_is_one_line_with_location(tmp_path):
    model = tmp_path / "bad.relay"
    model.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {\n  add(%x, %y)\n}\n')
    result = relaycc("compile", str(model), "-o", str(tmp_path / "out"))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{model}:3:")
    assert "Traceback" not in result.stderr


def test_run_reports_a_wrong_input_shape(tmp_path):
    assert relaycc("compile", str(models.path("mlp")), "-o", str(tmp_path / "m")).returncode == 0
    inputs = models.mlp_inputs()
    inputs["x"] = inputs["x"][:2]
    np.savez(tmp_path / "in.npz", **inputs)
    result = relaycc("run", str(tmp_path / "m"), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"))
    assert result.returncode == 1
    assert "input x: expected shape (8, 64), got (2, 64)" in result.stderr


def test_unknown_target_and_bad_config_are_reported(tmp_path):
    result = relaycc("compile", str(models.path("mlp")), "-o", str(tmp_path / "m"), "--target", "llvm")
    assert result.returncode == 1 and "unknown host target 'llvm'" in result.stderr
    config = tmp_path / "c.json"
    config.write_text('{"opt_levle": 2}')
    result = relaycc("compile", str(models.path("mlp")), "-o", str(tmp_path / "m"), "--config", str(config))
    assert result.returncode == 1 and "unknown config key 'opt_levle'" in result.stderr


def test_seed001_mlp_workspace_is_at_most_the_two_largest_live_buffers(tmp_path):
    assert relaycc("compile", str(models.path("mlp_seed001")), "-o", str(tmp_path)).returncode == 0
    memory = json.loads((tmp_path / "metadata.json").read_text())["memory"]
    buffers = memory["buffers"]
    steps = range(max(b["last_use"] for b in buffers) + 1)
    two_largest_live = max(
        sum(sorted((b["bytes"] for b in buffers if b["first_use"] <= s <= b["last_use"]), reverse=True)[:2])
        for s in steps
    )
    assert memory["workspace_bytes"] <= two_largest_live
