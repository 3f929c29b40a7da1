"""Models with `?` dims compiled once and run at many shapes (compiler/backend/aot_dynamic.py)."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from compiler.diagnostics import InputError
from compiler.driver import build
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

MODELS = Path(__file__).parents[2] / "models" / "dynamic"


def random_inputs(module: CompiledModule, unknown: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Every input at its declared shape, each `?` dim set to `unknown`."""
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal([unknown if d < 0 else d for d in t.shape]).astype(t.dtype)
            for t in module.inputs}


def compile_model(name: str, outdir: Path) -> tuple[str, CompiledModule]:
    text = (MODELS / f"{name}.relay").read_text()
    build(text, outdir)
    return text, CompiledModule(outdir)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, CompiledModule]:
    """The MLP with a `?` batch, built once for the tests that only run it."""
    return compile_model("mlp_unknown_batch", tmp_path_factory.mktemp("mlp_unknown_batch"))


def assert_matches_interpreter(text: str, module: CompiledModule, unknown: int) -> None:
    inputs = random_inputs(module, unknown, seed=unknown)
    got = module.run(inputs).outputs
    want = run_main(parse(text), inputs)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_mlp_compiled_once_runs_every_batch_like_the_interpreter(mlp):
    text, module = mlp
    assert module.dynamic
    for n in (1, 3, 64):
        assert_matches_interpreter(text, module, n)


@pytest.mark.parametrize(("model", "sizes"), [
    ("cnn_unknown_batch", (1, 3, 64)),
    ("attention_unknown_length", (1, 7, 128)),
])
def test_model_compiled_once_runs_every_size_like_the_interpreter(model, sizes, tmp_path):
    text, module = compile_model(model, tmp_path)
    assert module.dynamic
    for n in sizes:
        assert_matches_interpreter(text, module, n)


def test_empty_batch_gives_an_empty_output(mlp):
    _, module = mlp
    (out,) = module.run(random_inputs(module, 0)).outputs
    assert out.shape == (0, 4)


def test_input_of_a_shape_the_model_cannot_take_names_input_and_declared_shape(mlp):
    _, module = mlp
    inputs = random_inputs(module, 2)
    inputs["x"] = np.zeros((2, 7), "float32")
    with pytest.raises(InputError, match=r"input x: expected shape \(\?, 8\), got \(2, 7\)"):
        module.run(inputs)


def test_report_shows_symbolic_interface_shape_functions_and_the_arena(mlp):
    _, module = mlp
    report = module.report
    assert report["interface"]["dynamic"] is True
    assert report["interface"]["inputs"][0]["shape"] == [-1, 8]
    assert report["interface"]["outputs"][0]["shape"] == [-1, 4]
    arena = report["memory"]["arena"]
    first = arena["buffers"][0]
    assert first["type"] == "float32[?, 16]"
    assert first["bytes"] == "4 * sid_0.shape[0] * 16"
    assert first["shape_func"].startswith("tvmgen_default_shape_func_nn_dense")
    dense_calls = [c for c in report["calls"] if "nn_dense" in c["callee"]]
    assert dense_calls and all("prim_shape_fn_var" in str(c) for c in dense_calls)


def test_static_model_keeps_the_static_entry(tmp_path):
    text = (MODELS / "mlp_unknown_batch.relay").read_text().replace("Tensor[(?, 8)", "Tensor[(2, 8)")
    build(text, tmp_path)
    module = CompiledModule(tmp_path)
    assert not module.dynamic
    header = (tmp_path / "include" / "tvmgen_default.h").read_text()
    assert "DLTensor" not in header and "TVMGEN_DEFAULT_WORKSPACE_SIZE" in header


