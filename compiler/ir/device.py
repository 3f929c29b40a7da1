"""VirtualDevice: where a value lives (TVM's `meta[VirtualDevice][i]` entries).

relaycc compiles for one CPU, so these are kept only to read TVM's text and print it back; the
StripDevices pass removes them before lowering. Fields follow TVM's node: device type (-1 when
unconstrained, 1 = CPU, 2 = CUDA, ...), virtual device id (-1 when unconstrained), the target's
kind name if one is given, and the memory scope ("" for the default).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VirtualDevice:
    device_type: int = -1
    virtual_device_id: int = -1
    target: str | None = None
    memory_scope: str = ""

    def __str__(self) -> str:
        parts = [f"device_type={self.device_type}", f"virtual_device_id={self.virtual_device_id}"]
        if self.target is not None:
            parts.append(f"target={self.target}")
        if self.memory_scope:
            parts.append(f"memory_scope={self.memory_scope}")
        return f"VirtualDevice({', '.join(parts)})"
