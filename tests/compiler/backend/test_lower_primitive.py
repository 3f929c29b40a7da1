"""Lowering a fused primitive function to one PrimFunc.

Each case states the primitive in Relay text and checks the shape of the loop nest (which
values are inlined, which are materialized, where results are stored), then runs the C that the
PrimFunc compiles to against numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from compiler.backend.lower_primitive import lower_primitive, parallel_axis
from compiler.diagnostics import UnsupportedError
from compiler.ir.expr import Call, Function, Op, Var, const
from compiler.ir.types import TensorType
from compiler.parser import parse_expr
from compiler.passes.infer_type import infer_expr
from compiler.tir import expr as te
from compiler.tir.analysis import post_order, stmt_exprs, walk_stmts
from compiler.runtime.threads import available_cores, set_threads
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, PrimFunc, Store
from tests.built_once import built_once
from tests.compiler.backend.prim_library import PrimLibrary, build_prim_library


def typed(text: str) -> Function:
    func = parse_expr(text)
    assert isinstance(func, Function)
    infer_expr(func)
    return func


def lower(text: str, name: str = "f") -> PrimFunc:
    return lower_primitive(typed(text), name)


def temporaries(func: PrimFunc) -> list[te.Buffer]:
    """Buffers the PrimFunc allocates in memory (local accumulators excluded)."""
    return [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.scope == "global"]


def stores(func: PrimFunc) -> list[Store]:
    return [s for s in walk_stmts(func.body) if isinstance(s, Store) and s.buffer.scope == "global"]


def top_level_loops(func: PrimFunc) -> list[For]:
    """The outermost loop nests, in program order (under any temporaries' Allocates)."""
    body = func.body
    while isinstance(body, Allocate):
        body = body.body
    items = body.stmts if hasattr(body, "stmts") else (body,)
    return [s for s in items if isinstance(s, For)]


def nodes_of(store: Store) -> list[te.PrimExpr]:
    """Every distinct expression node (by identity) a store computes."""
    done: set[int] = set()
    out: list[te.PrimExpr] = []
    for root in stmt_exprs(store):
        out.extend(post_order(root, done))
    return out


def intrinsics(store: Store, name: str) -> list[te.Intrin]:
    return [n for n in nodes_of(store) if isinstance(n, te.Intrin) and n.name == name]


def loads_of(store: Store, buffer: te.Buffer) -> list[te.Load]:
    return [n for n in nodes_of(store) if isinstance(n, te.Load) and n.buffer is buffer]


F23 = "Tensor[(2, 3), float32]"

ADD_EXP_MULTIPLY = f"""
fn (%p0: {F23}, %p1: Tensor[(3), float32], %p2: {F23}, Primitive=1) {{
  %0 = add(%p0, %p1);
  %1 = exp(%0);
  multiply(%1, %p2)
}}"""

EXP_SUM = f"""
fn (%p0: {F23}, Primitive=1) {{
  %0 = exp(%p0);
  sum(%0, axis=[1])
}}"""

SUM_THEN_SUBTRACT = f"""
fn (%p0: {F23}, Primitive=1) {{
  %0 = sum(%p0, axis=[1], keepdims=True);
  subtract(%p0, %0)
}}"""

SUM_TIMES_SCALAR = f"""
fn (%p0: {F23}, Primitive=1) {{
  %0 = sum(%p0, axis=[0]);
  multiply(%0, 0.5f)
}}"""

DIAMOND = f"""
fn (%p0: {F23}, Primitive=1) {{
  %0 = exp(%p0);
  %1 = sqrt(%0);
  add(%0, %1)
}}"""

TUPLE_OUT = f"""
fn (%p0: {F23}, %p1: {F23}, Primitive=1) {{
  %0 = add(%p0, %p1);
  %1 = tanh(%0);
  (%0, %1)
}}"""

REDUCTION_SHARED_BY_OUTPUTS = f"""
fn (%p0: {F23}, Primitive=1) {{
  %0 = max(%p0, axis=[1]);
  %1 = sqrt(%0);
  (%0, %1)
}}"""

SCALAR_CONSTANT = f"""
fn (%p0: {F23}, Primitive=1) {{
  %0 = add(%p0, 1.5f);
  maximum(%0, 0f)
}}"""

INT_MEAN_CAST = """
fn (%p0: Tensor[(2, 5), int32], Primitive=1) {
  %0 = mean(%p0, axis=[1]);
  cast(%0, dtype="float32")
}"""

# Each level reads the previous one twice; rebuilding per path would need 2**40 nodes.
DIAMOND_CHAIN = f"""
fn (%p0: {F23}, Primitive=1) {{
  %0 = exp(%p0);
  {" ".join(f"%{i} = add(%{i - 1}, %{i - 1});" for i in range(1, 41))}
  %40
}}"""

LONG_CHAIN = f"""
fn (%p0: {F23}, Primitive=1) {{
  %0 = exp(%p0);
  {" ".join(f"%{i} = negative(%{i - 1});" for i in range(1, 3000))}
  %2999
}}"""

SPLIT = """
fn (%p0: Tensor[(4, 3), float32], Primitive=1) {
  split(%p0, indices_or_sections=2)
}"""

SPLIT_FIELD_EXP = """
fn (%p0: Tensor[(4, 3), float32], Primitive=1) {
  %0 = split(%p0, indices_or_sections=[1], axis=1);
  %1 = %0.1;
  exp(%1)
}"""

# Softmax written with reductions: max and sum each feed a broadcast along the row, so each is
# materialized in a small temporary; the exp is recomputed inline wherever it is read.
SOFTMAX_BY_HAND = f"""
fn (%p0: {F23}, Primitive=1) {{
  %0 = max(%p0, axis=[1], keepdims=True);
  %1 = subtract(%p0, %0);
  %2 = exp(%1);
  %3 = sum(%2, axis=[1], keepdims=True);
  divide(%2, %3)
}}"""

ROUND = "fn (%p0: Tensor[(8), float32], Primitive=1) { round(%p0) }"

# int8 sums wrap before the division, as in numpy: (100 + 100) / 2 is -56 / 2.
INT8_ADD_DIVIDE = """
fn (%p0: Tensor[(4), int8], %p1: Tensor[(4), int8], %p2: Tensor[(4), int8], Primitive=1) {
  %0 = add(%p0, %p1);
  divide(%0, %p2)
}"""

# A kernel with a tuple result writes the function's outputs directly ...
TOPK = """
fn (%p0: Tensor[(2, 5), float32], Primitive=1) {
  topk(%p0, k=3)
}"""

# ... or temporaries, when the result is built from its fields.
TOPK_FIELDS_SWAPPED = """
fn (%p0: Tensor[(2, 5), float32], Primitive=1) {
  %0 = topk(%p0, k=3);
  (%0.1, %0.0)
}"""

# name -> (primitive, inputs, numpy result(s))
rng = np.random.default_rng(7)
X23 = rng.uniform(-2, 2, (2, 3)).astype(np.float32)
Y23 = rng.uniform(-2, 2, (2, 3)).astype(np.float32)
B3 = rng.uniform(-2, 2, (3,)).astype(np.float32)
X43 = rng.uniform(-2, 2, (4, 3)).astype(np.float32)
I25 = np.array([[-3, 7, 1, 0, 4], [5, -9, 2, 2, -1]], dtype=np.int32)
HALVES = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 3.2, -7.5], dtype=np.float32)
T25 = np.arange(10, dtype=np.float32).reshape(2, 5)
I8 = (np.array([100, -100, 7, -128], np.int8), np.array([100, -100, 0, -1], np.int8), np.array([2, 3, 2, 1], np.int8))

