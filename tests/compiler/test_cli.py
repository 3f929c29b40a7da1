from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import cli
from tests.e2e.cli_runner import relaycc

REPO_ROOT = Path(__file__).resolve().parents[2]

DOUBLE = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(2, 2), float32]) {
  add(%x, %x)
}
"""

SUM_AND_PRODUCT = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  %1 = multiply(%x, %y);
  (%0, %1)
}
"""

UNKNOWN_OPERATOR = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(2, 2), float32]) {
  not_an_operator(%x)
}
"""


def run_relaycc(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`relaycc` in this process (cli.main with its output captured): a fresh interpreter per
    call imports the compiler again, about a second of CPU each. Errors and usage go through
    `run_relaycc_process`: the one-line message and exit status are the process's."""
    return relaycc(*args)


def run_relaycc_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "compiler", *map(str, args)],
        capture_output=True, text=True, env=env, timeout=120,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def save_npz(path: Path, **arrays: np.ndarray) -> Path:
    with open(path, "wb") as stream:
        np.savez(stream, **arrays)
    return path


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_interpret_writes_model_result_as_out0(tmp_path: Path) -> None:
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    model = write(tmp_path / "double.relay", DOUBLE)
    inputs = save_npz(tmp_path / "inputs.npz", x=x)
    outputs = tmp_path / "outputs.npz"

    result = run_relaycc("interpret", model, "--inputs", inputs, "-o", outputs)

    assert result.returncode == 0, result.stderr
    with np.load(outputs) as saved:
        assert saved.files == ["out0"]
        np.testing.assert_allclose(saved["out0"], x + x)
        assert saved["out0"].dtype == np.float32


def test_interpret_flattens_tuple_result_in_order(tmp_path: Path) -> None:
    x = np.array([1, 2, 3], dtype=np.float32)
    y = np.array([4, 5, 6], dtype=np.float32)
    model = write(tmp_path / "pair.relay", SUM_AND_PRODUCT)
    inputs = save_npz(tmp_path / "inputs.npz", x=x, y=y)
    outputs = tmp_path / "outputs.npz"

    result = run_relaycc("interpret", model, "--inputs", inputs, "-o", outputs)

    assert result.returncode == 0, result.stderr
    with np.load(outputs) as saved:
        assert saved.files == ["out0", "out1"]
        np.testing.assert_allclose(saved["out0"], x + y)
        np.testing.assert_allclose(saved["out1"], x * y)


def test_interpret_binds_params_as_constants(tmp_path: Path) -> None:
    x = np.array([1, 2, 3], dtype=np.float32)
    y = np.array([10, 20, 30], dtype=np.float32)
    model = write(tmp_path / "pair.relay", SUM_AND_PRODUCT)
    inputs = save_npz(tmp_path / "inputs.npz", x=x)
    params = save_npz(tmp_path / "params.npz", y=y)
    outputs = tmp_path / "outputs.npz"

    result = run_relaycc(
        "interpret", model, "--inputs", inputs, "--params", params, "-o", outputs
    )

    assert result.returncode == 0, result.stderr
    with np.load(outputs) as saved:
        np.testing.assert_allclose(saved["out0"], x + y)
        np.testing.assert_allclose(saved["out1"], x * y)


def test_interpret_reports_parse_error_with_file_line_and_column(tmp_path: Path) -> None:
    model = write(tmp_path / "bad.relay", UNKNOWN_OPERATOR)
    inputs = save_npz(tmp_path / "inputs.npz", x=np.zeros((2, 2), np.float32))

    result = run_relaycc_process("interpret", model, "--inputs", inputs, "-o", tmp_path / "o.npz")

    line = assert_one_line_error(result)
    assert re.search(r"bad\.relay:3:3\b", line), line
    assert "not_an_operator" in line
    assert not (tmp_path / "o.npz").exists()


def test_interpret_reports_missing_inputs_file(tmp_path: Path) -> None:
    model = write(tmp_path / "double.relay", DOUBLE)

    result = run_relaycc_process(
        "interpret", model, "--inputs", tmp_path / "absent.npz", "-o", tmp_path / "o.npz"
    )

    line = assert_one_line_error(result)
    assert "absent.npz" in line


def test_interpret_reports_missing_model_file(tmp_path: Path) -> None:
    inputs = save_npz(tmp_path / "inputs.npz", x=np.zeros((2, 2), np.float32))

    result = run_relaycc_process(
        "interpret", tmp_path / "absent.relay", "--inputs", inputs, "-o", tmp_path / "o.npz"
    )

    line = assert_one_line_error(result)
    assert "absent.relay" in line


def test_interpret_reports_inputs_file_that_is_not_npz(tmp_path: Path) -> None:
    model = write(tmp_path / "double.relay", DOUBLE)
    garbage = tmp_path / "inputs.npz"
    garbage.write_bytes(b"PK\x03\x04 this is not a zip archive")

    result = run_relaycc_process("interpret", model, "--inputs", garbage, "-o", tmp_path / "o.npz")

    line = assert_one_line_error(result)
    assert "inputs.npz" in line


def test_interpret_reports_model_input_missing_from_inputs(tmp_path: Path) -> None:
    model = write(tmp_path / "double.relay", DOUBLE)
    inputs = save_npz(tmp_path / "inputs.npz", y=np.zeros((2, 2), np.float32))

    result = run_relaycc_process("interpret", model, "--inputs", inputs, "-o", tmp_path / "o.npz")

    line = assert_one_line_error(result)
    assert re.search(r"\bx\b", line), line


def test_interpret_without_output_option_is_a_usage_error(tmp_path: Path) -> None:
    model = write(tmp_path / "double.relay", DOUBLE)

    result = run_relaycc("interpret", model, "--inputs", tmp_path / "inputs.npz")

    assert result.returncode == 2
    assert "-o" in result.stderr


