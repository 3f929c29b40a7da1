"""The loop lowerings (`compute=`) of the injective, broadcast and creation ops.

Each case is a primitive function in Relay text. All cases are lowered with lower_primitive,
emitted into one C module, built into one shared library (a module-scoped fixture, so the C
compiler runs once) and run through cffi; results must equal numpy exactly, since these ops
only move data or do one exact float operation. Single-op cases compare with the op's own numpy
reference; fused chains state their expected value in plain numpy and also check the shape of
the loop nest: producers are computed inline, with no temporary buffers.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import pytest

from compiler import ops
from compiler.backend.codegen_c import emit_c_module
from compiler.backend.lower_primitive import lower_primitive
from compiler.diagnostics import UnsupportedError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, Op, Tuple, Var
from compiler.ir.types import ANY, TensorType
from compiler.ops.common import reshape_index, row_major_index, row_major_offset, static_dims
from compiler.parser import parse_expr
from compiler.passes.infer_type import infer_expr
from compiler.runtime.build import build_shared_library, compile_check
from compiler.runtime.ffi import Library, load_library, prim_func_cdef
from compiler.tir import expr as te
from compiler.tir.analysis import post_order, walk_stmts
from compiler.tir.compute import TensorView
from compiler.tir.stmt import Allocate, For, PrimFunc, Store

Expected = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


@dataclass(frozen=True)
class Case:
    """`body` computes the primitive's result from the named `inputs`; `expected` (numpy, given
    the inputs in order) defaults to the reference of the body's single op."""

    name: str
    body: str
    inputs: dict[str, np.ndarray]
    expected: Expected | None = None


