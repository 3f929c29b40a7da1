"""The reference interpreter against numpy on a small MLP (bench/models/mlp.relay) and on
ResNet-50 (bench/models/resnet.py): how slow the interpreter is, which is what checking a real
model against it costs (issue 11's target: ResNet-50 in under 3 s)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from compiler.parser import parse, parse_file
from compiler.runtime.interpreter import run_main

MLP_MODEL = Path(__file__).resolve().parent / "models" / "mlp.relay"
# (out_features, in_features) of each dense layer of mlp.relay.
MLP_LAYERS = [(512, 256), (128, 512), (10, 128)]
MLP_BATCH = 32


def mlp_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    params = {}
    for index, (units, features) in enumerate(MLP_LAYERS, start=1):
        scale = 1.0 / np.sqrt(features)
        params[f"w{index}"] = rng.normal(0.0, scale, (units, features)).astype(np.float32)
        params[f"b{index}"] = rng.normal(0.0, 0.1, units).astype(np.float32)
    return params


def mlp_numpy(x: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    hidden = x
    for index in range(1, len(MLP_LAYERS) + 1):
        hidden = hidden @ params[f"w{index}"].T + params[f"b{index}"]
        if index < len(MLP_LAYERS):
            hidden = np.maximum(hidden, 0.0)
    return hidden


def median_ms(run: Callable[[], object], repeat: int) -> float:
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def resnet50(repeat: int) -> None:
    """The interpreter on the benchmark's ResNet-50 (parse and type-check not counted), its
    output checked against the model's numpy reference first."""
    from bench.models import get

    model = get("resnet50", tiny=False)
    module = parse(model.relay, "resnet50.relay")
    (result,) = run_main(module, model.inputs, model.params)
    reference = model.reference()
    np.testing.assert_allclose(result, reference, rtol=1e-3, atol=1e-3 * float(np.abs(reference).max()))
    ms = median_ms(lambda: run_main(module, model.inputs, model.params), repeat)
    print(f"ResNet-50 1x3x224x224, relaycc interpret: {ms / 1e3:.2f} s (median of {repeat} runs; target < 3 s)")


def run(repeat: int) -> None:

    rng = np.random.default_rng(0)
    x = rng.normal(size=(MLP_BATCH, MLP_LAYERS[0][1])).astype(np.float32)
    params = mlp_params(rng)
    module = parse_file(MLP_MODEL)

    # A benchmark of a wrong answer is worthless: check agreement before timing.
    (result,) = run_main(module, {"x": x}, params)
    np.testing.assert_allclose(result, mlp_numpy(x, params), rtol=1e-4, atol=1e-4)

    cases = {
        "numpy": lambda: mlp_numpy(x, params),
        "relaycc interpret": lambda: run_main(module, {"x": x}, params),
    }
    timings = {name: median_ms(run, repeat) for name, run in cases.items()}

    baseline = timings["numpy"]
    shape = f"{MLP_BATCH}x{MLP_LAYERS[0][1]} -> {MLP_LAYERS[-1][0]}"
    print(f"MLP {shape}, median of {repeat} runs")
    print(f"{'case':<20} {'ms':>10} {'vs numpy':>10}")
    for name, ms in timings.items():
        print(f"{name:<20} {ms:>10.3f} {ms / baseline:>9.2f}x")
    print()
    resnet50(max(1, min(repeat, 3)))
