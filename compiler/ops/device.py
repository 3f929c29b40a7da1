"""Device placement ops TVM writes into heterogeneous programs.

`on_device(x, virtual_device=..., constrain_result=False, constrain_body=True)` says where `x`
is computed or lives; `device_copy(x, src_virtual_device=..., dst_virtual_device=...)` moves a
value between devices. TVM 0.8 printed the older forms, which are accepted too:
`on_device(x, device_type=1, is_fixed=True)`, `device_copy(x, src_dev_type=1, dst_dev_type=2)`
(DLPack device type numbers; 0 means unset) and the function attributes `param_device_types`
and `result_device_type`. On relaycc's single CPU both are the identity: they type and interpret as
their argument, and the StripDevices pass removes them before lowering, so they are never
lowered themselves (registered as internal ops, which the generic per-op tests skip).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.device import VirtualDevice
from compiler.ir.types import Type
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, TypeRelationError, lookup, register
from compiler.ops.shape_rules import same_shape_rule

UNCONSTRAINED = VirtualDevice()


def _identity_type(types: Sequence[Type], attrs: Attrs) -> Type:
    if len(types) != 1:
        raise TypeRelationError(f"takes one argument, got {len(types)}")
    return types[0]


def _identity(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return arrays[0]


def _device_op(name: str, attrs: tuple[AttrSpec, ...]) -> OpDef:
    existing = lookup(name)
    if existing is not None:
        return existing
    return register(
        OpDef(name, 1, _identity_type, OpPattern.OPAQUE, _identity, attrs=attrs, shape_func=same_shape_rule,
              extras={"internal": True})
    )


ON_DEVICE = _device_op(
    "on_device",
    (
        AttrSpec("virtual_device", "any", UNCONSTRAINED),
        AttrSpec("constrain_result", "bool", False),
        AttrSpec("constrain_body", "bool", True),
        AttrSpec("device_type", "int", 0),  # TVM 0.8
        AttrSpec("is_fixed", "bool", False),  # TVM 0.8
    ),
)
DEVICE_COPY = _device_op(
    "device_copy",
    (
        AttrSpec("src_virtual_device", "any", UNCONSTRAINED),
        AttrSpec("dst_virtual_device", "any", UNCONSTRAINED),
        AttrSpec("src_dev_type", "int", 0),  # TVM 0.8
        AttrSpec("dst_dev_type", "int", 0),  # TVM 0.8
    ),
)
DEVICE_OPS = (ON_DEVICE.name, DEVICE_COPY.name)