def test_unknown_subcommand_is_a_usage_error() -> None:
    result = run_relaycc_process("frobnicate")

    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_load_arrays_returns_arrays_by_name(tmp_path: Path) -> None:
    path = save_npz(tmp_path / "a.npz", x=np.ones(3, np.int64), y=np.zeros((1, 2), np.float32))

    arrays = cli.load_arrays(path)

    assert sorted(arrays) == ["x", "y"]
    assert arrays["x"].dtype == np.int64
    assert arrays["y"].shape == (1, 2)


def test_load_arrays_rejects_a_bare_npy_file(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.ones(3))

    with pytest.raises(cli.InputError, match="not an .npz archive"):
        cli.load_arrays(path)


def test_save_outputs_writes_exactly_the_given_path(tmp_path: Path) -> None:
    path = tmp_path / "results"

    cli.save_outputs(path, [np.ones(2), np.zeros(1)])

    with np.load(path) as saved:
        assert saved.files == ["out0", "out1"]


def test_save_outputs_into_missing_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(cli.InputError, match="cannot write outputs"):
        cli.save_outputs(tmp_path / "nowhere" / "o.npz", [np.ones(2)])


def test_serve_starts_uvicorn_on_the_app_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    uvicorn = pytest.importorskip("uvicorn")
    from service.settings import get_settings

    calls: list[tuple[str, dict[str, object]]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append((app, kwargs)))
    # Registered with monkeypatch so that what `serve` writes there is undone afterwards.
    monkeypatch.setenv("RELAYCC_HOST", "127.0.0.1")
    monkeypatch.setenv("RELAYCC_PORT", "8000")
    monkeypatch.setenv("RELAYCC_WORKERS", "7")

    try:
        status = cli.main(["serve", "--host", "0.0.0.0", "--port", "9123", "--workers", "2"])
        settings = get_settings()
    finally:
        get_settings.cache_clear()

    assert status == 0
    # proxy_headers=False: uvicorn must not rewrite the client address from X-Forwarded-For;
    # the app decides whom to believe (RELAYCC_TRUSTED_PROXIES).
    # Idle connections outlive a load balancer's usual 60 s (RELAYCC_KEEP_ALIVE_SECONDS).
    expected = {"factory": True, "host": "0.0.0.0", "port": 9123, "proxy_headers": False, "timeout_keep_alive": 75}
    assert calls == [("service.app:create_app", expected)]
    assert settings.workers == 2


def test_serve_keeps_idle_connections_as_long_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    uvicorn = pytest.importorskip("uvicorn")
    from service.settings import get_settings

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append(kwargs))
    monkeypatch.setenv("RELAYCC_KEEP_ALIVE_SECONDS", "130")
    try:
        assert cli.main(["serve", "--port", "9124"]) == 0
    finally:
        get_settings.cache_clear()

    assert calls[0]["timeout_keep_alive"] == 130


def test_serve_with_json_logs_gives_uvicorn_a_log_config_in_that_format(monkeypatch: pytest.MonkeyPatch) -> None:
    uvicorn = pytest.importorskip("uvicorn")
    from service.log_format import uvicorn_log_config
    from service.settings import get_settings

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append(kwargs))
    monkeypatch.setenv("RELAYCC_LOG_FORMAT", "json")
    monkeypatch.setenv("RELAYCC_PORT", "8000")  # so that what `serve` writes there is undone
    try:
        assert cli.main(["serve", "--port", "9124"]) == 0
    finally:
        get_settings.cache_clear()

    assert calls[0]["log_config"] == uvicorn_log_config("json")


def test_serve_reports_invalid_port_on_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    uvicorn = pytest.importorskip("uvicorn")
    from service.settings import get_settings

    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: pytest.fail("server started"))
    monkeypatch.setenv("RELAYCC_PORT", "8000")

    try:
        status = cli.main(["serve", "--port", "70000"])
    finally:
        get_settings.cache_clear()

    assert status == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "port" in error


def test_compile_reports_a_missing_codegen_file_on_one_line(tmp_path: Path) -> None:
    model = tmp_path / "m.relay"
    model.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) { add(%x, %x) }\n')
    result = subprocess.run(
        [sys.executable, "-m", "compiler", "compile", str(model), "-o", str(tmp_path / "out"),
         "--codegen", str(tmp_path / "absent.json")],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: {tmp_path / 'absent.json'}: no such codegen file"


def test_ops_lists_operators_with_attributes_and_defaults() -> None:
    result = run_relaycc("ops")
    assert result.returncode == 0, result.stderr
    pool = next(line for line in result.stdout.splitlines() if line.startswith("nn.max_pool2d "))
    assert "OUT_ELEMWISE_FUSABLE" in pool and "pool_size," in pool and "strides=[1, 1]" in pool


def test_ops_json_gives_the_catalog_for_the_named_operators() -> None:
    import json

    result = run_relaycc("ops", "--json", "nn.conv2d", "exp")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)
    assert [e["name"] for e in entries] == ["exp", "nn.conv2d"]
    groups = next(a for a in entries[1]["attrs"] if a["name"] == "groups")
    assert groups["default"] == 1 and groups["required"] is False


def test_ops_with_an_unknown_name_is_a_one_line_error() -> None:
    assert "unknown operator 'nn.bogus'" in assert_one_line_error(run_relaycc_process("ops", "nn.bogus"))


def test_inspect_describes_inputs_outputs_operators_and_compilability(tmp_path: Path) -> None:
    result = run_relaycc("inspect", write(tmp_path / "m.relay", SUM_AND_PRODUCT))
    assert result.returncode == 0, result.stderr
    assert "  %x: Tensor[(3), float32]" in result.stdout
    assert "  out1: Tensor[(3), float32]" in result.stdout
    assert "  add x1" in result.stdout and "  multiply x1" in result.stdout
    assert "compiles to AOT C: yes" in result.stdout


