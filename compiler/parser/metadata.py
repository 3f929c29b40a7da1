"""The `#[metadata]` section: TVM's JSON node graph holding constants as base64 NDArray blobs.

The section is a serialized `Map<String, Array<Object>>`. Nodes refer to each other by index
into `nodes` (0 is null); a `relay.Constant` node's `data` attribute indexes `b64ndarrays`.
Each blob is DLPack-style: a magic number, the device, ndim, dtype (code, bits, lanes), the
shape, the byte count and the raw little-endian elements. See tvm-facts §1.4.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import io
import json
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from compiler.diagnostics import ParseError, Span
from compiler.ir.attrs import Attrs
from compiler.ir.device import VirtualDevice
from compiler.ir.expr import Constant
from compiler.ir.types import MAX_RANK

CONSTANT_KEY = "relay.Constant"
DEVICE_KEY = "VirtualDevice"
NDARRAY_MAGIC = 0xDD5E40F096B4A13F
TVM_VERSION = "0.13.0"

_DL_INT, _DL_UINT, _DL_FLOAT = 0, 1, 2
# (DLPack type code, bits) for every dtype we can store; bool is a 1-bit uint kept in a byte.
_DL_TYPES: dict[str, tuple[int, int]] = {
    "int8": (_DL_INT, 8),
    "int16": (_DL_INT, 16),
    "int32": (_DL_INT, 32),
    "int64": (_DL_INT, 64),
    "uint8": (_DL_UINT, 8),
    "uint16": (_DL_UINT, 16),
    "uint32": (_DL_UINT, 32),
    "uint64": (_DL_UINT, 64),
    "bool": (_DL_UINT, 1),
    "float16": (_DL_FLOAT, 16),
    "float32": (_DL_FLOAT, 32),
    "float64": (_DL_FLOAT, 64),
}
_DTYPE_OF_DL = {code_bits: name for name, code_bits in _DL_TYPES.items()}
_HEADER = struct.Struct("<QQiiiBBH")  # magic, reserved, device type, device id, ndim, code, bits, lanes


@dataclass(frozen=True)
class MetaAttrs:
    """A call's attributes printed as `meta[relay.attrs.<Name>Attrs][i]`: TVM's printer falls
    back to that when a call's attrs are not of its op's registered attrs type (TVM 0.8's TFLite
    detection post-process prints NMS and get_valid_counts so). `fields` are the JSON's
    strings: plain values (ints, bools, floats, dtypes, std::string) as text, object fields
    (arrays, IntImm, FloatImm, String, null) as node indices that `resolve` decodes."""

    type_key: str
    fields: Mapping[str, str]
    resolve: Callable[[str], object]


class MetaTable:
    """Resolves `meta[relay.Constant][i]` references against a text's metadata section.

    The section is decoded on first use. Each index yields one shared Constant (as in TVM, two
    references to the same entry are the same node), located at its first reference.
    """

    def __init__(self, json_text: str | None, section_span: Span | None):
        self.json_text = json_text
        self.section_span = section_span
        self.table: dict[str, list[object]] | None = None
        self.node: Callable[[object], dict[str, object]] | None = None
        self.constants: dict[int, Constant] = {}

    def entries(self) -> dict[str, list[object]]:
        if self.table is None:
            assert self.json_text is not None
            self.table, self.node = _decode_text(self.json_text, self.section_span)
        return self.table

    def validate(self) -> None:
        """Decode a section that nothing referred to, so that a broken one is still reported."""
        if self.json_text is not None:
            self.entries()

    def virtual_device(self, reference: str, span: Span) -> VirtualDevice:
        """The VirtualDevice for the text `meta[VirtualDevice][<index>]` found at `span`."""
        entry = self._entry(reference, span)
        if not isinstance(entry, VirtualDevice):
            raise ParseError(f"{reference} is not a VirtualDevice in the metadata section", span)
        return entry

    def call_attrs(self, reference: str, span: Span) -> MetaAttrs:
        """The attributes node for the text `meta[relay.attrs.<Name>][<index>]` at `span`."""
        entry = self._entry(reference, span)
        if not isinstance(entry, MetaAttrs):
            raise ParseError(f"{reference} is not an attributes node in the metadata section", span)
        return entry

    def _entry(self, reference: str, span: Span) -> object:
        key, _, rest = reference[len("meta[") :].partition("]")
        index = int(rest.strip("[]"))
        if self.json_text is None:
            raise ParseError(
                f"{reference} refers to the #[metadata] section, but the module was printed without "
                "its metadata section; print it with its metadata (a `#[metadata]` section at the end) "
                "to keep its constants",
                span,
            )
        entries = self.entries().get(key)
        if entries is None:
            raise ParseError(f"the metadata section has no entry for meta[{key}]", span)
        if index >= len(entries):
            raise ParseError(f"{reference} is out of range: the metadata section holds {len(entries)}", span)
        return entries[index]

    def attribute(self, reference: str, span: Span, global_var: Callable[[str], object]) -> object:
        """An attribute value kept in the section, as TVM's `astext()` keeps maps there
        (`metadata=meta[Map][0]` of call_lowered, `__dict__=meta[Map][0]` of DictAttrs):
        maps and DictAttrs become Attrs, arrays tuples, IntImm/FloatImm numbers, strings
        strings; `global_var(name)` makes the value of a GlobalVar node."""
        entry = self._entry(reference, span)
        if isinstance(entry, (Constant, VirtualDevice)):
            return entry
        assert isinstance(entry, dict) and self.node is not None
        try:
            return _node_value(entry, self.node, global_var, span)
        except _MetadataError as exc:
            raise ParseError(f"{reference}: {exc}", span) from None

    def constant(self, reference: str, span: Span) -> Constant:
        """The Constant for the text `meta[<key>][<index>]` found at `span`."""
        key, _, rest = reference[len("meta[") :].partition("]")
        index = int(rest.strip("[]"))
        if key != CONSTANT_KEY:
            raise ParseError(f"meta[{key}] references are not supported; only meta[{CONSTANT_KEY}]", span)
        if index not in self.constants:
            entry = self._entry(reference, span)
            if not isinstance(entry, Constant):
                raise ParseError(f"{reference} is not a constant in the metadata section", span)
            self.constants[index] = Constant(entry.data, span)
        return self.constants[index]


class _MetadataError(ValueError):
    """A malformed section; decode_metadata turns it into a located ParseError."""


def decode_metadata(json_text: str, span: Span | None) -> dict[str, list[object]]:
    """Decode a metadata section into type key -> objects.

    `relay.Constant` entries become `Constant`s (with `span`); entries of other type keys are
    kept as their raw JSON node dicts, which the parser refuses to use.
    """
    return _decode_text(json_text, span)[0]


def _decode_text(
    json_text: str, span: Span | None
) -> tuple[dict[str, list[object]], Callable[[object], dict[str, object]]]:
    try:
        graph = json.loads(json_text)
    except json.JSONDecodeError as exc:
        where = f"at its line {exc.lineno}, column {exc.colno}"
        raise ParseError(f"the metadata section is not valid JSON: {exc.msg} {where}", span) from None
    except RecursionError:
        raise ParseError("the metadata section nests its JSON too deeply", span) from None
    except ValueError as exc:  # a number of more than 4300 digits
        raise ParseError(f"the metadata section cannot be read: {exc}", span) from None
    try:
        return _decode_graph(graph, span)
    except _MetadataError as exc:
        raise ParseError(f"malformed metadata section: {exc}", span) from None


def _decode_graph(
    graph: object, span: Span | None
) -> tuple[dict[str, list[object]], Callable[[object], dict[str, object]]]:
    if not isinstance(graph, dict):
        raise _MetadataError("expected a JSON object with `root` and `nodes`")
    nodes = graph.get("nodes")
    blobs = graph.get("b64ndarrays", [])
    if not isinstance(nodes, list) or not isinstance(blobs, list):
        raise _MetadataError("`nodes` and `b64ndarrays` must be lists")

    def node(index: object) -> dict[str, object]:
        position = _index(index, len(nodes), "node")
        found = nodes[position]
        if not isinstance(found, dict):
            raise _MetadataError(f"node {position} is not an object")
        return found

    root = node(graph.get("root"))
    if root.get("type_key") != "Map":
        raise _MetadataError("the root node must be a Map")
    entries = _map_entries(root, node)
    decoded_blobs: dict[int, np.ndarray] = {}
    table: dict[str, list[object]] = {}
    for key, value_index in entries:
        array_node = node(value_index)
        if array_node.get("type_key") != "Array":
            raise _MetadataError(f"the entry for {key} is not an Array")
        items: list[object] = []
        for element_index in _int_list(array_node.get("data", []), "Array data"):
            element = node(element_index)
            if element.get("type_key") == DEVICE_KEY:
                items.append(_virtual_device(element, node))
            elif element.get("type_key") == CONSTANT_KEY:
                blob_index = _index(_attr(element, "data"), len(blobs), "b64ndarrays")
                if blob_index not in decoded_blobs:
                    decoded_blobs[blob_index] = decode_ndarray(_as_str(blobs[blob_index], "b64ndarrays entry"))
                items.append(Constant(decoded_blobs[blob_index], span))
            elif str(element.get("type_key", "")).startswith("relay.attrs."):
                items.append(_meta_attrs(element, node))
            else:
                items.append(element)
        table[key] = items
    return table, node


def _node_value(
    element: Mapping[str, object],
    node: Callable[[object], dict[str, object]],
    global_var: Callable[[str], object],
    span: Span | None,
    depth: int = 0,
) -> object:
    """The attribute value a node of the graph stands for (see MetaTable.attribute)."""
    if depth > 64:
        raise _MetadataError("values nest too deeply")

    def value(index: object) -> object:
        if str(index) == "0":
            return None
        return _node_value(node(index), node, global_var, span, depth + 1)

    kind = element.get("type_key")
    if kind in ("Map", "DictAttrs"):
        entries = _map_entries(node(_attr(element, "__dict__")) if kind == "DictAttrs" else element, node)
        return Attrs({key: value(index) for key, index in entries})
    if kind == "Array":
        return tuple(value(i) for i in _int_list(element.get("data", []), "Array data"))
    if kind == "runtime.String":
        return str(element.get("repr_str", ""))
    if kind in ("IntImm", "FloatImm"):
        dtype, text = str(_attr(element, "dtype")), str(_attr(element, "value"))
        try:
            if kind == "FloatImm":
                return float(text)
            return bool(int(text)) if dtype == "bool" else int(text)
        except ValueError:
            raise _MetadataError(f"{kind} value {text!r} is not a number") from None
    if kind == "GlobalVar":
        name = value(_attr(element, "name_hint"))
        return global_var(_as_str(name, "GlobalVar name_hint"))
    if kind == DEVICE_KEY:
        return _virtual_device(element, node)
    raise _MetadataError(f"holds a {kind} node, which relaycc cannot read as an attribute value")


def _meta_attrs(element: Mapping[str, object], node: Callable[[object], dict[str, object]]) -> MetaAttrs:
    attrs = element.get("attrs", {})
    if not isinstance(attrs, dict) or not all(isinstance(v, str) for v in attrs.values()):
        raise _MetadataError(f"{element.get('type_key')} attrs must be an object of strings")

    def resolve(index: str, depth: int = 0) -> object:
        if index == "0":
            return None  # node 0 is TVM's null
        if depth > 64:
            raise _MetadataError("values nest too deeply")
        found = node(index)
        type_key = found.get("type_key")
        fields = found.get("attrs", {})
        if type_key == "Array":
            return [resolve(str(i), depth + 1) for i in _int_list(found.get("data", []), "Array data")]
        if type_key in ("IntImm", "FloatImm") and isinstance(fields, dict):
            text = str(fields.get("value", ""))
            try:
                if type_key == "FloatImm":
                    return float(text)
                return bool(int(text)) if fields.get("dtype") == "bool" else int(text)
            except ValueError:
                raise _MetadataError(f"{type_key} node {index} has value {text!r}") from None
        if type_key in ("runtime.String", "String"):
            return _as_str(found.get("repr_str"), "String repr_str")
        raise _MetadataError(f"node {index} ({type_key}) is not an attribute value")

    return MetaAttrs(str(element["type_key"]), dict(attrs), resolve)


def _virtual_device(element: Mapping[str, object], node: Callable[[object], dict[str, object]]) -> VirtualDevice:
    attrs = element.get("attrs", {})
    if not isinstance(attrs, dict):
        raise _MetadataError("VirtualDevice attrs must be an object")

    def integer(name: str) -> int:
        try:
            return int(str(attrs.get(name, "-1")))
        except ValueError:
            raise _MetadataError(f"VirtualDevice {name} must be an integer") from None

    scope = ""
    if str(attrs.get("memory_scope", "0")) != "0":
        scope = str(node(attrs["memory_scope"]).get("repr_str", ""))
    target = None
    if str(attrs.get("target", "0")) != "0":
        # A Target node names its kind through a TargetKind node (e.g. "llvm", "c").
        target_attrs = node(attrs["target"]).get("attrs", {})
        kind = target_attrs.get("kind") if isinstance(target_attrs, dict) else None
        target = str(node(kind).get("repr_str", "")) if kind not in (None, "0") else ""
    return VirtualDevice(integer("device_type_int"), integer("virtual_device_id"), target, scope)


def _map_entries(
    root: Mapping[str, object], node: Callable[[object], dict[str, object]]
) -> list[tuple[str, object]]:
    data = root.get("data", [])
    if not isinstance(data, list):
        raise _MetadataError("Map data must be a list")
    keys = root.get("keys")
    if keys is not None:
        if not isinstance(keys, list) or len(keys) != len(data):
            raise _MetadataError("Map keys and data differ in length")
        return [(_as_str(k, "Map key"), v) for k, v in zip(keys, data)]
    # Maps with object keys alternate key node, value node.
    pairs = []
    for i in range(0, len(data) - 1, 2):
        key_node = node(data[i])
        pairs.append((_as_str(key_node.get("repr_str"), "Map key"), data[i + 1]))
    return pairs


def _attr(node: Mapping[str, object], name: str) -> object:
    attrs = node.get("attrs")
    if not isinstance(attrs, dict) or name not in attrs:
        raise _MetadataError(f"{node.get('type_key')} node has no `{name}` attribute")
    return attrs[name]


def _index(value: object, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _MetadataError(f"bad {what} index {value!r}")
    try:
        index = int(value)
    except ValueError:
        raise _MetadataError(f"bad {what} index {value!r}") from None
    if not 0 <= index < size:
        raise _MetadataError(f"{what} index {index} is out of range (there are {size})")
    return index


def _int_list(value: object, what: str) -> list[object]:
    if not isinstance(value, list):
        raise _MetadataError(f"{what} must be a list")
    return value


def _as_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise _MetadataError(f"{what} must be a string")
    return value


def decode_ndarray(b64: str) -> np.ndarray:
    """One base64 NDArray blob -> a numpy array (raises _MetadataError)."""
    try:
        blob = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise _MetadataError("an NDArray blob is not valid base64") from None
    if len(blob) < _HEADER.size:
        raise _MetadataError("an NDArray blob is truncated")
    magic, _reserved, _device_type, _device_id, ndim, code, bits, lanes = _HEADER.unpack_from(blob)
    if magic != NDARRAY_MAGIC:
        raise _MetadataError("an NDArray blob has the wrong magic number")
    dtype = _DTYPE_OF_DL.get((code, bits))
    if dtype is None or lanes != 1:
        raise _MetadataError(f"unsupported NDArray dtype (code {code}, bits {bits}, lanes {lanes})")
    offset = _HEADER.size
    if ndim > MAX_RANK:
        raise _MetadataError(f"an NDArray blob has rank {ndim}; the maximum rank is {MAX_RANK}")
    if ndim < 0 or len(blob) < offset + 8 * ndim + 8:
        raise _MetadataError("an NDArray blob is truncated")
    shape = struct.unpack_from(f"<{ndim}q", blob, offset)
    offset += 8 * ndim
    (nbytes,) = struct.unpack_from("<q", blob, offset)
    offset += 8
    if any(d < 0 for d in shape) or math.prod(d for d in shape if d) >= 2**62:
        # numpy refuses such a shape even holding no elements (a zero dim beside a huge one).
        raise _MetadataError(f"an NDArray blob has the impossible shape {list(shape)}")
    count = math.prod(shape)
    if nbytes != count * ((bits + 7) // 8) or len(blob) != offset + nbytes:
        raise _MetadataError(f"an NDArray blob of shape {list(shape)} has an inconsistent byte count")
    raw = blob[offset:]
    if dtype == "bool":
        return np.frombuffer(raw, dtype=np.uint8).astype(np.bool_).reshape(shape)
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)


def ndarray_blob_parts(array: np.ndarray) -> tuple[bytes, memoryview]:
    """TVM's NDArray blob of `array` (CPU device, lanes 1) in two parts: the header (magic,
    device, dtype, shape, byte count) and the little-endian elements, a view of `array`'s own
    memory when it is contiguous and little-endian already (so a large weight is not copied)."""
    array = np.asarray(array)
    dtype = "bool" if array.dtype == np.bool_ else str(array.dtype)
    if dtype not in _DL_TYPES:
        raise ValueError(f"cannot store dtype {dtype} in the metadata section")
    code, bits = _DL_TYPES[dtype]
    stored = np.dtype(np.uint8) if dtype == "bool" else np.dtype(dtype).newbyteorder("<")
    raw = np.ascontiguousarray(array, dtype=stored).reshape(-1).view(np.uint8)
    header = _HEADER.pack(NDARRAY_MAGIC, 0, 1, 0, array.ndim, code, bits, 1)
    shape = struct.pack(f"<{array.ndim}q", *array.shape)
    return header + shape + struct.pack("<q", raw.size), memoryview(raw)


def encode_ndarray(array: np.ndarray) -> str:
    """A numpy array -> TVM's base64 NDArray blob (CPU device, lanes 1)."""
    head, raw = ndarray_blob_parts(array)
    return base64.b64encode(head + raw).decode("ascii")


