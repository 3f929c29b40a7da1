"""The AOT executor on hand-built lowered modules: @main made of call_lowered calls to
PrimFuncs written with the loop-level IR constructors, compiled together with the kernels' C
(with -Wall -Wextra -Werror) and run through cffi."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from compiler.backend.aot_executor import AOTExecutorCodegen, AOTResult
from compiler.backend.codegen_c import emit_c_module
from compiler.diagnostics import UnsupportedError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, GlobalVar, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, TensorType, TupleType
from compiler.runtime.build import DEFAULT_CFLAGS, WARNING_FLAGS, build_shared_library
from compiler.runtime.ffi import aligned_empty, load_library
from compiler.tir import expr as te
from compiler.tir.stmt import Allocate, PrimFunc, Stmt, Store, loop_nest, seq

F32 = "float32"
# The library's usual flags (-O3 enables the flow-sensitive warnings) plus warnings as errors.
STRICT_CFLAGS = (*DEFAULT_CFLAGS, *WARNING_FLAGS, "-Werror")
APP_CFLAGS = ("-O1", "-std=gnu11", *WARNING_FLAGS, "-Werror")


# -- building lowered modules by hand ----------------------------------------------------------


def tt(*shape: int, dtype: str = F32) -> TensorType:
    return TensorType(shape, dtype)


def elementwise(name: str, shape: tuple[int, ...], n_inputs: int,
                fn: Callable[..., te.PrimExpr], out_shape: tuple[int, ...] | None = None) -> PrimFunc:
    """out[i...] = fn(in0[i...], in1[i...], ...); with `out_shape` the output is the same
    elements under another shape (a reshape kernel, when fn is the identity)."""
    ins = tuple(te.Buffer(f"p{k}", shape, F32) for k in range(n_inputs))
    out_shape = out_shape or shape
    out = te.Buffer("T_out", out_shape, F32)
    names = [f"i{k}" for k in range(len(shape))]

    def body(idx: list[te.Var]) -> Stmt:
        flat = idx[0]
        for d, i in zip(shape[1:], idx[1:]):
            flat = flat * d + i
        out_idx = _unflatten(flat, out_shape)
        return Store(out, tuple(out_idx), fn(*(b[tuple(idx)] for b in ins)))

    func_type = FuncType(tuple(tt(*shape) for _ in ins), tt(*out_shape))
    return PrimFunc(name, (*ins, out), loop_nest(names, shape, body), n_inputs, func_type=func_type)


def reverse_plus_one(name: str, n: int) -> PrimFunc:
    """out[i] = in[n - 1 - i] + 1."""
    src, out = te.Buffer("p0", (n,), F32), te.Buffer("T_out", (n,), F32)
    body = loop_nest(["i"], (n,), lambda v: Store(out, (v[0],), src[n - 1 - v[0]] + 1.0))
    return PrimFunc(name, (src, out), body, 1, func_type=FuncType((tt(n),), tt(n)))


def _unflatten(flat: te.PrimExpr, shape: Sequence[int]) -> list[te.PrimExpr]:
    idx = []
    for k in range(len(shape)):
        stride = int(np.prod(shape[k + 1 :], dtype=np.int64))
        idx.append((flat // stride) % shape[k] if k else flat // stride)
    return idx


def dense(name: str, m: int, k: int, n: int, relu: bool = False) -> PrimFunc:
    """out[i, j] = sum_r x[i, r] * w[j, r] (nn.dense layout), optionally relu'd."""
    x, w = te.Buffer("p0", (m, k), F32), te.Buffer("p1", (n, k), F32)
    out = te.Buffer("T_dense", (m, n), F32)
    acc = te.Buffer("acc", (1,), F32, scope="local")

    def body(idx: list[te.Var]) -> Stmt:
        i, j = idx
        zero = te.const(0)
        reduce = loop_nest(["r"], [k], lambda r: Store(acc, (zero,), acc[0] + x[i, r[0]] * w[j, r[0]]))
        value = te.maximum(acc[0], te.const(0.0)) if relu else acc[0]
        return Allocate(acc, seq(Store(acc, (zero,), te.const(0.0)), reduce, Store(out, (i, j), value)))

    func_type = FuncType((tt(m, k), tt(n, k)), tt(m, n))
    return PrimFunc(name, (x, w, out), loop_nest(["i", "j"], [m, n], body), 2, func_type=func_type)


