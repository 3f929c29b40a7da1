"""Model Library Format export: the tar archive TVM's microTVM tooling reads.

Layout (TVM's MLF version 7, with the Relay text at `src/relay.txt`):

    ./metadata.json                          modules.<name>: executors, memory, target, ...
    ./codegen/host/src/<name>_lib0.c, ...    the generated C, one file per module
    ./codegen/host/include/tvmgen_<name>.h   the C interface header
    ./src/relay.txt                          the Relay module that was compiled
    ./parameters/<name>.params               bound parameters in TVM's param-dict format
"""

from __future__ import annotations

import base64
import io
import json
import struct
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from compiler.backend.interface_c import TensorInfo
from compiler.parser.metadata import encode_ndarray

MLF_VERSION = 7
PARAMS_MAGIC = 0xF7E58D4F05049CB7
CPU_DEVICE = 1


def params_bytes(params: Mapping[str, np.ndarray]) -> bytes:
    """TVM's param-dict binary: magic, reserved, names, then one NDArray blob per name."""
    out = io.BytesIO()
    out.write(struct.pack("<QQ", PARAMS_MAGIC, 0))
    names = list(params)
    out.write(struct.pack("<Q", len(names)))
    for name in names:
        raw = name.encode("utf-8")
        out.write(struct.pack("<Q", len(raw)))
        out.write(raw)
    out.write(struct.pack("<Q", len(names)))
    for name in names:
        out.write(base64.b64decode(encode_ndarray(np.asarray(params[name]))))
    return out.getvalue()


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
    as a Path is copied from that file (a large constant pool is never held in memory whole)."""
    files: list[tuple[str, bytes | Path]] = [
        ("./metadata.json", (json.dumps(metadata, indent=2, sort_keys=True) + "\n").encode()),
        (f"./codegen/host/include/{header_name}", header.encode()),
        ("./src/relay.txt", relay_text.encode()),
        (f"./parameters/{module_name}.params", params_bytes(params)),
    ]
    for i, source in enumerate(c_sources):
        files.append((f"./codegen/host/src/{module_name}_lib{i}.c", source if isinstance(source, Path) else source.encode()))
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = data.stat().st_size if isinstance(data, Path) else len(data)
            info.mtime = int(time.time())
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            if isinstance(data, Path):
                with open(data, "rb") as stream:
                    tar.addfile(info, stream)
            else:
                tar.addfile(info, io.BytesIO(data))
    tmp.replace(path)
    return path
