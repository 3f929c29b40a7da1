from __future__ import annotations

from compiler.ir.device import VirtualDevice
from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.parser.metadata import encode_metadata
from compiler.passes.strip_devices import StripDevices, device_placements

PLACED = """#[version = "0.0.5"]
def @main(%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(2), float32], virtual_device=meta[VirtualDevice][0]) {
  %0 = on_device(%x, virtual_device=meta[VirtualDevice][0]);
  %1 = add(%0, %0);
  device_copy(%1, src_virtual_device=meta[VirtualDevice][0], dst_virtual_device=meta[VirtualDevice][1])
}
#[metadata]
""" + encode_metadata([], [VirtualDevice(1, 0), VirtualDevice(2, 0)])

PLAIN = """#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  add(%x, %x)
}"""


def test_strip_devices_removes_device_ops_and_virtual_devices():
    after = StripDevices()(parse(PLACED))
    assert structural_equal(after, parse(PLAIN))
    assert after.main.params[0].virtual_device is None
    assert "virtual_device" not in after.main.attrs


def test_strip_devices_substitutes_the_new_parameter_at_every_use():
    after = StripDevices()(parse(PLACED))
    (x,) = after.main.params
    assert after.main.body.args == (x, x)


def test_strip_devices_leaves_a_module_without_placement_alone():
    mod = parse(PLAIN)
    assert StripDevices()(mod) is mod


TVM08 = """#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32], param_device_types=[1], result_device_type=2) {
  %0 = on_device(%x, device_type=1, is_fixed=True);
  %1 = add(%0, %0);
  device_copy(%1, src_dev_type=1, dst_dev_type=2)
}"""


def test_strip_devices_removes_tvm_0_8_device_types_and_their_function_attributes():
    after = StripDevices()(parse(TVM08))
    assert structural_equal(after, parse(PLAIN))
    assert not {"param_device_types", "result_device_type"} & set(after.main.attrs)


def test_device_placements_lists_each_placement_with_its_location():
    found = device_placements(parse(PLACED))
    by_kind = {entry["kind"]: entry for entry in found}
    assert set(by_kind) == {"parameter", "function", "on_device", "device_copy"}
    assert by_kind["parameter"]["name"] == "%x" and "device_type=1" in by_kind["parameter"]["attrs"]["virtual_device"]
    assert by_kind["device_copy"]["location"] == "5:3"
    assert "device_type=2" in by_kind["device_copy"]["attrs"]["dst_virtual_device"]


def test_device_placements_shows_only_attributes_given_in_the_text():
    (on_device,) = [e for e in device_placements(parse(TVM08)) if e["kind"] == "on_device"]
    assert on_device["attrs"] == {"device_type": "1", "is_fixed": "True"}
    assert device_placements(parse(PLAIN)) == []
