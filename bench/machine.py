"""What the benchmark ran on and what that machine can do at best: the CPU and its vector
extensions, the versions of every peer, and the measured FMA peak (bench/fma_peak.c)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

FMA_SOURCE = Path(__file__).resolve().parent / "fma_peak.c"
# The flags that decide which kernels a compiler or library picks on x86.
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx512_fp16", "amx_tile")
PACKAGES = ("numpy", "onnxruntime", "onnx", "torch")


def cpuinfo(text: str) -> dict[str, object]:
    """Model name and vector flags from /proc/cpuinfo's first processor."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", platform.processor() or "unknown"),
            "vector_flags": [f for f in VECTOR_FLAGS if f in flags]}


def describe() -> dict[str, object]:
    try:
        info = cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        info = {"model": platform.processor() or "unknown", "vector_flags": []}
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
    return {
        **info,
        "cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "gcc": gcc,
        "versions": versions,
        # Other work on a shared machine shows up here; 2-thread rows suffer most from it.
        "load_average": list(os.getloadavg()),
        # Set on some machines to keep old OpenBLAS builds correct; they slow a current one.
        "openblas_env": {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ},
    }


def summary(info: dict[str, object]) -> str:
    flags = list(info["vector_flags"])  # type: ignore[call-overload]  # a list from describe()
    width = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{info['model']}, {info['cores']} cores, {width} ({' '.join(flags)})"


def build_fma_peak(directory: Path) -> Path:
    binary = directory / "fma_peak"
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", str(FMA_SOURCE), "-o", str(binary)],
                   check=True, capture_output=True, text=True)
    return binary


def fma_peak(binary: Path, threads: int, seconds: float, runs: int = 7) -> dict[str, float]:
    """GFLOP/s of the FMA loop on `threads` threads, best of `runs` short runs: the peak is what
    the cores can do, so on a shared machine the least disturbed run is the right one."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    best, bits = 0.0, 0
    for _ in range(runs):
        out = subprocess.run([str(binary), str(threads), str(seconds)], check=True, capture_output=True,
                             text=True, env=env).stdout.split()
        best, bits = max(best, float(out[0])), int(out[1])
    return {"gflops": best, "vector_bits": bits}