def with_workspace(name: str, n: int) -> PrimFunc:
    """out = in * 2 + 1, computed through a global-scope temporary (so it needs a workspace)."""
    a, out = te.Buffer("p0", (n,), F32), te.Buffer("T_out", (n,), F32)
    tmp = te.Buffer("tmp", (n,), F32, scope="global")
    body = Allocate(tmp, seq(
        loop_nest(["i"], [n], lambda i: Store(tmp, (i[0],), a[i[0]] * 2.0)),
        loop_nest(["j"], [n], lambda j: Store(out, (j[0],), tmp[j[0]] + 1.0)),
    ))
    return PrimFunc(name, (a, out), body, 1, func_type=FuncType((tt(n),), tt(n)))


def sum_and_difference(name: str, n: int) -> PrimFunc:
    """A kernel with two outputs: (a + b, a - b)."""
    a, b = te.Buffer("p0", (n,), F32), te.Buffer("p1", (n,), F32)
    s, d = te.Buffer("T_sum", (n,), F32), te.Buffer("T_diff", (n,), F32)
    body = loop_nest(["i"], [n], lambda i: seq(Store(s, (i[0],), a[i[0]] + b[i[0]]),
                                                Store(d, (i[0],), a[i[0]] - b[i[0]])))
    func_type = FuncType((tt(n), tt(n)), TupleType((tt(n), tt(n))))
    return PrimFunc(name, (a, b, s, d), body, 2, func_type=func_type)


class Lowered:
    """A lowered module under construction: globals for kernels, @main from call_lowered."""

    def __init__(self) -> None:
        self.mod = IRModule()
        self.funcs: list[PrimFunc] = []
        self.extern_sources: list[str] = []

    def prim(self, func: PrimFunc) -> GlobalVar:
        gv = GlobalVar(func.name)
        self.mod.add(gv, func)
        self.funcs.append(func)
        return gv

    def extern(self, name: str, params: Sequence[TensorType], ret: TensorType, c_source: str) -> GlobalVar:
        vars_ = [Var(f"e{k}", t) for k, t in enumerate(params)]
        func = Function(tuple(vars_), vars_[0], ret, Attrs({"Extern": 1, "global_symbol": name}))
        gv = GlobalVar(name)
        self.mod.add(gv, func)
        self.extern_sources.append(c_source)
        return gv

    def call(self, gv: GlobalVar, *args: Expr, **metadata: object) -> Call:
        meta = {"relay_attrs": Attrs({"Primitive": 1}), "all_prim_fn_vars": (gv,)}
        meta.update(metadata)
        return Call(Op.get("call_lowered"), (gv, Tuple(args)), Attrs({"metadata": Attrs(meta)}))

    def main(self, params: Sequence[Var], body: Expr) -> IRModule:
        self.mod.add(GlobalVar("main"), Function(tuple(params), body))
        return self.mod


_build_ids = itertools.count()


class Built:
    def __init__(self, result: AOTResult, lib_path: Path):
        self.result = result
        self.lib = load_library(lib_path, result.cdef)
        self.prefix = result.entry[: -len("_run")]

    def run(self, *inputs: np.ndarray, workspace: np.ndarray | None = None) -> list[np.ndarray]:
        res = self.result
        outs = [np.full(t.shape, np.nan, t.dtype) for t in res.outputs]
        in_fields = {t.c_name: np.ascontiguousarray(a, t.dtype) for t, a in zip(res.inputs, inputs)}
        ins = self.lib.new_struct(f"struct {self.prefix}_inputs", **in_fields)
        out_fields = {t.c_name: o for t, o in zip(res.outputs, outs)}
        outs_struct = self.lib.new_struct(f"struct {self.prefix}_outputs", **out_fields)
        if workspace is None:
            status = self.lib.call(res.entry, ins, outs_struct)
        else:
            status = self.lib.call(res.entry + "_with_workspace", ins, outs_struct, workspace)
        assert status == 0
        return outs


