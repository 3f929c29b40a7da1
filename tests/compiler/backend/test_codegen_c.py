"""C code generation: hand-built PrimFuncs are emitted, built into one library per test module,
called with numpy arrays and compared with numpy."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from compiler.backend import codegen_c
from compiler.backend.codegen_c import CFiles, emit_c_files, emit_c_module, emit_prim_func, prim_func_signature
from compiler.diagnostics import UnsupportedError
from compiler.runtime.build import build_shared_library, compile_check
from compiler.runtime.ffi import Library, load_library, prim_func_cdef
from compiler.tir.analysis import workspace_bytes
from compiler.tir.expr import (
    BINARY_OPS,
    BITWISE_OPS,
    COMPARE_OPS,
    INTRINSICS,
    LOGIC_OPS,
    UNARY_OPS,
    Binary,
    Buffer,
    CallExtern,
    Const,
    ExprLike,
    PrimExpr,
    Intrin,
    Unary,
    Var,
    binary,
    cast,
    intrin,
    maximum,
    minimum,
    select,
)
from compiler.tir.stmt import (
    Allocate,
    Evaluate,
    ForKind,
    LetStmt,
    PrimFunc,
    Stmt,
    Store,
    for_range,
    loop_nest,
    seq,
)

N = 64


def elementwise(name: str, inputs: list[Buffer], outputs: list[Buffer],
                body: Callable[[Var], list[Stmt]], kind: ForKind = ForKind.SERIAL) -> PrimFunc:
    return PrimFunc(name, (*inputs, *outputs), for_range("i", outputs[0].shape[0], lambda i: seq(*body(i)), kind),
                    len(inputs))


# -- the functions under test --------------------------------------------------------------------


def vector_add() -> PrimFunc:
    a, b, c = Buffer("A", (N,)), Buffer("B", (N,)), Buffer("C", (N,))
    return elementwise("vector_add", [a, b], [c], lambda i: [Store(c, (i,), a[i] + b[i])], ForKind.PARALLEL)


def transpose() -> PrimFunc:
    x, y = Buffer("X", (7, 5)), Buffer("Y", (5, 7))
    body = loop_nest(["i", "j"], [5, 7], lambda v: Store(y, (v[0], v[1]), x[v[1], v[0]]))
    return PrimFunc("transpose", (x, y), body, 1)


MM = (6, 5, 8)  # M, K, N


def matmul() -> PrimFunc:
    """Copies B transposed into a workspace buffer, then accumulates 4-wide tiles locally."""
    m, k, n = MM
    a, b, c = Buffer("A", (m, k)), Buffer("B", (k, n)), Buffer("C", (m, n))
    bt = Buffer("Bt", (n, k))
    acc = Buffer("acc", (4,), scope="local")
    copy = loop_nest(["j", "k"], [n, k], lambda v: Store(bt, (v[0], v[1]), b[v[1], v[0]]))

    def tile(i: Var, j0: Var) -> Allocate:
        init = for_range("jj", 4, lambda jj: Store(acc, (jj,), Const(0.0, "float32")), ForKind.UNROLLED)
        update = for_range("kk", k, lambda kk: for_range(
            "jj", 4, lambda jj: Store(acc, (jj,), acc[jj] + a[i, kk] * bt[j0 * 4 + jj, kk]), ForKind.VECTORIZED))
        out = for_range("jj", 4, lambda jj: Store(c, (i, j0 * 4 + jj), acc[jj]))
        return Allocate(acc, seq(init, update, out))

    tiles = for_range("i", m, lambda i: for_range("j0", n // 4, lambda j0: tile(i, j0)), ForKind.PARALLEL)
    return PrimFunc("matmul", (a, b, c), Allocate(bt, seq(copy, tiles)), 2)


UNARY_INTRINSICS = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "fabs", "floor", "ceil", "round"]
POSITIVE_ONLY = {"log", "sqrt", "rsqrt"}
INTRINSIC_ROWS = [*UNARY_INTRINSICS, "pow", "fmod"]


def intrinsics(dtype: str) -> PrimFunc:
    """Row r of `out` is INTRINSIC_ROWS[r] applied to x (or to the positive p); `flags` holds
    isnan and isinf of x."""
    x, p = Buffer("x", (N,), dtype), Buffer("p", (N,), dtype)
    out = Buffer("out", (len(INTRINSIC_ROWS), N), dtype)
    flags = Buffer("flags", (2, N), "bool")

    def body(i: Var) -> list[Stmt]:
        stores = []
        for r, name in enumerate(UNARY_INTRINSICS):
            arg = p[i] if name in POSITIVE_ONLY else x[i]
            stores.append(Store(out, (r, i), intrin(name, arg)))
        stores.append(Store(out, (len(UNARY_INTRINSICS), i), intrin("pow", p[i], x[i])))
        stores.append(Store(out, (len(UNARY_INTRINSICS) + 1, i), intrin("fmod", x[i], p[i])))
        stores.append(Store(flags, (0, i), intrin("isnan", x[i], dtype="bool")))
        stores.append(Store(flags, (1, i), intrin("isinf", x[i], dtype="bool")))
        return stores

    return PrimFunc(f"intrinsics_{dtype}", (x, p, out, flags), for_range("i", N, lambda i: seq(*body(i))), 2)


def division(dtype: str) -> PrimFunc:
    a, b = Buffer("a", (N,), dtype), Buffer("b", (N,), dtype)
    outs = [Buffer(name, (N,), dtype) for name in ("fdiv", "fmod", "tdiv", "tmod")]
    ops = ["//", "%", "tdiv", "tmod"]
    return elementwise(f"division_{dtype}", [a, b], outs,
                       lambda i: [Store(o, (i,), binary(op, a[i], b[i])) for o, op in zip(outs, ops)])


def min_max(dtype: str) -> PrimFunc:
    a, b = Buffer("a", (N,), dtype), Buffer("b", (N,), dtype)
    lo, hi = Buffer("lo", (N,), dtype), Buffer("hi", (N,), dtype)
    return elementwise(f"min_max_{dtype}", [a, b], [lo, hi],
                       lambda i: [Store(lo, (i,), minimum(a[i], b[i])), Store(hi, (i,), maximum(a[i], b[i]))])


def select_cast() -> PrimFunc:
    x = Buffer("x", (N,))
    as_int, leaky = Buffer("as_int", (N,), "int32"), Buffer("leaky", (N,))
    nonzero, round_trip = Buffer("nonzero", (N,), "bool"), Buffer("round_trip", (N,))
    return elementwise("select_cast", [x], [as_int, leaky, nonzero, round_trip], lambda i: [
        Store(as_int, (i,), cast("int32", x[i] * 2.5)),
        Store(leaky, (i,), select(x[i] > 0.0, x[i], x[i] * 0.1)),
        Store(nonzero, (i,), cast("bool", x[i])),
        Store(round_trip, (i,), cast("float32", cast("int32", x[i]))),
    ])


def dynamic_shape() -> PrimFunc:
    """out[i, j] = 2 * x[i, j] + j over an (n, m) array given at run time."""
    n, m = Var("n", "int64"), Var("m", "int64")
    x, out = Buffer("x", (n, m)), Buffer("out", (n, m))
    body = loop_nest(["i", "j"], [n, m],
                     lambda v: Store(out, (v[0], v[1]), x[v[0], v[1]] * 2.0 + cast("float32", v[1])))
    return PrimFunc("dynamic_shape", (x, out), body, 1, scalar_params=(n, m))


def constants() -> PrimFunc:
    f32, f64, i64, i32 = Buffer("f32", (4,)), Buffer("f64", (2,), "float64"), Buffer("i64", (2,), "int64"), \
        Buffer("i32", (1,), "int32")
    return PrimFunc("constants", (f32, f64, i64, i32), seq(
        Store(f32, (0,), Const(0.1, "float32")),
        Store(f32, (1,), Const(math.inf, "float32")),
        Store(f32, (2,), Const(-math.inf, "float32")),
        Store(f32, (3,), Const(math.nan, "float32")),
        Store(f64, (0,), Const(0.1, "float64")),
        Store(f64, (1,), Const(-1e-300, "float64")),
        Store(i64, (0,), Const(2**40 + 1, "int64")),
        Store(i64, (1,), Const(-(2**63), "int64")),
        Store(i32, (0,), Const(-(2**31), "int32")),
    ), 0)


def shadowed_names() -> PrimFunc:
    """Two nested loops whose variables are both called i; the body uses both."""
    out = Buffer("out", (4, 3), "int32")
    body = for_range("i", 4, lambda outer: for_range(
        "i", 3, lambda inner: Store(out, (outer, inner), outer * 10 + inner)))
    return PrimFunc("shadowed_names", (out,), body, 0)


def shared_subexpressions() -> PrimFunc:
    """t <- t*0.5 + t*0.25, thirty times, with t shared: 2**30 uses if printed as a tree."""
    x, out = Buffer("x", (N,)), Buffer("out", (N,))

    def value(i: Var) -> PrimExpr:
        t: PrimExpr = x[i]
        for _ in range(30):
            t = t * 0.5 + t * 0.25
        return t

    return elementwise("shared_subexpressions", [x], [out], lambda i: [Store(out, (i,), value(i))])


def unused_and_odd_names() -> PrimFunc:
    """An unused input, an unused let, a buffer named like a math function."""
    unused, x = Buffer("unused", (N,)), Buffer("x", (N,))
    exp = Buffer("exp", (N,), "float64")
    scratch = Buffer("scratch", (N,), scope="local")
    body = Allocate(scratch, for_range("i", N, lambda i: LetStmt(
        Var("spare"), i * 2, Store(exp, (i,), intrin("exp", cast("float64", x[i]))))))
    return PrimFunc("unused_and_odd_names", (unused, x, exp), body, 2)


CHECK_PREAMBLE = "static int32_t check_positive(const float* values, int32_t i) { return values[i] > 0.0f ? 0 : -1; }"


def checked_copy(kind: ForKind) -> PrimFunc:
    x, out = Buffer("x", (N,)), Buffer("out", (N,))
    return elementwise(f"checked_copy_{kind.value}", [x], [out], lambda i: [
        Evaluate(CallExtern("check_positive", (x, i))),
        Store(out, (i,), x[i]),
    ], kind)


def calls_vector_add() -> PrimFunc:
    a, b, c = Buffer("A", (N,)), Buffer("B", (N,)), Buffer("C", (N,))
    return PrimFunc("calls_vector_add", (a, b, c), Evaluate(CallExtern("vector_add", (a, b, c))), 2)


def odd_bounds() -> PrimFunc:
    """A loop bound that is a select (so `i < c ? a : b` would misparse) and an isnan of an
    integer inside a helper call (so `(void)x, 0` must keep its parentheses)."""
    n = Var("n", "int64")
    x, out = Buffer("x", (8,), "int32"), Buffer("out", (8,), "int32")
    extent = select(n > 4, Const(4, "int64"), n)
    body = for_range("i", extent, lambda i: Store(
        out, (i,), maximum(cast("int32", intrin("isnan", x[i], dtype="bool")), x[i])))
    return PrimFunc("odd_bounds", (x, out), body, 1, scalar_params=(n,))


BIG = 1_000_000_007  # i * BIG leaves int32 from i = 3


def loop_index_overflow() -> PrimFunc:
    """int32 values built from a loop index, which C holds in an int64_t, that overflow int32:
    each must wrap before it is divided, compared, selected on or bound by a let."""
    out = Buffer("out", (4, N), "int32")

    def body(i: Var) -> Stmt:
        big = i * BIG
        spare = Var("spare", "int32")
        return seq(
            Store(out, (0, i), binary("tdiv", big, Const(7, "int32"))),
            Store(out, (1, i), cast("int32", big > 0)),
            Store(out, (2, i), select(big + i > 0, i, -i)),
            LetStmt(spare, big + 1, Store(out, (3, i), binary("tdiv", spare, Const(3, "int32")))),
        )

    return PrimFunc("loop_index_overflow", (out,), for_range("i", N, body), 0)


def claimed_counts(name: str, slots: ExprLike, items: ExprLike, scalars: tuple[Var, ...] = (),
                   parallel: bool = True) -> PrimFunc:
    """counts[item] += 1 for every iteration of a CLAIMED loop over `items` inside a (parallel)
    loop over `slots`; each count must come out 1."""
    counts = Buffer("counts", (items,), "int32")
    claimed = for_range("item", items, lambda item: Store(counts, (item,), counts[item] + 1), ForKind.CLAIMED)
    body = for_range("slot", slots, lambda _: claimed, ForKind.PARALLEL if parallel else ForKind.SERIAL)
    return PrimFunc(name, (counts,), body, 0, scalar_params=scalars)


def heap_temporary() -> PrimFunc:
    """out[i] = x[n - 1 - i] + 1 through a temporary of the run-time length n; the length to
    allocate is a separate parameter, so a test can ask for more memory than there is."""
    n, length = Var("n", "int64"), Var("length", "int64")
    x, out = Buffer("x", (n,)), Buffer("out", (n,))
    tmp = Buffer("tmp", (length,), scope="heap")
    body = Allocate(tmp, seq(
        for_range("i", n, lambda i: Store(tmp, (i,), x[n - 1 - i] + 1.0)),
        for_range("i", n, lambda i: Store(out, (i,), tmp[i])),
    ))
    return PrimFunc("heap_temporary", (x, out), body, 1, scalar_params=(n, length))


CLAIMED_SHAPES = {"claimed_even": (2, 14), "claimed_ragged": (3, 10), "claimed_fewer_items": (4, 3)}


def claimed_funcs() -> list[PrimFunc]:
    n = Var("n", "int64")
    return [*(claimed_counts(name, slots, items) for name, (slots, items) in CLAIMED_SHAPES.items()),
            claimed_counts("claimed_dynamic", 2, n, (n,)), claimed_counts("claimed_serial", 1, 5, parallel=False)]


def all_funcs() -> list[PrimFunc]:
    return [
        vector_add(), transpose(), matmul(), intrinsics("float32"), intrinsics("float64"),
        division("int32"), division("int64"), division("float32"), min_max("float32"), min_max("int32"),
        select_cast(), dynamic_shape(), heap_temporary(), constants(), shadowed_names(), shared_subexpressions(),
        unused_and_odd_names(), odd_bounds(), loop_index_overflow(), checked_copy(ForKind.SERIAL), checked_copy(ForKind.PARALLEL), calls_vector_add(),
        *claimed_funcs(),
    ]


@pytest.fixture(scope="module")
def module() -> tuple[str, list[PrimFunc]]:
    funcs = all_funcs()
    return emit_c_module(funcs, preamble=CHECK_PREAMBLE), funcs


@pytest.fixture(scope="module")
def lib(module: tuple[str, list[PrimFunc]], tmp_path_factory: pytest.TempPathFactory) -> Library:
    source, funcs = module
    tmp = tmp_path_factory.mktemp("codegen_c")
    (tmp / "module.c").write_text(source)
    so = build_shared_library([tmp / "module.c"], tmp / "libmodule.so")
    return load_library(so, "\n".join(prim_func_cdef(f) for f in funcs))


def rand(*shape: int, dtype: str = "float32", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-3, 3, shape).astype(dtype)


# -- running the functions -----------------------------------------------------------------------


def test_vector_add_with_parallel_loop_matches_numpy(lib: Library) -> None:
    a, b, c = rand(N), rand(N, seed=1), np.zeros(N, np.float32)
    assert lib.call("vector_add", a, b, c) == 0
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("n", [0, 1, 1000])
def test_a_heap_temporary_of_run_time_length_is_allocated_for_the_call(lib: Library, n: int) -> None:
    x, out = rand(n), np.zeros(n, np.float32)

    assert lib.call("heap_temporary", x, out, n, n) == 0
    np.testing.assert_array_equal(out, x[::-1] + 1)


def test_a_heap_temporary_the_machine_cannot_hold_makes_the_call_fail(lib: Library) -> None:
    x, out = rand(4), np.zeros(4, np.float32)

    assert lib.call("heap_temporary", x, out, 4, 1 << 60) == -1
    assert not out.any()


def test_transpose_matches_numpy(lib: Library) -> None:
    x, y = rand(7, 5), np.zeros((5, 7), np.float32)
    lib.call("transpose", x, y)
    np.testing.assert_array_equal(y, x.T)


def test_matmul_with_local_tile_and_workspace_matches_numpy(lib: Library) -> None:
    m, k, n = MM
    a, b, c = rand(m, k), rand(k, n, seed=1), np.zeros((m, n), np.float32)
    func = matmul()
    assert workspace_bytes(func) == 192  # n * k * 4 = 160 bytes, rounded up to the 64-byte kernel alignment
    workspace = np.full(workspace_bytes(func), 0xFF, np.uint8)
    assert lib.call("matmul", a, b, c, workspace) == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def _intrinsic_reference(name: str, x: np.ndarray, p: np.ndarray) -> np.ndarray:
    one = x.dtype.type(1)
    table: dict[str, Callable[[], np.ndarray]] = {
        "exp": lambda: np.exp(x), "log": lambda: np.log(p), "sqrt": lambda: np.sqrt(p),
        "rsqrt": lambda: one / np.sqrt(p), "tanh": lambda: np.tanh(x),
        "sigmoid": lambda: one / (one + np.exp(-x)),
        "erf": lambda: np.array([math.erf(v) if not math.isnan(v) else math.nan for v in x.tolist()], x.dtype),
        "fabs": lambda: np.abs(x), "floor": lambda: np.floor(x), "ceil": lambda: np.ceil(x),
        "round": lambda: np.where(x >= 0, np.floor(x + one / 2), np.ceil(x - one / 2)).astype(x.dtype), "pow": lambda: np.power(p, x), "fmod": lambda: np.fmod(x, p),
    }
    with np.errstate(all="ignore"):
        return table[name]()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_intrinsic_matches_numpy(lib: Library, dtype: str) -> None:
    specials = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.0, -0.0, math.nan, math.inf, -math.inf]
    x = rand(N, dtype=dtype)
    x[: len(specials)] = specials
    p = np.abs(rand(N, dtype=dtype, seed=1)) + dtype_type(dtype)(0.1)
    out = np.zeros((len(INTRINSIC_ROWS), N), dtype)
    flags = np.zeros((2, N), np.bool_)
    lib.call(f"intrinsics_{dtype}", x, p, out, flags)
    rtol = 2e-6 if dtype == "float32" else 1e-13
    for r, name in enumerate(INTRINSIC_ROWS):
        np.testing.assert_allclose(out[r], _intrinsic_reference(name, x, p), rtol=rtol, atol=rtol,
                                   equal_nan=True, err_msg=name)
    np.testing.assert_array_equal(flags[0], np.isnan(x))
    np.testing.assert_array_equal(flags[1], np.isinf(x))


def dtype_type(dtype: str) -> type[np.generic]:
    return np.dtype(dtype).type


def test_round_is_half_away_from_zero_like_tvm(lib: Library) -> None:
    x = np.zeros(N, np.float32)
    x[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]
    out = np.zeros((len(INTRINSIC_ROWS), N), np.float32)
    lib.call("intrinsics_float32", x, np.ones(N, np.float32), out, np.zeros((2, N), np.bool_))
    assert out[INTRINSIC_ROWS.index("round"), :6].tolist() == [1.0, 2.0, 3.0, -1.0, -2.0, -3.0]


def _trunc_div(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """C's truncating division, with numpy's conventions where C traps: x / 0 == 0 and
    MIN / -1 wraps to MIN."""
    bits = np.iinfo(a.dtype).bits

    def wrap(v: int) -> int:
        return (v + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)

    pairs = list(zip(a.tolist(), b.tolist()))
    q = [wrap(-x if y == -1 else int(x / y)) if y else 0 for x, y in pairs]
    r = [x - qq * y if y not in (0, -1) else 0 for (x, y), qq in zip(pairs, q)]
    return np.array(q, a.dtype), np.array(r, a.dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_and_modulo_match_numpy_without_trapping(lib: Library, dtype: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-20, 20, N).astype(dtype)
    b = rng.choice([-7, -3, -2, -1, 1, 2, 3, 7], N).astype(dtype)
    b[0] = 0  # numpy gives 0 for both
    a[1], b[1] = np.iinfo(dtype).min, -1  # wraps in numpy instead of trapping
    outs = [np.zeros(N, dtype) for _ in range(4)]
    lib.call(f"division_{dtype}", a, b, *outs)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(outs[0], np.floor_divide(a, b))
        np.testing.assert_array_equal(outs[1], np.remainder(a, b))
    q, r = _trunc_div(a, b)
    np.testing.assert_array_equal(outs[2], q)
    np.testing.assert_array_equal(outs[3], r)


def test_float_floor_division_and_modulo_match_numpy(lib: Library) -> None:
    a = rand(N)
    b = rand(N, seed=1)
    b[:4] = [0.0, -0.5, 0.5, -3.0]
    a[:4] = [1.0, 1.25, -1.25, 3.0]
    outs = [np.zeros(N, np.float32) for _ in range(4)]
    lib.call("division_float32", a, b, *outs)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(outs[0], np.floor_divide(a, b))
        np.testing.assert_array_equal(outs[1], np.remainder(a, b))
        np.testing.assert_allclose(outs[2], np.trunc(a / b), equal_nan=True)
        np.testing.assert_array_equal(outs[3], np.fmod(a, b))


def test_float_min_max_propagate_nan_like_numpy(lib: Library) -> None:
    a, b = rand(N), rand(N, seed=1)
    a[:3] = [math.nan, 1.0, math.nan]
    b[:3] = [1.0, math.nan, math.nan]
    lo, hi = np.zeros(N, np.float32), np.zeros(N, np.float32)
    lib.call("min_max_float32", a, b, lo, hi)
    np.testing.assert_array_equal(lo, np.minimum(a, b))
    np.testing.assert_array_equal(hi, np.maximum(a, b))


def test_int_min_max_match_numpy(lib: Library) -> None:
    a, b = rand(N, dtype="int32"), rand(N, seed=1, dtype="int32")
    lo, hi = np.zeros(N, np.int32), np.zeros(N, np.int32)
    lib.call("min_max_int32", a, b, lo, hi)
    np.testing.assert_array_equal(lo, np.minimum(a, b))
    np.testing.assert_array_equal(hi, np.maximum(a, b))


def test_select_and_casts_match_numpy(lib: Library) -> None:
    x = rand(N)
    x[:3] = [0.0, -0.4, 0.4]
    as_int, leaky = np.zeros(N, np.int32), np.zeros(N, np.float32)
    nonzero, round_trip = np.zeros(N, np.bool_), np.zeros(N, np.float32)
    lib.call("select_cast", x, as_int, leaky, nonzero, round_trip)
    np.testing.assert_array_equal(as_int, (x * np.float32(2.5)).astype(np.int32))
    np.testing.assert_allclose(leaky, np.where(x > 0, x, x * np.float32(0.1)))
    np.testing.assert_array_equal(nonzero, x.astype(np.bool_))
    np.testing.assert_array_equal(round_trip, x.astype(np.int32).astype(np.float32))


@pytest.mark.parametrize("shape", [(5, 3), (2, 9), (0, 4)])
def test_dynamic_shape_function_takes_int64_dims(lib: Library, shape: tuple[int, int]) -> None:
    x = rand(*shape)
    out = np.zeros(shape, np.float32)
    assert lib.call("dynamic_shape", x, out, shape[0], shape[1]) == 0
    np.testing.assert_allclose(out, x * 2 + np.arange(shape[1], dtype=np.float32))


def test_constants_are_exact(lib: Library) -> None:
    f32, f64 = np.zeros(4, np.float32), np.zeros(2, np.float64)
    i64, i32 = np.zeros(2, np.int64), np.zeros(1, np.int32)
    lib.call("constants", f32, f64, i64, i32)
    assert f32[0] == np.float32(0.1) and f32[1] == np.inf and f32[2] == -np.inf and np.isnan(f32[3])
    assert f64.tolist() == [0.1, -1e-300]
    assert i64.tolist() == [2**40 + 1, -(2**63)]
    assert i32.tolist() == [-(2**31)]


def test_nested_loops_with_the_same_variable_name_do_not_shadow(lib: Library) -> None:
    out = np.zeros((4, 3), np.int32)
    lib.call("shadowed_names", out)
    np.testing.assert_array_equal(out, np.arange(4)[:, None] * 10 + np.arange(3))


def test_int32_values_of_int64_loop_counters_still_wrap(lib: Library) -> None:
    out = np.zeros((4, N), "int32")
    assert lib.call("loop_index_overflow", out) == 0
    i = np.arange(N, dtype=np.int64)
    big = (i * BIG).astype(np.int32)  # numpy's cast wraps
    assert (big < 0).any()
    plus_one = big + np.int32(1)
    np.testing.assert_array_equal(out[0], np.sign(big) * (np.abs(big.astype(np.int64)) // 7))
    np.testing.assert_array_equal(out[1], (big > 0).astype("int32"))
    np.testing.assert_array_equal(out[2], np.where(big + i.astype(np.int32) > 0, i, -i))
    np.testing.assert_array_equal(out[3], np.sign(plus_one) * (np.abs(plus_one.astype(np.int64)) // 3))


def test_shared_subexpressions_are_emitted_once(lib: Library, module: tuple[str, list[PrimFunc]]) -> None:
    text = emit_prim_func(shared_subexpressions())
    assert len(text) < 5000
    assert "const float cse" in text
    x, out = rand(N), np.zeros(N, np.float32)
    lib.call("shared_subexpressions", x, out)
    np.testing.assert_allclose(out, x * np.float32(0.75) ** 30, rtol=1e-5)


def test_unused_parameters_and_math_named_buffers_still_work(lib: Library) -> None:
    x, exp = rand(N), np.zeros(N, np.float64)
    lib.call("unused_and_odd_names", np.zeros(N, np.float32), x, exp)
    np.testing.assert_allclose(exp, np.exp(x.astype(np.float64)))


@pytest.mark.parametrize("n, written", [(6, 4), (2, 2)])
def test_select_as_loop_bound_and_isnan_of_int_keep_their_meaning(lib: Library, n: int, written: int) -> None:
    x = np.array([-3, 5, -1, 7, 9, 9, 9, 9], np.int32)
    out = np.full(8, -100, np.int32)
    lib.call("odd_bounds", x, out, n)
    np.testing.assert_array_equal(out[:written], np.maximum(x[:written], 0))
    assert (out[written:] == -100).all()


@pytest.mark.parametrize("kind", [ForKind.SERIAL, ForKind.PARALLEL])
def test_failing_extern_call_makes_the_function_return_minus_one(lib: Library, kind: ForKind) -> None:
    x, out = np.abs(rand(N)) + 1, np.zeros(N, np.float32)
    assert lib.call(f"checked_copy_{kind.value}", x, out) == 0
    np.testing.assert_array_equal(out, x)
    x[10] = -1.0
    assert lib.call(f"checked_copy_{kind.value}", x, out) == -1


def test_prim_func_calls_another_function_of_the_module(lib: Library) -> None:
    a, b, c = rand(N), rand(N, seed=1), np.zeros(N, np.float32)
    assert lib.call("calls_vector_add", a, b, c) == 0
    np.testing.assert_array_equal(c, a + b)


def test_generated_module_compiles_without_warnings(module: tuple[str, list[PrimFunc]]) -> None:
    source, _ = module
    assert compile_check(source, ["-Werror"]) == []


# -- the text ------------------------------------------------------------------------------------


def test_signature_has_const_inputs_then_outputs_then_scalars_then_workspace() -> None:
    # C may be written over A (compiler/tir/inplace.py), so neither is `restrict`.
    assert prim_func_signature(vector_add()) == (
        "int32_t vector_add(const float* A, const float* restrict B, float* C)")
    assert prim_func_signature(matmul()).endswith("float* restrict C, uint8_t* restrict workspace)")
    # So may `out` over `x` when the run's shapes are equal.
    assert prim_func_signature(dynamic_shape()) == (
        "int32_t dynamic_shape(const float* x, float* out, int64_t n, int64_t m)")


def test_module_includes_only_standard_headers() -> None:
    text = emit_c_module([vector_add()])
    includes = [ln for ln in text.splitlines() if ln.startswith("#include")]
    assert includes == ["#include <stdint.h>", "#include <stddef.h>", "#include <string.h>", "#include <math.h>"]
    assert "Python" not in text


def test_loads_and_stores_are_flattened_row_major() -> None:
    text = emit_prim_func(transpose())
    assert "Y[(i * 7) + j] = X[(j * 5) + i];" in text


def test_workspace_buffers_and_local_tiles_are_declared_by_convention() -> None:
    text = emit_prim_func(matmul())
    assert "float* restrict Bt = (float*)(workspace + 0);" in text
    assert "float acc[4] __attribute__((aligned(64)));" in text


def test_loop_kinds_become_pragmas() -> None:
    text = emit_prim_func(matmul())
    assert "#pragma omp parallel for" in text
    assert "#pragma omp simd" in text  # allowed inside the parallel loop
    assert "#pragma GCC unroll 4" in text


def test_rolled_loop_asks_the_compiler_not_to_unroll() -> None:
    out = Buffer("out", (3,))
    loop = for_range("i", 3, lambda i: Store(out, (i,), Const(1.0, "float32")), ForKind.ROLLED)
    func = PrimFunc("f", (out,), loop, 0)
    assert "#pragma GCC unroll 1\n  for (" in emit_prim_func(func)


def test_long_unrolled_loop_unrolls_by_eight() -> None:
    out = Buffer("out", (100,))
    loop = for_range("i", 100, lambda i: Store(out, (i,), Const(1.0, "float32")), ForKind.UNROLLED)
    func = PrimFunc("f", (out,), loop, 0)
    assert "#pragma GCC unroll 8" in emit_prim_func(func)


@pytest.mark.parametrize("name", [*CLAIMED_SHAPES, "claimed_dynamic", "claimed_serial"])
def test_claimed_loop_runs_each_iteration_once_in_all(lib: Library, name: str) -> None:
    items = CLAIMED_SHAPES[name][1] if name in CLAIMED_SHAPES else 5 if name == "claimed_serial" else 23
    for _ in range(200):  # the threads race for the iterations differently each time
        counts = np.zeros(items, np.int32)
        args = (counts, items) if name == "claimed_dynamic" else (counts,)
        assert lib.call(name, *args) == 0
        np.testing.assert_array_equal(counts, np.ones(items, np.int32))


def test_claimed_loop_takes_its_own_share_first_with_constant_extents() -> None:
    text = emit_prim_func(claimed_counts("f", 3, 10))
    assert "int64_t relaycc_next0[3] = {INT64_C(0), INT64_C(4), INT64_C(8)};" in text
    assert "(slot + relaycc_next0_tried) % 3" in text


def test_claimed_loop_shares_one_counter_with_a_dynamic_extent() -> None:
    n = Var("n", "int64")
    text = emit_prim_func(claimed_counts("f", 2, n, (n,)))
    assert "int64_t relaycc_next0 = 0;" in text
    assert "__atomic_fetch_add(&relaycc_next0, 1, __ATOMIC_RELAXED)" in text


def test_claimed_loop_outside_a_parallel_loop_is_a_plain_loop() -> None:
    text = emit_prim_func(claimed_counts("f", 1, 5, parallel=False))
    assert "__atomic" not in text and "for (int64_t item = 0; item < 5; ++item)" in text


def test_long_parallel_loop_is_handed_out_in_guided_chunks() -> None:
    out = Buffer("out", (64,))
    loop = for_range("i", 64, lambda i: Store(out, (i,), Const(0.0, "float32")), ForKind.PARALLEL)
    assert "#pragma omp parallel for schedule(guided)" in emit_prim_func(PrimFunc("f", (out,), loop, 0))
    short = for_range("i", 4, lambda i: Store(out, (i,), Const(0.0, "float32")), ForKind.PARALLEL)
    assert "schedule" not in emit_prim_func(PrimFunc("f", (out,), short, 0))


def test_nested_parallel_loop_loses_its_pragma() -> None:
    out = Buffer("out", (4, 4))
    body = loop_nest(["i", "j"], [4, 4], lambda v: Store(out, (v[0], v[1]), Const(0.0, "float32")),
                     [ForKind.PARALLEL, ForKind.PARALLEL])
    assert emit_prim_func(PrimFunc("f", (out,), body, 0)).count("#pragma omp parallel for") == 1


def test_loop_beyond_int32_range_uses_int64_counter() -> None:
    out = Buffer("out", (1,))
    body = for_range("i", 2**32, lambda i: Store(out, (0,), Const(1.0, "float32")))
    text = emit_prim_func(PrimFunc("f", (out,), body, 0))
    assert "for (int64_t i = 0; i < INT64_C(4294967296); ++i)" in text


def test_int32_loops_and_their_index_arithmetic_are_int64_in_c() -> None:
    # gcc vectorizes under -fwrapv only loops whose counters and addresses cannot wrap.
    assert "for (int64_t i = 0; i < 64; ++i)" in emit_prim_func(vector_add())
    text = emit_prim_func(transpose())
    assert "Y[(i * 7) + j] = X[(j * 5) + i];" in text
    assert "int32_t" not in text.split("{", 1)[1].replace("return 0", "")


def test_loop_nests_keep_their_order_but_single_loops_carry_no_attribute() -> None:
    assert 'optimize("no-loop-interchange")' in emit_prim_func(transpose())
    assert "optimize" not in emit_prim_func(vector_add())


def test_index_arithmetic_that_may_overflow_int32_is_truncated_back() -> None:
    text = emit_prim_func(loop_index_overflow())
    assert "((int32_t)(i * 1000000007))" in text
    assert "const int32_t spare" in text


def test_floor_division_of_non_negative_loop_indices_uses_plain_c_operators() -> None:
    x, out = Buffer("x", (24,)), Buffer("out", (4, 6))
    body = loop_nest(["i", "j"], [4, 6], lambda v: Store(out, (v[0], v[1]), x[(v[0] * 6 + v[1]) // 3 * 3 + v[1] % 3]))
    text = emit_prim_func(PrimFunc("f", (x, out), body, 1))
    assert "relaycc_floordiv" not in text and "relaycc_floormod" not in text


def test_deep_expression_chain_emits_without_recursion() -> None:
    x, out = Buffer("x", (1,)), Buffer("out", (1,))
    value: PrimExpr = x[0]
    for k in range(5000):
        value = value + Const(float(k % 7), "float32")
    text = emit_prim_func(PrimFunc("deep", (x, out), Store(out, (0,), value), 1))
    assert text.count(" + ") == 5000


def test_extern_calls_are_declared_from_their_arguments() -> None:
    text = emit_c_module([checked_copy(ForKind.SERIAL)])
    assert "int32_t check_positive(const float*, int32_t);" in text
    assert "if (check_positive(x, i) != 0) return -1;" in text
    assert "check_positive(const float*" not in emit_c_module([checked_copy(ForKind.SERIAL)], declare_externs=False)


OP_DTYPES = ["float32", "float64", "float16", "int8", "int32", "int64", "uint8", "uint32", "uint64", "bool"]


def every_operator(dtype: str) -> PrimFunc:
    """Every binary and unary operator and every intrinsic applied to operands of `dtype` (the
    bitwise operators to integers and bools only)."""
    bitwise_ok = not dtype.startswith("float")
    a, b = Buffer("a", (N,), dtype), Buffer("b", (N,), dtype)
    out, flags = Buffer("out", (N,), dtype), Buffer("flags", (N,), "bool")

    def body(i: Var) -> list[Stmt]:
        stores: list[Stmt] = []
        for op in BINARY_OPS:
            if op in BITWISE_OPS and not bitwise_ok:
                continue
            target = flags if op in COMPARE_OPS or op in LOGIC_OPS else out
            stores.append(Store(target, (i,), Binary(op, a[i], b[i], target.dtype)))
        for op in UNARY_OPS:
            if op == "~" and not bitwise_ok:
                continue
            target = flags if op == "!" else out
            stores.append(Store(target, (i,), Unary(op, a[i], target.dtype)))
        for name in INTRINSICS:
            args = (a[i], b[i]) if name in ("pow", "fmod") else (a[i],)
            target = flags if name in ("isnan", "isinf") else out
            stores.append(Store(target, (i,), Intrin(name, args, target.dtype)))
        return stores

    return PrimFunc(f"every_operator_{dtype}", (a, b, out, flags), for_range("i", N, lambda i: seq(*body(i))), 2)


def test_every_operator_compiles_without_warnings_for_every_dtype() -> None:
    source = emit_c_module([every_operator(d) for d in OP_DTYPES])
    assert compile_check(source, ["-Werror"]) == []


# -- errors --------------------------------------------------------------------------------------


def test_local_buffer_of_dynamic_size_is_rejected() -> None:
    n = Var("n", "int64")
    out = Buffer("out", (n,))
    tmp = Buffer("tmp", (n,), scope="local")
    body = Allocate(tmp, for_range("i", n, lambda i: Store(out, (i,), Const(0.0, "float32"))))
    with pytest.raises(UnsupportedError, match="local buffer tmp"):
        emit_prim_func(PrimFunc("f", (out,), body, 0, scalar_params=(n,)))


def test_unbound_variable_is_reported() -> None:
    out = Buffer("out", (4,))
    stray = Var("stray")
    body = for_range("i", 4, lambda i: Store(out, (i,), cast("float32", stray)))
    with pytest.raises(ValueError, match="variable stray is used but not bound"):
        emit_prim_func(PrimFunc("f", (out,), body, 0))


def test_store_into_an_input_is_reported() -> None:
    x = Buffer("x", (4,))
    with pytest.raises(ValueError, match="stores into its input buffer x"):
        emit_prim_func(PrimFunc("f", (x,), for_range("i", 4, lambda i: Store(x, (i,), Const(0.0, "float32"))), 1))


def test_duplicate_function_names_are_reported() -> None:
    with pytest.raises(ValueError, match="defined twice: vector_add"):
        emit_c_module([vector_add(), vector_add()])


def test_function_name_must_be_a_c_identifier() -> None:
    bad = PrimFunc("not-an-identifier", (Buffer("x", (1,)),), Evaluate(Const(0)), 1)
    with pytest.raises(ValueError, match="not a usable C identifier"):
        emit_prim_func(bad)


# -- several files ---------------------------------------------------------------------------------


def add_twice() -> PrimFunc:
    """C = A + B through vector_add, which may be defined in another file."""
    a, b, c = Buffer("A", (N,)), Buffer("B", (N,)), Buffer("C", (N,))
    return PrimFunc("add_twice", (a, b, c), Evaluate(CallExtern("vector_add", (a, b, c))), 2)


def test_one_group_of_every_function_is_the_single_file() -> None:
    funcs = [vector_add(), transpose(), matmul()]
    assert emit_c_files(funcs, lambda bodies: [list(range(len(bodies)))]) == [emit_c_module(funcs)]


def test_functions_split_over_files_build_one_working_library(tmp_path) -> None:
    funcs = [vector_add(), transpose(), add_twice()]
    files = emit_c_files(funcs, lambda bodies: [[2], [1], [0]])
    assert len(files) == 3 and "int32_t vector_add(const float* A" in files[0]
    paths = []
    for k, text in enumerate(files):
        paths.append(tmp_path / f"part{k}.c")
        paths[-1].write_text(text)
    lib = load_library(build_shared_library(paths, tmp_path / "libparts.so"),
                       "\n".join(prim_func_cdef(f) for f in funcs))
    a, b, c = rand(N), rand(N, seed=1), np.zeros(N, "float32")
    assert lib.call("add_twice", a, b, c) == 0
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_a_split_that_loses_or_repeats_a_function_is_refused() -> None:
    funcs = [vector_add(), transpose()]
    for groups in ([[0]], [[0, 1], [1]]):
        with pytest.raises(ValueError, match="exactly one group"):
            emit_c_files(funcs, lambda bodies, groups=groups: groups)


@pytest.fixture
def fork_for_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers even for these small functions, which alone would not be worth one."""
    monkeypatch.setattr(codegen_c, "FORK_FROM_STATEMENTS", 0)


