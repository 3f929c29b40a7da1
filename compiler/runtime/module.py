"""A compiled model on disk (an OUTDIR), loaded through cffi and run with numpy arrays.

The library's C entry `tvmgen_<name>_run(inputs*, outputs*)` is called with pointers straight
into the numpy arrays (no copies); inputs are checked for name, shape and dtype first, so a
mistake is an InputError, never a crash in C. A model with `?` dims (interface `dynamic`) takes
DLTensors: any shape that conforms to the declared one runs, and the entry allocates the outputs
(compiler/backend/aot_dynamic.py), which are copied into numpy arrays and released.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler.backend.dlpack import DTYPE_CODES
from compiler.backend.interface_c import TensorInfo, cffi_cdef, dynamic_cffi_cdef
from compiler.diagnostics import InputError
from compiler.runtime.ffi import Library, aligned_empty, load_library
from compiler.runtime.threads import set_threads


@dataclass(frozen=True)
class RunResult:
    outputs: list[np.ndarray]
    times_us: list[float]

    @property
    def median_us(self) -> float:
        return float(np.median(self.times_us))

    @property
    def min_us(self) -> float:
        return float(min(self.times_us))


@dataclass(frozen=True)
class Profile:
    """A profiled run: its result, and for each kernel call in execution order the kernel's
    name and its mean time per run in microseconds."""

    result: RunResult
    kernels: list[str]
    kernel_us: list[float]

    def rows(self, functions: Mapping[str, Mapping[str, object]] | None = None) -> list[dict[str, object]]:
        """One row per kernel (its calls summed), slowest first, with its share of the run; with
        the report's `functions`, also its result shape and the GFLOP/s of its products (None
        where a kernel does none)."""
        total_us: dict[str, float] = {}
        calls: dict[str, int] = {}
        for name, us in zip(self.kernels, self.kernel_us):
            total_us[name] = total_us.get(name, 0.0) + us
            calls[name] = calls.get(name, 0) + 1
        run_us = float(np.mean(self.result.times_us))
        info = functions or {}

        def extra(name: str, us: float) -> dict[str, object]:
            entry = info.get(name, {})
            flops = int(entry.get("flops", 0) or 0)  # type: ignore[call-overload]  # an int in reports
            rate = round(flops * calls[name] / (us * 1e3), 2) if flops and us > 0 else None
            return {"shape": entry.get("out_shape"), "gflops": rate}

        rows = [{"kernel": name, "calls": calls[name], "us": round(us, 3),
                 "percent": round(100.0 * us / run_us, 2) if run_us > 0 else 0.0, **extra(name, us)}
                for name, us in total_us.items()]
        return sorted(rows, key=lambda row: -float(row["us"]))  # type: ignore[arg-type]


def _profile_cdef(module_name: str) -> str:
    prefix = f"tvmgen_{module_name}"
    return (f"\nint32_t {prefix}_profile_calls(void);\nconst char* {prefix}_profile_name(int32_t call);\n"
            f"void {prefix}_profile(int64_t* nanoseconds);\n")


def _tensors(entries: object) -> list[TensorInfo]:
    assert isinstance(entries, list)
    return [
        TensorInfo(e["name"], e["c_name"], tuple(e["shape"]), e["dtype"], e["bytes"]) for e in entries
    ]


class CompiledModule:
    def __init__(self, outdir: Path):
        outdir = Path(outdir)
        meta_path = outdir / "metadata.json"
        try:
            report = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise InputError(f"{meta_path}: not a compiled model directory ({err})") from None
        interface = report.get("interface")
        if not isinstance(interface, dict):
            raise InputError(f"{outdir}: built by `relaycc lower` (no library); use `relaycc compile`")
        self.outdir = outdir
        self.report = report
        self.module_name: str = report["module_name"]
        self.entry: str = interface["entry"]
        self.inputs = _tensors(interface["inputs"])
        self.outputs = _tensors(interface["outputs"])
        memory = report["memory"]
        self.dynamic = bool(interface.get("dynamic"))
        if self.dynamic:
            cdef = dynamic_cffi_cdef(self.module_name, self.inputs, self.outputs) + _profile_cdef(self.module_name)
        else:
            cdef = cffi_cdef(
                self.module_name,
                self.inputs,
                self.outputs,
                memory["workspace_bytes"],
                interface["workspace_byte_alignment"],
                memory["constant_bytes"],
            ) + _profile_cdef(self.module_name)
        library = outdir / interface["library"]
        if not library.exists():
            raise InputError(f"{library} does not exist; was the build finished?")
        self.lib: Library = load_library(library, cdef)

    def check_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = self._by_relay_name(inputs)
        names = [t.name for t in self.inputs]
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise InputError(f"unknown input {unknown[0]!r}; the model takes {', '.join(names) or 'no inputs'}")
        checked = {}
        for t in self.inputs:
            if t.name not in inputs:
                raise InputError(f"missing input {t.name!r}")
            array = np.asarray(inputs[t.name])
            if str(array.dtype) != t.dtype:
                raise InputError(f"input {t.name}: expected dtype {t.dtype}, got {array.dtype}")
            if not _conforms(array.shape, t.shape):
                raise InputError(f"input {t.name}: expected shape {_symbolic(t.shape)}, got {tuple(array.shape)}")
            checked[t.c_name] = np.ascontiguousarray(array)
        return checked

    def _by_relay_name(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """Inputs of a model imported from ONNX may be named as the ONNX graph names them
        (`gpu_0/data_0`) as well as by their Relay names (`gpu_0_data_0`)."""
        entries = self.report["interface"]["inputs"]
        relay_of = {e["onnx_name"]: e["name"] for e in entries if "onnx_name" in e and e["onnx_name"] != e["name"]}
        if not relay_of or not any(name in relay_of for name in inputs):
            return inputs
        renamed: dict[str, np.ndarray] = {}
        for name, value in inputs.items():
            relay = relay_of.get(name, name)
            if relay in renamed:
                raise InputError(f"input {relay!r} is given twice (by its Relay and its ONNX name)")
            renamed[relay] = value
        return renamed

    def run(self, inputs: Mapping[str, np.ndarray], repeat: int = 1, threads: int | None = None) -> RunResult:
        """Run `repeat` times; with `threads`, on that many threads (else as many as the
        OpenMP runtime was told, all cores by default)."""
        if repeat < 1:
            raise InputError(f"repeat must be at least 1, got {repeat}")
        if threads is not None:
            set_threads(threads)
        arrays = self.check_inputs(inputs)
        if self.dynamic:
            return self._run_dynamic(arrays, repeat)
        outputs = [np.empty(t.shape, dtype=t.dtype) for t in self.outputs]
        prefix = f"struct tvmgen_{self.module_name}"
        in_struct = self.lib.new_struct(f"{prefix}_inputs", **(arrays or {"unused_": None}))
        out_fields = {t.c_name: a for t, a in zip(self.outputs, outputs)}
        out_struct = self.lib.new_struct(f"{prefix}_outputs", **(out_fields or {"unused_": None}))
        times = []
        for _ in range(repeat):
            start = time.perf_counter_ns()
            status = self.lib.call(self.entry, in_struct, out_struct)
            times.append((time.perf_counter_ns() - start) / 1000.0)
            if status != 0:
                raise InputError(f"{self.entry} returned {status}: a kernel or external call failed")
        return RunResult(outputs, times)


    def profile(self, inputs: Mapping[str, np.ndarray], repeat: int = 1, threads: int | None = None) -> Profile:
        """Run as `run` does (after one run that is not timed), timing every kernel call of the
        executor."""
        prefix = f"tvmgen_{self.module_name}"
        try:
            count_calls, name_of, give = (getattr(self.lib.lib, f"{prefix}_profile{suffix}")
                                          for suffix in ("_calls", "_name", ""))
        except AttributeError:
            raise InputError(
                f"{self.outdir}: no kernel timing in this library (models with control flow have none "
                "yet, nor libraries built before relaycc had profiling)"
            ) from None
        ffi = self.lib.ffi
        calls = int(count_calls())
        counters = ffi.new("int64_t[]", max(calls, 1))
        self.run(inputs, threads=threads)  # not timed: the first run pays for page faults and thread start-up
        give(counters)
        try:
            result = self.run(inputs, repeat=repeat, threads=threads)
        finally:
            give(ffi.NULL)
        names = [ffi.string(name_of(i)).decode() for i in range(calls)]
        return Profile(result, names, [counters[i] / 1000.0 / repeat for i in range(calls)])

    def _run_dynamic(self, arrays: dict[str, np.ndarray], repeat: int) -> RunResult:
        ffi = self.lib.ffi
        keep: list[object] = []

        def dltensor(info: TensorInfo, array: np.ndarray | None) -> object:
            t = ffi.new("DLTensor*")
            t.device.device_type, t.device.device_id = 1, 0
            t.ndim = len(info.shape)
            code, bits = DTYPE_CODES[info.dtype]
            t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
            shape = ffi.new("int64_t[]", list(array.shape) if array is not None else [0] * max(len(info.shape), 1))
            t.shape = shape
            t.data = ffi.cast("void*", array.ctypes.data) if array is not None else ffi.NULL
            keep.extend((t, shape, array))
            return t

        prefix = f"struct tvmgen_{self.module_name}"
        in_struct = ffi.new(f"{prefix}_inputs*")
        for info in self.inputs:
            setattr(in_struct, info.c_name, dltensor(info, arrays[info.c_name]))
        fn = getattr(self.lib.lib, self.entry)
        release = getattr(self.lib.lib, f"tvmgen_{self.module_name}_free")
        times: list[float] = []
        outputs: list[np.ndarray] = []
        for _ in range(repeat):
            out_struct = ffi.new(f"{prefix}_outputs*")
            out_tensors = [dltensor(info, None) for info in self.outputs]
            for info, t in zip(self.outputs, out_tensors):
                setattr(out_struct, info.c_name, t)
            start = time.perf_counter_ns()
            status = fn(in_struct, out_struct)
            times.append((time.perf_counter_ns() - start) / 1000.0)
            if status != 0:
                raise InputError(f"{self.entry} returned {status}: {_DYNAMIC_STATUS.get(status, 'unknown status')}")
            outputs = []
            for info, t in zip(self.outputs, out_tensors):
                shape = tuple(int(t.shape[k]) for k in range(len(info.shape)))
                count = int(np.prod(shape, dtype=np.int64))
                nbytes = count * np.dtype(info.dtype).itemsize
                data = np.frombuffer(ffi.buffer(t.data, nbytes), dtype=info.dtype).reshape(shape).copy() \
                    if nbytes else np.empty(shape, dtype=info.dtype)
                release(t.data)
                outputs.append(data)
        keep.clear()  # the C side no longer points into these
        return RunResult(outputs, times)


_DYNAMIC_STATUS = {
    -1: "a kernel, shape function or external call failed",
    -2: "an input does not conform to its declared type",
    -3: "an output does not conform to its computed shape",
    -4: "memory ran out",
    -5: "the inputs' shapes conform one by one but not together (two `?` dims the model needs equal "
        "differ, or a reshape gets a different number of elements)",
}


def _conforms(shape: tuple[int, ...], declared: tuple[int, ...]) -> bool:
    """`shape` fits `declared`, where -1 is a `?` dim any extent fits."""
    return len(shape) == len(declared) and all(d < 0 or d == s for s, d in zip(shape, declared))


def _symbolic(shape: tuple[int, ...]) -> str:
    dims = ["?" if d < 0 else str(d) for d in shape]
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


__all__ = ["CompiledModule", "Profile", "RunResult", "aligned_empty"]
