from __future__ import annotations

import numpy as np

from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.parser.metadata import encode_metadata
from compiler.passes.infer_type import InferType
from compiler.passes.undo_manifest_alloc import UndoManifestAlloc

HEADER = '#[version = "0.0.5"]\n'
SHAPES = [np.array([4], dtype="int64"), np.array([2, 2], dtype="int64")]

# Two outputs of one primitive in one storage, a reshape without a kernel, a kill; the callee
# bound by `let`, as TVM 0.8's ManifestAlloc wrote after ToANormalForm.
BEFORE = HEADER + """def @main(%x: Tensor[(4), int32]) -> (Tensor[(4), int32], Tensor[(2, 2), int32]) {
  let %f = fn (%p0: Tensor[(4), int32], Primitive=1) -> (Tensor[(4), int32], Tensor[(4), int32]) {
    %0 = multiply(%p0, %p0);
    %1 = add(%p0, %p0);
    (%0, %1)
  };
  let %storage_0 = memory.alloc_storage(32i64, 64i64, dtype="int32");
  let %tensor_0 = memory.alloc_tensor(%storage_0, 0i64, meta[relay.Constant][0], dtype="int32", const_shape=meta[relay.Constant][0], assert_shape=None);
  let %tensor_1 = memory.alloc_tensor(%storage_0, 16i64, meta[relay.Constant][0], dtype="int32", const_shape=meta[relay.Constant][0], assert_shape=None);
  let %_ = vm.invoke_tvm_op(%f, (%x,), (%tensor_0, %tensor_1));
  let %r = vm.reshape_tensor(%tensor_1, meta[relay.Constant][1], newshape=[2, 2]);
  let %_1 = memory.kill(%storage_0);
  (%tensor_0, %r)
}
#[metadata]
""" + encode_metadata(SHAPES)

EXPECTED = HEADER + """def @main(%x: Tensor[(4), int32]) -> (Tensor[(4), int32], Tensor[(2, 2), int32]) {
  %2 = fn (%p0: Tensor[(4), int32], Primitive=1) -> (Tensor[(4), int32], Tensor[(4), int32]) {
    %0 = multiply(%p0, %p0);
    %1 = add(%p0, %p0);
    (%0, %1)
  };
  let %result_0 = %2(%x);
  let %r = reshape(%result_0.1, newshape=[2, 2]);
  (%result_0.0, %r)
}
"""


def test_allocations_and_invoke_tvm_op_become_a_call_returning_its_results():
    after = InferType()(UndoManifestAlloc()(parse(BEFORE)))
    assert structural_equal(after, parse(EXPECTED))


def test_a_tensor_read_before_the_invoke_that_writes_it_is_left_alone():
    text = BEFORE.replace(
        "let %_ = vm.invoke_tvm_op(%f, (%x,), (%tensor_0, %tensor_1));",
        "let %early = negative(%tensor_0);\n  let %_ = vm.invoke_tvm_op(%f, (%x,), (%tensor_0, %tensor_1));",
    )
    mod = parse(text)
    assert UndoManifestAlloc()(mod) is mod


def test_a_tensor_no_invoke_writes_and_a_storage_used_otherwise_are_left_alone():
    unwritten = parse(BEFORE.replace("(%tensor_0, %tensor_1));", "(%tensor_0, %tensor_0));"))
    assert UndoManifestAlloc()(unwritten) is unwritten
    returned = parse(BEFORE.replace("(%tensor_0, %r)\n}", "(%tensor_0, %r, %storage_0)\n}").replace(
        "-> (Tensor[(4), int32], Tensor[(2, 2), int32])", ""))
    assert UndoManifestAlloc()(returned) is returned


def test_a_module_without_memory_ops_is_returned_as_it_is():
    mod = parse(EXPECTED)
    assert UndoManifestAlloc()(mod) is mod


def test_vm_shape_of_becomes_shape_of():
    before = parse(HEADER + 'def @main(%x: Tensor[(2, 3), float32]) { vm.shape_of(%x, dtype="int64") }')
    after = InferType()(UndoManifestAlloc()(before))
    assert structural_equal(after, parse(HEADER + 'def @main(%x: Tensor[(2, 3), float32]) { shape_of(%x, dtype="int64") }'))
