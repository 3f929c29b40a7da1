from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from compiler.backend.c_helpers import HELPERS, helper_suffix, helpers_used


def test_only_the_helpers_a_text_calls_are_included() -> None:
    used = helpers_used("x = relaycc_max_f32(a, b) + relaycc_floordiv_i64(c, d);")
    assert len(used) == 2
    assert any("relaycc_max_f32(float a, float b)" in h for h in used)
    assert any("relaycc_floordiv_i64(int64_t a, int64_t b)" in h for h in used)
    assert helpers_used("no helpers here") == []


def test_a_helper_brings_the_helpers_it_calls_before_itself() -> None:
    used = helpers_used("y = relaycc_erf_f32(x);")
    names = [next(n for n, t in HELPERS.items() if t == text) for text in used]
    assert names == ["relaycc_asint_f32", "relaycc_asfloat_i32", "relaycc_pick_f32", "relaycc_exp_f32",
                     "relaycc_erf_f32"]


def test_narrow_types_use_the_int32_variant() -> None:
    assert [helper_suffix(d) for d in ("int8", "uint16", "bool", "int32")] == ["i32"] * 4
    assert [helper_suffix(d) for d in ("int64", "uint32", "uint64")] == ["i64", "u32", "u64"]
    assert [helper_suffix(d) for d in ("float16", "float32", "float64")] == ["f32", "f32", "f64"]


def test_every_helper_is_static_inline_and_named_by_its_key() -> None:
    for name, text in HELPERS.items():
        body = text
        # The whole-row float16 helpers open with their vector types and conversions, the heap
        # helpers with the C library functions they call (generated files include no stdlib.h).
        while body.startswith(("#", "typedef ", "extern ")):
            body = body.split("\n", 1)[1]
        assert body.startswith("static inline ") and f" {name}(" in text


# The float16 helpers in loops as the kernels use them, built with the default flags
# (-march=native: vectorized on this machine) and portably (baseline x86-64: SSE2 only).
_HALF_LOOPS = """
#include <stdint.h>
{helpers}
void half_to_float(const _Float16* restrict in, float* restrict out, int64_t n) {{
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = relaycc_halfload_f32(&in[i]);
}}
void float_to_half(const float* restrict in, _Float16* restrict out, int64_t n) {{
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) relaycc_halfstore_f32(&out[i], in[i]);
}}
void round_to_half(const float* restrict in, float* restrict out, int64_t n) {{
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = relaycc_halfround_f32(in[i]);
}}
void widen_row(const _Float16* restrict in, float* restrict out, int64_t n) {{
  relaycc_halfwidenn_f32(out, in, n);
}}
void narrow_row(const float* restrict in, _Float16* restrict out, int64_t n) {{
  relaycc_halfnarrown_f32(out, in, n);
}}
void round_row(const float* restrict in, float* restrict out, int64_t n) {{
  for (int64_t i = 0; i < n; ++i) out[i] = in[i];
  relaycc_halfroundn_f32(out, n);
}}
"""
# Scalar helpers in loops gcc vectorizes, and the whole-row helpers (F16C's instructions under
# -march=native here, the scalar helpers portably), by what they compute.
LOADS, STORES = ("half_to_float", "widen_row"), ("float_to_half", "narrow_row")
ROUNDINGS = ("round_to_half", "round_row")