def test_inspect_json_says_why_a_model_runs_in_the_interpreter_only(tmp_path: Path) -> None:
    import json

    model = write(tmp_path / "ref.relay", """#[version = "0.0.5"]
def @main(%c: bool, %x: Tensor[(2), float32]) {
  ref_read(ref(%x))
}
""")
    result = run_relaycc("inspect", "--json", model)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["compiles_to_c"] is False
    assert info["interpreter_only_because"].startswith(f"{model}:3:3: error:")
    assert info["inputs"][0] == {"name": "c", "shape": [], "dtype": "bool"}


def test_inspect_of_a_broken_model_is_its_located_error(tmp_path: Path) -> None:
    line = assert_one_line_error(run_relaycc_process("inspect", write(tmp_path / "bad.relay", UNKNOWN_OPERATOR)))
    assert re.search(r"bad\.relay:3:3: error: .*not_an_operator", line), line
SUM_LIST = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  match (Cons(%x, Cons(%x, Nil))) {
    Cons(%h, Cons(%g, _)) => add(%h, %g),
    _ => %x,
  }
}
"""


def test_compile_of_a_match_is_one_located_error_and_interpret_runs_it(tmp_path: Path) -> None:
    model = write(tmp_path / "model.relay", SUM_LIST)
    result = run_relaycc_process("compile", model, "-o", tmp_path / "out")
    line = assert_one_line_error(result)
    assert line == (
        f"{model}:4:3: error: the AOT executor cannot compile match expressions; run it with relaycc interpret"
    )
    x = np.array([1, 2], np.float32)
    inputs, outputs = save_npz(tmp_path / "in.npz", x=x), tmp_path / "out.npz"
    result = run_relaycc("interpret", model, "--inputs", inputs, "-o", outputs)
    assert result.returncode == 0, result.stderr
    with np.load(outputs) as saved:
        np.testing.assert_array_equal(saved["out0"], x + x)


def test_lowered_output_read_back_is_one_located_error_in_every_command(tmp_path: Path) -> None:
    model = write(tmp_path / "m.relay", SUM_AND_PRODUCT)
    assert run_relaycc("lower", model, "-o", tmp_path / "out").returncode == 0
    lowered = tmp_path / "out" / "lowered.relay"
    inputs = save_npz(tmp_path / "in.npz", x=np.ones(3, np.float32), y=np.ones(3, np.float32))
    for command in (["inspect"], ["compile", "-o", tmp_path / "again"], ["interpret", "--inputs", inputs, "-o", tmp_path / "o.npz"]):
        line = assert_one_line_error(run_relaycc_process(command[0], lowered, *command[1:]))
        assert re.match(rf"{re.escape(str(lowered))}:\d+:\d+: error: call_lowered refers to @tvmgen_default_fused_\w+, "
                        "a PrimFunc the text does not contain", line), line


CALL_LOWERED_OF_RELAY = """#[version = "0.0.5"]
def @tvmgen_default_fused_add(%p0: Tensor[(3), float32], %p1: Tensor[(3), float32], Primitive=1) -> Tensor[(3), float32] {
  add(%p0, %p1)
}
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) -> Tensor[(3), float32] {
  %0 = (%x, %y);
  %1 = call_lowered(@tvmgen_default_fused_add, %0, metadata={"relay_attrs"={__dict__={"Primitive"=1}}, "all_prim_fn_vars"=['tvmgen_default_fused_add']});
  multiply(%1, %x)
}
"""


def test_call_lowered_of_a_relay_function_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    model = write(tmp_path / "m.relay", CALL_LOWERED_OF_RELAY)
    x, y = np.array([1, -2, 3], np.float32), np.array([0.5, 4, -1], np.float32)
    inputs = save_npz(tmp_path / "in.npz", x=x, y=y)
    assert run_relaycc("compile", model, "-o", tmp_path / "out").returncode == 0
    for result in (
        run_relaycc("run", tmp_path / "out", "--inputs", inputs, "-o", tmp_path / "ran.npz"),
        run_relaycc("interpret", model, "--inputs", inputs, "-o", tmp_path / "interpreted.npz"),
    ):
        assert result.returncode == 0, result.stderr
    with np.load(tmp_path / "ran.npz") as ran, np.load(tmp_path / "interpreted.npz") as interpreted:
        np.testing.assert_array_equal(ran["out0"], (x + y) * x)
        np.testing.assert_array_equal(interpreted["out0"], (x + y) * x)


def test_a_module_after_manifest_alloc_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    from compiler.parser.metadata import encode_metadata

    model = write(tmp_path / "vm.relay", """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  %0 = fn (%p0: Tensor[(2, 3), float32], %p1: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    %1 = subtract(%p0, %p1);
    nn.relu(%1)
  };
  let %storage_0 = memory.alloc_storage(24i64, meta[relay.Constant][0], 64i64);
  let %tensor_0 = memory.alloc_tensor(%storage_0, 0i64, meta[relay.Constant][0], const_shape=None, assert_shape=[2, 3]);
  let %_0 = vm.invoke_tvm_op(%0, (%x, %y), (%tensor_0,), Primitive=1);
  let %_1 = memory.kill(%storage_0);
  multiply(%tensor_0, %x)
}
extern type Storage
#[metadata]
""" + encode_metadata([np.array([2, 3], dtype="int64")]))
    x = np.array([[1, -2, 3], [4, 0.5, -6]], np.float32)
    y = np.array([[0.5, 1, 3.5], [-1, 2, -8]], np.float32)
    inputs = save_npz(tmp_path / "in.npz", x=x, y=y)
    assert run_relaycc("compile", model, "-o", tmp_path / "out").returncode == 0
    for result in (
        run_relaycc("run", tmp_path / "out", "--inputs", inputs, "-o", tmp_path / "ran.npz"),
        run_relaycc("interpret", model, "--inputs", inputs, "-o", tmp_path / "interpreted.npz"),
    ):
        assert result.returncode == 0, result.stderr
    with np.load(tmp_path / "ran.npz") as ran, np.load(tmp_path / "interpreted.npz") as interpreted:
        np.testing.assert_array_equal(ran["out0"], np.maximum(x - y, 0) * x)
        np.testing.assert_array_equal(interpreted["out0"], np.maximum(x - y, 0) * x)


DYNAMIC_CNN = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(?, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32],
          %w2: Tensor[(10, 64), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.relu(%1);
  %3 = nn.max_pool2d(%2, pool_size=[2, 2], strides=[2, 2]);
  %4 = nn.batch_flatten(%3);
  %5 = nn.dense(%4, %w2, units=10);
  nn.softmax(%5)
}
"""


