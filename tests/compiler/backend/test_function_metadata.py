"""Per-function sizes collected by UpdateFunctionMetadata while LowerTE runs."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.backend.function_metadata import (
    UpdateFunctionMetadata,
    constant_bytes,
    relay_io_bytes,
    update_function_metadata,
)
from compiler.backend.targets import TARGETS, TargetKind
from compiler.backend.te_compiler import LowerTE, LoweredFunction
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Function, GlobalVar, Op, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.parser import parse, parse_expr
from compiler.passes.infer_type import infer_expr
from compiler.tir import expr as te
from compiler.tir.stmt import Allocate, PrimFunc, Store

HEADER = '#[version = "0.0.5"]\n'

SOFTMAX_LIKE = HEADER + """
def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(5, 7), float32] {
  %0 = fn (%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] {
    add(%x, %y)
  };
  %1 = %0(%a, %a);
  %2 = fn (%x: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] {
    subtract(%x, max(%x, axis=[1], keepdims=True))
  };
  %2(%1)
}"""


def test_update_function_metadata_records_sizes_of_each_lowered_prim_func() -> None:
    collect = UpdateFunctionMetadata()
    LowerTE("test", process_fn=collect)(parse(SOFTMAX_LIKE))
    assert collect.functions == {
        "test_fused_add": {"kind": "prim_func", "target": "c", "compiler": None,
                           "workspace_bytes": 0, "io_bytes": 3 * 5 * 7 * 4, "constant_bytes": 0,
                           "flops": 0, "out_shape": [5, 7]},
        # The row maxima (5 x 1 floats, 20 bytes) live in the workspace, rounded up to the
        # 64-byte alignment of a kernel's own buffers.
        "test_fused_max_subtract": {"kind": "prim_func", "target": "c", "compiler": None,
                                    "workspace_bytes": 64, "io_bytes": 2 * 5 * 7 * 4, "constant_bytes": 0,
                                    "flops": 0, "out_shape": [5, 7]},
    }


def test_update_function_metadata_rounds_workspace_to_the_requested_alignment_above_64() -> None:
    collect = UpdateFunctionMetadata(workspace_byte_alignment=128)
    LowerTE("test", process_fn=collect)(parse(SOFTMAX_LIKE))
    assert collect.functions["test_fused_max_subtract"]["workspace_bytes"] == 128


def test_update_function_metadata_describes_external_function_by_its_compiler() -> None:
    x = Var("x", TensorType((4,), "float32"))
    weights = Constant(np.arange(4, dtype="float32"))
    ext = Function((x,), Call(Op.get("add"), (x, weights)), TensorType((4,), "float32"),
                   Attrs(Primitive=1, Compiler="acme", global_symbol="acme_add"))
    a = Var("a", TensorType((4,), "float32"))
    mod = IRModule.from_expr(Function((a,), Call(ext, (a,))))
    collect = UpdateFunctionMetadata()
    with TARGETS.scoped(TargetKind("acme", codegen=lambda func: None)):
        LowerTE("test", process_fn=collect)(mod)
    assert collect.functions == {
        "acme_add": {"kind": "extern", "target": "acme", "compiler": "acme",
                     "workspace_bytes": 0, "io_bytes": 2 * 16, "constant_bytes": 16, "flops": 0, "out_shape": [4]},
    }


def test_update_function_metadata_records_extern_functions_and_their_shape_functions() -> None:
    collect = UpdateFunctionMetadata()
    LowerTE("test", process_fn=collect)(parse(HEADER + """
        def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(?, ?), float32] {
          @my_dyn(%a, %a)
        }
        def @my_dyn(%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Extern=1) -> Tensor[(?, ?), float32] {
          add(%x, %y)
        }"""))
    assert collect.functions == {
        # Only the parameters count: the result's size is known at run time.
        "my_dyn": {"kind": "extern", "target": "c", "compiler": None,
                   "workspace_bytes": 0, "io_bytes": 2 * 5 * 7 * 4, "constant_bytes": 0,
                   "flops": 0, "out_shape": ["?", "?"]},
        # Two input shapes and one output shape, each two int64 dims.
        "shape_func_add": {"kind": "shape_func", "target": "c", "compiler": None,
                           "workspace_bytes": 0, "io_bytes": 3 * 2 * 8, "constant_bytes": 0,
                           "flops": 0, "out_shape": []},
    }


def test_update_function_metadata_function_form_fills_the_given_mapping() -> None:
    temp = te.Buffer("temp", (3,), "float64")
    out = te.Buffer("out", (2,), "int8")
    body = Allocate(temp, Store(temp, (te.const(0),), te.const(1.0, "float64")))
    gv = GlobalVar("kernel")
    prim_func = PrimFunc("kernel", (out,), body, num_inputs=0)
    metadata: dict[str, dict[str, object]] = {"other": {}}
    update_function_metadata(LoweredFunction(gv, None, {gv: prim_func}, "c", None), metadata, workspace_byte_alignment=8)
    assert metadata["kernel"] == {"kind": "prim_func", "target": "c", "compiler": None,
                                  "workspace_bytes": 64, "io_bytes": 2, "constant_bytes": 0,
                                  "flops": 0, "out_shape": []}
    assert "other" in metadata


def test_constant_bytes_counts_each_tensor_constant_once_and_ignores_scalars() -> None:
    x = Var("x", TensorType((2, 2), "float32"))
    table = Constant(np.zeros((2, 2), "float32"))
    body = Call(Op.get("add"), (Call(Op.get("multiply"), (x, table)), table))
    body = Call(Op.get("add"), (body, Constant(np.float32(1.0))))
    assert constant_bytes(Function((x,), body)) == 16


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fn (%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] { negative(%x) }", 2 * 24),
        ("fn (%x: Tensor[(?, 3), float32], %y: Tensor[(3,), int8]) { add(%x, %x) }", 3),
        ("fn (%x: Tensor[(2,), bool]) -> (Tensor[(2,), bool], Tensor[(2,), bool]) { (%x, %x) }", 6),
    ],
)
def test_relay_io_bytes_counts_static_parameters_and_results(text: str, expected: int) -> None:
    func = parse_expr(text)
    assert isinstance(func, Function)
    infer_expr(func)
    assert relay_io_bytes(func) == expected


def test_function_metadata_counts_the_products_operations() -> None:
    collect = UpdateFunctionMetadata()
    LowerTE("test", process_fn=collect)(parse(HEADER + """
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) -> Tensor[(1, 4, 8, 8), float32] {
  %0 = fn (%a: Tensor[(1, 3, 8, 8), float32], %b: Tensor[(4, 3, 3, 3), float32], Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {
    nn.relu(nn.conv2d(%a, %b, padding=[1, 1, 1, 1]))
  };
  %0(%x, %w)
}"""))
    (info,) = collect.functions.values()
    # Each of the 1x4x8x8 outputs sums 3 channels x 3x3 taps: 2 operations per multiply-add.
    assert info["flops"] == 2 * (4 * 8 * 8) * (3 * 3 * 3) and info["out_shape"] == [1, 4, 8, 8]
