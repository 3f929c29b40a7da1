"""The vector width probe (compiler/runtime/vector_width.py): lanes read from the assembly gcc
makes of an `omp simd` loop under the build flags, and the `tir.vector_lanes` override."""

from __future__ import annotations

import platform

import pytest

from compiler.runtime.vector_width import (
    FALLBACK_LANES,
    VECTOR_LANES_KEY,
    configured_lanes,
    lanes_in_assembly,
    native_vector_lanes,
    probe_vector_lanes,
)

X86 = platform.machine() in ("x86_64", "AMD64")


def test_lanes_are_those_of_the_widest_register_named() -> None:
    assert lanes_in_assembly("vfmadd231ps (%rsi,%rax), %zmm1, %zmm0\n vmovups %ymm2, (%rdi)") == 16
    assert lanes_in_assembly("vfmadd231ps (%rsi,%rax), %ymm1, %ymm0") == 8
    assert lanes_in_assembly("mulps %xmm1, %xmm0") == 4
    assert lanes_in_assembly("fmla v0.4s, v1.4s, v2.4s") == FALLBACK_LANES


@pytest.mark.skipif(not X86, reason="x86 instruction sets named in the flags")
def test_probe_follows_the_flags_not_the_cpu() -> None:
    # Compiling for a CPU is possible on any x86 machine; running is not needed.
    assert probe_vector_lanes(("-O3",)) == 4  # baseline x86-64: SSE2
    assert probe_vector_lanes(("-O3", "-mavx2", "-mfma")) == 8
    # gcc keeps 256-bit vectors on AVX-512 CPUs unless told to prefer 512.
    assert probe_vector_lanes(("-O3", "-march=skylake-avx512")) == 8
    assert probe_vector_lanes(("-O3", "-march=skylake-avx512", "-mprefer-vector-width=512")) == 16


def test_a_compiler_that_fails_gives_the_fallback() -> None:
    assert probe_vector_lanes(("-O3", "--no-such-flag-for-relaycc")) == FALLBACK_LANES


def test_configured_lanes_prefer_the_config_key() -> None:
    assert configured_lanes({VECTOR_LANES_KEY: 16}) == 16
    assert configured_lanes({}) == native_vector_lanes() in (4, 8, 16)
    assert configured_lanes({VECTOR_LANES_KEY: "wide"}) == native_vector_lanes()
