"""The static inline C helpers generated code may call, and which of them a text uses.

Helpers exist where one C operator does not have the IR's (numpy's) semantics: integer
division and modulo that must not trap and may have to round toward minus infinity, floor
division and modulo of floats as numpy's `divmod` computes them, NaN-propagating float
min/max, integer abs, float16 conversions that vectorize (`halfload`, `halfstore`,
`halfround`), and float32 exp, erf and tanh that vectorize (`c_math`). Each comes in a few
widths named by suffix (`_i32`, `_i64`, `_u32`, `_u64`, `_f32`, `_f64`); narrower integer types
use the `_i32` variant, since C promotes them to int anyway. A module includes only the helpers
its functions call, and the ones those call.
"""

from __future__ import annotations

import re

from compiler.backend.c_math import math_helpers

HELPER_PREFIX = "relaycc_"


def helper_suffix(dtype: str) -> str:
    """The helper variant for operands of `dtype` (narrow ints promote to int32 in C anyway)."""
    if dtype in ("float32", "float16"):
        return "f32"
    if dtype == "float64":
        return "f64"
    if dtype in ("int64", "uint64", "uint32"):
        return {"int64": "i64", "uint64": "u64", "uint32": "u32"}[dtype]
    return "i32"


_INT_TYPES = {"i32": "int32_t", "i64": "int64_t"}
_MINMAX_TYPES = {"i32": "int32_t", "i64": "int64_t", "u32": "uint32_t", "u64": "uint64_t"}
_FLOAT_TYPES = {"f32": ("float", "f"), "f64": ("double", "")}


def _signed_division_helpers(sfx: str, t: str) -> dict[str, str]:
    # Division by 0 gives 0 and MIN / -1 wraps, as in numpy; C would trap on both.
    return {
        f"truncdiv_{sfx}": (
            f"static inline {t} relaycc_truncdiv_{sfx}({t} a, {t} b) {{\n"
            f"  if (b == 0) return 0;\n"
            f"  if (b == -1) return ({t})(0 - (u{t})a);\n"
            f"  return a / b;\n}}\n"),
        f"truncmod_{sfx}": (
            f"static inline {t} relaycc_truncmod_{sfx}({t} a, {t} b) {{\n"
            f"  return (b == 0 || b == -1) ? 0 : a % b;\n}}\n"),
        f"floordiv_{sfx}": (
            f"static inline {t} relaycc_floordiv_{sfx}({t} a, {t} b) {{\n"
            f"  if (b == 0) return 0;\n"
            f"  if (b == -1) return ({t})(0 - (u{t})a);\n"
            f"  {t} q = a / b;\n"
            f"  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n}}\n"),
        f"floormod_{sfx}": (
            f"static inline {t} relaycc_floormod_{sfx}({t} a, {t} b) {{\n"
            f"  if (b == 0 || b == -1) return 0;\n"
            f"  {t} r = a % b;\n"
            f"  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}\n"),
    }


def _unsigned_division_helpers(sfx: str, t: str) -> dict[str, str]:
    return {
        f"truncdiv_{sfx}": (f"static inline {t} relaycc_truncdiv_{sfx}({t} a, {t} b) "
                            f"{{ return b == 0 ? 0 : a / b; }}\n"),
        f"truncmod_{sfx}": (f"static inline {t} relaycc_truncmod_{sfx}({t} a, {t} b) "
                            f"{{ return b == 0 ? 0 : a % b; }}\n"),
    }


def _float_division_helpers(sfx: str, t: str, f: str) -> dict[str, str]:
    zero, half, one = f"0.0{f}", f"0.5{f}", f"1.0{f}"
    return {
        f"floormod_{sfx}": (
            f"static inline {t} relaycc_floormod_{sfx}({t} a, {t} b) {{\n"
            f"  {t} mod = fmod{f}(a, b);\n"
            f"  if (b == {zero}) return mod;\n"
            f"  if (mod != {zero}) {{\n"
            f"    if ((b < {zero}) != (mod < {zero})) mod += b;\n"
            f"  }} else {{\n"
            f"    mod = copysign{f}({zero}, b);\n"
            f"  }}\n"
            f"  return mod;\n}}\n"),
        f"floordiv_{sfx}": (
            f"static inline {t} relaycc_floordiv_{sfx}({t} a, {t} b) {{\n"
            f"  if (b == {zero}) return a / b;\n"
            f"  {t} mod = fmod{f}(a, b);\n"
            f"  {t} div = (a - mod) / b;\n"
            f"  if (mod != {zero} && ((b < {zero}) != (mod < {zero}))) div -= {one};\n"
            f"  if (div == {zero}) return copysign{f}({zero}, a / b);\n"
            f"  {t} whole = floor{f}(div);\n"
            f"  return (div - whole > {half}) ? whole + {one} : whole;\n}}\n"),
    }