C_DRIVER = r"""
#include <stdio.h>
#include "tvmgen_default.h"

static DLTensor tensor(void* data, int32_t ndim, int64_t* shape) {
  DLTensor t = {data, {kDLCPU, 0}, ndim, {kDLFloat, 32, 1}, shape, NULL, 0};
  return t;
}

int main(void) {
  static float x[3 * 8], w[16 * 8], b[16], w2[4 * 16], given[3 * 4];
  int64_t x_shape[] = {3, 8}, w_shape[] = {16, 8}, b_shape[] = {16}, w2_shape[] = {4, 16};
  for (int i = 0; i < 3 * 8; ++i) x[i] = (float)(i % 5) - 2.0f;
  for (int i = 0; i < 16 * 8; ++i) w[i] = (float)(i % 7) * 0.1f;
  for (int i = 0; i < 4 * 16; ++i) w2[i] = (float)(i % 3) * 0.2f;
  DLTensor tx = tensor(x, 2, x_shape), tw = tensor(w, 2, w_shape), tb = tensor(b, 1, b_shape);
  DLTensor tw2 = tensor(w2, 2, w2_shape);
  struct tvmgen_default_inputs inputs = {&tx, &tw, &tb, &tw2};

  /* data NULL: the entry allocates the output and writes its shape */
  int64_t out_shape[2] = {0, 0};
  DLTensor out = tensor(NULL, 2, out_shape);
  struct tvmgen_default_outputs outputs = {&out};
  int32_t status = tvmgen_default_run(&inputs, &outputs);
  float sum = 0.0f;
  for (int i = 0; status == 0 && i < 3 * 4; ++i) sum += ((float*)out.data)[i];
  printf("allocated %d %lld %lld %.3f\n", status, (long long)out_shape[0], (long long)out_shape[1], sum);
  tvmgen_default_free(out.data);

  /* the caller's buffer of the right shape */
  int64_t given_shape[] = {3, 4};
  DLTensor out2 = tensor(given, 2, given_shape);
  outputs.output = &out2;
  printf("given %d\n", tvmgen_default_run(&inputs, &outputs));

  /* a caller's buffer of the wrong shape, then an input of the wrong shape */
  given_shape[0] = 2;
  printf("wrong output %d\n", tvmgen_default_run(&inputs, &outputs));
  x_shape[1] = 7;
  printf("wrong input %d\n", tvmgen_default_run(&inputs, &outputs));

  /* the arena this thread kept for its next run is freed now, and a later run makes another */
  tvmgen_default_release();
  x_shape[1] = 8;
  given_shape[0] = 3;
  printf("after release %d\n", tvmgen_default_run(&inputs, &outputs));
  tvmgen_default_release();
  return 0;
}
"""


def test_c_program_runs_the_entry_as_the_header_documents(mlp, tmp_path):
    out = mlp[1].outdir
    header = (out / "include" / "tvmgen_default.h").read_text()
    assert "tvmgen_default_free()" in header and "-2 when an input" in header
    assert "tvmgen_default_release()" in header
    (tmp_path / "main.c").write_text(C_DRIVER)
    exe = tmp_path / "main"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-o", str(exe), str(tmp_path / "main.c"),
                    f"-I{out / 'include'}", str(out / "libdefault.so"), f"-Wl,-rpath,{out}"], check=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    status, rows, cols, total = lines[0].split()[1:]
    assert (status, rows, cols) == ("0", "3", "4")
    assert float(total) == pytest.approx(3.0, abs=1e-3)  # three softmax rows
    assert lines[1:] == ["given 0", "wrong output -3", "wrong input -2", "after release 0"]