_ASCII_SUPERSETS = ("utf-8", "ascii", "latin-1", "iso8859-1")
# Base64 of this many bytes at a time (a multiple of 3, so the pieces join into one encoding).
_B64_CHUNK = 3 << 20


def write_ndarray_b64(stream: TextIO, array: np.ndarray) -> None:
    """`encode_ndarray(array)` written to `stream` a few megabytes at a time."""
    head, raw = ndarray_blob_parts(array)
    first = -len(head) % 3  # elements that complete the header's last group of three
    stream.write(base64.b64encode(head + raw[:first]).decode("ascii"))
    # Base64 is ASCII, the same bytes in any encoding a file of Relay text may have (UTF-8): a
    # file's text layer is flushed and the rest goes to its bytes. Decoded to str and encoded
    # back by the text layer, ResNet-50's 100 MB took 1.4 s of the build's CPU, 1.0 s so.
    binary = getattr(stream, "buffer", None) if isinstance(stream, io.TextIOWrapper) else None
    if binary is not None and codecs.lookup(stream.encoding).name in _ASCII_SUPERSETS:
        stream.flush()
        for start in range(first, len(raw), _B64_CHUNK):
            binary.write(base64.b64encode(raw[start : start + _B64_CHUNK]))
        return
    for start in range(first, len(raw), _B64_CHUNK):
        stream.write(base64.b64encode(raw[start : start + _B64_CHUNK]).decode("ascii"))


