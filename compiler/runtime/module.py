"""A compiled model on disk (an OUTDIR), loaded through cffi and run with numpy arrays.

The library's C entry `tvmgen_<name>_run(inputs*, outputs*)` is called with pointers straight
into the numpy arrays (no copies); inputs are checked for name, shape and dtype first, so a
mistake is an InputError, never a crash in C.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler.backend.interface_c import TensorInfo, cffi_cdef
from compiler.diagnostics import InputError
from compiler.runtime.ffi import Library, aligned_empty, load_library


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
        cdef = cffi_cdef(
            self.module_name,
            self.inputs,
            self.outputs,
            memory["workspace_bytes"],
            interface["workspace_byte_alignment"],
            memory["constant_bytes"],
        )
        library = outdir / interface["library"]
        if not library.exists():
            raise InputError(f"{library} does not exist; was the build finished?")
        self.lib: Library = load_library(library, cdef)

    def check_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
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
            if tuple(array.shape) != tuple(t.shape):
                raise InputError(f"input {t.name}: expected shape {tuple(t.shape)}, got {tuple(array.shape)}")
            checked[t.c_name] = np.ascontiguousarray(array)
        return checked

    def run(self, inputs: Mapping[str, np.ndarray], repeat: int = 1) -> RunResult:
        if repeat < 1:
            raise InputError(f"repeat must be at least 1, got {repeat}")
        arrays = self.check_inputs(inputs)
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


__all__ = ["CompiledModule", "RunResult", "aligned_empty"]