def _mask_select(name: str, t: str, condition: str, chosen: str, other: str) -> str:
    """A float helper `relaycc_<name>(a, b)` returning `chosen` (`ua` or `ub`: a's or b's bits)
    where `condition` holds and `other` elsewhere, selected with a mask rather than `?:`."""
    bits, size = ("uint32_t", 4) if t == "float" else ("uint64_t", 8)
    return (f"static inline {t} relaycc_{name}({t} a, {t} b) {{\n"
            f"  {bits} ua, ub, m; {t} y;\n"
            f"  __builtin_memcpy(&ua, &a, {size}); __builtin_memcpy(&ub, &b, {size});\n"
            f"  m = ({bits})0 - ({bits})({condition});\n"
            f"  ua = ({chosen} & m) | ({other} & ~m);\n"
            f"  __builtin_memcpy(&y, &ua, {size});\n"
            f"  return y;\n}}\n")


def _build_helpers() -> dict[str, str]:
    helpers: dict[str, str] = {}
    for sfx, t in _INT_TYPES.items():
        helpers.update(_signed_division_helpers(sfx, t))
        helpers[f"abs_{sfx}"] = f"static inline {t} relaycc_abs_{sfx}({t} a) {{ return a < 0 ? -a : a; }}\n"
    for sfx, t in (("u32", "uint32_t"), ("u64", "uint64_t")):
        helpers.update(_unsigned_division_helpers(sfx, t))
    for sfx, t in _MINMAX_TYPES.items():
        helpers[f"min_{sfx}"] = f"static inline {t} relaycc_min_{sfx}({t} a, {t} b) {{ return a < b ? a : b; }}\n"
        helpers[f"max_{sfx}"] = f"static inline {t} relaycc_max_{sfx}({t} a, {t} b) {{ return a > b ? a : b; }}\n"
    for sfx, (t, f) in _FLOAT_TYPES.items():
        helpers.update(_float_division_helpers(sfx, t, f))
        # NaN wins, as in numpy's minimum/maximum. Chosen with a mask, not `?:`: kernels built
        # without if-conversion (the masked-load workaround) keep a loop with a branch scalar,
        # and a relu epilogue is such a loop.
        for name, less in (("min", "<"), ("max", ">")):
            helpers[f"{name}_{sfx}"] = _mask_select(f"{name}_{sfx}", t, f"(a {less} b) | (a != a)", "ua", "ub")
        # The same with a `b` that is not NaN (a constant: relu's 0, clip's bounds): then
        # "a > b or a is NaN" is "not a <= b", one comparison, and b = +0.0 makes the select a
        # single and-not (relu: 2 vector instructions instead of 4). Equal in every bit,
        # signed zeros included.
        for name, more in (("mink", ">="), ("maxk", "<=")):
            helpers[f"{name}_{sfx}"] = _mask_select(f"{name}_{sfx}", t, f"a {more} b", "ub", "ua")
    return {**{HELPER_PREFIX + k: v for k, v in helpers.items()}, **math_helpers()}