def test_files_emitted_with_forked_workers_are_those_emitted_serially(fork_for_any_size: None) -> None:
    funcs = [vector_add(), transpose(), matmul(), add_twice()]

    def split(bodies: Sequence[str]) -> list[list[int]]:
        return [[3, 0], [2], [1]]

    assert emit_c_files(funcs, split, workers=2) == emit_c_files(funcs, split)


def test_an_error_in_one_function_emitted_by_workers_keeps_its_type_and_message(fork_for_any_size: None) -> None:
    n = Var("n", "int64")
    out = Buffer("out", (n,))
    tmp = Buffer("tmp", (n,), scope="local")
    body = Allocate(tmp, for_range("i", n, lambda i: Store(out, (i,), Const(0.0, "float32"))))
    bad = PrimFunc("needs_static_size", (out,), body, 0, scalar_params=(n,))
    funcs = [vector_add(), transpose(), bad, matmul()]
    with pytest.raises(UnsupportedError, match="needs_static_size: local buffer tmp needs a static size"):
        emit_c_files(funcs, lambda bodies: [list(range(len(bodies)))], workers=1)


def test_started_emission_left_unused_ends_its_workers(fork_for_any_size: None) -> None:
    with CFiles([vector_add(), transpose(), matmul()], lambda bodies: [[0, 1, 2]], workers=2) as files:
        pids = files.workers
        assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_few_small_functions_are_emitted_without_workers() -> None:
    with CFiles([vector_add(), transpose(), matmul()], lambda bodies: [[0, 1, 2]], workers=2) as files:
        assert files.workers == []
        assert files.result() == [emit_c_module([vector_add(), transpose(), matmul()])]