def test_lower_takes_a_cnn_with_an_unknown_batch(tmp_path: Path) -> None:
    import json

    model = write(tmp_path / "cnn.relay", DYNAMIC_CNN)
    result = run_relaycc("lower", model, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    lowered = (tmp_path / "out" / "lowered.relay").read_text()
    kernels = re.findall(r"^primfn (tvmgen_default_fused_\w+)\((.*)\) ->", lowered, re.M)
    assert len(kernels) == 5 and all(params.endswith("p0_dim0: int64") for _, params in kernels)
    report = json.loads((tmp_path / "out" / "metadata.json").read_text())
    text = json.dumps(report)
    assert text.count("prim_shape_fn_var") >= 5


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "compiler", "ops", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.read(10)
    proc.stdout.close()  # like `relaycc ops --json | head -c 10`
    _, stderr = proc.communicate(timeout=60)
    assert b"Traceback" not in stderr


@pytest.mark.parametrize("command", ["compile", "interpret"])
def test_a_model_that_is_not_utf8_is_one_error_at_its_first_bad_byte(tmp_path: Path, command: str) -> None:
    model = tmp_path / "m.relay"
    model.write_bytes(b'#[version = "0.0.5"]\ndef @main(%x: float32) {\n  %x \xff\n}\n')
    inputs = save_npz(tmp_path / "in.npz", x=np.float32(1))
    extra = ["--inputs", inputs] if command == "interpret" else []
    line = assert_one_line_error(run_relaycc_process(command, model, "-o", tmp_path / "out", *extra))
    assert line == f"{model}:3:6: error: cannot read {model}: not UTF-8 text (invalid start byte at byte 51)"


def test_run_without_inputs_fills_them_and_saves_what_the_model_computed(tmp_path: Path) -> None:
    model = write(tmp_path / "double.relay", DOUBLE)
    assert run_relaycc("compile", model, "-o", tmp_path / "out").returncode == 0

    ones = run_relaycc("run", tmp_path / "out", "--fill-mode", "ones", "-o", tmp_path / "ones.npz")
    made_up = run_relaycc("run", tmp_path / "out", "--repeat", "3", "--threads", "1")

    assert ones.returncode == 0, ones.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "ones.npz")["out0"], np.full((2, 2), 2.0, np.float32))
    assert made_up.returncode == 0, made_up.stderr
    assert set(json.loads(made_up.stdout)) == {"median_us", "min_us"}


@pytest.mark.parametrize(("flags", "complaint"), [
    (["--fill-mode", "zeros", "--inputs", "x.npz"], "--fill-mode makes up inputs"),
    (["--threads", "0"], "--threads must be at least 1"),
])
def test_run_refuses_contradictory_or_impossible_options(tmp_path: Path, flags: list[str], complaint: str) -> None:
    result = run_relaycc_process("run", tmp_path / "out", *flags)

    assert complaint in assert_one_line_error(result)


def test_run_with_profile_prints_every_kernel_and_the_whole_run(tmp_path: Path) -> None:
    model = write(tmp_path / "both.relay", SUM_AND_PRODUCT)
    assert run_relaycc("compile", model, "-o", tmp_path / "out").returncode == 0

    result = run_relaycc("run", tmp_path / "out", "--profile", "--repeat", "3", "--threads", "1")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["kernel", "shape", "calls", "us", "%", "GFLOP/s"]
    kernels = {line.split()[0] for line in lines[1:-2]}
    assert kernels == {"tvmgen_default_fused_add", "tvmgen_default_fused_multiply"}
    assert lines[-2].startswith("whole run (mean)")
    assert set(json.loads(lines[-1])) == {"median_us", "min_us"}


def test_run_with_profile_gives_a_products_shape_and_gflops(tmp_path: Path) -> None:
    model = write(tmp_path / "dense.relay", """#[version = "0.0.5"]
def @main(%x: Tensor[(64, 256), float32], %w: Tensor[(128, 256), float32]) {
  nn.relu(nn.dense(%x, %w, units=None))
}
""")
    assert run_relaycc("compile", model, "-o", tmp_path / "out").returncode == 0

    result = run_relaycc("run", tmp_path / "out", "--profile", "--threads", "1")

    assert result.returncode == 0, result.stderr
    (row,) = [line.split() for line in result.stdout.splitlines() if "nn_dense" in line]
    name, shape, calls, us, _, gflops = row
    assert shape == "64x128" and calls == "1"
    # 2 operations per multiply-add, over the kernel's own time.
    assert float(gflops) == pytest.approx(2 * 64 * 128 * 256 / (float(us) * 1e3), rel=0.02)