def build(lowered: Lowered, mod: IRModule, tmp_path: Path, **options: object) -> Built:
    result = AOTExecutorCodegen(**options).codegen(mod)  # type: ignore[arg-type]  # test options
    root = tmp_path / f"build{next(_build_ids)}"
    (root / "include").mkdir(parents=True)
    (root / "include" / result.header_name).write_text(result.header)
    sources = [root / "main.c", root / "kernels.c"]
    sources[0].write_text(result.main_source)
    sources[1].write_text(emit_c_module(lowered.funcs))
    for k, text in enumerate(lowered.extern_sources):
        path = root / f"extern{k}.c"
        path.write_text(text)
        sources.append(path)
    lib = build_shared_library(sources, root / "libmodel.so", cflags=STRICT_CFLAGS, include_dirs=[root / "include"])
    return Built(result, lib)


def kernel_calls(source: str) -> list[str]:
    """The callees of `if (<callee>(...) != 0) return -1;` lines, in order."""
    return re.findall(r"if \((\w+)\(.*\) != 0\) return -1;", source)


# -- tests -------------------------------------------------------------------------------------


def test_single_kernel_writes_straight_into_the_output(tmp_path):
    low = Lowered()
    add = low.prim(elementwise("tvmgen_default_fused_add", (2, 4), 2, lambda a, b: a + b))
    x, y = Var("x", tt(2, 4)), Var("y", tt(2, 4))
    mod = low.main([x, y], low.call(add, x, y))
    built = build(low, mod, tmp_path)
    res = built.result
    a, b = np.random.rand(2, 4).astype(F32), np.random.rand(2, 4).astype(F32)
    (out,) = built.run(a, b)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    assert res.workspace_bytes == 0 and res.memory.buffers == []
    assert [c.args for c in res.calls] == [("%x", "%y")]
    assert [c.outputs for c in res.calls] == [("output",)]
    assert [(t.name, t.shape, t.dtype, t.bytes) for t in res.inputs] == [("x", (2, 4), F32, 32), ("y", (2, 4), F32, 32)]
    assert [(t.name, t.c_name, t.bytes) for t in res.outputs] == [("out0", "output", 32)]
    assert res.io_bytes == 96
    assert kernel_calls(res.main_source) == ["tvmgen_default_fused_add"]


def test_dense_relu_dense_chain_needs_only_the_two_live_intermediates(tmp_path):
    low = Lowered()
    d1 = low.prim(dense("tvmgen_default_fused_nn_dense", 4, 8, 16))
    relu = low.prim(elementwise("tvmgen_default_fused_nn_relu", (4, 16), 1, lambda v: te.maximum(v, te.const(0.0))))
    d2 = low.prim(dense("tvmgen_default_fused_nn_dense_1", 4, 16, 3))
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((16, 8)).astype(F32)
    w2 = rng.standard_normal((3, 16)).astype(F32)
    x = Var("x", tt(4, 8))
    t0 = Var("t0")
    t1 = Var("t1")
    body = Let(t0, low.call(d1, x, Constant(w1)), Let(t1, low.call(relu, t0), low.call(d2, t1, Constant(w2))))
    built = build(low, low.main([x], body), tmp_path)
    res = built.result
    data = rng.standard_normal((4, 8)).astype(F32)
    (out,) = built.run(data)
    np.testing.assert_allclose(out, np.maximum(data @ w1.T, 0) @ w2.T, rtol=1e-4, atol=1e-5)
    intermediate = 4 * 16 * 4
    assert res.memory.peak_live_bytes == 2 * intermediate
    assert res.workspace_bytes == res.memory.total_bytes == 2 * intermediate
    assert [c.args for c in res.calls] == [("%x", "constant_0"), ("sid_0",), ("sid_1", "constant_1")]
    lifetimes = [(b["name"], b["first_use"], b["last_use"]) for b in res.memory.buffers]
    assert lifetimes == [("sid_0", 0, 1), ("sid_1", 1, 2)]
    assert f"#define TVMGEN_DEFAULT_WORKSPACE_SIZE {2 * intermediate}" in res.header


def test_longer_chain_reuses_memory_of_dead_intermediates(tmp_path):
    low = Lowered()
    # Reading the input reversed keeps each result out of its input's buffer.
    step = low.prim(reverse_plus_one("tvmgen_default_fused_reverse_add_one", 64))
    x = Var("x", tt(64))
    value: Expr = x
    for _ in range(6):
        value = low.call(step, value)
    built = build(low, low.main([x], value), tmp_path)
    (out,) = built.run(np.arange(64, dtype=F32))
    np.testing.assert_allclose(out, np.arange(64) + 6.0)
    assert len(built.result.memory.buffers) == 5  # the sixth result is the output
    assert built.result.workspace_bytes == 2 * 256


