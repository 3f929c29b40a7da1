"""float32 exp, erf and tanh of generated C (compiler/backend/c_math.py), built with the
backend's default flags and compared with float64 references in ulps of the float32 result."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import cffi
import numpy as np
import pytest

from compiler.backend.c_helpers import helpers_used
from compiler.backend.c_math import VECTOR_MATH_F32
from compiler.driver import BuildOptions, build
from compiler.runtime.build import DEFAULT_CFLAGS, compiler_command


def _loops() -> str:
    """One `#pragma omp simd` loop per function, as the kernels call them."""
    return "".join(
        f"void apply_{name}(const float* restrict x, float* restrict y, int64_t n) {{\n"
        f"  #pragma omp simd\n"
        f"  for (int64_t i = 0; i < n; ++i) y[i] = relaycc_{name}_f32(x[i]);\n}}\n"
        for name in VECTOR_MATH_F32)


def _source() -> str:
    loops = _loops()
    return "#include <stdint.h>\n#include <math.h>\n" + "".join(helpers_used(loops)) + loops


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> object:
    directory = tmp_path_factory.mktemp("c_math")
    source = directory / "c_math.c"
    source.write_text(_source())
    out = directory / "libc_math.so"
    subprocess.run(compiler_command([source], out), check=True, capture_output=True, timeout=120)
    ffi = cffi.FFI()
    ffi.cdef("".join(f"void apply_{n}(const float* x, float* y, int64_t n);" for n in VECTOR_MATH_F32))
    return ffi, ffi.dlopen(str(out))


def _apply(lib: object, name: str, x: np.ndarray) -> np.ndarray:
    ffi, handle = lib  # type: ignore[misc]  # the fixture's pair
    y = np.empty_like(x)
    getattr(handle, f"apply_{name}")(ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y), x.size)
    return y


_EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.17549435e-38,
                   -1.17549435e-38, 3.4028235e38, -3.4028235e38, 1.0, -1.0], np.float32)


def _sweep(*dense_around: float) -> np.ndarray:
    """Every 4099th float32 bit pattern (all signs and exponents), the edge values, and every
    float32 near each point of `dense_around` (where a function changes formula or saturates)."""
    bits = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)
    parts = [bits.view(np.float32), _EDGES]
    for point in dense_around:
        centre = np.array([point], np.float32).view(np.int32)[0]
        parts.append(np.arange(centre - 20000, centre + 20000, dtype=np.int32).view(np.float32))
    return np.ascontiguousarray(np.concatenate(parts))


def _wide(x: np.ndarray) -> np.ndarray:
    """x as float64; the sweep's signaling NaNs raise numpy's `invalid` on the way."""
    with np.errstate(invalid="ignore"):
        return x.astype(np.float64)


def _ulps(actual: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|actual - exact| in units of the spacing of float32 at exact (denormal spacing at least)."""
    with np.errstate(over="ignore"):
        rounded = exact.astype(np.float32)
    spacing = np.maximum(np.abs(np.spacing(np.abs(rounded))).astype(np.float64), 2.0**-149)
    with np.errstate(invalid="ignore"):
        err = np.abs(_wide(actual) - exact) / spacing
    same_special = (np.isnan(actual) & np.isnan(exact)) | (np.isinf(rounded) & (actual == rounded))
    return np.where(same_special, 0.0, np.where(np.isfinite(err), err, np.inf))


def _check(actual: np.ndarray, x: np.ndarray, exact: np.ndarray, bound: float) -> None:
    err = _ulps(actual, exact)
    worst = int(np.argmax(err))
    assert err[worst] <= bound, f"{err[worst]:.2f} ulps at x={x[worst]!r}: {actual[worst]!r} vs {exact[worst]!r}"
    # The sign of zero results too: -0.0 stays -0.0 where libm keeps it.
    zeros = exact == 0
    assert np.array_equal(np.signbit(actual[zeros]), np.signbit(exact[zeros]))