def encode_metadata(constants: Sequence[np.ndarray], devices: Sequence[VirtualDevice] = ()) -> str:
    """The JSON text of a metadata section holding `constants` as meta[relay.Constant][0..]."""
    out = io.StringIO()
    write_metadata(out, constants, devices)
    return out.getvalue()


def write_metadata(stream: TextIO, constants: Sequence[np.ndarray], devices: Sequence[VirtualDevice] = ()) -> None:
    """`encode_metadata`'s text written to `stream`, the blobs' base64 streamed from the arrays:
    neither the base64 text nor the JSON document is ever held whole.

    Node indices follow TVM's depth-first discovery order: the root Map, its Array, then each
    Constant; the first Constant also discovers the shared unconstrained VirtualDevice and its
    empty memory-scope string.
    """
    nodes: list[dict[str, object]] = [
        {"type_key": ""},
        {"type_key": "Map", "keys": [CONSTANT_KEY], "data": [2]},
        {"type_key": "Array", "data": []},
    ]
    element_indices: list[int] = []
    virtual_device = 0
    for position in range(len(constants)):
        element_indices.append(len(nodes))
        nodes.append({"type_key": CONSTANT_KEY})  # attrs filled in once the device node exists
        if virtual_device == 0:
            virtual_device = len(nodes)
            nodes.append(
                {
                    "type_key": "VirtualDevice",
                    "attrs": {
                        "device_type_int": "-1",
                        "memory_scope": str(virtual_device + 1),
                        "target": "0",
                        "virtual_device_id": "-1",
                    },
                }
            )
            nodes.append({"type_key": "runtime.String"})
        nodes[element_indices[-1]]["attrs"] = {
            "_checked_type_": "0",
            "data": str(position),
            "span": "0",
            "virtual_device_": str(virtual_device),
        }
    nodes[2]["data"] = element_indices
    if devices:
        _add_devices(nodes, devices)
    # The document is dumped with a placeholder per blob (base64 needs no JSON escaping), and
    # each placeholder is replaced by its blob as the text is written.
    placeholders = [_BLOB_PLACEHOLDER.format(i) for i in range(len(constants))]
    document = {
        "root": 1,
        "nodes": nodes,
        "b64ndarrays": placeholders,
        "attrs": {"tvm_version": TVM_VERSION},
    }
    text = json.dumps(document, indent=2)
    at = text.rindex('"b64ndarrays": ')  # the document's own key: only "attrs" follows it
    stream.write(text[:at])
    for placeholder, constant in zip(placeholders, constants):
        found = text.index(json.dumps(placeholder), at)
        stream.write(text[at : found + 1])
        write_ndarray_b64(stream, np.asarray(constant))
        at = found + len(placeholder) + 1
    stream.write(text[at:])