def test_help_starts_without_the_compiler_numpy_or_the_service() -> None:
    program = (
        "import sys\nfrom compiler.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'cffi', 'service', 'compiler')))"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert result.returncode == 0, result.stderr
    loaded = result.stdout.strip().splitlines()[-1]
    assert loaded == "['compiler', 'compiler.cli', 'compiler.diagnostics']"


def test_compile_keeps_objects_where_relaycc_cache_dir_says_and_nowhere_when_off(tmp_path: Path) -> None:
    model = write(tmp_path / "m.relay", DOUBLE)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HOME=str(tmp_path / "home"))
    env.pop("XDG_CACHE_HOME", None)
    for setting, out in (("off", "a"), (str(tmp_path / "cache"), "b")):
        env["RELAYCC_CACHE_DIR"] = setting
        result = subprocess.run([sys.executable, "-m", "compiler", "compile", str(model), "-o", str(tmp_path / out)],
                                capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 0, result.stderr
    assert not (tmp_path / "home").exists()
    assert len(list((tmp_path / "cache" / "objects").rglob("*.o"))) == 2  # the executor and the kernels


def _onnx_model(path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """A Gemm + Relu model whose input is named as Caffe2 exports named them."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3)).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["gpu_0/data_0", "fc.w", "fc.b"], ["h"], transB=1),
         helper.make_node("Relu", ["h"], ["y"])],
        "g",
        [helper.make_tensor_value_info("gpu_0/data_0", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [numpy_helper.from_array(w, "fc.w"), numpy_helper.from_array(b, "fc.b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path, w, b


def test_import_writes_relay_text_with_sanitized_names_that_interprets(tmp_path: Path) -> None:
    model, w, b = _onnx_model(tmp_path / "m.onnx")
    result = run_relaycc("import", model, "-o", tmp_path / "m.relay")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "m.relay").read_text()
    assert "%gpu_0_data_0: Tensor[(?, 3), float32]" in text
    assert "input %gpu_0_data_0: ONNX 'gpu_0/data_0'" in result.stderr
    x = np.arange(6, dtype="float32").reshape(2, 3)
    run = run_relaycc("interpret", tmp_path / "m.relay", "--inputs", save_npz(tmp_path / "in.npz", gpu_0_data_0=x),
                      "-o", tmp_path / "out.npz")
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["out0"], np.maximum(x @ w.T + b, 0), rtol=1e-5)


def test_import_params_out_keeps_initializers_as_params_and_saves_them(tmp_path: Path) -> None:
    model, w, b = _onnx_model(tmp_path / "m.onnx")
    result = run_relaycc("import", model, "-o", tmp_path / "m.relay", "--params-out", tmp_path / "p.npz")
    assert result.returncode == 0, result.stderr
    assert "%fc_w: Tensor[(4, 3), float32]" in (tmp_path / "m.relay").read_text()
    params = np.load(tmp_path / "p.npz")
    assert sorted(params.files) == ["fc_b", "fc_w"]
    np.testing.assert_array_equal(params["fc_w"], w)


def test_compile_takes_an_onnx_file_and_run_takes_inputs_by_onnx_or_relay_name(tmp_path: Path) -> None:
    model, w, b = _onnx_model(tmp_path / "m.onnx")
    result = run_relaycc("compile", model, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    interface = json.loads((tmp_path / "out" / "metadata.json").read_text())["interface"]
    assert interface["inputs"][0]["name"] == "gpu_0_data_0"
    assert interface["inputs"][0]["onnx_name"] == "gpu_0/data_0"
    x = np.arange(6, dtype="float32").reshape(2, 3)
    want = np.maximum(x @ w.T + b, 0)
    for name in ("gpu_0/data_0", "gpu_0_data_0"):
        inputs = tmp_path / "in.npz"
        with open(inputs, "wb") as stream:
            np.savez(stream, **{name: x})
        run = run_relaycc("run", tmp_path / "out", "--inputs", inputs, "-o", tmp_path / "o.npz")
        assert run.returncode == 0, run.stderr
        np.testing.assert_allclose(np.load(tmp_path / "o.npz")["out0"], want, rtol=1e-5)


def test_a_second_compile_of_an_onnx_model_comes_from_the_build_cache_with_its_dumps(tmp_path: Path) -> None:
    model, w, b = _onnx_model(tmp_path / "m.onnx")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), RELAYCC_CACHE_DIR=str(tmp_path / "cache"))
    for out in ("a", "b"):
        result = subprocess.run([sys.executable, "-m", "compiler", "compile", str(model), "-o", str(tmp_path / out),
                                 "--dump-code", "relay"], capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 0, result.stderr
    first, second = (json.loads((tmp_path / d / "metadata.json").read_text()) for d in ("a", "b"))
    assert "build_cache" not in first and second["build_cache"]["hit"] is True
    assert second["interface"]["inputs"][0]["onnx_name"] == "gpu_0/data_0"
    assert (tmp_path / "b" / "default.relay").read_text() == (tmp_path / "a" / "default.relay").read_text()
    x = np.arange(6, dtype="float32").reshape(2, 3)
    run = run_relaycc("run", tmp_path / "b", "--inputs", save_npz(tmp_path / "in.npz", **{"gpu_0/data_0": x}),
                      "-o", tmp_path / "out.npz")
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["out0"], np.maximum(x @ w.T + b, 0), rtol=1e-5)


_SERVED = (
    "import sys\nfrom compiler.cli import main\nrc = main(sys.argv[1:])\n"
    "print(rc, 'compiler.driver' in sys.modules)"
)


def _compile_reporting_imports(tmp_path: Path, *args: object) -> tuple[int, bool]:
    """`relaycc compile ARGS` in a fresh process with its own cache: the exit code, and whether
    the compiler's driver was imported (it is not when the front key served the build)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), RELAYCC_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-c", _SERVED, "compile", *map(str, args)], capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    code, imported = result.stdout.split()[-2:]
    return int(code), imported == "True"


def test_a_repeated_compile_is_served_by_its_command_line_without_importing_the_compiler(tmp_path: Path) -> None:
    model = write(tmp_path / "m.relay", DOUBLE)
    assert _compile_reporting_imports(tmp_path, model, "-o", tmp_path / "a") == (0, True)
    assert _compile_reporting_imports(tmp_path, model, "-o", tmp_path / "b") == (0, False)
    first, second = (json.loads((tmp_path / d / "metadata.json").read_text()) for d in ("a", "b"))
    assert "build_cache" not in first and second["build_cache"]["hit"] is True
    assert (tmp_path / "b" / "libdefault.so").read_bytes() == (tmp_path / "a" / "libdefault.so").read_bytes()
    # Another option, or the model's text changed, is another command line: the compiler runs.
    assert _compile_reporting_imports(tmp_path, model, "-o", tmp_path / "c", "--module-name", "other") == (0, True)
    write(tmp_path / "m.relay", DOUBLE.replace("add(%x, %x)", "multiply(%x, %x)"))
    assert _compile_reporting_imports(tmp_path, model, "-o", tmp_path / "d") == (0, True)
    assert "build_cache" not in json.loads((tmp_path / "d" / "metadata.json").read_text())


def test_a_compile_with_a_codegen_document_is_never_served_by_its_command_line(tmp_path: Path) -> None:
    model = write(tmp_path / "m.relay", DOUBLE)
    codegen = REPO_ROOT / "tests" / "codegens" / "toy_cg_thflow" / "toy_cg_thflow.json"
    for out in ("a", "b"):
        assert _compile_reporting_imports(tmp_path, model, "-o", tmp_path / out, "--codegen", codegen) == (0, True)
    assert json.loads((tmp_path / "b" / "metadata.json").read_text())["build_cache"]["hit"] is True


def test_compile_recognizes_onnx_by_its_first_byte_without_the_suffix(tmp_path: Path) -> None:
    model, _, _ = _onnx_model(tmp_path / "m.bin")
    result = run_relaycc("lower", model, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "fused_nn_dense" in (tmp_path / "out" / "lowered.relay").read_text()


def test_import_of_a_file_that_is_not_onnx_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\xff\xff garbage")
    line = assert_one_line_error(run_relaycc_process("import", bad, "-o", tmp_path / "m.relay"))
    assert "bad.onnx: not an ONNX model" in line


def test_import_of_unsupported_operators_lists_them_in_one_line(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["a"], name="nz"), helper.make_node("Det", ["x"], ["d"], name="det")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("a", TensorProto.INT64, None),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    line = assert_one_line_error(run_relaycc_process("compile", path, "-o", tmp_path / "out"))
    assert "NonZero (node 'nz', opset 17)" in line and "Det (node 'det', opset 17)" in line


def test_importing_the_driver_does_not_import_onnx() -> None:
    program = "import sys\nimport compiler.driver\nprint('onnx' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


CONV_NCHW = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 6, 6), float32], %w: Tensor[(4, 2, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]))
}
"""

BATCHED = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(?, 3), float32]) {
  multiply(%x, 2f)
}
"""