def rand(name: str, shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    """Inputs drawn from a generator seeded by `name`, so every run sees the same values."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if np.dtype(dtype).kind == "f":
        return np.asarray(rng.uniform(-4.0, 4.0, shape)).astype(dtype)
    info = np.iinfo(dtype)
    return np.asarray(rng.integers(max(int(info.min), -100), min(int(info.max), 100), shape)).astype(dtype)


def ints(values: object, dtype: str = "int32") -> np.ndarray:
    return np.asarray(values, dtype=dtype)


F32 = "float32"

CASES: list[Case] = [
    # nn activations and bias
    Case("relu_int8", "nn.relu(%x)", {"x": rand("relu_int8", (3, 5), "int8")}),
    Case("relu_float64", "nn.relu(%x)", {"x": rand("relu_float64", (7,), "float64")}),
    Case("leaky_relu_int_truncates_alpha", "nn.leaky_relu(%x, alpha=1.5)",
         {"x": rand("lr_int", (4, 3), "int32")}),
    Case("leaky_relu_float64", "nn.leaky_relu(%x, alpha=0.3)", {"x": rand("lr_f64", (2, 2, 3), "float64")}),
    Case("bias_add_last_axis", "nn.bias_add(%x, %b, axis=-1)",
         {"x": rand("ba_x", (2, 3, 4)), "b": rand("ba_b", (4,))}),
    Case("bias_add_axis_0_int", "nn.bias_add(%x, %b, axis=0)",
         {"x": rand("ba_xi", (3, 2), "int32"), "b": rand("ba_bi", (3,), "int32")}),
    # nn.pad
    Case("pad_constant_int_with_float_value", "nn.pad(%x, %v, pad_width=[[1, 0], [0, 2]])",
         {"x": rand("pad_ci", (2, 3), "int32"), "v": np.array(-7.9, F32)}),
    Case("pad_constant_scalar_literal", "nn.pad(%x, 2f, pad_width=[[3, 1]])", {"x": rand("pad_lit", (4,))},
         lambda x: np.pad(x, [(3, 1)], constant_values=2.0)),
    Case("pad_nothing", "nn.pad(%x, %v, pad_width=[[0, 0], [0, 0]])",
         {"x": rand("pad_none", (2, 2)), "v": np.array(1.0, F32)}),
    Case("pad_edge_3d", "nn.pad(%x, %v, pad_width=[[0, 2], [1, 0], [2, 2]], pad_mode=\"edge\")",
         {"x": rand("pad_edge", (2, 3, 2)), "v": np.array(0.0, F32)}),
    Case("pad_reflect_both_sides", "nn.pad(%x, %v, pad_width=[[2, 2]], pad_mode=\"reflect\")",
         {"x": rand("pad_refl", (3,)), "v": np.array(0.0, F32)}),
    Case("pad_reflect_2d", "nn.pad(%x, %v, pad_width=[[1, 3], [0, 1]], pad_mode=\"reflect\")",
         {"x": rand("pad_refl2", (4, 2), "int8"), "v": np.array(0, "int8")}),
    # reshape family
    Case("batch_flatten_4d", "nn.batch_flatten(%x)", {"x": rand("bf4", (2, 3, 1, 5))}),
    Case("batch_flatten_2d", "nn.batch_flatten(%x)", {"x": rand("bf2", (4, 1))}),
    Case("reshape_unaligned", "reshape(%x, newshape=[4, 6])", {"x": rand("rs_un", (2, 3, 4))}),
    Case("reshape_split_with_minus_4", "reshape(%x, newshape=[-4, 3, 2, 5])",
         {"x": rand("rs_m4", (6, 5))}),
    Case("reshape_flat_to_3d", "reshape(%x, newshape=[2, 3, 4])",
         {"x": rand("rs_flat", (24,), "int64")}),
    Case("reshape_with_unit_dims", "reshape(%x, newshape=[3, 1, 2, 1])", {"x": rand("rs_unit", (1, 6, 1))}),
    Case("reshape_to_scalar", "reshape(%x, newshape=[])", {"x": rand("rs_scalar", (1, 1))}),
    Case("squeeze_everything", "squeeze(%x)", {"x": rand("sq_all", (1, 1), "bool")}),
    Case("squeeze_middle", "squeeze(%x, axis=[1])", {"x": rand("sq_mid", (2, 1, 3))}),
    Case("expand_dims_scalar", "expand_dims(%x, axis=0, num_newaxis=2)", {"x": rand("ed_scalar", ())}),
    Case("expand_dims_middle", "expand_dims(%x, axis=1)", {"x": rand("ed_mid", (3, 2), "uint8")}),
    # transpose, broadcast_to, layout_transform
    Case("transpose_1d", "transpose(%x, axes=None)", {"x": rand("tr1", (5,))}),
    Case("transpose_5d", "transpose(%x, axes=[4, 2, 0, -2, 1])",
         {"x": rand("tr5", (2, 1, 3, 2, 4), "int16")}),
    Case("broadcast_to_scalar", "broadcast_to(%x, shape=[2, 3])", {"x": rand("bt_s", ())}),
    Case("broadcast_to_inner_ones", "broadcast_to(%x, shape=[3, 2, 4])",
         {"x": rand("bt_i", (3, 1, 1), "int8")}),
    Case("layout_nchw4c_to_nchw", "layout_transform(%x, src_layout=\"NCHW4c\", dst_layout=\"NCHW\")",
         {"x": rand("lt_merge", (1, 2, 3, 2, 4))}),
    Case("layout_nhwc_to_nchw8c", "layout_transform(%x, src_layout=\"NHWC\", dst_layout=\"NCHW8c\")",
         {"x": rand("lt_split", (2, 3, 2, 16))}),
    Case("layout_nchw2c_to_nchw4c", "layout_transform(%x, src_layout=\"NCHW2c\", dst_layout=\"NCHW4c\")",
         {"x": rand("lt_resplit", (1, 4, 2, 3, 2))}),
    Case("layout_nchw_to_chwn", "layout_transform(%x, src_layout=\"NCHW\", dst_layout=\"CHWN\")",
         {"x": rand("lt_perm", (2, 3, 2, 2))}),
    # tuple ops
    Case("concatenate_three_middle_axis", "concatenate((%a, %b, %c), axis=1)",
         {"a": rand("cc_a", (2, 1, 3)), "b": rand("cc_b", (2, 4, 3)), "c": rand("cc_c", (2, 2, 3))}),
    Case("concatenate_negative_axis_int", "concatenate((%a, %b), axis=-2)",
         {"a": rand("cc_ia", (3, 2), "int32"), "b": rand("cc_ib", (1, 2), "int32")}),
    Case("concatenate_single_field", "concatenate((%a,), axis=0)", {"a": rand("cc_one", (3,))}),
    Case("concatenate_skips_empty_field", "concatenate((%a, %b, %c), axis=0)",
         {"a": rand("cc_e1", (1, 2)), "b": rand("cc_e2", (0, 2)), "c": rand("cc_e3", (2, 2))}),
    Case("stack_middle_axis", "stack((%a, %b, %c), axis=1)",
         {"a": rand("st_a", (2, 3)), "b": rand("st_b", (2, 3)), "c": rand("st_c", (2, 3))}),
    Case("stack_last_axis_of_vectors", "stack((%a, %b), axis=-1)",
         {"a": rand("st_va", (4,), "int64"), "b": rand("st_vb", (4,), "int64")}),
    Case("split_sections_middle_axis", "split(%x, indices_or_sections=2, axis=1)",
         {"x": rand("sp_s", (2, 4, 3))}),
    Case("split_at_indices", "split(%x, indices_or_sections=[1, 3], axis=0)",
         {"x": rand("sp_i", (5, 2), "int8")}),
    # strided_slice
    Case("strided_slice_reverse", "strided_slice(%x, begin=[-1], end=[-100], strides=[-1], axes=None)",
         {"x": rand("ss_rev", (5,))}),
    Case("strided_slice_step_3", "strided_slice(%x, begin=[0, 1], end=[7, 4], strides=[3, 2], axes=None)",
         {"x": rand("ss_step", (7, 4))}),
    Case("strided_slice_axes", "strided_slice(%x, begin=[1, -2], end=[2, 100], strides=None, axes=[0, 2])",
         {"x": rand("ss_axes", (3, 2, 4), "int32")}),
    Case("strided_slice_size_mode",
         "strided_slice(%x, begin=[1, 0], end=[-1, 2], strides=None, slice_mode=\"size\", axes=None)",
         {"x": rand("ss_size", (4, 3))}),
    # take
    Case("take_flat_clip_negative", "take(%x, %i)",
         {"x": rand("tk_flat", (2, 3)), "i": ints([[-3, 0], [5, 9]], "int64")}),
    Case("take_clip_negative_axis_1", "take(%x, %i, axis=1, mode=\"clip\")",
         {"x": rand("tk_clip", (2, 4)), "i": ints([-5, -1, 0, 3, 9])}),
    Case("take_wrap_negative_axis_0", "take(%x, %i, axis=0, mode=\"wrap\")",
         {"x": rand("tk_wrap", (3, 2)), "i": ints([[-1, -4], [7, -6]])}),
    Case("take_wrap_huge_int64", "take(%x, %i, axis=0, mode=\"wrap\")",
         {"x": rand("tk_huge", (5,)), "i": ints([2**40 + 3, -(2**40)], "int64")}),
    Case("take_clip_huge_int64", "take(%x, %i, axis=0, mode=\"clip\")",
         {"x": rand("tk_hclip", (5,)), "i": ints([2**40, -(2**40), 2**32 + 1], "int64")}),
    Case("take_fast_last_axis", "take(%x, %i, axis=-1, mode=\"fast\")",
         {"x": rand("tk_fast", (2, 3, 4)), "i": ints([3, 0, 2], "int8")}),
    Case("take_batch_dims", "take(%x, %i, axis=2, batch_dims=1)",
         {"x": rand("tk_batch", (2, 3, 4, 2)), "i": ints([[3, 0, 1], [2, 2, 9]], "uint8")}),
    # creation
    Case("zeros_bool", "zeros(shape=[2, 2], dtype=\"bool\")", {}),
    Case("ones_float16", "ones(shape=[3], dtype=\"float16\")", {}),
    Case("ones_scalar", "ones(shape=[], dtype=\"float64\")", {}),
    Case("full_float_to_int8_truncates", "full(%v, shape=[2, 3], dtype=\"int8\")",
         {"v": np.array(-3.7, F32)}),
    Case("full_to_bool", "full(%v, shape=[4], dtype=\"bool\")", {"v": np.array(2, "int32")}),
    Case("zeros_like_float64", "zeros_like(%x)", {"x": rand("zl", (2, 3), "float64")}),
    Case("ones_like_bool", "ones_like(%x)", {"x": rand("ol", (3,), "bool")}),
    # fused chains
    Case("reshape_transpose_reshape",
         "reshape(transpose(reshape(%x, newshape=[6, 4]), axes=[1, 0]), newshape=[2, 12])",
         {"x": rand("chain_rtr", (2, 3, 4))}, lambda x: x.reshape(6, 4).T.reshape(2, 12)),
    Case("pad_then_relu", "nn.relu(nn.pad(%x, -1f, pad_width=[[1, 1], [2, 0]]))", {"x": rand("chain_pr", (3, 4))},
         lambda x: np.maximum(np.pad(x, [(1, 1), (2, 0)], constant_values=-1.0), 0)),
    Case("concatenate_of_computed_inputs", "concatenate((negative(%a), transpose(%b, axes=[1, 0])), axis=1)",
         {"a": rand("chain_ca", (3, 2)), "b": rand("chain_cb", (4, 3))},
         lambda a, b: np.concatenate([-a, b.T], axis=1)),
    Case("take_with_computed_indices", "take(%x, subtract(%i, 3), axis=0, mode=\"wrap\")",
         {"x": rand("chain_tx", (4, 2)), "i": ints([0, 1, 7, 2])}, lambda x, i: x[np.mod(i - 3, 4)]),
    Case("split_fields_added", "%0 = split(%x, indices_or_sections=2, axis=1); add(%0.0, %0.1)",
         {"x": rand("chain_split", (3, 4))}, lambda x: x[:, :2] + x[:, 2:]),
    Case("stack_of_slices", "stack((strided_slice(%x, begin=[0], end=[2], strides=None, axes=None), "
         "strided_slice(%x, begin=[2], end=[4], strides=None, axes=None)), axis=0)",
         {"x": rand("chain_stack", (4, 3))}, lambda x: np.stack([x[:2], x[2:]])),
    Case("bias_relu_layout_transform",
         "layout_transform(nn.relu(nn.bias_add(%x, %b)), src_layout=\"NCHW\", dst_layout=\"NCHW2c\")",
         {"x": rand("chain_lay", (1, 4, 2, 3)), "b": rand("chain_lb", (4,))},
         lambda x, b: np.maximum(x + b.reshape(1, 4, 1, 1), 0).reshape(1, 2, 2, 2, 3).transpose(0, 1, 3, 4, 2)),
]

NAMES = [c.name for c in CASES]
assert len(set(NAMES)) == len(NAMES), "case names must be unique"


def _type_text(array: np.ndarray) -> str:
    dims = ", ".join(str(d) for d in array.shape)
    return f"Tensor[({dims}), {array.dtype}]"


def primitive(case: Case) -> Function:
    params = ", ".join(f"%{name}: {_type_text(value)}" for name, value in case.inputs.items())
    head = f"{params}, Primitive=1" if params else "Primitive=1"
    func = parse_expr(f"fn ({head}) {{ {case.body} }}")
    assert isinstance(func, Function)
    infer_expr(func)
    return func


def single_op_reference(func: Function, case: Case) -> np.ndarray | tuple[np.ndarray, ...]:
    """The body op's numpy reference applied to the case's inputs (tuple arguments as tuples)."""
    call = func.body
    assert isinstance(call, Call) and isinstance(call.op, Op), f"{case.name} needs an explicit expected value"
    values = dict(zip(func.params, case.inputs.values()))

    def value(arg: Expr) -> object:
        if isinstance(arg, Var):
            return values[arg]
        if isinstance(arg, Constant):
            return arg.data
        assert isinstance(arg, Tuple), f"{case.name}: argument {arg} is not an input"
        return tuple(value(f) for f in arg.fields)

    # Tuple arguments reach the reference as tuples of arrays, as the op contract says.
    arguments = cast(list[np.ndarray], [value(a) for a in call.args])
    return ops.get(call.op.name).reference(arguments, call.attrs)


@dataclass
class Built:
    source: str
    library: Library
    funcs: dict[str, PrimFunc]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    funcs = {case.name: lower_primitive(primitive(case), f"case_{k}") for k, case in enumerate(CASES)}
    source = emit_c_module(list(funcs.values()))
    path = tmp_path_factory.mktemp("injective") / "cases.c"
    path.write_text(source)
    lib_path = build_shared_library([path], path.with_name("libcases.so"))
    cdef = "\n".join(prim_func_cdef(f) for f in funcs.values())
    return Built(source, load_library(lib_path, cdef), funcs)


def run(built: Built, case: Case) -> list[np.ndarray]:
    func = built.funcs[case.name]
    outputs = [np.zeros(static_dims(b.shape, case.name), np.dtype(b.dtype)) for b in func.outputs]
    assert built.library.call(func.name, *case.inputs.values(), *outputs) == 0
    return outputs


def assert_identical(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert np.array_equal(actual, expected), f"{what}:\n{actual}\n!=\n{expected}"


@pytest.mark.parametrize("case", CASES, ids=NAMES)
def test_lowered_op_matches_numpy_exactly(built: Built, case: Case) -> None:
    func = primitive(case)
    if case.expected is None:
        expected = single_op_reference(func, case)
    else:
        expected = case.expected(*case.inputs.values())
    outputs = run(built, case)
    expected_list = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(outputs) == len(expected_list)
    for k, (actual, want) in enumerate(zip(outputs, expected_list)):
        assert_identical(actual, want, f"{case.name} output {k}")


def test_generated_c_compiles_without_warnings(built: Built) -> None:
    assert compile_check(built.source) == []


# --- fusion: producers are computed inline ---------------------------------------------------------


def temporaries(func: PrimFunc) -> list[te.Buffer]:
    return [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.scope == "global"]


def global_stores(func: PrimFunc) -> list[Store]:
    return [s for s in walk_stmts(func.body) if isinstance(s, Store) and s.buffer.scope == "global"]


CHAINS = [
    "reshape_transpose_reshape",
    "pad_then_relu",
    "concatenate_of_computed_inputs",
    "take_with_computed_indices",
    "split_fields_added",
    "stack_of_slices",
    "bias_relu_layout_transform",
]


@pytest.mark.parametrize("name", CHAINS)
def test_fused_chain_is_one_loop_nest_without_temporaries(built: Built, name: str) -> None:
    func = built.funcs[name]
    assert temporaries(func) == []
    stores = global_stores(func)
    assert len(stores) == 1 and stores[0].buffer is func.outputs[0]
    assert isinstance(func.body, For), "one loop nest, nothing before or after it"


def test_reshape_transpose_reshape_reads_the_input_once_per_element(built: Built) -> None:
    func = built.funcs["reshape_transpose_reshape"]
    (store,) = global_stores(func)
    loads = [e for e in post_order(store.value) if isinstance(e, te.Load)]
    assert [load.buffer for load in loads] == [func.inputs[0]]


# --- index helpers ---------------------------------------------------------------------------------


def evaluate(expr: te.PrimExpr, env: dict[te.Var, int]) -> int:
    """The value of an integer index expression built from +, *, // and % over `env`."""
    if isinstance(expr, te.Const):
        return int(expr.value)
    if isinstance(expr, te.Var):
        return env[expr]
    assert isinstance(expr, te.Binary), expr
    a, b = evaluate(expr.a, env), evaluate(expr.b, env)
    apply: dict[str, Callable[[int, int], int]] = {
        "+": lambda x, y: x + y,
        "-": lambda x, y: x - y,
        "*": lambda x, y: x * y,
        "//": lambda x, y: x // y,
        "%": lambda x, y: x % y,
    }
    return apply[expr.op](a, b)


@pytest.mark.parametrize(
    ("out_shape", "in_shape"),
    [((2, 12), (2, 3, 4)), ((4, 6), (2, 3, 4)), ((3, 1, 2), (1, 6)), ((6,), (6,)), ((), (1, 1)), ((2, 2), (4, 1)),
     ((2, 3, 2), (3, 4))],
)
def test_reshape_index_agrees_with_numpy_reshape(out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> None:
    idx = [te.Var(f"i{k}") for k in range(len(out_shape))]
    source = reshape_index(idx, out_shape, in_shape)
    data = np.arange(int(np.prod(in_shape))).reshape(in_shape)
    expected = data.reshape(out_shape)
    for position in np.ndindex(*out_shape):
        env = dict(zip(idx, position))
        assert data[tuple(evaluate(e, env) for e in source)] == expected[position]


def test_reshape_index_maps_untouched_dims_directly() -> None:
    idx = [te.Var("n"), te.Var("c"), te.Var("hw")]
    source = reshape_index(idx, (2, 3, 20), (2, 3, 4, 5))
    assert source[0] is idx[0] and source[1] is idx[1]


def test_row_major_index_inverts_row_major_offset() -> None:
    shape = (3, 4, 5)
    offset = te.Var("off")
    coords = row_major_index(offset, shape)
    idx = [te.Var(f"i{k}") for k in range(3)]
    flat = row_major_offset(idx, shape)
    for n in range(60):
        position = tuple(evaluate(c, {offset: n}) for c in coords)
        assert position == np.unravel_index(n, shape)
        assert evaluate(flat, dict(zip(idx, position))) == n


def test_static_dims_rejects_a_dynamic_dim() -> None:
    with pytest.raises(UnsupportedError, match="reshape: the loop lowering needs static shapes"):
        static_dims((2, ANY), "reshape")


def test_reshape_compute_of_a_dynamic_input_reads_through_the_flat_position() -> None:
    compute = ops.get("reshape").compute
    assert compute is not None
    n = te.Var("p0_dim0", "int64")
    dynamic_shape = cast(tuple[int, ...], (n, 4))  # a `?` dim as the kernel's dim parameter
    loads: list[tuple[te.PrimExpr, ...]] = []
    view = TensorView(dynamic_shape, F32, lambda idx: loads.append(tuple(idx)) or te.const(0.0))
    attrs = Attrs({"newshape": (-1,), "allowzero": 0})
    compute((te.Var("i"),), [view], attrs, TensorType((ANY,), F32))
    assert len(loads) == 1 and len(loads[0]) == 2