RESIDUAL = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 4), float32], %y: Tensor[(?, 4), float32]) {
  %0 = nn.relu(%x);
  add(%0, %y)
}
"""


def test_add_of_two_unknown_batches_runs_when_they_agree_and_fails_when_not(tmp_path):
    build(RESIDUAL, tmp_path)
    module = CompiledModule(tmp_path)
    x, y = np.arange(12, dtype="float32").reshape(3, 4) - 5, np.ones((3, 4), "float32")
    (out,) = module.run({"x": x, "y": y}).outputs
    np.testing.assert_array_equal(out, np.maximum(x, 0) + y)
    # Batches 1 and 3 would broadcast; the kernel was built for one shared batch, so the run
    # fails rather than answer wrongly.
    with pytest.raises(InputError, match="returned -5: the inputs' shapes conform one by one but not together"):
        module.run({"x": x[:1], "y": y})


def test_reshape_to_a_static_shape_refuses_a_batch_with_other_element_count(tmp_path):
    build('#[version = "0.0.5"]\ndef @main(%x: Tensor[(?, 1, 1, 4), float32]) {\n'
          "  reshape(nn.relu(%x), newshape=[1, 4])\n}\n", tmp_path)
    module = CompiledModule(tmp_path)
    (out,) = module.run({"x": np.full((1, 1, 1, 4), -2.0, "float32")}).outputs
    np.testing.assert_array_equal(out, np.zeros((1, 4), "float32"))
    with pytest.raises(InputError, match="returned -5"):
        module.run({"x": np.ones((2, 1, 1, 4), "float32")})


SHORTCUT = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 16, 6, 6), float32], %y: Tensor[(?, 16, 6, 6), float32],
          %w1: Tensor[(16, 16, 3, 3), float32], %w2: Tensor[(16, 16, 3, 3), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.relu(nn.conv2d(%0, %w1, padding=[1, 1, 1, 1]));
  %2 = nn.conv2d(%1, %w2, padding=[1, 1, 1, 1]);
  %3 = add(%2, nn.relu(%y));
  %4 = nn.relu(add(%3, %0));
  nn.max_pool2d(%4, pool_size=[2, 2], strides=[2, 2])
}
"""


def test_a_residual_sum_takes_the_dying_shortcuts_bytes_only_when_the_runs_shapes_are_equal(tmp_path):
    rng = np.random.default_rng(3)
    params = {f"w{k}": (rng.standard_normal((16, 16, 3, 3)) * 0.2).astype("float32") for k in (1, 2)}
    build(SHORTCUT, tmp_path, params=params)
    module = CompiledModule(tmp_path)
    rows = module.report["memory"]["arena"]["buffers"]
    assert any("in_place_of" in row for row in rows), rows
    entry = "\n".join(path.read_text() for path in (tmp_path / "src").glob("*.c"))
    assert "offset[" in entry and "else if (!relaycc_place" in entry
    # Equal batches write over the shortcut; a batch-1 `y` broadcasts, so the sum gets its own bytes.
    for x_batch, y_batch in ((2, 2), (3, 1), (1, 1)):
        inputs = {"x": rng.standard_normal((x_batch, 16, 6, 6)).astype("float32"),
                  "y": rng.standard_normal((y_batch, 16, 6, 6)).astype("float32")}
        (got,) = module.run(inputs).outputs
        (want,) = run_main(parse(SHORTCUT), {**inputs, **params})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_threads_running_at_once_each_keep_their_own_arena(mlp):
    text, module = mlp
    batches = [1, 64, 3, 17]
    inputs = {n: random_inputs(module, n, seed=n) for n in batches}
    wanted = {n: run_main(parse(text), inputs[n])[0] for n in batches}

    def runs(k: int) -> list[bool]:
        # Each thread walks the sizes in its own order, so its kept arena grows and is reused.
        return [np.allclose(module.run(inputs[n]).outputs[0], wanted[n], rtol=1e-4, atol=1e-5)
                for n in (batches[k:] + batches[:k]) * 3]

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(all(ok) for ok in pool.map(runs, range(4)))


