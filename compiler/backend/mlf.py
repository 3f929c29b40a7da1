"""Model Library Format export: the tar archive TVM's microTVM tooling reads.

Layout (TVM's MLF version 7, with the Relay text at `src/relay.txt`):

    ./metadata.json                          modules.<name>: executors, memory, target, ...
    ./codegen/host/src/<name>_lib0.c, ...    the generated C, one file per module
    ./codegen/host/include/tvmgen_<name>.h   the C interface header
    ./src/relay.txt                          the Relay module that was compiled
    ./parameters/<name>.params               bound parameters in TVM's param-dict format
"""

from __future__ import annotations

import io
import json
import struct
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from compiler.backend.file_replace import replace_file
from compiler.backend.interface_c import TensorInfo
from compiler.parser.metadata import ndarray_blob_parts

MLF_VERSION = 7
PARAMS_MAGIC = 0xF7E58D4F05049CB7
CPU_DEVICE = 1


def params_bytes(params: Mapping[str, np.ndarray]) -> bytes:
    """TVM's param-dict binary: magic, reserved, names, then one NDArray blob per name."""
    return b"".join(params_chunks(params))


def params_chunks(params: Mapping[str, np.ndarray]) -> Iterator[bytes | memoryview]:
    """`params_bytes` in pieces, each array's elements a view of the array itself: a model's
    weights are written into the archive without a copy of them all in memory."""
    names = list(params)
    yield struct.pack("<QQQ", PARAMS_MAGIC, 0, len(names))
    for name in names:
        raw = name.encode("utf-8")
        yield struct.pack("<Q", len(raw)) + raw
    yield struct.pack("<Q", len(names))
    for name in names:
        yield from ndarray_blob_parts(np.asarray(params[name]))


def mlf_metadata(
    *,
    module_name: str,
    target: str,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    workspace_bytes: int,
    constant_bytes: int,
    io_bytes: int,
    operator_workspaces: Mapping[str, int],
) -> dict[str, object]:
    main = {
        "constants_size_bytes": constant_bytes,
        "device": CPU_DEVICE,
        "io_size_bytes": io_bytes,
        "inputs": {t.name: {"dtype": t.dtype, "size": t.bytes} for t in inputs},
        "outputs": {t.name: {"dtype": t.dtype, "size": t.bytes} for t in outputs},
        "workspace_size_bytes": workspace_bytes,
    }
    operators = [
        {"function_name": name, "workspace": [{"device": CPU_DEVICE, "workspace_size_bytes": size}]}
        for name, size in sorted(operator_workspaces.items())
    ]
    return {
        "modules": {
            module_name: {
                "executors": ["aot"],
                "export_datetime": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
                "memory": {"functions": {"main": [main], "operator_functions": operators}},
                "model_name": module_name,
                "style": "full-model",
                "target": [f"{target} -keys=cpu"],
            }
        },
        "version": MLF_VERSION,
    }


def write_mlf(
    path: Path,
    *,
    module_name: str,
    metadata: Mapping[str, object],
    c_sources: Sequence[str | Path],
    header_name: str,
    header: str,
    relay_text: str,
    params: Mapping[str, np.ndarray],
) -> Path:
    """Write the archive to `path` (atomically: a temp file renamed into place). A source given
    as a Path is copied from that file, and the parameters are written from the arrays a piece
    at a time: a large constant pool or its weights are never held in memory whole."""
    members: list[tuple[str, int, Callable[[], Iterable[bytes | memoryview]]]] = []

    def add_bytes(name: str, data: bytes) -> None:
        members.append((name, len(data), lambda: (data,)))

    add_bytes("./metadata.json", (json.dumps(metadata, indent=2, sort_keys=True) + "\n").encode())
    add_bytes(f"./codegen/host/include/{header_name}", header.encode())
    add_bytes("./src/relay.txt", relay_text.encode())
    params_size = sum(len(chunk) for chunk in params_chunks(params))
    members.append((f"./parameters/{module_name}.params", params_size, lambda: params_chunks(params)))
    for i, source in enumerate(c_sources):
        name = f"./codegen/host/src/{module_name}_lib{i}.c"
        if isinstance(source, Path):
            members.append((name, source.stat().st_size, lambda source=source: _file_chunks(source)))
        else:
            add_bytes(name, source.encode())
    tmp = path.with_name(path.name + ".tmp")
    now = int(time.time())
    with tarfile.open(tmp, "w", copybufsize=_COPY_BYTES) as tar:
        for name, size, chunks in members:
            info = tarfile.TarInfo(name)
            info.size = size
            info.mtime = now
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            tar.addfile(info, io.BufferedReader(_ChunkReader(chunks()), _COPY_BYTES))
    replace_file(tmp, path)
    return path


_COPY_BYTES = 4 << 20


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as stream:
        while chunk := stream.read(_COPY_BYTES):
            yield chunk


class _ChunkReader(io.RawIOBase):
    """A readable stream over an iterable of byte chunks (what tarfile copies a member from)."""

    def __init__(self, chunks: Iterable[bytes | memoryview]):
        self._chunks = iter(chunks)
        self._current = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._current:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._current = memoryview(chunk).cast("B")
        count = min(len(buffer), len(self._current))
        buffer[:count] = self._current[:count]
        self._current = self._current[count:]
        return count