def test_a_result_is_written_over_an_input_that_no_later_call_reads(tmp_path):
    low = Lowered()
    step = low.prim(elementwise("tvmgen_default_fused_add_one", (64,), 1, lambda v: v + 1.0))
    x = Var("x", tt(64))
    value: Expr = x
    for _ in range(6):
        value = low.call(step, value)
    built = build(low, low.main([x], value), tmp_path)
    (out,) = built.run(np.zeros(64, F32))
    np.testing.assert_allclose(out, np.full(64, 6.0))
    res = built.result
    assert [(b["name"], b["first_use"], b["last_use"]) for b in res.memory.buffers] == [("sid_0", 0, 5)]
    assert res.memory.buffers[0]["in_place_at"] == [1, 2, 3, 4]  # where each next value took it over
    assert res.workspace_bytes == 256
    assert [c.args for c in res.calls] == [("%x",), *[("sid_0",)] * 5]
    # The kernel's two buffers may be one, so neither is `restrict`.
    assert "(const float* p0, float* T_out)" in emit_c_module(low.funcs)


def test_an_input_read_again_later_keeps_its_buffer(tmp_path):
    low = Lowered()
    add_one = low.prim(elementwise("tvmgen_default_fused_add_one", (64,), 1, lambda v: v + 1.0))
    add = low.prim(elementwise("tvmgen_default_fused_add", (64,), 2, lambda a, b: a + b))
    x = Var("x", tt(64))
    t0, t1 = Var("t0"), Var("t1")
    body = Let(t0, low.call(add_one, x), Let(t1, low.call(add_one, t0), low.call(add, t1, t0)))
    built = build(low, low.main([x], body), tmp_path)
    (out,) = built.run(np.zeros(64, F32))
    np.testing.assert_allclose(out, np.full(64, 3.0))
    assert [(b["name"], b["first_use"], b["last_use"]) for b in built.result.memory.buffers] == [
        ("sid_0", 0, 2), ("sid_1", 1, 2)]


def test_constants_live_in_a_read_only_pool_with_aligned_offsets(tmp_path):
    low = Lowered()
    add = low.prim(elementwise("tvmgen_default_fused_add", (5,), 2, lambda a, b: a + b))
    c1 = np.arange(5, dtype=F32)
    c2 = np.full(5, 10.0, F32)
    x = Var("x", tt(5))
    # c1 appears as two separate Constant nodes: one pool entry serves both.
    body = low.call(add, low.call(add, low.call(add, x, Constant(c1)), Constant(c2)), Constant(c1.copy()))
    built = build(low, low.main([x], body), tmp_path, constant_byte_alignment=64)
    res = built.result
    assert len(res.constants) == 2
    np.testing.assert_array_equal(res.constants[0], c1)
    np.testing.assert_array_equal(res.constants[1], c2)
    assert res.constant_offsets == [0, 64]
    assert res.constant_bytes == 64 + 20
    assert "static const uint8_t tvmgen_default_constant_pool[84 + 1] __attribute__((aligned(64)))" in res.main_source
    (out,) = built.run(np.ones(5, F32))
    np.testing.assert_allclose(out, 1 + 2 * c1 + c2)


def test_reshape_only_call_aliases_its_input_and_is_not_emitted(tmp_path):
    low = Lowered()
    inc = low.prim(elementwise("tvmgen_default_fused_add", (2, 4), 1, lambda v: v + 1.0))
    reshape = low.prim(elementwise("tvmgen_default_fused_reshape", (2, 4), 1, lambda v: v, out_shape=(8,)))
    double = low.prim(elementwise("tvmgen_default_fused_multiply", (8,), 1, lambda v: v * 2.0))
    x = Var("x", tt(2, 4))
    body = low.call(double, low.call(reshape, low.call(inc, x), **{"relay.reshape_only": 1}))
    built = build(low, low.main([x], body), tmp_path)
    res = built.result
    assert kernel_calls(res.main_source) == ["tvmgen_default_fused_add", "tvmgen_default_fused_multiply"]
    assert "tvmgen_default_fused_reshape" not in res.main_source
    assert [c.emitted for c in res.calls] == [True, False, True]
    assert res.calls[1].args == res.calls[1].outputs == ("sid_0",)
    assert res.calls[2].args == ("sid_0",)
    data = np.arange(8, dtype=F32).reshape(2, 4)
    (out,) = built.run(data)
    np.testing.assert_allclose(out, (data.reshape(8) + 1) * 2)