def test_exp_is_within_one_and_a_half_ulps_and_saturates_like_libm(lib: object) -> None:
    # 88.72 is the last finite result, -87.34 the first denormal, -103.97 the last nonzero.
    x = _sweep(88.72283935546875, -87.33654, -103.972, 0.0, 0.34657359)
    with np.errstate(over="ignore"):
        exact = np.exp(_wide(x))
    # 0.94 ulp where gcc contracts to FMA, 1.17 without (-mno-fma).
    _check(_apply(lib, "exp", x), x, exact, 1.5)
    special = _apply(lib, "exp", np.array([np.inf, -np.inf, np.nan, -0.0, 89.0, -104.0], np.float32))
    assert special[0] == np.inf and special[1] == 0 and np.isnan(special[2]) and special[3] == 1
    assert special[4] == np.inf and special[5] == 0


def test_exp_rounds_denormal_results_once(lib: object) -> None:
    # Below 2^-140 a denormal's spacing dwarfs the polynomial's error, so rounding once gives
    # <= 0.5 ulp (scaling by 2^n in one step would round p first, then the denormal again).
    x = np.linspace(-103.97, -97.1, 200001, dtype=np.float32)
    got = _apply(lib, "exp", x)
    exact = np.exp(_wide(x))
    assert _ulps(got, exact).max() <= 0.51
    assert np.array_equal(got > 0, exact.astype(np.float32) > 0)


def test_erf_is_within_three_ulps(lib: object) -> None:
    x = _sweep(1.0, -1.0, 3.92, 4.0, 0.0, 1e-3)
    exact = np.array([math.erf(v) for v in _wide(x).tolist()])
    exact[np.isnan(x)] = np.nan
    _check(_apply(lib, "erf", x), x, exact, 3.0)


def test_tanh_is_within_two_ulps(lib: object) -> None:
    x = _sweep(0.625, -0.625, 9.01, 9.5, 0.0, 1e-3)
    exact = np.tanh(_wide(x))
    _check(_apply(lib, "tanh", x), x, exact, 2.0)


def test_the_loops_calling_them_vectorize_under_the_default_flags(tmp_path: Path) -> None:
    source = tmp_path / "loops.c"
    source.write_text(_source())
    command = compiler_command([source], tmp_path / "loops.so") + ["-fopt-info-vec-optimized"]
    assert "-O3" in DEFAULT_CFLAGS
    report = subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stderr
    loop_lines = {int(line.split(":")[1]) for line in report.splitlines()
                  if line.startswith(str(source)) and "loop vectorized" in line}
    wanted = {k + 1 for k, line in enumerate(_source().splitlines()) if "for (int64_t i = 0" in line}
    assert wanted <= loop_lines, report



_GELU_DENSE = """#[version = "0.0.5"]
def @main(%x: Tensor[(128, 256), float32], %w: Tensor[(1024, 256), float32], %b: Tensor[(1024), float32]) {
  %0 = nn.dense(%x, %w, units=1024);
  %1 = nn.bias_add(%0, %b, axis=-1);
  %2 = multiply(%1, 0.707107f);
  %3 = erf(%2);
  %4 = add(%3, 1f);
  %5 = multiply(%1, %4);
  multiply(%5, 0.5f)
}
"""


def test_they_stay_inline_in_a_product_kernel_storing_many_rows(tmp_path: Path) -> None:
    # A register tile's store writes each of its rows in a loop of its own (13 on AVX-512): past
    # gcc's budget for inlining into one function a plain `static inline` erf became a call per
    # element, and the transformer's gelu epilogue ran scalar (its dense 1.5x onnxruntime's).
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((1024, 256), dtype=np.float32)}
    build(_GELU_DENSE, tmp_path / "out", BuildOptions(config={"tir.vector_lanes": 16}), params,
          build_library=False, cache=None)
    kernels = [p for p in (tmp_path / "out" / "src").glob("*_lib*.c") if "relaycc_erf_f32" in p.read_text()]
    assert kernels
    for source in kernels:
        command = [*compiler_command([source], tmp_path / "k.s"), "-S", f"-I{tmp_path / 'out' / 'include'}"]
        command.remove("-shared")
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
        assert "call\trelaycc_" not in (tmp_path / "k.s").read_text(), source.name