# A batch of one, like every NCHW image: big enough for threads, odd sizes.
IMAGE = np.random.default_rng(11).uniform(-1, 1, (1, 67, 61, 65)).astype("float32")
BATCH_OF_ONE_EXP = """
fn (%p0: Tensor[(1, 67, 61, 65), float32], Primitive=1) {
  add(exp(%p0), 1f)
}"""
BATCH_OF_ONE_MEAN = """
fn (%p0: Tensor[(1, 67, 61, 65), float32], Primitive=1) {
  mean(%p0, axis=[2, 3], keepdims=True)
}"""

# Attention's k transposed for q @ k^T (a tiled transpose) and its heads merged back (a split
# division): compiler/tir/injective_loops.py.
RESHAPE_TRANSPOSE = """
fn (%p0: Tensor[(32, 64), float32], Primitive=1) {
  %0 = reshape(%p0, newshape=[32, 2, 32]);
  transpose(%0, axes=[1, 2, 0])
}"""

TRANSPOSE_RESHAPE = """
fn (%p0: Tensor[(2, 32, 16), float32], Primitive=1) {
  %0 = transpose(%p0, axes=[1, 0, 2]);
  reshape(%0, newshape=[32, 32])
}"""

X3264 = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
X23216 = np.arange(2 * 32 * 16, dtype=np.float32).reshape(2, 32, 16)

CASES: dict[str, tuple[str, tuple[np.ndarray, ...], tuple[np.ndarray, ...]]] = {
    "add_exp_multiply": (ADD_EXP_MULTIPLY, (X23, B3, Y23), (np.exp(X23 + B3) * Y23,)),
    "exp_sum": (EXP_SUM, (X23,), (np.exp(X23).sum(axis=1),)),
    "sum_then_subtract": (SUM_THEN_SUBTRACT, (X23,), (X23 - X23.sum(axis=1, keepdims=True),)),
    "sum_times_scalar": (SUM_TIMES_SCALAR, (X23,), (X23.sum(axis=0) * np.float32(0.5),)),
    "int_mean_cast": (INT_MEAN_CAST, (I25,), (np.array([1.0, -0.0], np.float32),)),
    "diamond": (DIAMOND, (X23,), (np.exp(X23) + np.sqrt(np.exp(X23)),)),
    "diamond_chain": (DIAMOND_CHAIN, (X23,), (np.exp(X23) * np.float32(2.0**40),)),
    "long_chain": (LONG_CHAIN, (X23,), (-np.exp(X23),)),
    "tuple_out": (TUPLE_OUT, (X23, Y23), (X23 + Y23, np.tanh(X23 + Y23))),
    "reduction_shared": (REDUCTION_SHARED_BY_OUTPUTS, (np.abs(X23),), (np.abs(X23).max(axis=1), np.sqrt(np.abs(X23).max(axis=1)))),
    "scalar_constant": (SCALAR_CONSTANT, (X23,), (np.maximum(X23 + np.float32(1.5), 0),)),
    "split": (SPLIT, (X43,), tuple(np.split(X43, 2))),
    "reshape_transpose": (RESHAPE_TRANSPOSE, (X3264,), (X3264.reshape(32, 2, 32).transpose(1, 2, 0),)),
    "transpose_reshape": (TRANSPOSE_RESHAPE, (X23216,), (X23216.transpose(1, 0, 2).reshape(32, 32),)),
    "split_field_exp": (SPLIT_FIELD_EXP, (X43,), (np.exp(X43[:, 1:]),)),
    "softmax_by_hand": (SOFTMAX_BY_HAND, (X23,), (np.exp(X23) / np.exp(X23).sum(axis=1, keepdims=True),)),
    "round_half_away": (ROUND, (HALVES,), (np.array([1, 2, 3, -1, -3, 0, 3, -8], np.float32),)),
    "int8_add_divide": (INT8_ADD_DIVIDE, I8, (np.array([-28, 18, 3, 127], np.int8),)),
    "batch_of_one_exp": (BATCH_OF_ONE_EXP, (IMAGE,), (np.exp(IMAGE) + np.float32(1),)),
    "batch_of_one_mean": (BATCH_OF_ONE_MEAN, (IMAGE,), (IMAGE.mean(axis=(2, 3), keepdims=True),)),
    "topk": (TOPK, (T25,), (np.array([[4, 3, 2], [9, 8, 7]], np.float32), np.array([[4, 3, 2]] * 2, np.int32))),
    "topk_fields_swapped": (
        TOPK_FIELDS_SWAPPED,
        (T25,),
        (np.array([[4, 3, 2]] * 2, np.int32), np.array([[4, 3, 2], [9, 8, 7]], np.float32)),
    ),
}


def test_elementwise_chain_is_one_loop_nest_without_temporaries() -> None:
    func = lower(ADD_EXP_MULTIPLY)
    assert temporaries(func) == []
    assert len(top_level_loops(func)) == 1
    (store,) = stores(func)
    assert store.buffer is func.outputs[0]
    assert len(intrinsics(store, "exp")) == 1
    p0, p1, p2 = func.inputs
    assert len(loads_of(store, p0)) == len(loads_of(store, p1)) == len(loads_of(store, p2)) == 1


def test_broadcast_operand_is_read_at_the_trailing_index() -> None:
    func = lower(ADD_EXP_MULTIPLY)
    (store,) = stores(func)
    (bias,) = loads_of(store, func.inputs[1])
    assert bias.indices == (store.indices[1],)


