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
import os
import struct
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

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
    as a Path is copied from that file by the kernel (`copy_file_range`: a large constant
    pool's C text, 4 bytes per byte of weights, never passes through Python), and the
    parameters are written from the arrays a piece at a time: a large constant pool or its
    weights are never held in memory whole. The bytes are those `tarfile` writes for the same
    members (PAX headers, records of 10240 bytes)."""
    members: list[tuple[str, int, Callable[[io.FileIO], None]]] = []

    def add_bytes(name: str, data: bytes) -> None:
        members.append((name, len(data), lambda out: _write_all(out, data)))

    def add_chunks(name: str, size: int, chunks: Callable[[], Iterable[bytes | memoryview]]) -> None:
        def write(out: io.FileIO) -> None:
            for chunk in chunks():
                _write_all(out, chunk)

        members.append((name, size, write))

    add_bytes("./metadata.json", (json.dumps(metadata, indent=2, sort_keys=True) + "\n").encode())
    add_bytes(f"./codegen/host/include/{header_name}", header.encode())
    add_bytes("./src/relay.txt", relay_text.encode())
    params_size = sum(len(chunk) for chunk in params_chunks(params))
    add_chunks(f"./parameters/{module_name}.params", params_size, lambda: params_chunks(params))
    for i, source in enumerate(c_sources):
        name = f"./codegen/host/src/{module_name}_lib{i}.c"
        if isinstance(source, Path):
            size = source.stat().st_size
            members.append((name, size, lambda out, source=source, size=size: _copy_file(source, out, size)))
        else:
            add_bytes(name, source.encode())
    tmp = path.with_name(path.name + ".tmp")
    now = int(time.time())
    try:
        with open(tmp, "wb", buffering=0) as out:
            written = 0
            for name, size, write in members:
                info = tarfile.TarInfo(name)
                info.size = size
                info.mtime = now
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mode = 0o644
                head = info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")
                _write_all(out, head)
                write(out)
                padding = -size % tarfile.BLOCKSIZE
                _write_all(out, bytes(padding))
                written += len(head) + size + padding
            # The end as tarfile.close writes it: two empty blocks, then zeros to a whole record.
            written += 2 * tarfile.BLOCKSIZE
            _write_all(out, bytes(2 * tarfile.BLOCKSIZE + -written % tarfile.RECORDSIZE))
        replace_file(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


_COPY_BYTES = 4 << 20


def _write_all(out: io.FileIO, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[out.write(view) or 0:]


def _copy_file(source: Path, out: io.FileIO, size: int) -> None:
    """`size` bytes of `source` appended to `out`: by the kernel where it can, else read and
    written here (another file system, an old kernel)."""
    with open(source, "rb", buffering=0) as stream:
        left = size
        try:
            while left:
                count = os.copy_file_range(stream.fileno(), out.fileno(), left)
                if count == 0:
                    break
                left -= count
        except OSError:
            pass
        while left:
            chunk = stream.read(min(left, _COPY_BYTES))
            if not chunk:
                raise OSError(f"{source} became shorter while it was archived")
            _write_all(out, chunk)
            left -= len(chunk)