def test_reshape_only_call_that_produces_the_output_runs(tmp_path):
    low = Lowered()
    inc = low.prim(elementwise("tvmgen_default_fused_add", (2, 4), 1, lambda v: v + 1.0))
    reshape = low.prim(elementwise("tvmgen_default_fused_reshape", (2, 4), 1, lambda v: v, out_shape=(8,)))
    x = Var("x", tt(2, 4))
    body = low.call(reshape, low.call(inc, x), **{"relay.reshape_only": 1})
    built = build(low, low.main([x], body), tmp_path)
    assert kernel_calls(built.result.main_source) == ["tvmgen_default_fused_add", "tvmgen_default_fused_reshape"]
    data = np.arange(8, dtype=F32).reshape(2, 4)
    (out,) = built.run(data)
    np.testing.assert_allclose(out, data.reshape(8) + 1)


def test_passthrough_and_constant_outputs_are_copied(tmp_path):
    low = Lowered()
    add = low.prim(elementwise("tvmgen_default_fused_add", (3,), 2, lambda a, b: a + b))
    x, y = Var("x", tt(3)), Var("y", tt(3))
    c = np.array([7.0, 8.0, 9.0], F32)
    body = Tuple((low.call(add, x, y), x, Constant(c)))
    built = build(low, low.main([x, y], body), tmp_path)
    res = built.result
    assert [(t.name, t.c_name) for t in res.outputs] == [("out0", "output0"), ("out1", "output1"), ("out2", "output2")]
    assert "memcpy(out_output1, in_x, 12);" in res.main_source
    assert "memcpy(out_output2, constant_0, 12);" in res.main_source
    a, b = np.ones(3, F32), np.arange(3, dtype=F32)
    o0, o1, o2 = built.run(a, b)
    np.testing.assert_allclose(o0, a + b)
    np.testing.assert_array_equal(o1, a)
    np.testing.assert_array_equal(o2, c)


def test_tuple_valued_kernel_gets_one_buffer_per_field(tmp_path):
    low = Lowered()
    sd = low.prim(sum_and_difference("tvmgen_default_fused_sum_diff", 4))
    inc = low.prim(elementwise("tvmgen_default_fused_add", (4,), 1, lambda v: v + 1.0))
    x, y = Var("x", tt(4)), Var("y", tt(4))
    t = Var("t")
    # The difference is an output twice (copied the second time); the sum only feeds `inc`.
    outputs = Tuple((TupleGetItem(t, 1), low.call(inc, TupleGetItem(t, 0)), TupleGetItem(t, 1)))
    body = Let(t, low.call(sd, x, y), outputs)
    built = build(low, low.main([x, y], body), tmp_path)
    res = built.result
    assert res.calls[0].outputs == ("sid_0", "output0")
    assert res.calls[1].args == ("sid_0",)
    assert "memcpy(out_output2, out_output0, 16);" in res.main_source
    a, b = np.arange(4, dtype=F32), np.full(4, 0.5, F32)
    o0, o1, o2 = built.run(a, b)
    np.testing.assert_allclose(o0, a - b)
    np.testing.assert_allclose(o1, a + b + 1)
    np.testing.assert_allclose(o2, a - b)


def test_output_that_later_calls_read_is_read_from_the_output_buffer(tmp_path):
    low = Lowered()
    inc = low.prim(elementwise("tvmgen_default_fused_add", (4,), 1, lambda v: v + 1.0))
    x = Var("x", tt(4))
    first = low.call(inc, x)
    built = build(low, low.main([x], Tuple((first, low.call(inc, first)))), tmp_path)
    assert [c.args for c in built.result.calls] == [("%x",), ("output0",)]
    assert built.result.workspace_bytes == 0
    o0, o1 = built.run(np.zeros(4, F32))
    np.testing.assert_allclose(o0, np.ones(4))
    np.testing.assert_allclose(o1, np.full(4, 2.0))


