from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import numpy as np

from compiler.diagnostics import ParseError
from compiler.runtime.build import BuildError
from service.arrays import decode_npz, encode_npz
from service.jobs.work import BUILDING_C, TIMES_KEY, compile_request, describe_error, run_module
from service.jobs.normalize import checked_options, normal_form
from tests.service.support import SMALL_RELAY


def normal(relay: str = SMALL_RELAY) -> dict[str, object]:
    return normal_form(relay, checked_options("c", "default", {}), {})


def test_compile_request_reports_each_finished_pass_then_builds_the_outdir(tmp_path: Path) -> None:
    seen: list[dict[str, object]] = []

    timings = compile_request(normal(), {}, tmp_path / "out", lambda p: seen.append(dict(p)))

    total = seen[0]["total"]
    assert seen[0] == {"stage": "compiling", "done": 0, "total": total}
    passes = [p for p in seen if "last_pass" in p]
    assert [p["passes_done"] for p in passes] == list(range(1, len(passes) + 1))
    assert timings["passes"] == len(passes)
    assert passes[-1]["last_pass"] == "LowerTE" and passes[-1]["done"] == total
    assert (tmp_path / "out" / "libdefault.so").is_file()


def test_compile_request_counts_the_planned_passes_then_the_c_files(tmp_path: Path) -> None:
    seen: list[dict[str, object]] = []

    compile_request(normal(), {}, tmp_path / "out", lambda p: seen.append(dict(p)))

    stages = [p["stage"] for p in seen]
    first_c = stages.index(BUILDING_C)
    assert set(stages[:first_c]) == {"compiling"} and set(stages[first_c:]) == {BUILDING_C}
    for part in (seen[:first_c], seen[first_c:]):
        done = [p["done"] for p in part]
        assert done == sorted(done) and done[0] == 0 and done[-1] == part[0]["total"]
        assert {p["total"] for p in part} == {part[0]["total"]}
    # The executor and a kernel file at least: a bar for gcc has more than one step.
    assert seen[first_c]["total"] == len(list((tmp_path / "out" / "src").glob("*.c"))) >= 2


def test_run_module_returns_outputs_and_one_latency_per_repeat(tmp_path: Path) -> None:
    compile_request(normal(), {}, tmp_path, lambda p: None)
    x = np.arange(6, dtype="float32").reshape(2, 3) - 3
    y = np.ones((2, 3), "float32")

    arrays = decode_npz(run_module(tmp_path, encode_npz({"x": x, "y": y}), repeat=4), "result", 1 << 20)

    np.testing.assert_array_equal(arrays["out0"], np.maximum(x + y, 0))
    assert arrays[TIMES_KEY].shape == (4,)


def test_describe_error_gives_a_located_problem_for_a_parse_error() -> None:
    try:
        compile_request(normal("def @main( {"), {}, Path("/nonexistent"), lambda p: None)
    except ParseError as err:
        problem = describe_error(err)
    assert problem["status"] == 400 and problem["line"] == 1


def test_describe_error_calls_an_out_of_memory_c_compiler_a_memory_limit() -> None:
    problem = describe_error(BuildError("cc1 failed", output="cc1: out of memory allocating 4096 bytes"))

    assert problem["type"].endswith("/memory-limit")


def test_describe_error_names_a_bug_by_file_and_line_but_not_its_directory() -> None:
    try:
        {}["missing"]
    except KeyError as err:
        problem = describe_error(err)

    assert problem["type"].endswith("/internal-error")
    assert "test_work.py:" in str(problem["detail"]) and "/tests/" not in str(problem["detail"])


def test_describe_error_keeps_the_problem_of_a_store_that_filled_up_under_a_forked_build() -> None:
    from service.store.module_store import writing

    try:
        with writing("storing the change"):
            raise OSError(errno.ENOSPC, "No space left on device")
    except Exception as err:  # noqa: BLE001
        problem = describe_error(err)

    assert problem["type"].endswith("/store-unavailable") and "full" in str(problem["detail"])


def test_describe_error_calls_a_full_output_directory_store_unavailable_not_a_bug() -> None:
    written = describe_error(OSError(errno.ENOSPC, "No space left on device"))
    compiled = describe_error(BuildError("gcc failed", output="lib0.c: fatal error: No space left on device"))

    assert written["type"].endswith("/store-unavailable") and compiled["type"].endswith("/store-unavailable")


def test_compile_request_with_record_passes_stores_the_text_after_each_pass(tmp_path: Path) -> None:
    import json

    request = normal_form(SMALL_RELAY, checked_options("c", "default", {}), {}, record_passes=True)
    compile_request(request, {}, tmp_path / "out", lambda p: None)

    records = json.loads((tmp_path / "out" / "passes.json").read_text())
    assert [r["pass"] for r in records][-3:] == ["FuseOps", "LabelOps", "LowerTE"]
    assert "call_lowered" in records[-1]["text"]
    assert not (tmp_path / "plain").exists()
    compile_request(normal(), {}, tmp_path / "plain", lambda p: None)
    assert not (tmp_path / "plain" / "passes.json").exists()


def test_run_module_with_profile_adds_each_kernel_calls_name_and_time(tmp_path: Path) -> None:
    from service.jobs.work import profile_of

    compile_request(normal(), {}, tmp_path, lambda p: None)
    x = np.ones((2, 3), "float32")

    arrays = decode_npz(run_module(tmp_path, encode_npz({"x": x, "y": x}), repeat=2, profile=True), "result", 1 << 20)

    np.testing.assert_array_equal(arrays["out0"], np.full((2, 3), 2, "float32"))
    profile = profile_of(arrays)
    assert profile is not None
    kernels, times = profile
    assert kernels == ["tvmgen_default_fused_add_nn_relu"] and len(times) == 1 and times[0] >= 0


def test_profile_of_refuses_an_entry_run_module_did_not_write() -> None:
    import pytest

    from service.jobs.work import PROFILE_KEY, profile_of

    assert profile_of({"out0": np.zeros(1)}) is None
    for bad in (b'{"kernels": ["a"], "us": []}', b'{"kernels": [1], "us": [1.0]}', b"not json"):
        with pytest.raises(ValueError, match="profile"):
            profile_of({PROFILE_KEY: np.frombuffer(bad, dtype=np.uint8)})


def test_importing_the_job_functions_leaves_the_parser_and_passes_to_compiles() -> None:
    # Every sandboxed run imports this module in a fresh interpreter: the parser, the ops and
    # the passes (half a second of imports) are a compile's, not a run's.
    code = ("import sys, service.jobs.work\n"
            "print(sorted(m for m in ('compiler.parser', 'compiler.passes', 'compiler.ops') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]"
