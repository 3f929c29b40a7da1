import numpy as np
import pytest

from compiler.diagnostics import InputError
from compiler.driver import BuildOptions, build
from compiler.runtime.module import CompiledModule

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  (%0, exp(%0))
}"""


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("m")
    build(MODEL, outdir, BuildOptions())
    return CompiledModule(outdir)


def test_run_returns_every_output_and_timings(module):
    x = np.arange(6, dtype="float32").reshape(2, 3)
    y = np.array([1, 2, 3], "float32")
    result = module.run({"x": x, "y": y}, repeat=4)
    np.testing.assert_allclose(result.outputs[0], x + y)
    np.testing.assert_allclose(result.outputs[1], np.exp(x + y), rtol=1e-6)
    assert len(result.times_us) == 4 and result.min_us <= result.median_us


def test_inputs_are_checked_before_calling_c(module):
    x = np.zeros((2, 3), "float32")
    with pytest.raises(InputError, match="missing input 'y'"):
        module.run({"x": x})
    with pytest.raises(InputError, match="expected dtype float32, got int32"):
        module.run({"x": x, "y": np.zeros(3, "int32")})
    with pytest.raises(InputError, match="unknown input 'z'"):
        module.run({"x": x, "y": np.zeros(3, "float32"), "z": x})
    with pytest.raises(InputError, match="repeat must be at least 1"):
        module.run({"x": x, "y": np.zeros(3, "float32")}, repeat=0)


def test_non_contiguous_inputs_are_accepted(module):
    x = np.arange(12, dtype="float32").reshape(3, 4)[:2, :3]
    y = np.ones(3, "float32")
    np.testing.assert_allclose(module.run({"x": x, "y": y}).outputs[0], x + y)


def test_a_directory_from_lower_cannot_be_run(tmp_path):
    build(MODEL, tmp_path, BuildOptions(), executor=False)
    with pytest.raises(InputError, match="relaycc lower"):
        CompiledModule(tmp_path)


def test_profile_times_each_kernel_call_in_execution_order_and_gives_the_same_outputs(module):
    x = np.arange(6, dtype="float32").reshape(2, 3)
    y = np.array([1, 2, 3], "float32")

    profile = module.profile({"x": x, "y": y}, repeat=3)

    np.testing.assert_allclose(profile.result.outputs[1], np.exp(x + y), rtol=1e-6)
    lowered_calls = [c["callee"] for c in module.report["calls"] if c["kind"] == "prim_func"]
    assert profile.kernels == lowered_calls
    assert all(us >= 0 for us in profile.kernel_us)
    assert {row["kernel"] for row in profile.rows()} == set(lowered_calls)


def test_a_run_after_profiling_no_longer_counts(module):
    x, y = np.zeros((2, 3), "float32"), np.zeros(3, "float32")
    module.profile({"x": x, "y": y})

    module.run({"x": x, "y": y})  # would write through a dangling counter array if still set


def test_a_model_with_unknown_dims_times_its_kernels_too(tmp_path):
    text = MODEL.replace("(2, 3)", "(?, 3)")
    build(text, tmp_path, BuildOptions())
    module = CompiledModule(tmp_path)

    profile = module.profile({"x": np.ones((5, 3), "float32"), "y": np.zeros(3, "float32")}, repeat=2)

    lowered_calls = [call["callee"] for call in module.report["calls"]]
    assert profile.kernels == lowered_calls and all(us >= 0 for us in profile.kernel_us)
    assert profile.result.outputs[0].shape[0] == 5
    # A `?`-shaped kernel has no static operation count: its rows give no GFLOP/s.
    assert all(row["gflops"] is None for row in profile.rows(module.report["functions"]))
