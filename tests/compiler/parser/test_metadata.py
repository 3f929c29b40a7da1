"""The #[metadata] section: TVM's node-graph JSON and base64 NDArray blobs, both directions."""

from __future__ import annotations

import base64
import io
import json
import struct
from collections.abc import Callable

import numpy as np
import pytest

from compiler.diagnostics import ParseError, Source, Span
from compiler.ir.expr import Constant
from compiler.ir.types import DTYPES, TensorType
from compiler.parser import astext, parse
from compiler.parser.metadata import (
    MetaAttrs,
    decode_metadata,
    decode_ndarray,
    encode_metadata,
    encode_ndarray,
    ndarray_blob_parts,
    write_metadata,
    write_ndarray_b64,
)

# TVM's own encoding of float32 [[1, 2], [3, 4]] (tvm-facts §1.4).
FLOAT32_2X2_BLOB = "P6G0lvBAXt0AAAAAAAAAAAEAAAAAAAAAAgAAAAIgAQACAAAAAAAAAAIAAAAAAAAAEAAAAAAAAAAAAIA/AAAAQAAAQEAAAIBA"
SPAN = Span(Source("model.relay", "#[metadata]\n{}"), 1, 1, 12)


def sample(dtype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    if dtype == "bool":
        return (np.arange(int(np.prod(shape))) % 3 == 0).reshape(shape)
    values = np.arange(int(np.prod(shape))) - (0 if dtype.startswith("uint") else 2)
    return (values * (1.5 if dtype.startswith("float") else 1)).astype(dtype).reshape(shape)


def constants_of(text: str) -> list[Constant]:
    items = decode_metadata(text, SPAN)["relay.Constant"]
    assert all(isinstance(c, Constant) for c in items)
    return [c for c in items if isinstance(c, Constant)]


def test_encode_ndarray_matches_tvms_blob_for_a_float32_matrix():
    assert encode_ndarray(np.array([[1, 2], [3, 4]], dtype="float32")) == FLOAT32_2X2_BLOB


def test_decode_metadata_reads_tvms_blob_for_a_float32_matrix():
    graph = json.loads(encode_metadata([np.zeros(1, "float32")]))
    graph["b64ndarrays"] = [FLOAT32_2X2_BLOB]
    (const,) = constants_of(json.dumps(graph))
    assert const.data.dtype == np.float32
    np.testing.assert_array_equal(const.data, [[1, 2], [3, 4]])
    assert const.span is SPAN


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (4,), (2, 3), (1, 2, 0)])
def test_metadata_round_trips_every_dtype_and_shape(dtype, shape):
    array = sample(dtype, shape)
    (const,) = constants_of(encode_metadata([array]))
    assert const.data.dtype == array.dtype
    assert const.data.shape == shape
    np.testing.assert_array_equal(const.data, array)


def test_metadata_stores_bool_as_one_bit_unsigned_in_whole_bytes():
    blob = base64.b64decode(encode_ndarray(np.array([True, False, True])))
    code, bits, lanes = struct.unpack_from("<BBH", blob, 28)
    assert (code, bits, lanes) == (1, 1, 1)
    (nbytes,) = struct.unpack_from("<q", blob, 40)
    assert nbytes == 3 and blob[48:] == b"\x01\x00\x01"


def test_encode_metadata_lays_out_nodes_in_tvms_discovery_order():
    graph = json.loads(encode_metadata([sample("float32"), sample("int8"), sample("bool")]))
    nodes = graph["nodes"]
    assert graph["root"] == 1
    assert nodes[0] == {"type_key": ""}
    assert nodes[1] == {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]}
    assert nodes[2] == {"type_key": "Array", "data": [3, 6, 7]}
    assert nodes[3] == {
        "type_key": "relay.Constant",
        "attrs": {"_checked_type_": "0", "data": "0", "span": "0", "virtual_device_": "4"},
    }
    assert nodes[4]["type_key"] == "VirtualDevice"
    assert nodes[4]["attrs"]["memory_scope"] == "5"
    assert nodes[5] == {"type_key": "runtime.String"}
    assert [nodes[i]["attrs"]["data"] for i in (3, 6, 7)] == ["0", "1", "2"]
    assert all(blob.startswith("P6G0lvBAXt0") for blob in graph["b64ndarrays"])
    assert graph["attrs"] == {"tvm_version": "0.13.0"}