# float16 <-> float32 in integer and float32 operations gcc vectorizes on any SIMD unit: gcc 12
# has no vector _Float16 without AVX512-FP16, so `(float)h` and `(_Float16)x` were one scalar
# conversion each (F16C's one-lane vcvtph2ps/vcvtps2ph) and kept every loop around them scalar.
# Exact as those instructions: ties to even, overflow to infinity, half subnormals, NaNs quieted
# with their sign and top payload bits. Choices are made with masks, not `?:`, which gcc turns
# into branches that stop vectorization. Below 2^-14, float32 addition of 0.5 rounds to the half
# subnormal step 2^-24 (the float32 step in [0.5, 1)).
_HALF_HELPERS = {
    # Rounding follows every float16 operation, often several per statement (a conv's store
    # rounds its sum, the scale's product and the bias's sum), inlined at each: its copies are
    # most of gcc's time on float16 files, so it is kept short. Adding and subtracting a float
    # whose last mantissa bit is worth x's float16 step (2^13 times x's power of two, at least
    # 0.5 for the step 2^-24 of half subnormals) rounds x to that step, ties to even, in one
    # float addition. A function with vector variants (gcc's `simd`) instead, called from the
    # vectorized stores, built float16 ResNet-50 in 40% of the time but ran it 8% slower: a call
    # per vector cost more than a product's store can hide.
    "halfround_f32": (
        "static inline float relaycc_halfround_f32(float x) {\n"
        "  uint32_t u, c, m, r; float fa, fc, t;\n"
        "  __builtin_memcpy(&u, &x, 4);\n"
        "  uint32_t a = u & 0x7fffffffu;\n"
        "  c = (a & 0x7f800000u) + 0x06800000u;\n"
        "  m = 0u - (uint32_t)(a < 0x38800000u);\n"
        "  c = (0x3f000000u & m) | (c & ~m);\n"
        "  __builtin_memcpy(&fa, &a, 4);\n"
        "  __builtin_memcpy(&fc, &c, 4);\n"
        "  t = (fa + fc) - fc;\n"
        "  __builtin_memcpy(&r, &t, 4);\n"
        "  m = 0u - (uint32_t)(a >= 0x477ff000u);\n"
        "  r = (0x7f800000u & m) | (r & ~m);\n"
        "  m = 0u - (uint32_t)(a > 0x7f800000u);\n"
        "  r = (((a & 0xffffe000u) | 0x00400000u) & m) | (r & ~m);\n"
        "  r |= u & 0x80000000u;\n"
        "  __builtin_memcpy(&x, &r, 4);\n"
        "  return x;\n}\n"),
    "halfload_f32": (
        "static inline float relaycc_halfload_f32(const _Float16* p) {\n"
        "  uint16_t h; uint32_t sb, k; float y;\n"
        "  __builtin_memcpy(&h, p, 2);\n"
        "  uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;\n"
        "  uint32_t r = ((e + 112u) << 23) | (m << 13);\n"
        "  k = 0u - (uint32_t)(e == 31u);\n"
        "  r = ((0x7f800000u | (m << 13) | ((uint32_t)(m != 0u) << 22)) & k) | (r & ~k);\n"
        "  float sub = (float)(int32_t)m * 0x1p-24f;\n"
        "  __builtin_memcpy(&sb, &sub, 4);\n"
        "  k = 0u - (uint32_t)(e == 0u);\n"
        "  r = (sb & k) | (r & ~k);\n"
        "  r |= ((uint32_t)h & 0x8000u) << 16;\n"
        "  __builtin_memcpy(&y, &r, 4);\n"
        "  return y;\n}\n"),
    "halfstore_f32": (
        "static inline void relaycc_halfstore_f32(_Float16* p, float x) {\n"
        "  uint32_t u, tb, m; float fa, t;\n"
        "  __builtin_memcpy(&u, &x, 4);\n"
        "  uint32_t a = u & 0x7fffffffu;\n"
        "  uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);\n"
        "  m = 0u - (uint32_t)(r >= 0x47800000u);\n"
        "  uint32_t h = (0x7c00u & m) | (((r - 0x38000000u) >> 13) & ~m);\n"
        "  __builtin_memcpy(&fa, &a, 4);\n"
        "  t = fa + 0.5f;\n"
        "  __builtin_memcpy(&tb, &t, 4);\n"
        "  m = 0u - (uint32_t)(a < 0x38800000u);\n"
        "  h = ((tb - 0x3f000000u) & m) | (h & ~m);\n"
        "  m = 0u - (uint32_t)(a > 0x7f800000u);\n"
        "  h = ((0x7e00u | ((a >> 13) & 0x3ffu)) & m) | (h & ~m);\n"
        "  h |= (u >> 16) & 0x8000u;\n"
        "  uint16_t b = (uint16_t)h;\n"
        "  __builtin_memcpy(p, &b, 2);\n}\n"),
}