def test_pass_config_with_an_unknown_key_exits_non_zero_naming_it(tmp_path: Path) -> None:
    model = write(tmp_path / "m.relay", DOUBLE)
    line = assert_one_line_error(run_relaycc_process("compile", model, "-o", tmp_path / "out", "--pass-config", "relay.bogus=1"))
    assert "unknown pass_config key 'relay.bogus'" in line
    line = assert_one_line_error(run_relaycc_process("compile", model, "-o", tmp_path / "out",
                                             "--pass-config", "relay.FuseOps.max_depth=deep"))
    assert "'relay.FuseOps.max_depth' takes an integer, got 'deep'" in line


def test_a_config_file_with_an_unknown_pass_config_key_is_refused(tmp_path: Path) -> None:
    model = write(tmp_path / "m.relay", DOUBLE)
    config = write(tmp_path / "c.json", json.dumps({"pass_config": {"relay.bogus.key": 1}}))
    line = assert_one_line_error(run_relaycc_process("compile", model, "-o", tmp_path / "out", "--config", config))
    assert "unknown pass_config key 'relay.bogus.key'" in line


def test_compile_flags_reach_the_build(tmp_path: Path) -> None:
    model = write(tmp_path / "m.relay", SUM_AND_PRODUCT)
    result = run_relaycc("lower", model, "-o", tmp_path / "out", "--opt-level", "0",
                         "--pass-config", "tir.parallel=false", "--disabled-pass", "FoldConstant,DeadCodeElimination")
    assert result.returncode == 0, result.stderr
    passes = [p["name"] for p in json.loads((tmp_path / "out" / "metadata.json").read_text())["passes"]]
    # opt level 0: nothing fuses, so each operator is a kernel of its own.
    calls = json.loads((tmp_path / "out" / "metadata.json").read_text())["calls"]
    assert len(calls) == 2 and "FoldConstant" not in passes and "DeadCodeElimination" not in passes
    line = assert_one_line_error(run_relaycc_process("lower", model, "-o", tmp_path / "o2", "--opt-level", "9"))
    assert "opt level must be between 0 and 4, got 9" in line