# U-Net's nearest upsampling and the NCHWc MobileNet's packed dense head take the `?` batch too.
@pytest.mark.parametrize("model", ["resnet_basic_block", "unet", "mobilenet_nchwc"])
def test_printed_cnn_with_an_unknown_batch_runs_batches_1_and_2(model, tmp_path):
    from tests.e2e import tvm_printed

    printed = getattr(tvm_printed, model)()
    name, (shape, _) = next(iter(printed.inputs.items()))
    text = printed.text.replace(f"%{name}: Tensor[({shape[0]}, ", f"%{name}: Tensor[(?, ", 1)
    assert text != printed.text
    build(text, tmp_path)
    module = CompiledModule(tmp_path)
    for batch in (1, 2):
        inputs = printed.make_inputs(batch)
        inputs[name] = np.concatenate([inputs[name]] * batch)
        got = module.run({t.name: inputs[t.name] for t in module.inputs}).outputs
        want = run_main(parse(text), inputs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


DYN_RESHAPE = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 8), float32], %y: Tensor[(?, 2, 4), float32]) {
  %0 = nn.relu(%x);
  %1 = shape_of(%y, dtype="int64");
  %2 = dyn.reshape(%0, %1);
  (add(%2, %y), dyn.reshape(%x, %1), dyn.full(2f, shape_of(%x, dtype="int32")))
}
"""


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_dyn_reshape_and_full_driven_by_shape_of_run_every_batch(batch, tmp_path):
    build(DYN_RESHAPE, tmp_path)
    module = CompiledModule(tmp_path)
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 8)).astype("float32")
    y = rng.standard_normal((batch, 2, 4)).astype("float32")
    summed, reshaped, full = module.run({"x": x, "y": y}).outputs
    np.testing.assert_allclose(summed, np.maximum(x, 0).reshape(batch, 2, 4) + y, rtol=1e-6)
    np.testing.assert_array_equal(reshaped, x.reshape(batch, 2, 4))
    np.testing.assert_array_equal(full, np.full((batch, 8), 2.0, "float32"))


UNKNOWN_IMAGE_SIZE = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, ?, ?), float32], %w: Tensor[(16, 3, 3, 3), float32], %b: Tensor[(16), float32],
          %w2: Tensor[(8, 16, 1, 1), float32]) {
  %0 = nn.relu(nn.bias_add(nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1]), %b));
  %1 = nn.max_pool2d(%0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1]);
  %2 = nn.conv2d(%1, %w2);
  (nn.global_avg_pool2d(%2), nn.avg_pool2d(%2, pool_size=[2, 2], ceil_mode=True))
}
"""


def test_a_cnn_with_an_unknown_image_size_runs_every_size_like_the_interpreter(tmp_path):
    rng = np.random.default_rng(5)
    params = {"w": rng.standard_normal((16, 3, 3, 3)).astype("float32"),
              "b": rng.standard_normal(16).astype("float32"),
              "w2": rng.standard_normal((8, 16, 1, 1)).astype("float32")}
    build(UNKNOWN_IMAGE_SIZE, tmp_path, params=params)
    module = CompiledModule(tmp_path)
    for hw in [(16, 16), (23, 9), (5, 40)]:
        x = rng.standard_normal((1, 3, *hw)).astype("float32")
        got = module.run({"x": x}).outputs
        want = run_main(parse(UNKNOWN_IMAGE_SIZE), {"x": x, **params})
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


# ResNet's convolutions take the tiled product, MobileNet's depthwise ones the plain reduction,
# EfficientNet's squeeze-and-excite an adaptive pool to one pixel, U-Net's decoder a transposed
# convolution and an upsampling whose scales come from the run's sizes.
@pytest.mark.parametrize("model", ["resnet", "mobilenet_v2", "efficientnet", "unet"])
def test_printed_cnn_with_an_unknown_image_size_runs_two_sizes(model, tmp_path):
    from tests.e2e import tvm_printed

    printed = getattr(tvm_printed, model)()
    name, (shape, dtype) = next(iter(printed.inputs.items()))
    declared = f"%{name}: Tensor[({', '.join(map(str, shape))}), {dtype}]"
    text = printed.text.replace(declared, f"%{name}: Tensor[({shape[0]}, {shape[1]}, ?, ?), {dtype}]", 1)
    assert text != printed.text
    build(text, tmp_path)
    module = CompiledModule(tmp_path)
    for hw in ((shape[2], shape[3]), (shape[2] + 8, shape[3] - 8)):
        x = np.random.default_rng(hw[0]).standard_normal((*shape[:2], *hw)).astype(dtype)
        got = module.run({name: x}).outputs
        want = run_main(parse(text), {name: x})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