def test_kernel_workspace_is_planned_and_live_only_during_its_call(tmp_path):
    low = Lowered()
    ws = low.prim(with_workspace("tvmgen_default_fused_scale", 32))
    x = Var("x", tt(32))
    built = build(low, low.main([x], low.call(ws, low.call(ws, x))), tmp_path)
    res = built.result
    rows = {b["name"]: b for b in res.memory.buffers}
    assert rows["workspace_0"]["bytes"] == 128
    assert (rows["workspace_0"]["first_use"], rows["workspace_0"]["last_use"]) == (0, 0)
    assert (rows["workspace_1"]["first_use"], rows["workspace_1"]["last_use"]) == (1, 1)
    assert rows["workspace_0"]["offset"] == rows["workspace_1"]["offset"]
    assert res.workspace_bytes == res.memory.total_bytes == 2 * 128  # sid_0 plus one workspace at a time
    assert [c.workspace for c in res.calls] == ["workspace_0", "workspace_1"]
    assert re.search(r"tvmgen_default_fused_scale\(in_x, sid_0, workspace \+ \d+\)", res.main_source)
    (out,) = built.run(np.arange(32, dtype=F32))
    np.testing.assert_allclose(out, (np.arange(32) * 2 + 1) * 2 + 1)


def two_temporaries(name: str, n: int) -> PrimFunc:
    """out = in + (in[0] * 2 + 1) through two small global-scope temporaries (20 and 12 bytes)."""
    a, out = te.Buffer("p0", (n,), F32), te.Buffer("T_out", (n,), F32)
    doubled = te.Buffer("doubled", (5,), F32, scope="global")
    shifted = te.Buffer("shifted", (3,), F32, scope="global")
    body = Allocate(doubled, Allocate(shifted, seq(
        loop_nest(["i"], [5], lambda i: Store(doubled, (i[0],), a[i[0]] * 2.0)),
        loop_nest(["k"], [3], lambda k: Store(shifted, (k[0],), doubled[k[0]] + 1.0)),
        loop_nest(["j"], [n], lambda j: Store(out, (j[0],), a[j[0]] + shifted[0])),
    )))
    return PrimFunc(name, (a, out), body, 1, func_type=FuncType((tt(n),), tt(n)))


def test_kernel_workspace_and_its_buffers_are_64_byte_aligned_and_named_in_the_report(tmp_path):
    low = Lowered()
    inc = low.prim(elementwise("tvmgen_default_fused_add", (40,), 1, lambda v: v + 1.0))
    temps = low.prim(two_temporaries("tvmgen_default_fused_temps", 40))
    x = Var("x", tt(40))
    built = build(low, low.main([x], low.call(temps, low.call(inc, x))), tmp_path)
    res = built.result
    buffers = res.memory_report()["buffers"]
    assert isinstance(buffers, list)
    rows = {b["name"]: b for b in buffers}
    # sid_0 (160 bytes) is live while the kernel runs; its workspace goes above it, at the next
    # multiple of 64 (not of the model's 16), and each temporary inside at a multiple of 64.
    assert (rows["sid_0"]["offset"], rows["sid_0"]["bytes"]) == (0, 160)
    assert (rows["workspace_1"]["offset"], rows["workspace_1"]["bytes"]) == (192, 128)
    assert rows["workspace_1"]["allocations"] == [
        {"name": "tvmgen_default_fused_temps/doubled", "offset": 192, "bytes": 20},
        {"name": "tvmgen_default_fused_temps/shifted", "offset": 256, "bytes": 12},
    ]
    assert "allocations" not in rows["sid_0"]
    assert "__attribute__((aligned(64)))" in res.main_source
    assert "tvmgen_default_fused_temps(sid_0, out_output, workspace + 192)" in res.main_source
    x_value = np.arange(40, dtype=F32)
    (out,) = built.run(x_value)
    y = x_value + 1
    np.testing.assert_allclose(out, y + (y[0] * 2 + 1))


def test_kernel_workspace_follows_a_model_alignment_above_64():
    low = Lowered()
    inc = low.prim(elementwise("tvmgen_default_fused_add", (40,), 1, lambda v: v + 1.0))
    temps = low.prim(two_temporaries("tvmgen_default_fused_temps", 40))
    x = Var("x", tt(40))
    res = AOTExecutorCodegen(workspace_byte_alignment=128).codegen(low.main([x], low.call(temps, low.call(inc, x))))
    rows = {b["name"]: b for b in res.memory.buffers}
    # Two temporaries at 128 bytes each; the larger workspace is placed first, sid_0 above it.
    assert (rows["workspace_1"]["offset"], rows["workspace_1"]["bytes"]) == (0, 256)
    assert rows["sid_0"]["offset"] == 256
    assert "__attribute__((aligned(128)))" in res.main_source


