"""Device placement in Relay text: virtual devices on parameters and functions, meta[VirtualDevice]
entries in #[metadata], and the on_device / device_copy ops."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import ParseError
from compiler.ir.device import VirtualDevice
from compiler.ir.expr import Call
from compiler.ir.structural import structural_equal
from compiler.parser import astext, parse
from compiler.parser.metadata import decode_metadata, encode_metadata
from compiler.runtime.interpreter import run_main

CPU = VirtualDevice(1, 0, "llvm", "global")
GPU = VirtualDevice(2, 0)
BODY = """#[version = "0.0.5"]
def @main(%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(2), float32], virtual_device=meta[VirtualDevice][1]) {
  %0 = on_device(%x, virtual_device=meta[VirtualDevice][1], constrain_result=True);
  %1 = add(%0, %0);
  device_copy(%1, src_virtual_device=meta[VirtualDevice][1], dst_virtual_device=meta[VirtualDevice][0])
}
"""
TEXT = BODY + "#[metadata]\n" + encode_metadata([], [CPU, GPU])


def test_metadata_section_round_trips_virtual_devices():
    table = decode_metadata(encode_metadata([np.zeros(2, "float32")], [CPU, GPU]), None)
    assert table["VirtualDevice"] == [CPU, GPU]
    assert len(table["relay.Constant"]) == 1


def test_virtual_devices_attach_to_parameters_functions_and_device_op_attrs():
    mod = parse(TEXT, "dev.relay")
    main = mod.main
    assert main.params[0].virtual_device == CPU
    assert main.attrs["virtual_device"] == GPU
    copy = main.body
    assert isinstance(copy, Call) and copy.op.name == "device_copy"
    assert (copy.attrs["src_virtual_device"], copy.attrs["dst_virtual_device"]) == (GPU, CPU)
    on_device = copy.args[0].args[0]
    assert on_device.op.name == "on_device" and on_device.attrs["virtual_device"] == GPU
    assert on_device.attrs["constrain_result"] is True and on_device.attrs["constrain_body"] is True


def test_device_placement_prints_and_parses_back_to_the_same_module():
    mod = parse(TEXT)
    text = astext(mod)
    assert "%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(2), float32]" in text
    assert "on_device(%x, virtual_device=meta[VirtualDevice][1], constrain_result=True)" in text
    assert structural_equal(parse(text), mod)


def test_device_ops_type_and_interpret_as_the_identity():
    mod = parse(TEXT)
    assert mod.main.checked_type.ret_type == mod.main.params[0].type_annotation
    x = np.array([1, 2], "float32")
    np.testing.assert_array_equal(run_main(mod, {"x": x})[0], 2 * x)


def test_parameter_attributes_other_than_virtual_device_are_errors():
    with pytest.raises(ParseError) as info:
        parse(TEXT.replace("{virtual_device=meta[VirtualDevice][0]}", "{device=1}"), "dev.relay")
    assert info.value.message == "a parameter takes only virtual_device, not device"
    assert (info.value.line, info.value.column) == (2, 15)


def test_virtual_device_reference_without_metadata_is_a_located_error():
    with pytest.raises(ParseError) as info:
        parse(BODY, "dev.relay")
    assert "printed without its metadata section" in info.value.message
    assert (info.value.line, info.value.column) == (2, 30)


TVM08 = """#[version = "0.0.5"]
def @main(%a: Tensor[(2), float32], %b: Tensor[(2), float32], param_device_types=[1, 2], result_device_type=2) {
  %0 = on_device(%a, device_type=1, is_fixed=True);
  %1 = device_copy(%0, src_dev_type=1, dst_dev_type=2);
  add(%1, %b)
}
"""


def test_tvm_0_8_device_types_parse_print_and_interpret_as_the_identity():
    """TVM 0.8's PlanDevices printed device types, not virtual devices."""
    mod = parse(TVM08, "dev08.relay")
    copy = mod.main.body.args[0]
    assert (copy.attrs["src_dev_type"], copy.attrs["dst_dev_type"]) == (1, 2)
    assert (copy.args[0].attrs["device_type"], copy.args[0].attrs["is_fixed"]) == (1, True)
    assert mod.main.attrs["result_device_type"] == 2
    text = astext(mod)
    assert "on_device(%a, device_type=1, is_fixed=True)" in text and "src_dev_type=1, dst_dev_type=2" in text
    assert structural_equal(parse(text), mod)
    a, b = np.array([1, 2], "float32"), np.array([3, 5], "float32")
    np.testing.assert_array_equal(run_main(mod, {"a": a, "b": b})[0], a + b)


def test_unknown_device_op_attribute_is_a_located_error():
    with pytest.raises(ParseError) as info:
        parse(TVM08.replace("is_fixed=True", "fixed=True"), "dev08.relay")
    assert info.value.message.startswith("operator on_device has no attribute fixed (known: virtual_device,")
    assert (info.value.line, info.value.column) == (3, 37)
