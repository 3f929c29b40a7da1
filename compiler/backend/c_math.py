"""float32 exp, erf and tanh as static inline C that gcc vectorizes.

math.h's expf, erff and tanhf are calls gcc cannot vectorize without -ffast-math, so a loop of
softmax or of a gelu epilogue ran one element at a time. These versions use only arithmetic,
comparisons and integer<->float bit casts, and every choice between two values is a bit mask
(`relaycc_pick_f32`), not a `?:`: gcc threads a `?:` on a float comparison into branches and
then refuses to if-convert them (a division or an overflowing product in one arm may trap), so
the loop would stay scalar.

Accuracy (distance from the float64 value in float32 ulps, checked over every float32 with
gcc 12 -O3 -march=native): exp 0.94 (1.17 where gcc does not contract to FMA), erf 1.17, tanh
1.37; inf, -inf, NaN, -0.0, overflow to inf and gradual underflow to denormals and 0 come out
as libm has them. float64 keeps libm.

The polynomial coefficients are our own fits (weighted least squares on relative error, in
float64, rounded to float32): Taylor's for exp on |r| <= ln2/2; erf(x) = x + x*P(x*x) for
|x| < 1; erfc(x) = exp(-x*x) * Q(1/x - 0.625) for 1 <= |x| <= 4 (beyond 3.92 erf rounds to 1);
tanh(x) = x + x^3 * T(x*x) for |x| < 0.625, else 1 - 2 / (exp(2|x|) + 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# The functions routed here, by their math.h name; their C names are relaycc_<name>_f32.
VECTOR_MATH_F32 = ("exp", "erf", "tanh")


def _horner(var: str, acc: str, coefficients: Sequence[float]) -> str:
    """`acc` = the polynomial in `var` whose coefficients run from the highest power down."""
    first, *rest = coefficients
    lines = [f"  float {acc} = {first!r}f;"]
    lines += [f"  {acc} = {acc} * {var} + {c!r}f;" for c in rest]
    return "\n".join(lines) + "\n"


# Taylor's series to degree 7: within 0.1 ulp on |r| <= ln2/2.
_EXP_POLY = (1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 0.5, 1.0, 1.0)
_ERF_SMALL = (7.898709736764431e-05, -0.0008024823036976159, 0.005190162919461727, -0.02685491554439068,
              0.11283617466688156, -0.3761262893676758, 0.12837916612625122)
_ERFC_LARGE = (-0.03674747794866562, 0.025932351127266884, 0.005812938790768385, -0.026895225048065186,
               0.04307516664266586, -0.04694567620754242, 0.023337868973612785, 0.043767042458057404,
               -0.17239490151405334, 0.3822837769985199, 0.3059529960155487)
_TANH_SMALL = (0.0026856327895075083, -0.008730323053896427, 0.02190074324607849, -0.05397709086537361,
               0.13333378732204437, -0.3333333432674408)


def _f32(values: Sequence[float]) -> tuple[float, ...]:
    """Each value rounded to float32, so that its printed literal is exact."""
    return tuple(float(np.float32(v)) for v in values)


# Bit casts through a union, which C99 defines (a pointer cast would break strict aliasing).
_ASINT = ("static inline __attribute__((always_inline)) int32_t relaycc_asint_f32(float x) "
          "{ return ((union { float f; int32_t i; }){ .f = x }).i; }\n")
_ASFLOAT = ("static inline __attribute__((always_inline)) float relaycc_asfloat_i32(int32_t i) "
            "{ return ((union { int32_t i; float f; }){ .i = i }).f; }\n")

# `take_a` is 0 or 1 (a C comparison).
_PICK = (
    "static inline __attribute__((always_inline)) float relaycc_pick_f32(int32_t take_a, float a, float b) {\n"
    "  int32_t mask = -take_a;\n"
    "  return relaycc_asfloat_i32((relaycc_asint_f32(a) & mask) | (relaycc_asint_f32(b) & ~mask));\n"
    "}\n"
)

# Clamped so that n = round(x / ln2) stays in [-150, 128]: beyond, the result is 0 or inf anyway.
# 2^n is applied as two normal powers of two, so a denormal result is rounded only once.
_EXP = (
    "static inline __attribute__((always_inline)) float relaycc_exp_f32(float x) {\n"
    "  float xc = relaycc_pick_f32(x < -104.0f, -104.0f, x);\n"
    "  xc = relaycc_pick_f32(xc > 89.0f, 89.0f, xc);\n"
    "  /* Adding 1.5 * 2^23 rounds to an integer, which the low bits then hold. */\n"
    "  float shifted = xc * 1.44269502f + 12582912.0f;\n"
    "  float n = shifted - 12582912.0f;\n"
    "  int32_t ni = relaycc_asint_f32(shifted) - 0x4B400000;\n"
    "  /* ln2 in two parts, the first with few bits so that n * it is exact. */\n"
    "  float r = xc - n * 0.693145751953125f;\n"
    "  r = r - n * 1.42860677e-06f;\n"
    + _horner("r", "p", _f32(_EXP_POLY))
    + "  int32_t n1 = ni >> 1;\n"
    "  int32_t n2 = ni - n1;\n"
    "  float s1 = relaycc_asfloat_i32((int32_t)((uint32_t)(n1 + 127) << 23));\n"
    "  float s2 = relaycc_asfloat_i32((int32_t)((uint32_t)(n2 + 127) << 23));\n"
    "  return (p * s1) * s2;\n"
    "}\n"
)

# The clamp keeps NaN (a comparison with NaN is false), and both branches are computed for every
# lane; 1/a of a = 0 is inf in the branch that is not picked.
_ERF = (
    "static inline __attribute__((always_inline)) float relaycc_erf_f32(float x) {\n"
    "  float a = fabsf(x);\n"
    "  a = relaycc_pick_f32(a > 4.0f, 4.0f, a);\n"
    "  float z = a * a;\n"
    + _horner("z", "s", _f32(_ERF_SMALL))
    + "  float small = a + a * s;\n"
    "  float u = 1.0f / a - 0.625f;\n"
    + _horner("u", "q", _f32(_ERFC_LARGE))
    + "  float large = 1.0f - relaycc_exp_f32(-z) * q;\n"
    "  return copysignf(relaycc_pick_f32(a < 1.0f, small, large), x);\n"
    "}\n"
)

# tanh(9.5) rounds to 1, and exp(19) is far from overflow.
_TANH = (
    "static inline __attribute__((always_inline)) float relaycc_tanh_f32(float x) {\n"
    "  float a = fabsf(x);\n"
    "  a = relaycc_pick_f32(a > 9.5f, 9.5f, a);\n"
    "  float z = a * a;\n"
    + _horner("z", "t", _f32(_TANH_SMALL))
    + "  float small = a + a * z * t;\n"
    "  float large = 1.0f - 2.0f / (relaycc_exp_f32(2.0f * a) + 1.0f);\n"
    "  return copysignf(relaycc_pick_f32(a < 0.625f, small, large), x);\n"
    "}\n"
)


def math_helpers() -> dict[str, str]:
    """The definitions by C name, each after the ones it calls."""
    return {
        "relaycc_asint_f32": _ASINT,
        "relaycc_asfloat_i32": _ASFLOAT,
        "relaycc_pick_f32": _PICK,
        "relaycc_exp_f32": _EXP,
        "relaycc_erf_f32": _ERF,
        "relaycc_tanh_f32": _TANH,
    }