def test_decode_metadata_keeps_other_type_keys_as_raw_nodes():
    graph = json.loads(encode_metadata([sample("int32")]))
    for key, fields in (("relay.attrs.Conv2DAttrs", {"groups": "1"}), ("relay.Var", {"span": "0"})):
        graph["nodes"][1]["keys"].append(key)
        graph["nodes"][1]["data"].append(len(graph["nodes"]))
        graph["nodes"].append({"type_key": "Array", "data": [len(graph["nodes"]) + 1]})
        graph["nodes"].append({"type_key": key, "attrs": fields})
    table = decode_metadata(json.dumps(graph), SPAN)
    (attrs_node,) = table["relay.attrs.Conv2DAttrs"]
    assert isinstance(attrs_node, MetaAttrs) and attrs_node.fields == {"groups": "1"}
    assert table["relay.Var"] == [{"type_key": "relay.Var", "attrs": {"span": "0"}}]
    assert isinstance(table["relay.Constant"][0], Constant)


def test_decode_metadata_accepts_maps_with_key_nodes():
    graph = json.loads(encode_metadata([sample("int16")]))
    key_index = len(graph["nodes"])
    graph["nodes"].append({"type_key": "runtime.String", "repr_str": "relay.Constant"})
    graph["nodes"][1] = {"type_key": "Map", "data": [key_index, 2]}
    (const,) = constants_of(json.dumps(graph))
    assert const.data.dtype == np.int16


def test_encode_metadata_refuses_dtypes_tvm_cannot_store():
    with pytest.raises(ValueError, match="complex64"):
        encode_metadata([np.zeros(2, "complex64")])


def _corrupt(change: Callable[[dict[str, object]], object]) -> str:
    graph = json.loads(encode_metadata([sample("float32")]))
    change(graph)
    return json.dumps(graph)


def _with_blob(blob: str) -> str:
    return _corrupt(lambda g: g.update(b64ndarrays=[blob]))


def _blob_with(offset: int, packed: bytes) -> str:
    blob = bytearray(base64.b64decode(encode_ndarray(sample("float32"))))
    blob[offset : offset + len(packed)] = packed
    return base64.b64encode(bytes(blob)).decode()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{ nope", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (_corrupt(lambda g: g.update(root=2)), "root node must be a Map"),
        (_corrupt(lambda g: g.update(root=99)), "node index 99 is out of range"),
        (_corrupt(lambda g: g["nodes"][3]["attrs"].update(data="7")), "b64ndarrays index 7 is out of range"),
        (_corrupt(lambda g: g["nodes"][3].pop("attrs")), "has no `data` attribute"),
        (_corrupt(lambda g: g.update(b64ndarrays=["***"])), "not valid base64"),
        (_corrupt(lambda g: g.update(b64ndarrays=["AAAA"])), "truncated"),
        (_with_blob(_blob_with(0, b"\0" * 8)), "wrong magic number"),
        (_with_blob(_blob_with(28, b"\x04\x10")), "unsupported NDArray dtype (code 4"),
        (_with_blob(_blob_with(40, struct.pack("<q", 5))), "inconsistent byte count"),
        # Found by the parser fuzzing: a RecursionError, a ValueError from int() and one from numpy.
        ("[" * 100_000, "nests its JSON too deeply"),
        ('{"root": ' + "1" * 5000 + "}", "cannot be read: Exceeds the limit (4300 digits)"),
        (_with_blob(_blob_with(24, struct.pack("<i", 65))), "rank 65; the maximum rank is 64"),
        # Found by make fuzz (atheris): numpy refuses a zero dim beside a huge one (ValueError).
        (_with_blob(_blob_with(32, struct.pack("<qq", 0, 2**62))), "impossible shape [0, 4611686018427387904]"),
    ],
)
def test_decode_metadata_reports_malformed_sections_at_the_header(text, fragment):
    with pytest.raises(ParseError) as info:
        decode_metadata(text, SPAN)
    assert fragment in info.value.message
    assert info.value.span is SPAN


# --- call attributes printed as meta[relay.attrs.*] ----------------------------------------------