def test_reduction_of_elementwise_producers_writes_the_output_directly() -> None:
    func = lower(EXP_SUM)
    assert temporaries(func) == []
    (store,) = stores(func)
    assert store.buffer is func.outputs[0]
    # The exp is computed inside the reduction's update, on the input buffer.
    local_updates = [s for s in walk_stmts(func.body) if isinstance(s, Store) and s.buffer.scope == "local"]
    assert any(intrinsics(s, "exp") and loads_of(s, func.inputs[0]) for s in local_updates)


def test_elementwise_consumer_of_a_reshaping_reduction_reads_a_temporary() -> None:
    func = lower(SUM_THEN_SUBTRACT)
    (temp,) = temporaries(func)
    assert temp.shape == (2, 1)
    first, second = stores(func)
    assert first.buffer is temp and second.buffer is func.outputs[0]
    assert loads_of(second, temp)


def test_reduction_stores_into_the_output_with_its_elementwise_consumer_as_epilogue() -> None:
    func = lower(SUM_TIMES_SCALAR)
    assert temporaries(func) == []
    assert len(top_level_loops(func)) == 1
    (store,) = stores(func)
    assert store.buffer is func.outputs[0]
    assert isinstance(store.value, te.Binary) and store.value.op == "*"


def test_epilogue_may_change_the_dtype_of_the_reduction() -> None:
    func = lower(INT_MEAN_CAST)
    assert temporaries(func) == []
    (store,) = stores(func)
    assert store.buffer is func.outputs[0] and store.buffer.dtype == "float32"


CAST_INTO_CONV = """fn (%p0: Tensor[(1, 1, 4, 4, 16), float16], %p1: Tensor[WEIGHT, float32], Primitive=1) {
  %0 = cast(%p0, dtype="float32");
  nn.contrib_conv2d_NCHWc(%0, %p1, channels=16, kernel_size=[1, 1], data_layout="NCHW16c", kernel_layout="LAYOUT",
                          out_layout="NCHW16c")
}"""


def test_a_kernel_that_widens_its_input_reads_the_float16_tensor_a_cast_made_float32() -> None:
    # The packed convolution (OHWI16o) declares extras["widened_inputs"]: no float32 copy.
    func = lower(CAST_INTO_CONV.replace("WEIGHT", "(1, 1, 1, 16, 16)").replace("LAYOUT", "OHWI16o"))
    assert func.inputs[0].dtype == "float16"
    assert [b.name for b in temporaries(func) if b.name.startswith("T_input")] == []


def test_a_kernel_that_reads_float32_gets_the_cast_input_stored_first() -> None:
    # TVM's OIHW16i16o layout takes the generic kernel, which widens nothing.
    func = lower(CAST_INTO_CONV.replace("WEIGHT", "(1, 1, 1, 1, 16, 16)").replace("LAYOUT", "OIHW16i16o"))
    assert func.inputs[0].dtype == "float16"
    (copy,) = [b for b in temporaries(func) if b.name.startswith("T_input")]
    assert copy.dtype == "float32"


def test_diamond_computes_the_shared_node_once_per_element() -> None:
    func = lower(DIAMOND)
    assert temporaries(func) == []
    (store,) = stores(func)
    assert len(intrinsics(store, "exp")) == 1 and len(intrinsics(store, "sqrt")) == 1
    assert len(loads_of(store, func.inputs[0])) == 1


def test_chain_of_diamonds_stays_linear_in_size() -> None:
    func = lower(DIAMOND_CHAIN)
    (store,) = stores(func)
    # Counted first: a failed assert would print the nodes, and printing a DAG expands it.
    size = len(nodes_of(store))
    assert size < 200


def test_long_elementwise_chain_lowers_without_deep_recursion() -> None:
    func = lower(LONG_CHAIN)
    (store,) = stores(func)
    negations = sum(isinstance(n, te.Unary) for n in nodes_of(store))
    assert negations == 2999


def test_tuple_outputs_get_one_loop_nest_each() -> None:
    func = lower(TUPLE_OUT)
    assert temporaries(func) == []
    assert [b.name for b in func.outputs] == ["output0", "output1"]
    first, second = stores(func)
    assert first.buffer is func.outputs[0] and second.buffer is func.outputs[1]
    assert intrinsics(second, "tanh") and not intrinsics(first, "tanh")


def test_reduction_that_is_an_output_is_stored_there_and_read_back() -> None:
    func = lower(REDUCTION_SHARED_BY_OUTPUTS)
    assert temporaries(func) == []
    first, second = stores(func)
    assert first.buffer is func.outputs[0]
    assert second.buffer is func.outputs[1]
    assert loads_of(second, func.outputs[0]) and intrinsics(second, "sqrt")


def test_tuple_valued_op_as_the_result_stores_each_field() -> None:
    func = lower(SPLIT)
    assert temporaries(func) == []
    assert [b.shape for b in func.outputs] == [(2, 3), (2, 3)]
    assert [s.buffer for s in stores(func)] == list(func.outputs)


def test_field_of_a_tuple_valued_op_is_computed_inline() -> None:
    func = lower(SPLIT_FIELD_EXP)
    assert temporaries(func) == []
    (store,) = stores(func)
    assert func.outputs[0].shape == (4, 2)
    assert intrinsics(store, "exp") and loads_of(store, func.inputs[0])


def test_tuple_valued_kernel_writes_each_field_to_its_output() -> None:
    func = lower(TOPK)
    assert temporaries(func) == []
    assert [(b.shape, b.dtype) for b in func.outputs] == [((2, 3), "float32"), ((2, 3), "int32")]
    assert {s.buffer.name for s in stores(func)} == {b.name for b in func.outputs}


def test_tuple_valued_kernel_read_by_fields_writes_temporaries() -> None:
    func = lower(TOPK_FIELDS_SWAPPED)
    assert [(t.shape, t.dtype) for t in temporaries(func)] == [((2, 3), "float32"), ((2, 3), "int32")]
    assert [b.dtype for b in func.outputs] == ["int32", "float32"]


def test_reduction_feeding_a_broadcast_is_materialized_and_the_last_one_is_not() -> None:
    func = lower(SOFTMAX_BY_HAND)
    # max and sum both feed broadcasts: two (2, 1) temporaries, then one loop nest writes the
    # result; no temporary of the input's size.
    assert [t.shape for t in temporaries(func)] == [(2, 1), (2, 1)]
    assert stores(func)[-1].buffer is func.outputs[0]


