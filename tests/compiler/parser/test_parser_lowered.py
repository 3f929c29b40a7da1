"""Already-lowered modules in Relay text: `call_lowered` as relaycc and TVM print it.

`relaycc lower` writes `metadata={relay_attrs={...}, all_prim_fn_vars=[@f]}`; TVM's debug
printer (`print(mod)`) writes the same map with quoted keys, DictAttrs as `{__dict__={...}}` and
globals as `'name'` (seen in TVM's forum posts and docs). Both forms read to the same call. A
PrimFunc is never part of Relay text, so a call_lowered of one is a located error that says so.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from compiler.diagnostics import ParseError
from compiler.driver import lower
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, GlobalVar
from compiler.ir.structural import structural_equal
from compiler.parser import astext, parse
from compiler.runtime.interpreter import run_main

HEADER = '#[version = "0.0.5"]\n'
KERNEL = """def @tvmgen_default_fused_add_nn_relu(%p0: Tensor[(1, 4), float32], %p1: Tensor[(1, 4), float32], Primitive=1, hash="a4b80ec818532480") -> Tensor[(1, 4), float32] {
  %0 = add(%p0, %p1);
  nn.relu(%0)
}
"""
OURS = """def @main(%x: Tensor[(1, 4), float32], %b: Tensor[(1, 4), float32]) -> Tensor[(1, 4), float32] {
  %0 = (%x, %b);
  call_lowered(@tvmgen_default_fused_add_nn_relu, %0, metadata={relay_attrs={Primitive=1, hash="a4b80ec818532480"}, all_prim_fn_vars=[@tvmgen_default_fused_add_nn_relu]})
}
"""
TVMS = """def @main(%x: Tensor[(1, 4), float32], %b: Tensor[(1, 4), float32]) -> Tensor[(1, 4), float32] {
  %0 = (%x, %b) /* ty=(Tensor[(1, 4), float32], Tensor[(1, 4), float32]) */;
  call_lowered(@tvmgen_default_fused_add_nn_relu, %0, metadata={"relay_attrs"={__dict__={"Primitive"=1, "hash"="a4b80ec818532480"}}, "all_prim_fn_vars"=['tvmgen_default_fused_add_nn_relu']}) /* ty=Tensor[(1, 4), float32] */
}
"""


def test_tvm_debug_printed_call_lowered_metadata_reads_like_ours():
    ours = parse(HEADER + KERNEL + OURS, "ours.relay")
    tvms = parse(HEADER + KERNEL + TVMS, "tvms.relay")
    assert structural_equal(ours, tvms)
    call = tvms.main.body
    assert isinstance(call, Call)
    metadata = call.attrs["metadata"]
    assert metadata["relay_attrs"] == Attrs({"Primitive": 1, "hash": "a4b80ec818532480"})
    (named,) = metadata["all_prim_fn_vars"]
    assert isinstance(named, GlobalVar) and named is call.args[0]
    assert astext(tvms) == astext(ours)


def test_call_lowered_of_a_relay_function_in_the_text_runs_in_the_interpreter():
    mod = parse(HEADER + KERNEL + TVMS)
    x = np.array([[1, -2, 3, -4]], dtype="float32")
    b = np.array([[0.5, 1, -4, 3]], dtype="float32")
    (out,) = run_main(mod, {"x": x, "b": b})
    np.testing.assert_array_equal(out, np.maximum(x + b, 0))


def test_call_lowered_of_a_primfunc_the_text_lacks_is_a_located_error():
    with pytest.raises(ParseError) as info:
        parse(HEADER + TVMS, "lowered.relay")
    assert info.value.message == (
        "call_lowered refers to @tvmgen_default_fused_add_nn_relu, a PrimFunc the text does not contain: "
        "Relay text cannot carry PrimFuncs (TVM prints them apart from the module, or not at all); "
        "give the module as it was before LowerTE"
    )
    assert (info.value.span.line, info.value.span.column) == (4, 16)


def test_a_primfunc_named_only_in_the_metadata_is_a_located_error_too():
    text = HEADER + KERNEL + TVMS.replace("['tvmgen_default_fused_add_nn_relu']", "['tvmgen_default_fused_add']")
    with pytest.raises(ParseError) as info:
        parse(text, "lowered.relay")
    assert info.value.message.startswith("an attribute names @tvmgen_default_fused_add, a PrimFunc the text does not")
    line = text.splitlines()[info.value.span.line - 1]
    assert line[info.value.span.column - 1 :].startswith("'tvmgen_default_fused_add'")


def test_relaycc_lower_output_read_back_says_what_is_missing():
    mlp = HEADER + """def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32]) -> Tensor[(2, 3), float32] {
  %0 = nn.dense(%x, %w, units=None);
  nn.relu(%0)
}"""
    lowered_text = astext(lower(parse(mlp), executor=False).lowered)
    with pytest.raises(ParseError) as info:
        parse(lowered_text, "lowered.relay")
    assert info.value.message.startswith(
        "call_lowered refers to @tvmgen_default_fused_nn_dense_nn_relu, a PrimFunc the text does not contain"
    )
    assert info.value.span.line == 4


def test_an_undefined_global_in_an_ordinary_call_keeps_the_plain_message():
    with pytest.raises(ParseError) as info:
        parse(HEADER + "def @main(%x: float32) -> float32 {\n  %0 = negative(%x);\n  @missing(%0)\n}", "m.relay")
    assert info.value.message == "undefined global @missing"
    assert (info.value.span.line, info.value.span.column) == (4, 3)


def tvm_map_section(callee: str) -> str:
    """The metadata section TVM's astext() writes for call_lowered's `metadata=meta[Map][0]`:
    a string-keyed Map, DictAttrs over a Map of IntImm and String, an Array of GlobalVar."""
    nodes = [
        {"type_key": ""},
        {"type_key": "Map", "keys": ["Map"], "data": [2]},
        {"type_key": "Array", "data": [3]},
        {"type_key": "Map", "keys": ["relay_attrs", "all_prim_fn_vars"], "data": [4, 8]},
        {"type_key": "DictAttrs", "attrs": {"__dict__": "5"}},
        {"type_key": "Map", "keys": ["Primitive", "hash"], "data": [6, 7]},
        {"type_key": "IntImm", "attrs": {"dtype": "int32", "span": "0", "value": "1"}},
        {"type_key": "runtime.String", "repr_str": "a4b80ec818532480"},
        {"type_key": "Array", "data": [9]},
        {"type_key": "GlobalVar", "attrs": {"_checked_type_": "0", "name_hint": "10", "span": "0",
                                             "virtual_device_": "0"}},
        {"type_key": "runtime.String", "repr_str": callee},
    ]
    return json.dumps({"root": 1, "nodes": nodes, "b64ndarrays": [], "attrs": {"tvm_version": "0.16.0"}}, indent=2)


TVM_ASTEXT = TVMS.replace(
    """metadata={"relay_attrs"={__dict__={"Primitive"=1, "hash"="a4b80ec818532480"}}, "all_prim_fn_vars"=['tvmgen_default_fused_add_nn_relu']}""",
    "metadata=meta[Map][0]",
)


def test_tvm_astext_keeps_call_lowered_metadata_in_the_section_and_it_reads_like_ours():
    assert "meta[Map][0]" in TVM_ASTEXT
    text = HEADER + KERNEL + TVM_ASTEXT + "#[metadata]\n" + tvm_map_section("tvmgen_default_fused_add_nn_relu")
    tvms = parse(text, "astext.relay")
    assert structural_equal(tvms, parse(HEADER + KERNEL + OURS))
    (named,) = tvms.main.body.attrs["metadata"]["all_prim_fn_vars"]
    assert named is tvms.main.body.args[0]


def test_a_primfunc_named_in_the_metadata_section_is_a_located_error_at_the_reference():
    text = HEADER + KERNEL + TVM_ASTEXT + "#[metadata]\n" + tvm_map_section("tvmgen_default_fused_add")
    with pytest.raises(ParseError) as info:
        parse(text, "astext.relay")
    assert info.value.message.startswith("an attribute names @tvmgen_default_fused_add, a PrimFunc the text does not")
    line = text.splitlines()[info.value.span.line - 1]
    assert info.value.span.line == 8 and line[info.value.span.column - 1 :].startswith("meta[Map][0])")