def attrs_section(entries: dict[str, list[dict[str, str]]], extra: list[dict[str, object]]) -> str:
    """A section holding attributes nodes (their object fields refer into `extra`, numbered
    from 1 + 2 * len(entries) ... as TVM lays out a graph: null, Map, Arrays, nodes)."""
    nodes: list[dict[str, object]] = [{"type_key": ""}, {"type_key": "Map", "keys": list(entries), "data": []}]
    for key, items in entries.items():
        nodes[1]["data"].append(len(nodes))  # type: ignore[union-attr]
        array: dict[str, object] = {"type_key": "Array", "data": []}
        nodes.append(array)
        for fields in items:
            array["data"].append(len(nodes))  # type: ignore[union-attr]
            nodes.append({"type_key": key, "attrs": fields})
    return json.dumps({"root": 1, "nodes": nodes + extra, "b64ndarrays": [], "attrs": {"tvm_version": "0.8.0"}})


CONV = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 5, 5), float32], %w: Tensor[(4, 2, 3, 3), float32]) {
  nn.conv2d(%x, %w, meta[relay.attrs.Conv2DAttrs][0])
}
#[metadata]
"""
# Nodes 4.. : strides [2, 2], padding [1, 1, 1, 1], channels 4, kernel_size [3, 3], layout "NCHW".
CONV_NODES: list[dict[str, object]] = [
    {"type_key": "Array", "data": [5, 5]},
    {"type_key": "IntImm", "attrs": {"dtype": "int64", "span": "0", "value": "2"}},
    {"type_key": "Array", "data": [7, 7, 7, 7]},
    {"type_key": "IntImm", "attrs": {"dtype": "int64", "span": "0", "value": "1"}},
    {"type_key": "IntImm", "attrs": {"dtype": "int32", "span": "0", "value": "4"}},
    {"type_key": "Array", "data": [10, 10]},
    {"type_key": "IntImm", "attrs": {"dtype": "int64", "span": "0", "value": "3"}},
    {"type_key": "runtime.String", "repr_str": "NCHW"},
]
CONV_FIELDS = {"strides": "4", "padding": "6", "dilation": "0", "groups": "1", "channels": "8",
               "kernel_size": "9", "data_layout": "11", "kernel_layout": "OIHW", "out_layout": "",
               "out_dtype": ""}


def test_call_attributes_printed_as_metadata_are_read_by_their_kinds() -> None:
    fields = {k: v for k, v in CONV_FIELDS.items() if k != "dilation"}
    mod = parse(CONV + attrs_section({"relay.attrs.Conv2DAttrs": [fields]}, CONV_NODES))
    call = mod.main.body
    assert call.attrs["strides"] == (2, 2) and call.attrs["padding"] == (1, 1, 1, 1)
    assert call.attrs["channels"] == 4 and call.attrs["kernel_size"] == (3, 3)
    assert call.attrs["data_layout"] == "NCHW" and call.attrs["kernel_layout"] == "OIHW"
    assert mod.main.checked_type.ret_type == TensorType((1, 4, 3, 3), "float32")
    assert "nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3])" in astext(mod)


def test_call_attributes_in_metadata_errors_are_located_at_the_reference() -> None:
    bad = {**CONV_FIELDS, "dilation": "11"}  # a String where an array belongs
    with pytest.raises(ParseError) as info:
        parse(CONV + attrs_section({"relay.attrs.Conv2DAttrs": [bad]}, CONV_NODES), "m.relay")
    assert (info.value.line, info.value.column) == (3, 21)
    assert "dilation" in info.value.message
    with pytest.raises(ParseError) as info:
        parse(CONV + attrs_section({"relay.attrs.Conv2DAttrs": [{**CONV_FIELDS, "tile": "1"}]}, CONV_NODES))
    assert "has no attribute tile" in info.value.message and (info.value.line, info.value.column) == (3, 21)
    with pytest.raises(ParseError, match=r"meta\[relay.attrs.Conv2DAttrs\]\[1\] is out of range"):
        parse(CONV.replace("[0])", "[1])") + attrs_section({"relay.attrs.Conv2DAttrs": [CONV_FIELDS]}, CONV_NODES))
    with pytest.raises(ParseError, match="attributes are given twice"):
        parse(CONV.replace("[0])", "[0], groups=1)") + attrs_section({"relay.attrs.Conv2DAttrs": [CONV_FIELDS]},
                                                                      CONV_NODES))


def test_a_map_entry_of_a_node_kind_relaycc_cannot_read_is_a_located_error():
    from compiler.parser import parse

    graph = json.loads(encode_metadata([]))
    graph["nodes"][1]["keys"].append("Map")
    graph["nodes"][1]["data"].append(len(graph["nodes"]))
    graph["nodes"].append({"type_key": "Array", "data": [len(graph["nodes"]) + 1]})
    graph["nodes"].append({"type_key": "Map", "keys": ["layout"], "data": [len(graph["nodes"]) + 1]})
    graph["nodes"].append({"type_key": "tir.Layout", "attrs": {"name": "0"}})
    text = '#[version = "0.0.5"]\ndef @main(%x: float32) {\n  %0 = (%x,);\n  call_lowered(@f, %0, metadata=meta[Map][0])\n}\n'
    text += 'def @f(%a: float32) -> float32 { %a }\n#[metadata]\n' + json.dumps(graph)
    with pytest.raises(ParseError) as info:
        parse(text, "m.relay")
    assert info.value.message == (
        "meta[Map][0]: holds a tir.Layout node, which relaycc cannot read as an attribute value"
    )
    assert (info.value.span.line, info.value.span.column) == (4, 33)


def test_an_attributes_array_that_contains_itself_is_a_located_error_not_a_recursion_error():
    nodes = [dict(node) for node in CONV_NODES]
    nodes[0] = {"type_key": "Array", "data": [4]}  # node 4, the strides array, holds itself
    with pytest.raises(ParseError) as info:
        parse(CONV + attrs_section({"relay.attrs.Conv2DAttrs": [CONV_FIELDS]}, nodes), "m.relay")
    assert info.value.message == "meta[relay.attrs.Conv2DAttrs][0] field strides: values nest too deeply"
    assert (info.value.line, info.value.column) == (3, 21)


@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 3, 4), (1 << 20,)])
def test_streamed_blob_base64_equals_the_blob_encoded_whole(shape):
    # Headers of 0-3 dimensions leave every remainder mod 3; the megabyte-sized array crosses
    # the writer's chunk boundary.
    array = (np.arange(int(np.prod(shape)), dtype="float32") * 0.5).reshape(shape)
    out = io.StringIO()
    write_ndarray_b64(out, array)
    assert out.getvalue() == encode_ndarray(array)
    np.testing.assert_array_equal(decode_ndarray(out.getvalue()), array)


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1", "utf-16"])
def test_a_blob_streamed_to_a_file_is_the_text_streamed_to_a_string(tmp_path, encoding):
    # A file's text layer is bypassed for the base64 of an ASCII-compatible encoding; text
    # written before and after the blob must keep its place around it.
    array = (np.arange(1 << 20, dtype="float32") * 0.25).reshape(256, 4096)
    path = tmp_path / "blob.txt"
    with open(path, "w", encoding=encoding) as stream:
        stream.write('{"b64": "')
        write_ndarray_b64(stream, array)
        stream.write('"}\n')
    assert path.read_text(encoding=encoding) == '{"b64": "' + encode_ndarray(array) + '"}\n'


def test_blob_parts_of_a_contiguous_array_view_its_memory_rather_than_copy_it():
    array = np.arange(6, dtype="float32").reshape(2, 3)
    head, raw = ndarray_blob_parts(array)
    assert np.shares_memory(np.frombuffer(raw, np.uint8), array)
    assert bytes(raw) == array.tobytes()
    assert struct.unpack_from("<q", head, len(head) - 8)[0] == 24


def test_written_metadata_section_is_the_json_of_tvms_node_graph():
    constants = [sample("float32"), sample("int8", (4,)), sample("bool", (2, 2))]
    out = io.StringIO()
    write_metadata(out, constants)
    document = json.loads(out.getvalue())
    assert out.getvalue() == encode_metadata(constants)
    assert document["b64ndarrays"] == [encode_ndarray(c) for c in constants]
    for got, want in zip(constants_of(out.getvalue()), constants):
        np.testing.assert_array_equal(got.data, want)


def test_writing_a_blob_of_an_unsupported_dtype_is_an_error():
    with pytest.raises(ValueError, match="complex64"):
        write_ndarray_b64(io.StringIO(), np.zeros(2, "complex64"))