def test_scalar_constants_are_inlined_not_passed() -> None:
    func = lower(SCALAR_CONSTANT)
    assert len(func.inputs) == 1
    (store,) = stores(func)
    values = {n.value for n in nodes_of(store) if isinstance(n, te.Const) and n.dtype == "float32"}
    assert values == {1.5, 0.0}


def test_output_buffer_is_named_after_the_last_op() -> None:
    assert lower(SCALAR_CONSTANT).outputs[0].name == "T_maximum"


def test_non_scalar_constant_is_rejected() -> None:
    p0 = Var("p0", TensorType((2,), "float32"))
    func = Function((p0,), Call(Op.get("add"), (p0, const(np.ones(2, np.float32)))), attrs={"Primitive": 1})
    infer_expr(func)
    with pytest.raises(UnsupportedError, match="non-scalar constant"):
        lower_primitive(func, "f")


# -- `?` dims ----------------------------------------------------------------------------------

DYNAMIC_BROADCAST = """fn (%p0: Tensor[(?, 8), float32], %p1: Tensor[(?, 1), float32], Primitive=1) {
    multiply(nn.relu(add(%p0, %p1)), 2f)
}"""


def test_dynamic_dims_become_scalar_parameters_named_after_their_buffer() -> None:
    func = lower(DYNAMIC_BROADCAST)
    assert [v.name for v in func.scalar_params] == ["p0_dim0", "p1_dim0"]
    p0, p1 = func.inputs
    assert p0.shape == (func.scalar_params[0], 8) and p1.shape == (func.scalar_params[1], 1)
    assert isinstance(func.outputs[0].shape[0], te.PrimExpr) and func.outputs[0].shape[1] == 8


def test_dynamic_elementwise_chain_is_still_one_loop_nest() -> None:
    func = lower(DYNAMIC_BROADCAST)
    assert len(top_level_loops(func)) == 1 and temporaries(func) == []


def test_kernel_reached_by_a_dynamic_dim_is_refused_naming_the_op() -> None:
    with pytest.raises(UnsupportedError, match="nn.contrib_dense_pack: its kernel needs static shapes"):
        lower("""fn (%p0: Tensor[(3, ?, 8), float32], %p1: Tensor[(2, 8, 4), float32], Primitive=1) {
            nn.contrib_dense_pack(%p0, %p1, units=8, weight_layout="NC4n")
        }""")


def test_undeclared_shape_rule_is_refused_naming_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from compiler import ops
    from compiler.ops import registry

    monkeypatch.setitem(registry._REGISTRY, "exp", dataclasses.replace(ops.get("exp"), shape_func=None))
    with pytest.raises(UnsupportedError, match="exp declares no shape rule"):
        lower("fn (%p0: Tensor[(?, 3), float32], Primitive=1) { exp(%p0) }")


DYNAMIC_DENSE = """fn (%p0: Tensor[(?, {k}), float32], %p1: Tensor[(12, {k}), float32], Primitive=1) {{
    nn.relu(nn.dense(%p0, %p1, units=12))
}}"""
DYNAMIC_BATCH_MATMUL = """fn (%p0: Tensor[(?, ?, 8), float32], %p1: Tensor[(?, ?, 8), float32], Primitive=1) {
    nn.batch_matmul(%p0, %p1, transpose_b=True)
}"""


DYNAMIC_CONV = """fn (%p0: Tensor[(?, 3, 8, 8), float32], %p1: Tensor[(4, 3, 3, 3), float32],
                    %p2: Tensor[(4, 1, 1), float32], Primitive=1) {
    nn.relu(add(nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]), %p2))
}"""
DYNAMIC_POOL_SOFTMAX = """fn (%p0: Tensor[(?, 3, 8, 8), float32], Primitive=1) {{ {pool} }}"""
# The residual comes first, so the sum takes its `?` dims, which the kernel cannot show equal to
# the product's: the product is kept in a temporary of the kernel's own, of `?` shape.
DYNAMIC_RESIDUAL = """fn (%p0: Tensor[(?, ?, 6), float32], %p1: Tensor[(20, 6), float32], %p2: Tensor[(20), float32],
                        %p3: Tensor[(?, ?, 20), float32], Primitive=1) {
    add(%p3, add(%p2, nn.dense(%p0, %p1, units=20)))
}"""