# The vector conversions the row helpers use. gcc gets its own builtins, the ones immintrin.h
# wraps: that header alone costs gcc 0.4 s of parsing in every file that includes it (float16
# ResNet-50 spreads its kernels over 18 files: 7 s of compiler CPU). Other compilers get the
# header. Loads and stores are memcpys, which compile to unaligned vector moves.
_HALF_VECTORS = (
    "#if defined(__F16C__) && !defined(RELAYCC_HALF_VECTORS)\n"
    "#define RELAYCC_HALF_VECTORS\n"
    "#if defined(__GNUC__) && !defined(__clang__)\n"
    "typedef float relaycc_f32x8 __attribute__((vector_size(32)));\n"
    "typedef short relaycc_f16x8 __attribute__((vector_size(16)));\n"
    "#define relaycc_cvtps_ph8(v) __builtin_ia32_vcvtps2ph256((v), 0)\n"
    "#define relaycc_cvtph_ps8(h) __builtin_ia32_vcvtph2ps256(h)\n"
    "#if defined(__AVX512F__)\n"
    "typedef float relaycc_f32x16 __attribute__((vector_size(64)));\n"
    "typedef short relaycc_f16x16 __attribute__((vector_size(32)));\n"
    "#define relaycc_cvtps_ph16(v) __builtin_ia32_vcvtps2ph512_mask((v), 0, (relaycc_f16x16){0}, (unsigned short)-1)\n"
    "#define relaycc_cvtph_ps16(h) __builtin_ia32_vcvtph2ps512_mask((h), (relaycc_f32x16){0}, (unsigned short)-1, 4)\n"
    "#endif\n"
    "#else\n"
    "#include <immintrin.h>\n"
    "typedef __m256 relaycc_f32x8;\n"
    "typedef __m128i relaycc_f16x8;\n"
    "#define relaycc_cvtps_ph8(v) _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT)\n"
    "#define relaycc_cvtph_ps8(h) _mm256_cvtph_ps(h)\n"
    "#if defined(__AVX512F__)\n"
    "typedef __m512 relaycc_f32x16;\n"
    "typedef __m256i relaycc_f16x16;\n"
    "#define relaycc_cvtps_ph16(v) _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT)\n"
    "#define relaycc_cvtph_ps16(h) _mm512_cvtph_ps(h)\n"
    "#endif\n"
    "#endif\n"
    "#endif\n"
)


def _row_helper(signature: str, body16: str, body8: str, scalar: str) -> str:
    """A row helper: 16 lanes at a time with AVX-512F, then 8 with F16C, then the scalar helper
    (which gcc vectorizes) for the rest, or for all of it without F16C."""
    return (
        _HALF_VECTORS +
        "static inline __attribute__((always_inline))\n"
        f"void {signature} {{\n"
        "  int64_t i = 0;\n"
        "#if defined(__AVX512F__) && defined(__F16C__)\n"
        f"  for (; i + 16 <= n; i += 16) {{\n{body16}  }}\n"
        "#endif\n"
        "#if defined(__F16C__)\n"
        f"  for (; i + 8 <= n; i += 8) {{\n{body8}  }}\n"
        "#endif\n"
        "  #pragma omp simd\n"
        # Counted from zero: with a constant n that leaves it empty, gcc 12 warns of an overflow
        # at iteration 2^63 of `for (k = i; k < n; ++k)` (-Waggressive-loop-optimizations).
        f"  for (int64_t r = 0; r < n - i; ++r) {{ const int64_t k = i + r; {scalar} }}\n}}\n")


def _converted(lanes: int, source: str, target: str, types: tuple[str, str], convert: str) -> str:
    """One step of a row helper: `lanes` values loaded from `source`, converted, stored to
    `target`; `types` are the vector types' element names (f32, f16) before and after."""
    return (f"    relaycc_{types[0]}x{lanes} v;\n"
            f"    __builtin_memcpy(&v, {source}, sizeof v);\n"
            f"    relaycc_{types[1]}x{lanes} w = {convert.format(lanes=lanes)};\n"
            f"    __builtin_memcpy({target}, &w, sizeof w);\n")


def _round_trip(lanes: int) -> str:
    return _converted(lanes, "p + i", "p + i", ("f32", "f32"), "relaycc_cvtph_ps{lanes}(relaycc_cvtps_ph{lanes}(v))")


def _widen(lanes: int) -> str:
    return _converted(lanes, "s + i", "d + i", ("f16", "f32"), "relaycc_cvtph_ps{lanes}(v)")


def _narrow(lanes: int) -> str:
    return _converted(lanes, "s + i", "d + i", ("f32", "f16"), "relaycc_cvtps_ph{lanes}(v)")