def test_run_with_workspace_uses_the_callers_memory(tmp_path):
    low = Lowered()
    inc = low.prim(elementwise("tvmgen_default_fused_add", (16,), 1, lambda v: v + 1.0))
    x = Var("x", tt(16))
    built = build(low, low.main([x], low.call(inc, low.call(inc, low.call(inc, x)))), tmp_path)
    assert built.result.workspace_bytes == 64  # the second result is written over the first
    workspace = aligned_empty(built.result.workspace_bytes, 16)
    (out,) = built.run(np.zeros(16, F32), workspace=workspace)
    np.testing.assert_allclose(out, np.full(16, 3.0))
    declaration = "static uint8_t tvmgen_default_global_workspace[64] __attribute__((aligned(16)));"
    assert declaration in built.result.main_source


def test_extern_function_is_called_by_its_symbol(tmp_path):
    low = Lowered()
    source = """
#include <stdint.h>
int32_t acme_negate(float* in, float* out) {
  for (int i = 0; i < 6; ++i) out[i] = -in[i];
  return 0;
}
"""
    neg = low.extern("acme_negate", [tt(6)], tt(6), source)
    x = Var("x", tt(6))
    built = build(low, low.main([x], low.call(neg, x)), tmp_path)
    assert built.result.calls[0].kind == "extern"
    assert "int32_t acme_negate(float*, float*);" in built.result.main_source
    (out,) = built.run(np.arange(6, dtype=F32))
    np.testing.assert_allclose(out, -np.arange(6))


def test_failing_kernel_makes_run_return_minus_one(tmp_path):
    low = Lowered()
    source = "#include <stdint.h>\nint32_t acme_fail(float* in, float* out) { (void)in; (void)out; return 3; }\n"
    fail = low.extern("acme_fail", [tt(2)], tt(2), source)
    x = Var("x", tt(2))
    built = build(low, low.main([x], low.call(fail, x)), tmp_path)
    res = built.result
    ins = built.lib.new_struct("struct tvmgen_default_inputs", x=np.zeros(2, F32))
    outs = built.lib.new_struct("struct tvmgen_default_outputs", output=np.zeros(2, F32))
    assert built.lib.call(res.entry, ins, outs) == -1


def test_header_declares_the_interface_the_source_defines(tmp_path):
    low = Lowered()
    add = low.prim(elementwise("tvmgen_net_fused_add", (2,), 2, lambda a, b: a + b))
    x, y = Var("data.0", tt(2)), Var("w", tt(2))
    built = build(low, low.main([x, y], low.call(add, x, y)), tmp_path, module_name="net")
    res = built.result
    assert res.header_name == "tvmgen_net.h"
    assert res.entry == "tvmgen_net_run"
    header = res.header
    assert "#ifndef TVMGEN_NET_H_" in header and "#include <stdint.h>" in header
    assert 'extern "C" {' in header
    assert "#define TVMGEN_NET_DATA_0_SIZE 8" in header
    assert "struct tvmgen_net_inputs {\n  void* data_0;\n  void* w;\n};" in header
    assert "struct tvmgen_net_outputs {\n  void* output;\n};" in header
    assert "not reentrant" in header.replace("NOT", "not")
    assert ("int32_t tvmgen_net_run_with_workspace(struct tvmgen_net_inputs* inputs, "
            "struct tvmgen_net_outputs* outputs, uint8_t* workspace);") in header
    src = res.main_source
    assert '#include "tvmgen_net.h"' in src
    # run() is defined once, with the header's prototype, and never re-declared.
    assert src.count("tvmgen_net_run(") == 1
    assert "int32_t tvmgen_net_run(struct tvmgen_net_inputs* inputs, struct tvmgen_net_outputs* outputs) {" in src
    assert "static int32_t tvmgen_net___tvm_main__(" in src
    a, b = np.ones(2, F32), np.ones(2, F32)
    (out,) = built.run(a, b)
    np.testing.assert_allclose(out, [2, 2])


