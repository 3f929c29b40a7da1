"""Times the generated kernels of dense, conv2d, batch_matmul, pools and softmax against numpy.

Each case is a fused primitive function as FuseOps produces it (dense + bias_add + relu is one
function), lowered to a PrimFunc, compiled to C the way the build does it and called through
cffi with pointers prepared once, so the time is the C function's (a workspace, where one is
needed, is 64-byte aligned here; a compiled model uses the configured alignment, 16 by
default). numpy's matmul runs on OpenBLAS with all cores; its convolution is im2col
(sliding_window_view) + einsum.

The headline is the MLP of seed 001 (x: 64 x 800 -> dense 500 + bias + relu -> dense 10 +
bias): the two kernels in sequence against the same computation in numpy, and the whole model
as `relaycc compile` builds it (bench/models/mlp_seed001.relay, run through its C entry point).
Results are checked before anything is timed.

Timings on a machine shared with other work vary a lot: OpenMP threads that lose their core
wait a whole scheduler slice, so compare medians of runs taken together, and mins.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler.backend.codegen_c import emit_c_module
from compiler.driver import BuildOptions, build
from compiler.backend.lower_primitive import lower_primitive
from compiler.ir.expr import Function
from compiler.parser import parse_expr
from compiler.passes.infer_type import infer_expr
from compiler.runtime.build import build_shared_library
from compiler.runtime.ffi import Library, aligned_empty, load_library, prim_func_cdef
from compiler.runtime.module import CompiledModule
from compiler.tir.analysis import workspace_bytes
from compiler.tir.stmt import PrimFunc

ALIGNMENT = 64
MLP_TARGET_RATIO = 3.0
# OpenBLAS's idle threads spin for up to 2^28 cycles (its THREAD_TIMEOUT), GOMP's for about 300k
# spins: a fifth of a second outlasts both.
SETTLE_S = 0.2
MLP_MODEL = Path(__file__).resolve().parent / "models" / "mlp_seed001.relay"


def tensor_type(array: np.ndarray) -> str:
    dims = ", ".join(str(d) for d in array.shape)
    return f"Tensor[({dims}{',' if array.ndim == 1 else ''}), {array.dtype}]"


def primitive_text(body: str, inputs: Sequence[np.ndarray]) -> str:
    params = ", ".join(f"%p{i}: {tensor_type(a)}" for i, a in enumerate(inputs))
    return f"fn ({params}, Primitive=1) {{\n  {body}\n}}"


@dataclass
class Kernel:
    """One primitive function: its Relay body over %p0, %p1..., and its inputs."""

    name: str
    body: str
    inputs: list[np.ndarray]

    def lower(self) -> PrimFunc:
        func = parse_expr(primitive_text(self.body, self.inputs))
        assert isinstance(func, Function)
        infer_expr(func)
        return lower_primitive(func, self.name)


class Runner:
    """The kernels built into one library, each callable with no per-call argument checks."""

    def __init__(self, kernels: Sequence[Kernel], directory: Path):
        self.funcs = {k.name: k.lower() for k in kernels}
        source = directory / "kernels.c"
        source.write_text(emit_c_module(list(self.funcs.values()), workspace_alignment=ALIGNMENT))
        path = build_shared_library([source], directory / "libbench_kernels.so")
        self.lib: Library = load_library(path, "\n".join(prim_func_cdef(f) for f in self.funcs.values()))

    def prepare(self, name: str, inputs: Sequence[np.ndarray]) -> tuple[Callable[[], object], list[np.ndarray]]:
        """A zero-argument call of kernel `name` on `inputs`, and its output arrays."""
        func = self.funcs[name]
        outputs = [np.empty(tuple(b.shape), b.dtype) for b in func.outputs]  # type: ignore[arg-type]  # static
        arrays: list[np.ndarray] = [*inputs, *outputs]
        size = workspace_bytes(func, ALIGNMENT)
        if size:
            arrays.append(aligned_empty(size, ALIGNMENT))
        fn, ftype = self.lib.function(name)
        pointers = [self.lib.pointer(a, t, name)[0] for a, t in zip(arrays, ftype.args)]

        def call() -> object:
            # `arrays` is referenced here so the memory behind the pointers outlives the call.
            return fn(*pointers) if arrays else None

        return call, outputs


def let_threads_sleep() -> None:
    """Waits until the other side's idle threads stop spinning. numpy's OpenBLAS and our OpenMP
    threads busy-wait a while after each call; timed right after numpy on two cores, our
    two-thread MLP shared its cores with OpenBLAS's spinning threads and ran at 1.6 ms by median
    against 0.34 alone (AMD EPYC, AVX-512)."""
    time.sleep(SETTLE_S)


def timings_ms(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, min) of `repeat` timed runs after one warm-up run, in milliseconds."""
    let_threads_sleep()
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3