# float16 conversions of whole rows, for kernels that stage a float16 epilogue through small
# local arrays (compiler/ops/kernels/half_stages.py): with F16C, one vcvtps2ph/vcvtph2ps pair
# rounds 8 lanes (16 with AVX-512F) where the bit trick above takes ~15 operations, and gcc 12
# vectorizes no float16 conversion itself. Same bits as the scalar helpers (ties to even
# explicitly, not MXCSR's mode). Always inlined: `n` is a constant at every call, and an
# out-of-line copy (which gcc chose for three calls in one kernel) spills the arrays the calls
# share and adds vzeroupper.
_HALF_ROW_HELPERS = {
    "halfroundn_f32": _row_helper("relaycc_halfroundn_f32(float* p, int64_t n)", _round_trip(16), _round_trip(8),
                                  "p[k] = relaycc_halfround_f32(p[k]);"),
    "halfwidenn_f32": _row_helper("relaycc_halfwidenn_f32(float* d, const _Float16* s, int64_t n)", _widen(16),
                                  _widen(8), "d[k] = relaycc_halfload_f32(s + k);"),
    "halfnarrown_f32": _row_helper("relaycc_halfnarrown_f32(_Float16* d, const float* s, int64_t n)", _narrow(16),
                                   _narrow(8), "relaycc_halfstore_f32(d + k, s[k]);"),
    # A run of `n` halves at element `sk` of `s` widened into `d` from element `dk` (a band copy's
    # row: the loop code has pointers to buffers, not to their elements).
    "halfwidenat_f32": ("static inline void relaycc_halfwidenat_f32(float* d, int64_t dk, const _Float16* s, "
                        "int64_t sk, int64_t n) {\n  relaycc_halfwidenn_f32(d + dk, s + sk, n);\n}\n"),
}

# A register tile's row step, `d[0, n) += a * w[0, n)` (compiler/backend/fma_rows.py): whole
# vectors of the build machine's width through GNU C vector types, the rest in a `simd` loop.
# The types are unaligned and may alias, as a tile row of the weights need not be aligned.
_FMA_ROW_HELPERS = {
    "fmarow_f32": (
        "#if defined(__GNUC__) && !defined(RELAYCC_FMA_VECTORS)\n"
        "#define RELAYCC_FMA_VECTORS\n"
        "typedef float relaycc_fmav8 __attribute__((vector_size(32), aligned(4), may_alias));\n"
        "typedef float relaycc_fmav16 __attribute__((vector_size(64), aligned(4), may_alias));\n"
        "#endif\n"
        "static inline __attribute__((always_inline))\n"
        "void relaycc_fmarow_f32(float* restrict d, float a, const float* restrict w, int64_t n) {\n"
        "  int64_t i = 0;\n"
        "#if defined(__GNUC__) && defined(__AVX512F__)\n"
        "  for (; i + 16 <= n; i += 16) *(relaycc_fmav16*)(d + i) += a * *(const relaycc_fmav16*)(w + i);\n"
        "#endif\n"
        "#if defined(__GNUC__) && defined(__AVX__)\n"
        "  for (; i + 8 <= n; i += 8) *(relaycc_fmav8*)(d + i) += a * *(const relaycc_fmav8*)(w + i);\n"
        "#endif\n"
        "  #pragma omp simd\n"
        "  for (int64_t r = 0; r < n - i; ++r) d[i + r] += a * w[i + r];\n}\n"),
}

# Heap temporaries (codegen_c's heap-scope Allocate): aligned as the workspace's buffers are, at
# least one byte so a zero-size `?` temporary is not mistaken for a failed allocation. The C
# library's functions are declared here: generated files include no <stdlib.h>.
_HEAP_HELPERS = {
    "heap_alloc": (
        "extern int posix_memalign(void** memptr, size_t alignment, size_t size);\n"
        "extern void free(void* ptr);\n"
        "static inline void relaycc_heap_free(void* slot) { free(*(void**)slot); }\n"
        "static inline void* relaycc_heap_alloc(int64_t count, int64_t size) {\n"
        "  void* p = NULL;\n"
        "  int64_t bytes = count > 0 ? count * size : 1;\n"
        "  return posix_memalign(&p, 64, (size_t)bytes) == 0 ? p : NULL;\n}\n"),
}

HELPERS: dict[str, str] = {**_build_helpers(),
                           **{HELPER_PREFIX + k: v
                              for k, v in {**_HALF_HELPERS, **_HALF_ROW_HELPERS, **_FMA_ROW_HELPERS,
                                                    **_HEAP_HELPERS}.items()}}
_HELPER_USE = re.compile(r"\b(" + HELPER_PREFIX + r"[a-z]+_[a-z0-9]+)\(")


def helpers_used(code: str) -> list[str]:
    """Definitions of the helpers `code` calls and of those they call, each after its callees
    (the order of HELPERS)."""
    used: set[str] = set()
    pending = set(_HELPER_USE.findall(code))
    while pending:
        name = pending.pop()
        if name in HELPERS and name not in used:
            used.add(name)
            pending.update(_HELPER_USE.findall(HELPERS[name]))
    return [text for name, text in HELPERS.items() if name in used]
