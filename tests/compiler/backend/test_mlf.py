import base64
import io
import json
import struct
import tarfile

import numpy as np
import pytest

from compiler.backend.interface_c import TensorInfo
from compiler.backend.mlf import PARAMS_MAGIC, mlf_metadata, params_bytes, write_mlf
from compiler.parser.metadata import decode_ndarray


def read_params(data: bytes) -> dict[str, np.ndarray]:
    stream = io.BytesIO(data)
    magic, _ = struct.unpack("<QQ", stream.read(16))
    assert magic == PARAMS_MAGIC
    (count,) = struct.unpack("<Q", stream.read(8))
    names = []
    for _ in range(count):
        (length,) = struct.unpack("<Q", stream.read(8))
        names.append(stream.read(length).decode())
    (arrays,) = struct.unpack("<Q", stream.read(8))
    assert arrays == count
    out = {}
    rest = stream.read()
    for name in names:
        # header (32 bytes) + shape + byte count + data
        ndim = struct.unpack_from("<i", rest, 24)[0]
        nbytes = struct.unpack_from("<q", rest, 32 + 8 * ndim)[0]
        size = 40 + 8 * ndim + nbytes
        out[name] = decode_ndarray(base64.b64encode(rest[:size]).decode())
        rest = rest[size:]
    return out


def test_params_file_round_trips_names_and_arrays():
    params = {"w": np.arange(6, dtype="float32").reshape(2, 3), "b": np.array([1, -2], "int64")}
    back = read_params(params_bytes(params))
    assert list(back) == ["w", "b"]
    np.testing.assert_array_equal(back["w"], params["w"])
    np.testing.assert_array_equal(back["b"], params["b"])


def test_mlf_metadata_follows_version_7_layout():
    meta = mlf_metadata(module_name="m", target="c", inputs=[TensorInfo("x", "x", (2,), "float32", 8)],
                        outputs=[TensorInfo("output", "output", (2,), "float32", 8)], workspace_bytes=64,
                        constant_bytes=0, io_bytes=16, operator_workspaces={"f": 32})
    module = meta["modules"]["m"]
    assert meta["version"] == 7 and module["style"] == "full-model" and module["executors"] == ["aot"]
    main = module["memory"]["functions"]["main"][0]
    assert main["inputs"] == {"x": {"dtype": "float32", "size": 8}}
    assert main["workspace_size_bytes"] == 64
    assert module["memory"]["functions"]["operator_functions"][0]["function_name"] == "f"


def test_write_mlf_writes_the_tar_layout(tmp_path):
    path = write_mlf(tmp_path / "m.tar", module_name="m", metadata={"version": 7}, c_sources=["int x;", "int y;"],
                     header_name="tvmgen_m.h", header="/* h */", relay_text="#[version]", params={})
    with tarfile.open(path) as tar:
        assert sorted(tar.getnames()) == sorted([
            "./metadata.json", "./codegen/host/include/tvmgen_m.h", "./src/relay.txt",
            "./parameters/m.params", "./codegen/host/src/m_lib0.c", "./codegen/host/src/m_lib1.c"])
        assert json.load(tar.extractfile("./metadata.json")) == {"version": 7}
        assert all(m.uname == "root" for m in tar.getmembers())
    assert not (tmp_path / "m.tar.tmp").exists()


def test_a_source_given_as_a_file_is_copied_into_the_archive(tmp_path):
    pool = tmp_path / "pool.c"
    pool.write_bytes(b'const char pool[] = "' + b"\\101" * 5000 + b'";\n')
    path = write_mlf(tmp_path / "m.tar", module_name="m", metadata={}, c_sources=["int x;", pool],
                     header_name="tvmgen_m.h", header="", relay_text="", params={})
    with tarfile.open(path) as tar:
        assert tar.extractfile("./codegen/host/src/m_lib0.c").read() == b"int x;"
        assert tar.extractfile("./codegen/host/src/m_lib1.c").read() == pool.read_bytes()


def test_archived_parameters_hold_strided_bool_and_large_arrays(tmp_path):
    matrix = np.arange(12, dtype="float32").reshape(3, 4)
    params = {"t": matrix.T, "mask": np.array([True, False, True]),
              "big": np.linspace(-1, 1, 5_000_000, dtype="float32")}
    path = write_mlf(tmp_path / "m.tar", module_name="m", metadata={}, c_sources=[], header_name="tvmgen_m.h",
                     header="", relay_text="", params=params)
    with tarfile.open(path) as tar:
        data = tar.extractfile("./parameters/m.params").read()
    assert data == params_bytes(params)
    back = read_params(data)
    assert list(back) == ["t", "mask", "big"]
    np.testing.assert_array_equal(back["t"], matrix.T)
    np.testing.assert_array_equal(back["mask"], params["mask"])
    np.testing.assert_array_equal(back["big"], params["big"])


def test_a_parameter_of_an_unstorable_dtype_is_an_error_and_leaves_no_archive(tmp_path):
    with pytest.raises(ValueError, match="complex64"):
        write_mlf(tmp_path / "m.tar", module_name="m", metadata={}, c_sources=[], header_name="tvmgen_m.h",
                  header="", relay_text="", params={"c": np.zeros(2, "complex64")})
    assert not (tmp_path / "m.tar").exists()


def test_the_archive_is_byte_for_byte_what_tarfile_writes_for_its_members(tmp_path):
    pool = tmp_path / "pool.c"
    pool.write_bytes(bytes(range(256)) * 40_000 + b"tail")  # not a whole number of tar blocks
    params = {"w": np.linspace(0, 1, 1000, dtype="float32")}
    path = write_mlf(tmp_path / "m.tar", module_name="m", metadata={"version": 7}, c_sources=["int x;", pool],
                     header_name="tvmgen_m.h", header="/* h */", relay_text="#[version]", params=params)
    with tarfile.open(path) as tar:
        mtime = tar.getmembers()[0].mtime  # the time of writing, the same for every member
    members = [("./metadata.json", json.dumps({"version": 7}, indent=2, sort_keys=True).encode() + b"\n"),
               ("./codegen/host/include/tvmgen_m.h", b"/* h */"), ("./src/relay.txt", b"#[version]"),
               ("./parameters/m.params", params_bytes(params)), ("./codegen/host/src/m_lib0.c", b"int x;"),
               ("./codegen/host/src/m_lib1.c", pool.read_bytes())]
    expected = io.BytesIO()
    with tarfile.open(fileobj=expected, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.uid, info.gid, info.mode = len(data), mtime, 0, 0, 0o644
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    assert path.read_bytes() == expected.getvalue()