def half_epilogue() -> PrimFunc:
    """A float16 kernel's epilogue as Float16ComputeInFloat32 leaves it: round, relu, round
    again (a no-op on a rounded value), store as float16, read float16 back."""
    a, h, f, g = Buffer("A", (N,)), Buffer("H", (N,), "float16"), Buffer("F", (N,)), Buffer("G", (N,))

    def body(i: Var) -> list[Stmt]:
        rounded = cast("float32", cast("float16", a[i] * Const(3.0, "float32")))
        relu = cast("float32", cast("float16", maximum(rounded, Const(0.0, "float32"))))
        return [Store(f, (i,), relu), Store(h, (i,), cast("float16", a[i] * Const(5.0, "float32"))),
                Store(g, (i,), cast("float32", h[i]) + Const(1.0, "float32"))]

    return elementwise("half_epilogue", [a], [h, f, g], body, ForKind.VECTORIZED)


def test_float16_conversions_print_as_vectorizable_helpers_and_round_like_numpy(tmp_path) -> None:
    func = half_epilogue()
    text = emit_c_module([func])
    assert text.count("relaycc_halfround_f32(") == 2  # the helper's definition and one call
    assert "relaycc_halfstore_f32(&H[" in text and "relaycc_halfload_f32(&H[" in text
    (tmp_path / "half.c").write_text(text)
    library = load_library(build_shared_library([tmp_path / "half.c"], tmp_path / "libhalf.so"), prim_func_cdef(func))
    a = rand(N) * 1e4
    a[:4] = [np.nan, np.inf, 1e-6, -2.0**-20]
    h, f, g = np.zeros(N, np.float16), np.zeros(N, np.float32), np.zeros(N, np.float32)
    assert library.call("half_epilogue", a, h, f, g) == 0
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(f, np.maximum((a * 3).astype(np.float16), 0).astype(np.float32))
        np.testing.assert_array_equal(h, (a * 5).astype(np.float16))
        np.testing.assert_array_equal(g, (a * 5).astype(np.float16).astype(np.float32) + 1)