def conv2d_same_3x3(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """NCHW / OIHW convolution with a 3x3 kernel, stride 1, padding 1."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, w_ = x.shape[2:]
    out = np.zeros((x.shape[0], w.shape[0], h, w_), np.float64)
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, dy:dy + h, dx:dx + w_], w[:, :, dy, dx])
    return out


@pytest.fixture(scope="module")
def dynamic_library(tmp_path_factory: pytest.TempPathFactory) -> PrimLibrary:
    return built_once(tmp_path_factory, "lower_primitive_dynamic", build_dynamic_library)


def build_dynamic_library(directory: Path) -> PrimLibrary:
    funcs = [lower(DYNAMIC_BROADCAST, "dyn_broadcast"),
             lower("fn (%p0: Tensor[(?, ?), int32], Primitive=1) { negative(%p0) }", "dyn_all"),
             lower(DYNAMIC_DENSE.format(k=40), "dyn_dense_dot"),
             lower(DYNAMIC_DENSE.format(k=5), "dyn_dense_gemm"),
             lower(DYNAMIC_BATCH_MATMUL, "dyn_batch_matmul"),
             lower(DYNAMIC_CONV, "dyn_conv"),
             lower(DYNAMIC_POOL_SOFTMAX.format(pool="nn.max_pool2d(%p0, pool_size=[2, 2], strides=[2, 2])"), "dyn_pool"),
             lower(DYNAMIC_POOL_SOFTMAX.format(pool="nn.softmax(%p0)"), "dyn_softmax"),
             lower("fn (%p0: Tensor[(2, ?), float32], Primitive=1) { nn.log_softmax(%p0, axis=1) }",
                   "dyn_softmax_axis"),
             lower("fn (%p0: Tensor[(?, 2, 3), float32], Primitive=1) { nn.batch_flatten(%p0) }", "dyn_flatten"),
             lower("fn (%p0: Tensor[(?, 2, 3), float32], Primitive=1) { reshape(%p0, newshape=[0, 3, 2]) }",
                   "dyn_reshape"),
             lower(DYNAMIC_RESIDUAL, "dyn_residual"),
             lower("""fn (%p0: Tensor[(?, 8), float32], %p1: Tensor[(2, 8, 4), float32], Primitive=1) {
                          nn.contrib_dense_pack(%p0, %p1, units=7, weight_layout="NC4n") }""", "dyn_dense_pack"),
             lower("""fn (%p0: Tensor[(?, 2, 3, 4), float32], Primitive=1) {
                          nn.upsampling(%p0, scale_h=2f, scale_w=1.5f, method="bilinear") }""", "dyn_upsampling"),
             *(lower(f"fn ({', '.join(f'%p{i}: {t}' for i, t in enumerate(types))}, Primitive=1) {{ {call} }}",
                     f"dyn_{name}") for name, (call, types) in {**QUESTION_BATCH_OPS, **SPATIAL_OPS}.items()),
             lower("fn (%p0: Tensor[(?, ?, 4), float32], Primitive=1) { take(%p0, 0i64, axis=1) }", "dyn_take_first"),
             lower("""fn (%p0: Tensor[(?, 4), float32], %p1: Tensor[(3), int32], Primitive=1) {
                          take(%p0, %p1, axis=0, mode="wrap") }""", "dyn_take_wrap")]
    return build_prim_library(funcs, directory)


@pytest.mark.parametrize("rows", [1, 3, 64])
def test_dynamic_kernel_compiled_once_runs_for_every_batch(dynamic_library: PrimLibrary, rows: int) -> None:
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 8)).astype("float32")
    for b_rows in {1, rows}:
        b = rng.standard_normal((b_rows, 1)).astype("float32")
        (out,) = dynamic_library.run("dyn_broadcast", [x, b])
        np.testing.assert_allclose(out, np.maximum(x + b, 0) * 2, rtol=1e-6)


def test_dynamic_kernel_broadcasts_a_runtime_dim_of_one(dynamic_library: PrimLibrary) -> None:
    # %p0 has five rows and %p1 one: the row of %p1 is read for every output row. (The kernel
    # keeps %p0's rows as the output's; the executor refuses a %p0 of one row against more.)
    x = np.arange(40, dtype="float32").reshape(5, 8)
    b = np.arange(1, dtype="float32").reshape(1, 1) + 3
    (out,) = dynamic_library.run("dyn_broadcast", [x, b])
    np.testing.assert_allclose(out, np.maximum(x + b, 0) * 2)


def test_dynamic_kernel_with_every_dim_unknown(dynamic_library: PrimLibrary) -> None:
    for shape in [(0, 4), (2, 7), (5, 1)]:
        x = np.arange(int(np.prod(shape)), dtype="int32").reshape(shape)
        (out,) = dynamic_library.run("dyn_all", [x])
        np.testing.assert_array_equal(out, -x)


@pytest.mark.parametrize("name, k", [("dyn_dense_dot", 40), ("dyn_dense_gemm", 5)])
@pytest.mark.parametrize("rows", [1, 3, 8, 13, 64])
def test_dense_with_unknown_rows_runs_whole_chunks_and_the_rest(dynamic_library: PrimLibrary, name: str, k: int, rows: int) -> None:
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, k)).astype("float32")
    w = rng.standard_normal((12, k)).astype("float32")
    (out,) = dynamic_library.run(name, [x, w])
    np.testing.assert_allclose(out, np.maximum(x @ w.T, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batches, m, n", [((1, 1), 1, 1), ((2, 2), 7, 7), ((1, 3), 5, 128), ((4, 1), 128, 3)])
def test_batch_matmul_with_unknown_extents_broadcasts_a_batch_of_one(
    dynamic_library: PrimLibrary, batches: tuple[int, int], m: int, n: int
) -> None:
    rng = np.random.default_rng(m * n)
    x = rng.standard_normal((batches[0], m, 8)).astype("float32")
    y = rng.standard_normal((batches[1], n, 8)).astype("float32")
    (out,) = dynamic_library.run("dyn_batch_matmul", [x, y])
    np.testing.assert_allclose(out, x @ y.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch", [1, 3])
def test_conv_with_unknown_batch_runs_the_static_kernel_per_row(dynamic_library: PrimLibrary, batch: int) -> None:
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 3, 8, 8)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    bias = rng.standard_normal((4, 1, 1)).astype("float32")
    (out,) = dynamic_library.run("dyn_conv", [x, w, bias])
    np.testing.assert_allclose(out, np.maximum(conv2d_same_3x3(x, w) + bias, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 5])
def test_pool_and_softmax_with_unknown_batch(dynamic_library: PrimLibrary, batch: int) -> None:
    x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype("float32")
    (pooled,) = dynamic_library.run("dyn_pool", [x])
    np.testing.assert_array_equal(pooled, x.reshape(batch, 3, 4, 2, 4, 2).max(axis=(3, 5)))
    (soft,) = dynamic_library.run("dyn_softmax", [x])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("length", [1, 7, 128])
def test_softmax_along_an_unknown_axis_runs_to_its_run_time_length(dynamic_library: PrimLibrary, length: int) -> None:
    x = np.random.default_rng(length).standard_normal((2, length)).astype("float32")
    (out,) = dynamic_library.run("dyn_softmax_axis", [x])
    shifted = x - x.max(axis=1, keepdims=True)
    np.testing.assert_allclose(out, shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)), rtol=1e-5, atol=1e-5)


def test_per_row_kernel_loops_over_the_batch_around_the_static_kernel() -> None:
    func = lower(DYNAMIC_CONV)
    (loop,) = top_level_loops(func)
    assert loop.extent is func.scalar_params[0]
    assert all(b.is_static for b in temporaries(func))


def test_kernel_whose_unknown_dim_is_not_its_batch_is_refused() -> None:
    # Plain layouts and NCHW[b]c have run-time forms; a channel-blocked NHWC has none.
    with pytest.raises(UnsupportedError, match="nn.max_pool2d: its kernel needs static shapes"):
        lower("""fn (%p0: Tensor[(1, ?, 8, 1, 4), float32], Primitive=1) {
                     nn.max_pool2d(%p0, pool_size=[2, 2], layout="NHWC4c") }""")


@pytest.mark.parametrize("batch", [1, 4])
def test_reshapes_keeping_an_unknown_batch_map_it_directly(dynamic_library: PrimLibrary, batch: int) -> None:
    x = np.arange(batch * 6, dtype="float32").reshape(batch, 2, 3)
    (flat,) = dynamic_library.run("dyn_flatten", [x])
    np.testing.assert_array_equal(flat, x.reshape(batch, 6))
    (reshaped,) = dynamic_library.run("dyn_reshape", [x])
    np.testing.assert_array_equal(reshaped, x.reshape(batch, 3, 2))


def test_an_intermediate_of_unknown_shape_is_a_heap_temporary_of_the_kernel() -> None:
    func = lower(DYNAMIC_RESIDUAL, "residual")
    (temp,) = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.scope == "heap"]

    assert temp.name == "T_dense" and not temp.is_static


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (2, 5), (3, 13)])
def test_a_kernel_with_a_heap_temporary_runs_for_every_shape(dynamic_library: PrimLibrary,
                                                             shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(shape[1])
    x = rng.standard_normal((*shape, 6)).astype("float32")
    w = rng.standard_normal((20, 6)).astype("float32")
    bias = rng.standard_normal(20).astype("float32")
    residual = rng.standard_normal((*shape, 20)).astype("float32")
    (out,) = dynamic_library.run("dyn_residual", [x, w, bias, residual])
    np.testing.assert_allclose(out, residual + (bias + x @ w.T), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 2, 5])
def test_take_reads_along_and_wraps_around_unknown_extents(dynamic_library: PrimLibrary, rows: int) -> None:
    x = np.arange(rows * 3 * 4, dtype="float32").reshape(rows, 3, 4)
    (first,) = dynamic_library.run("dyn_take_first", [x])
    np.testing.assert_array_equal(first, x[:, 0])

    flat = x.reshape(-1, 4)
    indices = np.array([-1, 7, 2], dtype="int32")
    (taken,) = dynamic_library.run("dyn_take_wrap", [flat, indices])
    np.testing.assert_array_equal(taken, flat[np.mod(indices, len(flat))])


# Ops with a `?` batch (a kernel run once per row, or a loop nest over the `?` extent), each
# checked against the interpreter on the same call with the batch given.
QUESTION_BATCH_OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "lrn": ("nn.lrn(%p0, size=3)", ("Tensor[(?, ?, 3, 4), float32]",)),
    "topk": ("topk(%p0, k=3)", ("Tensor[(?, 7), float32]",)),
    "topk_values": ('topk(%p0, k=2, ret_type="values", is_ascend=True)', ("Tensor[(?, 3, 5), float32]",)),
    "qnn_dense": ('qnn.dense(%p0, %p1, 1, 2, 0.5f, 0.25f, units=5, out_dtype="int32")',
                  ("Tensor[(?, 8), int8]", "Tensor[(5, 8), int8]")),
    "resize2d": ('image.resize2d(%p0, size=[8, 7], roi=[0f, 0f, 0f, 0f], method="linear")',
                 ("Tensor[(?, 3, 4, 5), float32]",)),
}


# Convolutions and pools whose spatial dims are `?` take a plain reduction over the window
# (`extras["dynamic_reduction"]`): every layout permutation, groups, strides, dilation,
# padding, ceil mode and both average divisors.
SPATIAL_OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "conv_nchw": ("nn.relu(nn.conv2d(%p0, %p1, strides=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 2], groups=2))",
                  ("Tensor[(2, 4, ?, ?), float32]", "Tensor[(6, 2, 3, 2), float32]")),
    "conv_nhwc": ('nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="HWIO")',
                  ("Tensor[(1, ?, ?, 3), float32]", "Tensor[(3, 3, 3, 5), float32]")),
    "conv_wide": ("nn.relu(nn.conv2d(%p0, %p1, strides=[2, 2], padding=[1, 2, 0, 1]))",
                  ("Tensor[(2, 4, ?, ?), float32]", "Tensor[(32, 4, 3, 3), float32]")),
    "conv_wide_nhwc": ('nn.conv2d(%p0, %p1, dilation=[2, 1], data_layout="NHWC", kernel_layout="HWIO")',
                       ("Tensor[(1, ?, ?, 3), float32]", "Tensor[(2, 2, 3, 16), float32]")),
    "conv_int8": ('nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1], out_dtype="int32")',
                  ("Tensor[(1, 3, ?, ?), int8]", "Tensor[(4, 3, 3, 3), int8]")),
    "max_pool": ("nn.max_pool2d(%p0, pool_size=[3, 2], strides=[2, 2], padding=[1, 1], ceil_mode=True)",
                 ("Tensor[(1, 3, ?, ?), float32]",)),
    "max_pool_dilated": ('nn.max_pool2d(%p0, pool_size=[2, 3], dilation=[1, 2], padding=[0, 2, 1, 0], layout="NHWC")',
                         ("Tensor[(2, ?, ?, 3), float32]",)),
    "avg_pool": ('nn.avg_pool2d(%p0, pool_size=[3, 3], strides=[2, 1], padding=[1, 1, 0, 2], ceil_mode=True, '
                 'layout="NHWC")', ("Tensor[(2, ?, ?, 3), float32]",)),
    "avg_pool_pad": ("nn.avg_pool2d(%p0, pool_size=[2, 3], dilation=[2, 1], padding=[1, 1], count_include_pad=True)",
                     ("Tensor[(1, 2, ?, ?), int32]",)),
    "global_avg": ('nn.global_avg_pool2d(%p0, layout="NHWC")', ("Tensor[(2, ?, ?, 3), int8]",)),
    # Channel-blocked, as BlockedActivations leaves a model of run-time image size: the stem's
    # NCHW data into NCHW16c, NCHW8c data read with an OHWI16o weight, the pools on NCHW8c.
    "conv_blocked_stem": ('nn.contrib_conv2d_NCHWc(%p0, %p1, strides=[2, 2], padding=[1, 1, 1, 1], channels=16, '
                          'kernel_size=[3, 3], kernel_layout="OIHW16o", out_layout="NCHW16c")',
                          ("Tensor[(1, 3, ?, ?), float32]", "Tensor[(1, 3, 3, 3, 16), float32]")),
    "conv_blocked": ('nn.relu(nn.contrib_conv2d_NCHWc(%p0, %p1, padding=[1, 0, 1, 1], channels=16, kernel_size=[3, 2], '
                     'data_layout="NCHW8c", kernel_layout="OHWI16o", out_layout="NCHW16c"))',
                     ("Tensor[(2, 2, ?, ?, 8), float32]", "Tensor[(1, 3, 2, 16, 16), float32]")),
    "max_pool_blocked": ('nn.max_pool2d(%p0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1], layout="NCHW8c")',
                         ("Tensor[(1, 2, ?, ?, 8), float32]",)),
    "avg_pool_blocked": ('nn.avg_pool2d(%p0, pool_size=[2, 3], padding=[0, 1], ceil_mode=True, layout="NCHW8c")',
                         ("Tensor[(2, 1, ?, ?, 8), float32]",)),
    "global_avg_blocked": ('nn.global_avg_pool2d(%p0, layout="NCHW8c")', ("Tensor[(1, 2, ?, ?, 8), float32]",)),
    "global_max": ("nn.global_max_pool2d(%p0)", ("Tensor[(1, 4, ?, ?), float32]",)),
    "adaptive_to_one": ("nn.adaptive_avg_pool2d(%p0, output_size=[1, 1])", ("Tensor[(1, 8, ?, ?), float32]",)),
    "conv_transpose": ("nn.conv2d_transpose(%p0, %p1, strides=[2, 1], padding=[1, 0, 0, 1], dilation=[1, 2], groups=2)",
                       ("Tensor[(1, 4, ?, ?), float32]", "Tensor[(4, 3, 3, 3), float32]")),
    "upsampling_spatial": ('nn.upsampling(%p0, scale_h=2f, scale_w=1.5f, method="bilinear", align_corners=True)',
                   ("Tensor[(1, 3, ?, ?), float32]",)),
    # An image of any size resized to a fixed one; the nearest asymmetric case is an integer
    # factor for 5x7 (TVM's int-div shortcut, taken by the static interpreter), not for 9x6.
    "resize_linear": ('image.resize2d(%p0, size=[6, 11], roi=[0f, 0f, 0f, 0f], method="linear")',
                      ("Tensor[(1, 3, ?, ?), float32]",)),
    "resize_nearest_asymmetric": ('image.resize2d(%p0, size=[10, 14], roi=[0f, 0f, 0f, 0f], '
                                  'method="nearest_neighbor", coordinate_transformation_mode="asymmetric")',
                                  ("Tensor[(2, 2, ?, ?), float32]",)),
    "resize_cubic_nhwc": ('image.resize2d(%p0, size=[4, 9], roi=[0f, 0f, 0f, 0f], layout="NHWC", method="cubic", '
                          'coordinate_transformation_mode="align_corners", cubic_exclude=1)',
                          ("Tensor[(1, ?, ?, 3), float32]",)),
    "resize_crop": ('image.resize2d(%p0, size=[5, 5], roi=[0.1f, -0.2f, 0.9f, 1.3f], method="linear", '
                    'coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1f)',
                    ("Tensor[(1, 2, ?, ?), float32]",)),
}


def random_arrays(types: Sequence[str], rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for t in types:
        dims, dtype = t[len("Tensor[("):].split("), ")
        shape = tuple(int(d) for d in dims.split(", "))
        dtype = dtype.rstrip("]")
        data = rng.integers(-100, 100, shape) if dtype.startswith("int") else rng.standard_normal(shape)
        arrays.append(data.astype(dtype))
    return arrays


def interpreted(call: str, types: Sequence[str], arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    from compiler.parser import parse
    from compiler.runtime.interpreter import run_main

    params = ", ".join(f"%p{i}: {t}" for i, t in enumerate(types))
    return run_main(parse(f'#[version = "0.0.5"]\ndef @main({params}) {{ {call} }}\n', "static.relay"),
                    {f"p{i}": a for i, a in enumerate(arrays)})


@pytest.mark.parametrize("name", sorted(SPATIAL_OPS))
@pytest.mark.parametrize("hw", [(5, 7), (9, 6)])
def test_a_convolution_or_pool_over_question_mark_spatial_dims_matches_the_interpreter(
    dynamic_library: PrimLibrary, name: str, hw: tuple[int, int]
) -> None:
    call, types = SPATIAL_OPS[name]
    static = [t.replace("?", str(hw[0]), 1).replace("?", str(hw[1]), 1) for t in types]
    arrays = random_arrays(static, np.random.default_rng(hw[0]))

    (got,) = dynamic_library.run(f"dyn_{name}", arrays)

    (want,) = interpreted(call, static, arrays)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def spatial_op(name: str) -> PrimFunc:
    call, types = SPATIAL_OPS[name]
    return lower(f"fn ({', '.join(f'%p{i}: {t}' for i, t in enumerate(types))}, Primitive=1) {{ {call} }}")


def test_a_convolution_over_question_mark_spatial_dims_runs_the_tiled_product_on_a_heap_copy() -> None:
    allocated = {s.buffer.name.rstrip("_0123456789"): s.buffer.scope
                 for s in walk_stmts(spatial_op("conv_wide").body) if isinstance(s, Allocate)}

    assert allocated["padded"] == "heap" and allocated["packed_b"] == "global" and allocated["acc"] == "local"


def test_a_narrow_group_convolution_over_question_mark_spatial_dims_is_one_plain_reduction() -> None:
    func = spatial_op("conv_nchw")  # 3 output channels per group: a register tile would be mostly empty

    # Two copies of the loop nest, on the threads or not as the run's sizes make it worth it.
    assert isinstance(func.body, IfThenElse)
    assert {s.buffer.scope for s in walk_stmts(func.body) if isinstance(s, Allocate)} == {"local"}
    assert [type(b) for b in (func.body.then_case, func.body.else_case)] == [For, For]
    assert func.body.then_case.kind == ForKind.PARALLEL and func.body.else_case.kind == ForKind.SERIAL


@pytest.mark.parametrize("name", sorted(QUESTION_BATCH_OPS))
@pytest.mark.parametrize("rows", [1, 3])
def test_an_op_with_a_question_mark_batch_matches_the_interpreter(
    dynamic_library: PrimLibrary, name: str, rows: int
) -> None:
    call, types = QUESTION_BATCH_OPS[name]
    static = [t.replace("?", str(rows) if i == 0 else "2") for i, t in enumerate(types)]
    arrays = random_arrays(static, np.random.default_rng(rows))

    got = dynamic_library.run(f"dyn_{name}", arrays)

    want = interpreted(call, static, arrays)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 4])
def test_a_packed_dense_runs_its_static_kernel_once_per_row_of_a_question_mark_batch(
    dynamic_library: PrimLibrary, rows: int
) -> None:
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 8)).astype("float32")
    w = rng.standard_normal((8, 8)).astype("float32")  # 7 units padded to two blocks of 4
    w[7] = 0
    packed = np.ascontiguousarray(w.reshape(2, 4, 8).transpose(0, 2, 1))
    (out,) = dynamic_library.run("dyn_dense_pack", [x, packed])
    np.testing.assert_allclose(out, x @ w[:7].T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 3])
def test_upsampling_takes_a_question_mark_batch(dynamic_library: PrimLibrary, rows: int) -> None:
    from compiler.parser import parse
    from compiler.runtime.interpreter import run_main

    x = np.random.default_rng(rows).standard_normal((rows, 2, 3, 4)).astype("float32")
    (out,) = dynamic_library.run("dyn_upsampling", [x])
    static = parse(f"""#[version = "0.0.5"]
def @main(%x: Tensor[({rows}, 2, 3, 4), float32]) {{
  nn.upsampling(%x, scale_h=2f, scale_w=1.5f, method="bilinear")
}}""", "static.relay")
    np.testing.assert_allclose(out, run_main(static, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_dynamic_kernels_compile_without_warnings(dynamic_library: PrimLibrary) -> None:
    assert dynamic_library.broken == {} and dynamic_library.warnings == []


# -- the C they compile to -------------------------------------------------------------------


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> PrimLibrary:
    return built_once(tmp_path_factory, "lower_primitive",
                      lambda directory: build_prim_library([lower(text, name) for name, (text, _, _) in CASES.items()],
                                                           directory))


def check_case(library: PrimLibrary, name: str) -> None:
    _, inputs, expected = CASES[name]
    actual = library.run(name, inputs)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(a, e)


NUMERIC_CASES = [name for name in CASES if name not in ("round_half_away", "int8_add_divide")]


@pytest.mark.parametrize("name", NUMERIC_CASES)
def test_lowered_primitive_computes_what_numpy_does(library: PrimLibrary, name: str) -> None:
    check_case(library, name)


def test_round_rounds_half_away_from_zero(library: PrimLibrary) -> None:
    check_case(library, "round_half_away")


def test_fused_int8_arithmetic_wraps_between_ops(library: PrimLibrary) -> None:
    check_case(library, "int8_add_divide")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", ["batch_of_one_exp", "batch_of_one_mean"])
def test_batch_of_one_kernels_match_numpy_at_each_thread_count(library: PrimLibrary, name: str, threads: int) -> None:
    set_threads(threads)
    try:
        check_case(library, name)
    finally:
        set_threads(available_cores())


def parallel_loops(func: PrimFunc) -> list[For]:
    return [s for s in walk_stmts(func.body) if isinstance(s, For) and s.kind is ForKind.PARALLEL]


@pytest.mark.parametrize("text", [BATCH_OF_ONE_EXP, BATCH_OF_ONE_MEAN])
def test_batch_of_one_runs_its_channels_in_parallel(text: str) -> None:
    # An OpenMP loop over the batch of one would run the whole nest on one core.
    func = lower(text)
    (loop,) = parallel_loops(func)
    assert isinstance(loop.extent, te.Const) and loop.extent.value == 67


@pytest.mark.parametrize("text", [
    "fn (%p0: Tensor[(128, 256), float32], Primitive=1) { subtract(%p0, 1f) }",
    "fn (%p0: Tensor[(128, 256), float32], Primitive=1) { mean(%p0, axis=[-1], keepdims=True) }",
    "fn (%p0: Tensor[(1, 32, 768), float32], Primitive=1) { transpose(%p0, axes=[1, 0, 2]) }",
])
def test_small_memory_bound_kernels_stay_on_one_core(text: str) -> None:
    assert parallel_loops(lower(text)) == []


def test_reduction_with_few_results_stays_on_one_core_however_long() -> None:
    assert parallel_loops(lower("fn (%p0: Tensor[(8, 65536), float32], Primitive=1) { sum(%p0, axis=[1]) }")) == []


@pytest.mark.parametrize("shape, axis", [((1, 1, 5, 3), 2), ((4, 1), 0), ((1,), None), ((1, 1), None), ((), None)])
def test_parallel_axis_is_the_outermost_one_not_of_extent_one(shape: tuple[int, ...], axis: int | None) -> None:
    assert parallel_axis(shape) == axis


def test_parallel_axis_takes_a_dynamic_extent() -> None:
    assert parallel_axis((1, te.Var("n", "int32"), 4)) == 1


def test_lowered_primitives_compile_without_warnings(library: PrimLibrary) -> None:
    assert library.broken == {}
    assert library.warnings == []


def test_kernel_keeps_its_dtype_changing_consumer_out_of_its_epilogue() -> None:
    # The kernel would compute in the output buffer's dtype; the cast must read its result.
    func = lower("""
fn (%p0: Tensor[(2, 4), float32], %p1: Tensor[(3, 4), float32], Primitive=1) {
  %0 = nn.dense(%p0, %p1, units=None);
  cast(%0, dtype="int32")
}""")
    (result,) = [t for t in temporaries(func) if t.name.startswith("T_dense")]
    assert result.dtype == "float32" and result.shape == (2, 3)
    last = stores(func)[-1]
    assert last.buffer is func.outputs[0] and loads_of(last, result)


def test_op_whose_loops_assume_static_extents_is_refused_not_crashed() -> None:
    # split along a `?` axis: its compute needs the extent to place the sections.
    with pytest.raises(UnsupportedError, match="cannot take `\\?` dims yet"):
        lower("fn (%p0: Tensor[(?, 8), float32], Primitive=1) { %0 = split(%p0, indices_or_sections=2); %0.0 }")


PACKED_CONV_TO_FLOAT16 = """fn (%p0: Tensor[(1, 16, 6, 6), float32], %p1: Tensor[(1, 1, 1, 16, 16), float32],
        %p2: Tensor[(1, 16, 6, 6), float32]) {
  %0 = nn.contrib_conv2d_NCHWc(%p0, %p1, channels=16, kernel_size=[1, 1], data_layout="NCHW",
                               kernel_layout="OHWI16o", out_layout="NCHW");
  cast(nn.relu(add(%0, %p2)), dtype="float16")
}"""


def test_packed_conv_ending_in_a_float16_cast_stores_it_without_a_float32_copy(tmp_path) -> None:
    # Float16ComputeInFloat32 leaves such chains after every residual add of a float16 ResNet:
    # the product and the chain in float32, the value rounded once as it is stored.
    func = lower(PACKED_CONV_TO_FLOAT16, "conv_to_f16")
    assert temporaries(func) == []
    assert func.outputs[0].dtype == "float16"
    rng = np.random.default_rng(16)
    x = rng.standard_normal((1, 16, 6, 6)).astype("float32")
    w = rng.standard_normal((16, 16)).astype("float32")  # (O, I)
    r = rng.standard_normal((1, 16, 6, 6)).astype("float32")
    library = build_prim_library([func], tmp_path)
    (out,) = library.run("conv_to_f16", [x, w.T.reshape(1, 1, 1, 16, 16), r])
    conv = np.einsum("oi,nihw->nohw", w.astype("float64"), x).astype("float32")
    want = np.maximum(conv + r, 0).astype("float16")
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype("float32"), want.astype("float32"), rtol=1e-3, atol=1e-3)
