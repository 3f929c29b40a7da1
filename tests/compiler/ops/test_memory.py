"""The memory and VM ops TVM writes after ManifestAlloc / ManifestLifetimes.

Each module below is written the way TVM prints a module after VM compilation (storages and
tensors bound by `let`, offsets and sizes as `i64` literals, shapes as metadata constants,
`on_device` around host values). Each parses, prints and parses back equal, type-checks to the
types TVM's relations give, and runs in the interpreter to the numpy result computed in the test.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from compiler import ops
from compiler.diagnostics import InputError, ParseError, TypeCheckError
from compiler.ir.device import VirtualDevice
from compiler.ir.expr import Let
from compiler.ir.structural import structural_equal
from compiler.ir.types import ANY, TensorType, TupleType, TypeCall
from compiler.ops.catalog import catalog
from compiler.ops.memory import MEMORY_OPS
from compiler.parser import astext, parse
from compiler.parser.metadata import encode_metadata
from compiler.runtime.interpreter import run_main

HEADER = '#[version = "0.0.5"]\n'
STORAGE = TypeCall("Storage")


def with_metadata(text: str, constants: list[np.ndarray], devices: int = 1) -> str:
    cpu = [VirtualDevice(1, 0)] * devices
    return text + "#[metadata]\n" + encode_metadata(constants, cpu)


def round_trip(text: str):
    mod = parse(text, "vm.relay")
    printed = astext(mod)
    again = parse(printed, "printed.relay")
    assert structural_equal(mod, again), printed
    assert astext(again) == printed
    return mod


def let_types(body) -> dict[str, object]:
    types = {}
    while isinstance(body, Let):
        types[body.var.name_hint] = body.var.checked_type
        body = body.body
    return types


# TVM 0.14+: alloc_storage(size, shape, alignment); the callee is a let-bound primitive function
# here (a PrimFunc global in TVM, which Relay text cannot carry).
STATIC = HEADER + """def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  let %f = fn (%p0: Tensor[(2, 3), float32], %p1: Tensor[(2, 3), float32], Primitive=1, hash="6a1c2b3d4e5f6a7b") -> Tensor[(2, 3), float32] {
    %0 = add(%p0, %p1);
    nn.relu(%0)
  };
  %1 = on_device(24i64, virtual_device=meta[VirtualDevice][0], constrain_result=True);
  let %storage_0: Storage = memory.alloc_storage(%1, meta[relay.Constant][0], 64i64, virtual_device=meta[VirtualDevice][0]);
  %2 = on_device(0i64, virtual_device=meta[VirtualDevice][0], constrain_result=True);
  let %tensor_0 = memory.alloc_tensor(%storage_0, %2, meta[relay.Constant][0], const_shape=None, assert_shape=[2, 3]);
  %3 = (%x, %y);
  %4 = (%tensor_0,);
  let %_0 = vm.invoke_tvm_op(%f, %3, %4, Primitive=1, hash="6a1c2b3d4e5f6a7b");
  let %_1 = memory.kill(%storage_0);
  %tensor_0
}
extern type Storage
"""


def static_module() -> str:
    return with_metadata(STATIC, [np.array([2, 3], dtype="int64")])


def test_module_after_manifest_alloc_round_trips_and_types_as_tvm_relations_say():
    mod = round_trip(static_module())
    types = let_types(mod.main.body)
    assert types["storage_0"] == STORAGE
    assert types["tensor_0"] == TensorType((2, 3), "float32")
    assert types["_0"] == TupleType(()) and types["_1"] == TupleType(())
    text = astext(mod)
    assert "memory.alloc_storage(%1, meta[relay.Constant][0], 64i64, virtual_device=meta[VirtualDevice][0])" in text
    assert "const_shape=None, assert_shape=[2, 3])" in text and text.rstrip().split("#[metadata]")[0].rstrip().endswith("extern type Storage")
    assert 'vm.invoke_tvm_op(%f, %3, %4, Primitive=1, hash="6a1c2b3d4e5f6a7b")' in text


def test_invoke_tvm_op_writes_the_result_into_the_allocated_tensor():
    x = np.array([[1, -2, 3], [-4, 5, -6]], dtype="float32")
    y = np.array([[0.5, 0.5, -4], [1, -6, 7]], dtype="float32")
    (out,) = run_main(parse(static_module()), {"x": x, "y": y})
    np.testing.assert_array_equal(out, np.maximum(x + y, 0))


# TVM 0.8-0.13: alloc_storage(size, alignment) (0.8 with device_id/device_type), a const_shape,
# a primitive function literal as the callee, and no attributes on invoke_tvm_op (0.8).
OLD_FORM = HEADER + """def @main(%x: Tensor[(4), int32]) -> (Tensor[(4), int32], Tensor[(2, 2), int32]) {
  %0 = fn (%p0: Tensor[(4), int32], Primitive=1) -> (Tensor[(4), int32], Tensor[(2, 2), int32]) {
    %1 = multiply(%p0, %p0);
    %2 = reshape(%p0, newshape=[2, 2]);
    (%1, %2)
  };
  let %storage_0 = memory.alloc_storage(32i64, 64i64, dtype="int32", device_id=0, device_type=1);
  let %tensor_0 = memory.alloc_tensor(%storage_0, 0i64, meta[relay.Constant][0], dtype="int32", const_shape=meta[relay.Constant][0], assert_shape=None);
  let %tensor_1 = memory.alloc_tensor(%storage_0, 16i64, meta[relay.Constant][1], dtype="int32", const_shape=meta[relay.Constant][1], assert_shape=None);
  let %_ = vm.invoke_tvm_op(%0, (%x,), (%tensor_0, %tensor_1));
  (%tensor_0, %tensor_1)
}
"""


def old_form() -> str:
    return with_metadata(OLD_FORM, [np.array([4], dtype="int64"), np.array([2, 2], dtype="int64")], devices=0)


def test_older_forms_share_one_storage_between_two_tensors_at_their_offsets():
    mod = round_trip(old_form())
    types = let_types(mod.main.body)
    assert types["storage_0"] == STORAGE  # no `extern type Storage` needed to use the ops
    assert types["tensor_1"] == TensorType((2, 2), "int32")
    x = np.array([1, -2, 3, 7], dtype="int32")
    square, square_matrix = run_main(mod, {"x": x})
    np.testing.assert_array_equal(square, x * x)
    np.testing.assert_array_equal(square_matrix, x.reshape(2, 2))


# A dynamic call in TVM 0.8's form: shape_of, shape_func (is_input=0: shapes only), a storage
# sized in Relay from the computed shape, an alloc_tensor typed by assert_shape with `?`.
DYNAMIC = HEADER + """def @main(%x: Tensor[(?, 3), float32]) -> Tensor[(?, 3), float32] {
  let %f = fn (%p0: Tensor[(?, 3), float32], Primitive=1) -> Tensor[(?, 3), float32] {
    exp(%p0)
  };
  let %in_shape_0 = vm.shape_of(%x, dtype="int64");
  let %storage_s = memory.alloc_storage(16i64, 64i64, dtype="int64");
  let %out_shape_0 = memory.alloc_tensor(%storage_s, 0i64, meta[relay.Constant][0], dtype="int64", const_shape=meta[relay.Constant][0], assert_shape=[2]);
  let %shape_func = vm.shape_func(%f, (%in_shape_0,), (%out_shape_0,), is_input=[0]);
  let %size = multiply(prod(%out_shape_0), 4i64);
  let %storage_0 = memory.alloc_storage(%size, %out_shape_0, 64i64);
  let %out_0 = memory.alloc_tensor(%storage_0, 0i64, %out_shape_0, const_shape=None, assert_shape=[?, 3]);
  let %_ = vm.invoke_tvm_op(%f, (%x,), (%out_0,));
  vm.reshape_tensor(%out_0, %out_shape_0, newshape=[?, 3])
}
"""


def test_dynamic_shapes_are_computed_by_shape_func_and_allocated_to_size():
    mod = round_trip(with_metadata(DYNAMIC, [np.array([2], dtype="int64")], devices=0))
    types = let_types(mod.main.body)
    assert types["in_shape_0"] == TensorType((2,), "int64")
    assert types["out_0"] == TensorType((ANY, 3), "float32")
    assert "assert_shape=[?, 3]" in astext(mod)
    x = np.linspace(-1, 1, 15, dtype="float32").reshape(5, 3)
    (out,) = run_main(mod, {"x": x})
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_tvm_debug_printed_dict_attrs_of_invoke_tvm_op_read_as_plain_attributes():
    text = static_module().replace(
        'Primitive=1, hash="6a1c2b3d4e5f6a7b");\n  let %_1', '__dict__={"Primitive"=1, "hash"="6a1c2b3d4e5f6a7b"});\n  let %_1'
    )
    assert "__dict__" in text
    assert structural_equal(parse(text), parse(static_module()))


def test_memory_kill_as_manifest_lifetimes_writes_it_returns_unit():
    mod = round_trip(HEADER + """def @main(%x: int32) -> int32 {
  let %y = add(%x, %x);
  let %_0 = memory.kill(%x);
  let %z = multiply(%y, 2);
  let %_1 = memory.kill(%y);
  %z
}""")
    assert let_types(mod.main.body)["_0"] == TupleType(())
    (out,) = run_main(mod, {"x": np.array(5, dtype="int32")})
    assert out == 20


def test_alloc_tensor_of_a_tensor_instead_of_a_storage_is_a_located_type_error():
    text = static_module().replace("memory.alloc_tensor(%storage_0,", "memory.alloc_tensor(%x,")
    with pytest.raises(TypeCheckError) as info:
        parse(text, "bad.relay")
    assert info.value.message == (
        "in call to memory.alloc_tensor: the first argument must be a Storage, got Tensor[(2, 3), float32]"
    )
    assert (info.value.line, info.value.column) == (10, 19)


def test_invoke_tvm_op_with_an_output_of_the_wrong_shape_is_a_located_type_error():
    text = static_module().replace("assert_shape=[2, 3]", "assert_shape=[3, 2]")
    with pytest.raises(TypeCheckError) as info:
        parse(text, "bad.relay")
    assert info.value.message == (
        "in call to vm.invoke_tvm_op: output 0: expected Tensor[(2, 3), float32], found Tensor[(3, 2), float32]"
    )
    assert (info.value.line, info.value.column) == (13, 13)


def test_alloc_tensor_needs_const_shape_and_assert_shape_written_out_as_tvm_prints_them():
    text = static_module().replace("const_shape=None, ", "")
    with pytest.raises(ParseError) as info:
        parse(text, "bad.relay")
    assert info.value.message == "operator memory.alloc_tensor requires attribute const_shape"
    assert (info.value.span.line, info.value.span.column) == (10, 19)


def test_a_tensor_larger_than_its_storage_is_an_input_error_when_run():
    text = static_module().replace("%1 = on_device(24i64", "%1 = on_device(20i64")
    with pytest.raises(InputError, match=r"float32\[2, 3\] at offset 0 needs 24 bytes; the storage has 20"):
        run_main(parse(text), {"x": np.zeros((2, 3), "float32"), "y": np.zeros((2, 3), "float32")})


def test_memory_ops_are_internal_and_left_out_of_the_catalog():
    names = {entry["name"] for entry in catalog()}
    for name in MEMORY_OPS:
        op = ops.get(name)
        assert op.extras.get("internal") and op.domain is None and name not in names


def test_shapes_in_metadata_without_the_section_are_one_located_error():
    # What TVM's astext(show_meta_data=False) gives: the section replaced by a comment.
    text = OLD_FORM + "/* For debugging purposes the metadata section has been omitted. */\n"
    with pytest.raises(ParseError) as info:
        parse(text, "nometa.relay")
    assert "printed without its metadata section" in info.value.message
    assert (info.value.span.line, info.value.span.column) == (9, 57)
    assert str(info.value).count("error:") == 1


# TVM's ManifestLifetimes test module (tests/python/relay/test_pass_manifest_lifetimes.py,
# test_simple_match), as TVM's parser reads it: `int` dtypes, a parenthesised match.
LIFETIMES_MATCH = HEADER + """type List[A] {
    Cons(A, List[A]),
    Nil,
}
def @main(%x: int) {
    let %l : List[int] = Nil;
    let %m = (match (%l) {
        Cons(%head, %rest) => {
            let %y = %x + 1;
            let %_0 = memory.kill(%x);
            let %z = %y + %y;
            let %_1 = memory.kill(%y);
            %z
        },
        Nil => -1
    });
    let %_2 = memory.kill(%l);
    %m
}
"""


def test_tvm_manifest_lifetimes_output_with_a_match_round_trips_and_runs():
    mod = round_trip(LIFETIMES_MATCH)
    assert let_types(mod.main.body)["_2"] == TupleType(())
    (out,) = run_main(mod, {"x": np.array(3, dtype="int32")})
    assert out == -1


def with_dict_attrs_in_metadata(section: str, items: dict[str, object]) -> str:
    """`section` with meta[Map][0] added: a string-keyed Map of IntImm and String nodes, as
    TVM's astext() stores invoke_tvm_op's DictAttrs."""
    graph = json.loads(section)
    nodes = graph["nodes"]
    root = nodes[graph["root"]]
    array, the_map = len(nodes), len(nodes) + 1
    nodes += [{"type_key": "Array", "data": [the_map]}, {"type_key": "Map", "keys": list(items), "data": []}]
    for value in items.values():
        nodes[the_map]["data"].append(len(nodes))
        if isinstance(value, int):
            nodes.append({"type_key": "IntImm", "attrs": {"dtype": "int32", "span": "0", "value": str(value)}})
        else:
            nodes.append({"type_key": "runtime.String", "repr_str": str(value)})
    root["keys"].append("Map")
    root["data"].append(array)
    return json.dumps(graph, indent=2)


def test_tvm_astext_form_keeps_invoke_tvm_op_dict_attrs_in_the_metadata_section():
    text, section = static_module().split("#[metadata]\n")
    text = text.replace('Primitive=1, hash="6a1c2b3d4e5f6a7b");\n  let %_1', "__dict__=meta[Map][0]);\n  let %_1")
    section = with_dict_attrs_in_metadata(section, {"Primitive": 1, "hash": "6a1c2b3d4e5f6a7b"})
    mod = parse(text + "#[metadata]\n" + section, "astext.relay")
    assert structural_equal(mod, parse(static_module()))


def test_a_dynamic_output_allocated_with_the_wrong_size_is_an_input_error_when_run():
    # The output's storage and shape come from a constant (5, 3) instead of the shape function.
    text = DYNAMIC.replace("%size = multiply(prod(%out_shape_0), 4i64)", "%size = 60i64").replace(
        "memory.alloc_tensor(%storage_0, 0i64, %out_shape_0,", "memory.alloc_tensor(%storage_0, 0i64, meta[relay.Constant][1],"
    )
    text = with_metadata(text, [np.array([2], dtype="int64"), np.array([5, 3], dtype="int64")], devices=0)
    message = r"vm.invoke_tvm_op output 0: the result is float32\[4, 3\], the tensor allocated for it float32\[5, 3\]"
    with pytest.raises(InputError, match=message):
        run_main(parse(text), {"x": np.zeros((4, 3), "float32")})