def half_rows() -> PrimFunc:
    """A float16 copy in reverse order, and a row of float32 rounded to float16 by the whole-row
    helper (what compiler/ops/kernels/half_stages.py emits)."""
    h, a = Buffer("H", (N,), "float16"), Buffer("A", (N,))
    copy, rounded = Buffer("C", (N,), "float16"), Buffer("R", (N,))
    row = Buffer("row", (N,), scope="local")
    copies = for_range("i", N, lambda i: Store(copy, (i,), h[N - 1 - i]), ForKind.VECTORIZED)
    fill = for_range("j", N, lambda j: Store(row, (j,), a[j]), ForKind.VECTORIZED)
    call = Evaluate(CallExtern("relaycc_halfroundn_f32", (row, Const(N, "int64")), "void"))
    out = for_range("k", N, lambda k: Store(rounded, (k,), row[k]), ForKind.VECTORIZED)
    return PrimFunc("half_rows", (h, a, copy, rounded), seq(copies, Allocate(row, seq(fill, call, out))), 2)


def test_float16_copies_move_two_bytes_and_row_helpers_are_not_declared_as_externs(tmp_path) -> None:
    func = half_rows()
    text = emit_c_module([func])
    assert "__builtin_memcpy(&C[i], &H[" in text
    assert text.count("relaycc_halfroundn_f32(") == 2  # its definition and the call: no prototype
    (tmp_path / "rows.c").write_text(text)
    library = load_library(build_shared_library([tmp_path / "rows.c"], tmp_path / "librows.so"), prim_func_cdef(func))
    h = np.arange(N, dtype=np.uint16).view(np.float16)
    h[:3] = np.uint16([0x7C01, 0xFE00, 0x0001]).view(np.float16)  # a signalling NaN is copied as it is
    a = rand(N) * 1e3
    copy, rounded = np.zeros(N, np.float16), np.zeros(N, np.float32)
    assert library.call("half_rows", h, a, copy, rounded) == 0
    np.testing.assert_array_equal(copy.view(np.uint16), h[::-1].view(np.uint16))
    np.testing.assert_array_equal(rounded, a.astype(np.float16).astype(np.float32))