# No node of the document holds text of this form: node values are type keys, numbers and names.
_BLOB_PLACEHOLDER = "<relaycc blob {} placeholder>"


def _add_devices(nodes: list[dict[str, object]], devices: Sequence[VirtualDevice]) -> None:
    """Append meta[VirtualDevice][0..] to the root Map of a section being built."""
    root = nodes[1]
    array_index = len(nodes)
    nodes.append({"type_key": "Array", "data": []})
    keys, data = root["keys"], root["data"]
    assert isinstance(keys, list) and isinstance(data, list)
    keys.append(DEVICE_KEY)
    data.append(array_index)
    elements = []
    for device in devices:
        elements.append(len(nodes))
        node: dict[str, object] = {"type_key": DEVICE_KEY}
        nodes.append(node)
        scope = "0"
        if device.memory_scope:
            scope = str(len(nodes))
            nodes.append({"type_key": "runtime.String", "repr_str": device.memory_scope})
        target = "0"
        if device.target is not None:
            target = str(len(nodes))
            nodes.append({"type_key": "Target", "attrs": {"kind": str(len(nodes) + 1)}})
            nodes.append({"type_key": "TargetKind", "repr_str": device.target})
        node["attrs"] = {
            "device_type_int": str(device.device_type),
            "memory_scope": scope,
            "target": target,
            "virtual_device_id": str(device.virtual_device_id),
        }
    nodes[array_index]["data"] = elements