def conv2d_numpy(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True)


def max_pool_numpy(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def softmax_numpy(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class Case:
    title: str
    run: Callable[[], object]
    result: Callable[[], np.ndarray]
    numpy: Callable[[], np.ndarray]


def build_cases(rng: np.random.Generator, directory: Path) -> tuple[Runner, list[Case]]:
    """The cases, and the runner whose library they call: keep it referenced while they run
    (unloading a library that started OpenMP threads crashes the process)."""
    def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    x, w1, b1 = f32(64, 800), f32(500, 800, scale=800**-0.5), f32(500)
    w2, b2 = f32(10, 500, scale=500**-0.5), f32(10)
    img, wc, bc = f32(1, 64, 56, 56), f32(64, 64, 3, 3, scale=576**-0.5), f32(64)
    qa, kb = f32(12, 128, 64), f32(12, 128, 64)
    feat, logits = f32(1, 64, 112, 112), f32(64, 1000)
    hidden = np.empty((64, 500), np.float32)
    kernels = [
        Kernel("mlp_dense1", "%0 = nn.dense(%p0, %p1, units=None);\n  nn.relu(nn.bias_add(%0, %p2, axis=-1))",
               [x, w1, b1]),
        Kernel("mlp_dense2", "%0 = nn.dense(%p0, %p1, units=None);\n  nn.bias_add(%0, %p2, axis=-1)",
               [hidden, w2, b2]),
        Kernel("conv", "%0 = nn.conv2d(%p0, %p1, padding=[1, 1]);\n  nn.relu(nn.bias_add(%0, %p2))", [img, wc, bc]),
        Kernel("bmm", "nn.batch_matmul(%p0, %p1, transpose_b=True)", [qa, kb]),
        Kernel("max_pool", "nn.max_pool2d(%p0, pool_size=[2, 2], strides=[2, 2])", [feat]),
        Kernel("softmax", "nn.softmax(%p0)", [logits]),
    ]
    runner = Runner(kernels, directory)
    calls: dict[str, Callable[[], object]] = {}
    outputs: dict[str, np.ndarray] = {}
    for k in kernels:
        # The second layer reads the first one's output, as the executor would chain them.
        inputs = [outputs["mlp_dense1"], w2, b2] if k.name == "mlp_dense2" else k.inputs
        calls[k.name], (outputs[k.name],) = runner.prepare(k.name, inputs)

    def mlp() -> None:
        calls["mlp_dense1"]()
        calls["mlp_dense2"]()

    def case(title: str, name: str, numpy: Callable[[], np.ndarray]) -> Case:
        return Case(title, calls[name], lambda: outputs[name], numpy)

    return runner, [
        Case("MLP seed 001 (64x800 -> 500 -> 10)", mlp, lambda: outputs["mlp_dense2"],
             lambda: np.maximum(x @ w1.T + b1, 0) @ w2.T + b2),
        case("dense 64x800x500 + bias + relu", "mlp_dense1", lambda: np.maximum(x @ w1.T + b1, 0)),
        case("conv2d 1x64x56x56 3x3 + bias + relu", "conv",
             lambda: np.maximum(conv2d_numpy(img, wc, 1) + bc[:, None, None], 0)),
        case("batch_matmul 12x128x64 . 12x128x64^T", "bmm", lambda: qa @ kb.transpose(0, 2, 1)),
        case("max_pool2d 1x64x112x112 2x2/2", "max_pool", lambda: max_pool_numpy(feat)),
        case("softmax 64x1000", "softmax", lambda: softmax_numpy(logits)),
    ]


def whole_mlp(
    rng: np.random.Generator, directory: Path, repeat: int, target: str = "c"
) -> tuple[float, float, float, float]:
    """(median, min) ms of the compiled seed-001 MLP's entry point, then of numpy. With target
    "cblas, c" both layers run in OpenBLAS's sgemm through the built-in cblas codegen."""
    x = rng.standard_normal((64, 800)).astype(np.float32)
    w1 = (rng.standard_normal((500, 800)) * 800**-0.5).astype(np.float32)
    w2 = (rng.standard_normal((10, 500)) * 500**-0.5).astype(np.float32)
    b1, b2 = rng.standard_normal(500).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    build(MLP_MODEL.read_text(), directory, BuildOptions(target=target), source_name=str(MLP_MODEL))
    module = CompiledModule(directory)
    inputs = {"x": x, "w1": w1, "b1": b1, "w2": w2, "b2": b2}

    def numpy() -> np.ndarray:
        return np.maximum(x @ w1.T + b1, 0) @ w2.T + b2

    (result,) = module.run(inputs).outputs
    np.testing.assert_allclose(result, numpy(), rtol=1e-3, atol=1e-3, err_msg="whole MLP")
    let_threads_sleep()
    times = module.run(inputs, repeat=repeat + 1).times_us[1:]
    theirs, theirs_min = timings_ms(numpy, repeat)
    return statistics.median(times) / 1e3, min(times) / 1e3, theirs, theirs_min


def run(repeat: int) -> dict[str, float]:
    """Prints the kernel table; returns the median ratio to numpy per case."""
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="relaycc-bench-") as tmp:
        runner, cases = build_cases(rng, Path(tmp))
        ratios = {}
        rows = []
        for case in cases:
            case.run()
            np.testing.assert_allclose(case.result(), case.numpy(), rtol=1e-3, atol=1e-3, err_msg=case.title)
            ours, ours_min = timings_ms(case.run, repeat)
            theirs, theirs_min = timings_ms(case.numpy, repeat)
            ratios[case.title] = ours / theirs
            rows.append((case.title, ours, ours_min, theirs, theirs_min, ours / theirs))
        del runner  # the library may be unloaded only now
        ours, ours_min, theirs, theirs_min = whole_mlp(rng, Path(tmp) / "mlp", repeat)
        title = "MLP seed 001, whole model (compile+run)"
        ratios[title] = ours / theirs
        rows.insert(1, (title, ours, ours_min, theirs, theirs_min, ours / theirs))
        ours, ours_min, theirs, theirs_min = whole_mlp(rng, Path(tmp) / "mlp_cblas", repeat, target="cblas, c")
        title = "MLP seed 001, whole model, \"cblas, c\""
        ratios[title] = ours / theirs
        rows.insert(2, (title, ours, ours_min, theirs, theirs_min, ours / theirs))
    print(f"generated kernels vs numpy, median (min) of {repeat} runs")
    print(f"{'case':<40} {'relaycc ms':>18} {'numpy ms':>18} {'ratio':>7}")
    for title, ours, ours_min, theirs, theirs_min, ratio in rows:
        print(f"{title:<40} {ours:>9.3f} ({ours_min:>6.3f}) {theirs:>9.3f} ({theirs_min:>6.3f}) {ratio:>6.2f}x")
    mlp = rows[1][-1]
    verdict = "within" if mlp <= MLP_TARGET_RATIO else "NOT within"
    print(f"MLP seed 001 (whole model): {mlp:.2f}x numpy's time, {verdict} the {MLP_TARGET_RATIO:g}x target")
    return ratios