@pytest.fixture(scope="module", params=["native", "portable"])
def half_library(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    from compiler.runtime.build import DEFAULT_CFLAGS, build_shared_library

    work = tmp_path_factory.mktemp(f"half_{request.param}")
    source = work / "half.c"
    names = ("relaycc_halfroundn_f32", "relaycc_halfwidenn_f32", "relaycc_halfnarrown_f32")
    helpers = "".join(helpers_used(" ".join(f"{n}(" for n in names)))
    source.write_text(_HALF_LOOPS.format(helpers=helpers))
    flags = DEFAULT_CFLAGS if request.param == "native" else ("-O3", "-std=gnu11", "-fPIC", "-shared", "-fopenmp-simd")
    library = ctypes.CDLL(str(build_shared_library([source], work / "libhalf.so", cflags=flags)))
    for name in (*LOADS, *STORES, *ROUNDINGS):
        getattr(library, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return library


def _call(library: ctypes.CDLL, name: str, values: np.ndarray, out_dtype: type) -> np.ndarray:
    out = np.empty(values.shape, out_dtype)
    getattr(library, name)(values.ctypes.data, out.ctypes.data, values.size)
    return out


def _float_sweep() -> np.ndarray:
    """Every half value, the float32 values around it and half-way to the next (the ties and
    their neighbours), beyond the half range, and random floats of every exponent."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    halves = halves[np.isfinite(halves)]
    ordered = np.sort(halves)
    mids = ((ordered[:-1].astype(np.float64) + ordered[1:]) / 2).astype(np.float32)
    points = np.concatenate([halves, mids, np.float32([65504, 65519.996, 65520, 65536, 1e38, 2.0**-25, 2.0**-26])])
    points = np.concatenate([points, -points])
    bits = points.view(np.uint32)
    around = np.concatenate([bits - 1, bits, bits + 1]).view(np.float32)
    rng = np.random.default_rng(11)
    random = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.uint32([0x7F800000, 0xFF800000, 0x7F800001, 0xFFA00000, 0x7FC00000, 0x7FFFFFFF]).view(np.float32)
    return np.concatenate([around, random, special])


def _quiet_half(bits32: np.ndarray) -> np.ndarray:
    """The float16 bits a NaN converts to (F16C's and gcc's rule): quiet, sign and top payload."""
    return ((bits32 >> 16) & 0x8000 | 0x7E00 | (bits32 >> 13) & 0x3FF).astype(np.uint16)


@pytest.mark.parametrize("name", LOADS)
def test_half_loads_are_exact_for_all_65536_values(half_library: ctypes.CDLL, name: str) -> None:
    halves = np.arange(1 << 16, dtype=np.uint16)
    got = _call(half_library, name, halves, np.float32).view(np.uint32)
    expected = halves.view(np.float16).astype(np.float32).view(np.uint32)
    nan = np.isnan(halves.view(np.float16))
    np.testing.assert_array_equal(got[~nan], expected[~nan])
    np.testing.assert_array_equal(got[nan], expected[nan] | 0x00400000)  # quieted, as vcvtph2ps does


@pytest.mark.parametrize("name", STORES)
def test_half_stores_round_to_nearest_even_like_numpy(half_library: ctypes.CDLL, name: str) -> None:
    values = _float_sweep()
    with np.errstate(over="ignore", invalid="ignore"):
        expected = values.astype(np.float16).view(np.uint16)
    got = _call(half_library, name, values, np.uint16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(got[~nan], expected[~nan])
    np.testing.assert_array_equal(got[nan], _quiet_half(values[nan].view(np.uint32)))


@pytest.mark.parametrize("name", ROUNDINGS)
def test_half_rounding_of_floats_is_the_round_trip_numpy_computes(half_library: ctypes.CDLL, name: str) -> None:
    values = _float_sweep()
    with np.errstate(over="ignore", invalid="ignore"):
        expected = values.astype(np.float16).astype(np.float32).view(np.uint32)
    got = _call(half_library, name, values, np.float32).view(np.uint32)
    nan = np.isnan(values)
    np.testing.assert_array_equal(got[~nan], expected[~nan])
    quiet = _quiet_half(values[nan].view(np.uint32)).view(np.float16).astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(got[nan], quiet | 0x00400000)


@pytest.mark.parametrize("name", ROUNDINGS[1:])
def test_a_row_rounds_its_tail_past_the_last_whole_vector_too(half_library: ctypes.CDLL, name: str) -> None:
    # 16 + 8 + 3 values: one AVX-512 vector, one AVX2 vector and three lanes on their own.
    values = np.float32([1 + 2.0**-11, 1 + 3 * 2.0**-11, 2.0**-25, 3 * 2.0**-25, 65520, -65519, 1e-8] * 4)[:27]
    got = _call(half_library, name, values, np.float32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got.view(np.uint32), values.astype(np.float16).astype(np.float32).view(np.uint32))


def _row_helpers_source() -> str:
    names = ("relaycc_halfroundn_f32", "relaycc_halfwidenn_f32", "relaycc_halfnarrown_f32")
    return _HALF_LOOPS.format(helpers="".join(helpers_used(" ".join(f"{n}(" for n in names))))


def test_gcc_builds_the_row_helpers_without_the_intrinsics_header(tmp_path: Path) -> None:
    from compiler.runtime.build import c_compiler

    source = tmp_path / "rows.c"
    source.write_text(_row_helpers_source())
    version = subprocess.run([*c_compiler(), "--version"], capture_output=True, text=True).stdout
    if "clang" in version:
        pytest.skip("the builtins are gcc's; other compilers include <immintrin.h>")

    expanded = subprocess.run([*c_compiler(), "-E", "-mf16c", str(source)], capture_output=True, text=True, check=True)

    assert "immintrin.h" not in expanded.stdout
    assert "__builtin_ia32_vcvtps2ph256" in expanded.stdout


def test_the_row_helpers_convert_16_lanes_at_a_time_on_an_avx512_machine(tmp_path: Path) -> None:
    from compiler.runtime.build import c_compiler

    source, obj = tmp_path / "rows.c", tmp_path / "rows.o"
    source.write_text(_row_helpers_source())

    subprocess.run([*c_compiler(), "-O3", "-march=skylake-avx512", "-fopenmp-simd", "-c", str(source), "-o", str(obj)],
                   check=True)

    code = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"vcvtps2ph\s+\$0x0,%zmm", code)
    assert re.search(r"vcvtph2ps\s+%ymm\d+,%zmm", code)


_MINMAX_LOOPS = """
#include <stdint.h>
{helpers}
#define LOOP(name, helper) \\
  void name(const {t}* restrict in, {t}* restrict out, int64_t n, {t} c) {{ \\
    _Pragma("omp simd") \\
    for (int64_t i = 0; i < n; ++i) out[i] = helper(in[i], c); \\
  }}
LOOP(max_any, relaycc_max_{s}) LOOP(max_const, relaycc_maxk_{s})
LOOP(min_any, relaycc_min_{s}) LOOP(min_const, relaycc_mink_{s})
"""


@pytest.mark.parametrize("flavour", ["native", "portable"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_min_max_with_a_constant_take_the_same_bits_as_the_general_helpers(
        tmp_path: Path, flavour: str, dtype: type) -> None:
    from compiler.runtime.build import DEFAULT_CFLAGS, build_shared_library

    t, s, c_type, bits = ("float", "f32", ctypes.c_float, np.uint32) if dtype is np.float32 else \
        ("double", "f64", ctypes.c_double, np.uint64)
    names = [f"relaycc_{n}_{s}(" for n in ("max", "maxk", "min", "mink")]
    source = tmp_path / "minmax.c"
    source.write_text(_MINMAX_LOOPS.format(helpers="".join(helpers_used(" ".join(names))), t=t, s=s))
    flags = DEFAULT_CFLAGS if flavour == "native" else ("-O3", "-std=gnu11", "-fPIC", "-shared", "-fopenmp-simd")
    library = ctypes.CDLL(str(build_shared_library([source], tmp_path / "libminmax.so", cflags=flags)))
    info = np.finfo(dtype)
    special = np.array([0.0, -0.0, 1.0, -1.0, 6.0, -1.5, info.tiny, -info.tiny, info.smallest_subnormal,
                        -info.smallest_subnormal, info.max, -info.max, np.inf, -np.inf], dtype)
    nans = np.array([0x7FC00000, 0xFFC00001, 0x7F800001] if dtype is np.float32 else
                    [0x7FF8000000000000, 0xFFF8000000000001, 0x7FF0000000000001], bits).view(dtype)
    rng = np.random.default_rng(5)
    random = rng.integers(0, np.iinfo(bits).max, 4096, dtype=bits, endpoint=True).view(dtype)
    values = np.concatenate([special, nans, random])
    for name in ("max_any", "max_const", "min_any", "min_const"):
        getattr(library, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, c_type]
    for c in special:  # every constant but NaN, signed zeros and infinities included
        got = {}
        for name in ("max_any", "max_const", "min_any", "min_const"):
            out = np.empty_like(values)
            getattr(library, name)(values.ctypes.data, out.ctypes.data, values.size, c_type(c))
            got[name] = out.view(bits)
        np.testing.assert_array_equal(got["max_const"], got["max_any"], err_msg=f"max with {c!r}")
        np.testing.assert_array_equal(got["min_const"], got["min_any"], err_msg=f"min with {c!r}")


_FMA_ROWS = """
#include <stdint.h>
{helpers}
void with_helper(float* restrict d, float a, const float* restrict w, int64_t n) {{
  relaycc_fmarow_f32(d, a, w, n);
}}
void as_loop(float* restrict d, float a, const float* restrict w, int64_t n) {{
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = d[i] + a * w[i];
}}
"""


@pytest.mark.parametrize("flavour", ["native", "portable"])
def test_the_tile_row_helper_computes_the_bits_of_the_loop_it_replaces(tmp_path: Path, flavour: str) -> None:
    # The tile's row step (fma_rows.py) must round as the vectorized loop did: an FMA where the
    # build machine contracts one, two roundings where it does not.
    from compiler.runtime.build import DEFAULT_CFLAGS, build_shared_library

    source = tmp_path / "fma.c"
    source.write_text(_FMA_ROWS.format(helpers="".join(helpers_used("relaycc_fmarow_f32("))))
    flags = DEFAULT_CFLAGS if flavour == "native" else ("-O3", "-std=gnu11", "-fPIC", "-shared", "-fopenmp-simd")
    library = ctypes.CDLL(str(build_shared_library([source], tmp_path / "libfma.so", cflags=flags)))
    for name in ("with_helper", "as_loop"):
        getattr(library, name).argtypes = [ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p, ctypes.c_int64]
    rng = np.random.default_rng(3)
    for n in (1, 5, 8, 13, 16, 24, 32, 48, 77):
        w = (rng.standard_normal(n + 1) * 1e3).astype(np.float32)[1:]  # not 32-byte aligned
        start = rng.standard_normal(n).astype(np.float32)
        got, want = start.copy(), start.copy()
        a = float(np.float32(rng.standard_normal() * 1e-3))
        library.with_helper(got.ctypes.data, a, w.ctypes.data, n)
        library.as_loop(want.ctypes.data, a, w.ctypes.data, n)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=f"n = {n}")


def test_the_tile_row_helper_steps_whole_zmm_vectors_on_an_avx512_machine(tmp_path: Path) -> None:
    from compiler.runtime.build import c_compiler

    source, obj = tmp_path / "fma.c", tmp_path / "fma.o"
    source.write_text(_FMA_ROWS.format(helpers="".join(helpers_used("relaycc_fmarow_f32("))))
    subprocess.run([*c_compiler(), "-O3", "-march=skylake-avx512", "-fopenmp-simd", "-c", str(source), "-o", str(obj)],
                   check=True)
    code = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    helper = code.split("<with_helper>:")[1].split(">:")[0]
    assert re.search(r"vfmadd\d+ps\s+.*%zmm", helper)