def test_an_index_adds_its_constant_part_last_so_neighbouring_rows_share_an_address() -> None:
    # A register tile's rows read one address at constant displacements (codegen_c's
    # constant_offset_last); `(i + 1) * 4 + j` gave each row an index register of its own.
    x, y = Buffer("X", (5, 4)), Buffer("Y", (4, 4))
    body = loop_nest(["i", "j"], [4, 4], lambda v: Store(y, (v[0], v[1]), x[v[0] + 1, v[1]] + x[v[0], v[1]]))
    text = emit_prim_func(PrimFunc("shifted_rows", (x, y), body, 1))
    assert "X[((i * 4) + j) + 4] + X[(i * 4) + j]" in text


def test_min_max_with_a_constant_other_than_nan_print_as_the_one_comparison_helpers() -> None:
    a, b = Buffer("a", (N,)), Buffer("b", (N,))
    outs = [Buffer(f"o{k}", (N,)) for k in range(4)]
    values = [lambda i: maximum(a[i], Const(0.0, "float32")), lambda i: minimum(a[i], Const(6.0, "float32")),
              lambda i: maximum(a[i], Const(math.nan, "float32")), lambda i: maximum(a[i], b[i])]
    text = emit_prim_func(elementwise("bounds", [a, b], outs, lambda i: [
        Store(o, (i,), value(i)) for o, value in zip(outs, values)]))
    assert "relaycc_maxk_f32(a[i], 0.0f)" in text and "relaycc_mink_f32(a[i], 6.0f)" in text
    assert text.count("relaycc_max_f32(") == 2  # NaN as the bound, and a bound that may be NaN
