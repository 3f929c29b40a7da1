"""How wide the vectors are that the C compiler makes of our `omp simd` loops on this machine.

The register tiles of the products (compiler/ops/kernels/gemm.py) and the block of the weights
AlterOpLayout packs at compile time are sized in float32 lanes. The right number is what gcc
emits under the build's own flags, not what the CPU could do: with `-march=native` on an
AVX-512 CPU gcc still prefers 256-bit vectors unless told `-mprefer-vector-width=512`, and a
16-lane tile compiled to 8-lane registers needs twice the registers it has and spills. So the
probe compiles one `omp simd` loop to assembly with the default flags and reads which vector
registers it uses (zmm: 16 float32 lanes, ymm: 8, xmm: 4), once per process. The PassContext
key `tir.vector_lanes` overrides it.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Mapping, Sequence

VECTOR_LANES_KEY = "tir.vector_lanes"  # float32 lanes of the widest vector unit used
FALLBACK_LANES = 4  # SSE2 / NEON: any 64-bit CPU has at least this
_PROBE = """
void relaycc_probe(float* restrict out, const float* restrict a, const float* restrict b) {
  #pragma omp simd
  for (int i = 0; i < 256; ++i) out[i] = a[i] * b[i] + out[i];
}
"""
_REGISTERS = (("zmm", 16), ("ymm", 8), ("xmm", 4))
_TIMEOUT_S = 60


def lanes_in_assembly(assembly: str) -> int:
    """Float32 lanes of the widest vector register named in x86 assembly; FALLBACK_LANES when
    there is none (another architecture, or no vector code)."""
    for name, lanes in _REGISTERS:
        if re.search(rf"%{name}\d", assembly):
            return lanes
    return FALLBACK_LANES


def native_vector_lanes() -> int:
    """Float32 lanes of the vectors gcc makes with the default build flags (cached)."""
    from compiler.runtime.build import DEFAULT_CFLAGS

    return probe_vector_lanes(tuple(DEFAULT_CFLAGS))


@functools.lru_cache(maxsize=8)
def probe_vector_lanes(cflags: Sequence[str]) -> int:
    from compiler.runtime.build import c_compiler

    flags = [f for f in cflags if f not in ("-shared", "-fPIC")]
    command = [*c_compiler(), *flags, "-fopenmp-simd", "-S", "-o", "-", "-x", "c", "-"]
    try:
        proc = subprocess.run(command, input=_PROBE, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return FALLBACK_LANES
    if proc.returncode != 0:
        return FALLBACK_LANES
    return lanes_in_assembly(proc.stdout)


def configured_lanes(config: Mapping[str, object]) -> int:
    """`tir.vector_lanes` from a config mapping when it is a positive integer, else the probe."""
    value = config.get(VECTOR_LANES_KEY)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return native_vector_lanes()