def test_library_is_usable_from_plain_c(tmp_path):
    import subprocess

    low = Lowered()
    add = low.prim(elementwise("tvmgen_default_fused_add", (3,), 2, lambda a, b: a + b))
    x, y = Var("x", tt(3)), Var("y", tt(3))
    built = build(low, low.main([x, y], low.call(add, low.call(add, x, y), y)), tmp_path)
    lib = built.lib.path
    app = tmp_path / "app.c"
    app.write_text("""
#include <stdio.h>
#include "tvmgen_default.h"
int main(void) {
  float x[3] = {1, 2, 3}, y[3] = {10, 20, 30}, out[3];
  struct tvmgen_default_inputs in = {x, y};
  struct tvmgen_default_outputs o = {out};
  if (tvmgen_default_run(&in, &o) != 0) return 1;
  printf("%g %g %g\\n", out[0], out[1], out[2]);
  return sizeof(x) == TVMGEN_DEFAULT_X_SIZE ? 0 : 2;
}
""")
    exe = tmp_path / "app"
    include = lib.parent / "include"
    subprocess.run(["cc", *APP_CFLAGS, f"-I{include}", str(app), str(lib), "-o", str(exe),
                    f"-Wl,-rpath,{lib.parent}"], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["21", "42", "63"]


def test_deep_let_chains_do_not_recurse():
    low = Lowered()
    inc = low.prim(elementwise("tvmgen_default_fused_add", (4,), 1, lambda v: v + 1.0))
    x = Var("x", tt(4))
    depth = 10_000
    vars_ = [Var(f"t{k}") for k in range(depth)]
    calls = [low.call(inc, x if k == 0 else vars_[k - 1]) for k in range(depth)]
    body: Expr = vars_[-1]
    for k in reversed(range(depth)):
        body = Let(vars_[k], calls[k], body)
    res = AOTExecutorCodegen().codegen(low.main([x], body))
    assert len(res.calls) == depth
    assert res.workspace_bytes == 16  # every result written over the one before
    assert res.calls[-1].outputs == ("output",)


def test_unknown_dim_reaching_a_static_kernel_is_checked_at_run_time():
    low = Lowered()
    add = low.prim(elementwise("tvmgen_default_fused_add", (4,), 1, lambda v: v + 1.0))
    x = Var("x", TensorType((ANY,), F32))
    res = AOTExecutorCodegen().codegen(low.main([x], low.call(add, x)))
    assert res.arena is not None  # the dynamic entry
    assert "if (dims[0] != INT64_C(4)) { status = -5; goto done; }" in res.main_source


def test_inputs_whose_c_names_clash_are_rejected():
    low = Lowered()
    add = low.prim(elementwise("tvmgen_default_fused_add", (2,), 2, lambda a, b: a + b))
    x, y = Var("a.b", tt(2)), Var("a_b", tt(2))
    with pytest.raises(UnsupportedError, match="'a.b' and 'a_b' both become 'a_b'"):
        AOTExecutorCodegen().codegen(low.main([x, y], low.call(add, x, y)))


def test_unlowered_calls_in_main_are_rejected():
    x = Var("x", tt(2))
    mod = IRModule.from_expr(Function((x,), Call(Op.get("negative"), (x,))))
    with pytest.raises(UnsupportedError, match="only lowered calls"):
        AOTExecutorCodegen().codegen(mod)


def test_callee_that_is_not_lowered_is_rejected():
    low = Lowered()
    p = Var("p", tt(2))
    helper = GlobalVar("helper")
    low.mod.add(helper, Function((p,), p))
    x = Var("x", tt(2))
    with pytest.raises(UnsupportedError, match="neither a lowered PrimFunc nor an Extern"):
        AOTExecutorCodegen().codegen(low.main([x], low.call(helper, x)))


def test_memory_report_has_the_design_keys():
    low = Lowered()
    inc = low.prim(elementwise("tvmgen_default_fused_add", (4,), 1, lambda v: v + 1.0))
    x = Var("x", tt(4))
    res = AOTExecutorCodegen().codegen(low.main([x], low.call(inc, low.call(inc, x))))
    report = res.memory_report()
    assert report["workspace_bytes"] == 16 and report["constant_bytes"] == 0 and report["io_bytes"] == 32
    assert report["buffers"] == [{"name": "sid_0", "offset": 0, "bytes": 16, "first_use": 0, "last_use": 1}]
