"""Per-function sizes for the metadata report, collected while LowerTE runs.

`UpdateFunctionMetadata` is a `process_fn` for LowerTE: for each function it is told about it
records, under the function's global name,

    {"kind": "prim_func" | "extern" | "shape_func", "target": "c" or the external compiler,
     "compiler": the Compiler name or None,
     "workspace_bytes": ..., "io_bytes": ..., "constant_bytes": ...,
     "flops": ..., "out_shape": [...]}

* workspace: the PrimFunc's global-scope allocations, each rounded up to the kernel workspace
  alignment, max(64, workspace_byte_alignment) (compiler.tir.analysis.workspace_bytes, the
  same size the AOT executor reserves); 0 for external functions, whose scratch
  memory is their own business.
* io: the bytes of all buffer parameters (inputs and outputs) with a static shape. TVM's own
  FunctionInfo reports only the last parameter's size (its loop overwrites the entry for each
  parameter); we report the total, which is what the name promises. For an external function
  it is the bytes of its Relay parameters and results.
* constants: the bytes of the non-scalar constants the function embeds. Lowered PrimFuncs take
  tensors as parameters (FuseOps lifts them), so this is 0 for them; external functions keep
  their constants inside (PartitionGraph binds them).
* flops: 2 x the multiply-adds of the function's products (compiler.ops.flops), for GFLOP/s in
  `relaycc run --profile`; 0 for a shape function and for the other PrimFuncs of a lowering.
* out_shape: the shape of the function's (first) result, `?` for a dimension known at run time.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field

from compiler.backend.te_compiler import LoweredFunction
from compiler.ir.expr import Constant, Function
from compiler.ir.types import FuncType, TensorType, Type, flatten_tensor_types
from compiler.ir.visitor import post_order
from compiler.ops.flops import expr_flops
from compiler.tir.analysis import io_bytes, workspace_bytes
from compiler.tir.dtypes import itemsize

FunctionInfo = dict[str, object]


def update_function_metadata(
    lowered: LoweredFunction, metadata: MutableMapping[str, FunctionInfo], workspace_byte_alignment: int = 16
) -> None:
    """Add the entries for `lowered` to `metadata` (keyed by global name)."""
    target = lowered.compiler or lowered.target
    constants = constant_bytes(lowered.relay_function) if lowered.relay_function is not None else 0
    if not lowered.prim_funcs:
        func = lowered.relay_function
        metadata[lowered.global_var.name_hint] = {
            "kind": lowered.kind,
            "target": target,
            "compiler": lowered.compiler,
            "workspace_bytes": 0,
            "io_bytes": relay_io_bytes(func) if func is not None else 0,
            "constant_bytes": constants,
            "flops": expr_flops(func.body) if func is not None else 0,
            "out_shape": out_shape(func),
        }
        return
    main = lowered.relay_function is not None and lowered.kind != "shape_func"
    for gv, prim_func in lowered.prim_funcs.items():
        metadata[gv.name_hint] = {
            "kind": lowered.kind if gv is lowered.global_var else "prim_func",
            "target": target,
            "compiler": lowered.compiler,
            "workspace_bytes": workspace_bytes(prim_func, workspace_byte_alignment),
            "io_bytes": io_bytes(prim_func),
            "constant_bytes": constants if gv is lowered.global_var and lowered.kind != "shape_func" else 0,
            "flops": expr_flops(lowered.relay_function.body) if main and gv is lowered.global_var else 0,  # type: ignore[union-attr]  # main checks it
            "out_shape": out_shape(lowered.relay_function) if main and gv is lowered.global_var else [],
        }


@dataclass
class UpdateFunctionMetadata:
    """A LowerTE `process_fn` that collects every function's sizes into `functions`."""

    workspace_byte_alignment: int = 16
    functions: dict[str, FunctionInfo] = field(default_factory=dict)

    def __call__(self, lowered: LoweredFunction) -> None:
        update_function_metadata(lowered, self.functions, self.workspace_byte_alignment)


def constant_bytes(func: Function) -> int:
    """Bytes of the non-scalar constants inside `func` (each distinct constant once)."""
    return sum(
        int(node.data.nbytes) for node in post_order(func.body) if isinstance(node, Constant) and node.data.ndim > 0
    )


def out_shape(func: Function | None) -> list[int | str]:
    """The shape of `func`'s first tensor result (`?` for a dimension known at run time)."""
    if func is None:
        return []
    ty = func.checked_type if func.has_type else None
    ret = func.ret_type or (ty.ret_type if isinstance(ty, FuncType) else None)
    tensors = [t for t in flatten_tensor_types(ret) if isinstance(t, TensorType)] if ret is not None else []
    if not tensors:
        return []
    return [d if isinstance(d, int) else "?" for d in tensors[0].shape]


def relay_io_bytes(func: Function) -> int:
    """Bytes of a Relay function's tensor parameters and results whose shapes are static."""
    ty = func.checked_type if func.has_type else None
    types: list[Type] = [p.type_annotation for p in func.params if p.type_annotation is not None]
    ret = func.ret_type or (ty.ret_type if isinstance(ty, FuncType) else None)
    if ret is not None:
        types.append(ret)
    total = 0
    for t in types:
        for tensor in flatten_tensor_types(t):
            if isinstance(tensor, TensorType) and not tensor.is_dynamic:
                total += tensor.num_elements * itemsize(tensor.dtype)
    return total