def test_desired_layout_nhwc_gives_the_outputs_of_the_nchw_build(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 2, 6, 6)).astype("float32"), rng.standard_normal((4, 2, 3, 3)).astype("float32")
    model = write(tmp_path / "conv.relay", CONV_NCHW)
    inputs = save_npz(tmp_path / "in.npz", x=x, w=w)
    for layout in ("NCHW", "NHWC"):
        out = tmp_path / layout
        assert run_relaycc("compile", model, "-o", out, "--desired-layout", layout).returncode == 0
        result = run_relaycc("run", out, "--inputs", inputs, "-o", tmp_path / f"{layout}.npz")
        assert result.returncode == 0, result.stderr
    assert "layout_transform" in (tmp_path / "NHWC" / "lowered.relay").read_text()
    with np.load(tmp_path / "NCHW.npz") as nchw, np.load(tmp_path / "NHWC.npz") as nhwc:
        np.testing.assert_allclose(nhwc["out0"], nchw["out0"], rtol=1e-5, atol=1e-5)


def test_a_model_with_an_unknown_batch_compiled_with_input_shapes_runs(tmp_path: Path) -> None:
    model = write(tmp_path / "b.relay", BATCHED)
    result = run_relaycc("compile", model, "-o", tmp_path / "out", "--input-shapes", "x:[2,3]")
    assert result.returncode == 0, result.stderr
    interface = json.loads((tmp_path / "out" / "metadata.json").read_text())["interface"]
    assert interface["inputs"][0]["shape"] == [2, 3] and interface["dynamic"] is False
    x = np.arange(6, dtype="float32").reshape(2, 3)
    result = run_relaycc("run", tmp_path / "out", "--inputs", save_npz(tmp_path / "in.npz", x=x), "-o", tmp_path / "o.npz")
    assert result.returncode == 0, result.stderr
    with np.load(tmp_path / "o.npz") as saved:
        np.testing.assert_array_equal(saved["out0"], 2 * x)
    line = assert_one_line_error(run_relaycc_process("compile", model, "-o", tmp_path / "o2", "--input-shapes", "y:[2,3]"))
    assert "--input-shapes names 'y', which is not an input of @main" in line


def test_dump_code_writes_the_requested_forms_beside_the_artifacts(tmp_path: Path) -> None:
    model = write(tmp_path / "m.relay", DOUBLE)
    result = run_relaycc("compile", model, "-o", tmp_path / "out", "--dump-code", "relay,c")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "default.relay").is_file() and (tmp_path / "out" / "default.c").is_file()
    assert not (tmp_path / "out" / "default.tir").exists()
    line = assert_one_line_error(run_relaycc_process("compile", model, "-o", tmp_path / "o2", "--dump-code", "tri"))
    assert "--dump-code 'tri' is not one of relay, tir, c (did you mean 'tir'?)" in line


def test_run_reads_inputs_from_stdin_and_writes_outputs_to_stdout(tmp_path: Path) -> None:
    import io

    model = write(tmp_path / "m.relay", DOUBLE)
    assert run_relaycc("compile", model, "-o", tmp_path / "out").returncode == 0
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    buffer = io.BytesIO()
    np.savez(buffer, x=x)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    for source in ("-", "/dev/stdin"):
        done = subprocess.run([sys.executable, "-m", "compiler", "run", str(tmp_path / "out"), "--inputs", source,
                               "-o", "-"], input=buffer.getvalue(), capture_output=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        with np.load(io.BytesIO(done.stdout)) as saved:
            np.testing.assert_array_equal(saved["out0"], x + x)


def test_outputs_to_stdout_cannot_share_it_with_the_timing_line(tmp_path: Path) -> None:
    # Refused before anything is loaded: no build is needed to see it.
    line = assert_one_line_error(run_relaycc_process("run", tmp_path / "out", "-o", "-", "--repeat", "2"))
    assert "cannot be given with --repeat" in line


def test_run_saves_out0_out1_as_the_metadata_names_them(tmp_path: Path) -> None:
    model = write(tmp_path / "pair.relay", SUM_AND_PRODUCT)
    assert run_relaycc("compile", model, "-o", tmp_path / "out").returncode == 0
    result = run_relaycc("run", tmp_path / "out", "--fill-mode", "ones", "-o", tmp_path / "o.npz")
    assert result.returncode == 0, result.stderr
    interface = json.loads((tmp_path / "out" / "metadata.json").read_text())["interface"]
    with np.load(tmp_path / "o.npz") as saved:
        assert saved.files == [t["name"] for t in interface["outputs"]] == ["out0", "out1"]
    assert [t["c_name"] for t in interface["outputs"]] == ["output0", "output1"]  # the header's struct fields


def test_config_lists_the_registry() -> None:
    result = run_relaycc("config")
    assert result.returncode == 0, result.stderr
    assert "relay.FuseOps.max_depth" in result.stdout and "opt_level: 0 to 4" in result.stdout
    listed = json.loads(run_relaycc("config", "--json").stdout)
    assert any(e["name"] == "relay.backend.use_auto_scheduler" for e in listed["pass_config"])


def test_every_option_of_every_command_has_help() -> None:
    import argparse

    parser = cli._build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [
        f"{name} {action.dest}"
        for name, sub in commands.choices.items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert missing == []
    for sub in commands.choices.values():
        assert "usage: relaycc" in sub.format_help()  # bracketed metavars must not break the layout


def test_a_model_without_main_is_one_located_line_for_compile_and_inspect(tmp_path: Path) -> None:
    model = tmp_path / "nomain.relay"
    model.write_text('#[version = "0.0.5"]\ndef @f(%x: Tensor[(2), float32]) { %x }\n')

    for args in (("compile", model, "-o", tmp_path / "out"), ("inspect", model)):
        line = assert_one_line_error(run_relaycc_process(*args))
        assert line.startswith(f"{model}:2:1: error: the module has no @main (it defines @f)"), line


CONV_MODEL = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 12, 12), float32], %w: Tensor[(16, 8, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]))
}
"""


def test_tune_writes_records_that_compile_applies_and_the_build_cache_tells_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAYCC_CACHE_DIR", str(tmp_path / "cache"))  # the records it stores stay in this test
    model = write(tmp_path / "conv.relay", CONV_MODEL)
    params = save_npz(tmp_path / "params.npz",
                      w=np.random.default_rng(1).standard_normal((16, 8, 3, 3)).astype(np.float32))
    records = tmp_path / "records.json"

    tuned = run_relaycc("tune", model, "--params", params, "-o", records, "--repeat", "1", "--threads", "1")

    assert tuned.returncode == 0, tuned.stderr
    assert "kernels changed; records in" in tuned.stdout
    document = json.loads(records.read_text())
    (record,) = document["records"]
    assert record["kernel"] in tuned.stdout
    chosen = record["schedule"]
    other = tmp_path / "other.json"
    record["schedule"] = {"tile_rows": 2}
    other.write_text(json.dumps(document))
    sources = []
    for name, path in (("a", records), ("b", other), ("c", other)):
        built = run_relaycc("compile", model, "--params", params, "--tuning-records", path, "-o", tmp_path / name)
        assert built.returncode == 0, built.stderr
        sources.append("".join(p.read_text() for p in sorted((tmp_path / name / "src").glob("*.c"))))
    assert "float acc[32]" in sources[1] and sources[2] == sources[1]
    assert ("float acc[32]" in sources[0]) == (chosen == {"tile_rows": 2})


def kernel_sources(outdir: Path) -> str:
    return "".join(p.read_text() for p in sorted((outdir / "src").glob("*.c")))


def test_records_tune_stored_for_this_machine_are_applied_by_later_builds_unless_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAYCC_CACHE_DIR", str(tmp_path / "cache"))
    model = write(tmp_path / "conv.relay", CONV_MODEL)
    params = save_npz(tmp_path / "params.npz",
                      w=np.random.default_rng(1).standard_normal((16, 8, 3, 3)).astype(np.float32))
    before = run_relaycc("compile", model, "--params", params, "-o", tmp_path / "before")
    assert before.returncode == 0, before.stderr

    tuned = run_relaycc("tune", model, "--params", params, "--repeat", "1", "--threads", "1")
    assert tuned.returncode == 0, tuned.stderr
    (store,) = (tmp_path / "cache" / "tuning").glob("*.json")
    assert f"records in {store}" in tuned.stdout
    document = json.loads(store.read_text())
    (record,) = document["records"]
    assert record["threads"] == 1
    # A schedule the rules never take, so the stored record shows in the kernel's C.
    record["schedule"] = {"tile_rows": 2}
    store.write_text(json.dumps(document))

    for name, flags in (("after", ()), ("rules", ("--no-stored-records",))):
        built = run_relaycc("compile", model, "--params", params, *flags, "-o", tmp_path / name)
        assert built.returncode == 0, built.stderr
    assert "float acc[32]" in kernel_sources(tmp_path / "after")
    assert kernel_sources(tmp_path / "rules") == kernel_sources(tmp_path / "before")
    assert "float acc[32]" not in kernel_sources(tmp_path / "before")


def test_a_damaged_store_is_ignored_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from compiler.runtime.tuning_store import store_path

    monkeypatch.setenv("RELAYCC_CACHE_DIR", str(tmp_path / "cache"))
    model = write(tmp_path / "double.relay", DOUBLE)
    store = store_path(tmp_path / "cache")
    store.parent.mkdir(parents=True)
    store.write_text(json.dumps({"format": "relaycc.tuning/1", "records": [{"key": "nothex"}]}))

    built = run_relaycc("compile", model, "-o", tmp_path / "out")

    assert built.returncode == 0, built.stderr
    assert "warning: stored tuning records ignored" in built.stderr and "records[0]" in built.stderr


def test_tune_without_a_cache_directory_needs_an_output_file(tmp_path: Path) -> None:
    model = write(tmp_path / "conv.relay", CONV_MODEL)
    env_off = dict(os.environ, PYTHONPATH=str(REPO_ROOT), RELAYCC_CACHE_DIR="off")

    result = subprocess.run([sys.executable, "-m", "compiler", "tune", str(model)], capture_output=True, text=True,
                            env=env_off, timeout=120)

    assert "give -o RECORDS.json" in assert_one_line_error(result)


def test_compile_with_a_missing_tuning_records_file_is_a_one_line_error(tmp_path: Path) -> None:
    model = write(tmp_path / "double.relay", DOUBLE)

    result = run_relaycc_process("compile", model, "--tuning-records", tmp_path / "none.json", "-o", tmp_path / "out")

    assert "none.json" in assert_one_line_error(result)


def test_tune_imports_an_onnx_model_and_compile_of_that_file_applies_its_stored_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnx import TensorProto, helper, numpy_helper

    monkeypatch.setenv("RELAYCC_CACHE_DIR", str(tmp_path / "cache"))
    w = np.random.default_rng(2).standard_normal((16, 8, 3, 3)).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])], [numpy_helper.from_array(w, "w")])
    model = tmp_path / "conv.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())

    tuned = run_relaycc("tune", model, "--repeat", "1", "--threads", "1")
    assert tuned.returncode == 0, tuned.stderr
    (store,) = (tmp_path / "cache" / "tuning").glob("*.json")
    document = json.loads(store.read_text())
    (record,) = document["records"]
    record["schedule"] = {"tile_rows": 2}
    store.write_text(json.dumps(document))
    built = run_relaycc("compile", model, "-o", tmp_path / "out")

    assert built.returncode == 0, built.stderr
    assert "float acc[32]" in kernel_sources(tmp_path / "out")
