"""LowerTE: the six call forms, naming and sharing of lowered functions, call metadata.

The first four tests are the four cases TVM's own LowerTE tests check (a primitive, a
primitive for an external compiler whose codegen returns nothing, an extern function, an
extern function with a dynamic result), restated against our API with the same facts asserted.
"""

from __future__ import annotations

import dataclasses

import pytest

from compiler.backend import te_compiler
from compiler.backend.lower_primitive import lower_primitive
from compiler.backend.targets import TARGETS, TargetKind
from compiler.backend.te_compiler import LowerTE, LoweredFunction
from compiler.diagnostics import CompileError, UnsupportedError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Function, GlobalVar, Let, Op, Tuple, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.parser import parse
from compiler.passes.pass_infra import PassContext, PassTimer
from compiler.tir.stmt import PrimFunc, seq

HEADER = '#[version = "0.0.5"]\n'


def lower(text: str, module_name: str = "test", **options: object) -> IRModule:
    return LowerTE(module_name, **options)(parse(HEADER + text))  # type: ignore[arg-type]  # pass fields


def metadata(call: object) -> Attrs:
    assert isinstance(call, Call)
    value = call.attrs["metadata"]
    assert isinstance(value, Attrs)
    return value


def assert_call_lowered(call: object, callee: str, arg_names: list[str]) -> Call:
    assert isinstance(call, Call)
    assert isinstance(call.op, Op) and call.op.name == "call_lowered"
    assert len(call.args) == 2
    fn, args = call.args
    assert isinstance(fn, GlobalVar) and fn.name_hint == callee
    assert isinstance(args, Tuple)
    assert [a.name_hint for a in args.fields if isinstance(a, Var)] == arg_names
    return call


def fake_lowering(func: Function, name: str, ctx: object = None) -> PrimFunc:
    """A PrimFunc with the right type and no loops: for tests about the rewriting only."""
    return PrimFunc(name, (), seq(), 0, attrs=Attrs(global_symbol=name), func_type=func.checked_type)


@pytest.fixture
def codegen_calls() -> list[Function]:
    """Registers target kind `test_pass_lower_te` whose codegen records its calls and returns None."""
    calls: list[Function] = []

    def codegen(func: Function) -> None:
        calls.append(func)

    with TARGETS.scoped(TargetKind("test_pass_lower_te", codegen=codegen)):
        yield calls


# -- the four cases of TVM's LowerTE tests ------------------------------------------------------


def test_lower_te_rewrites_call_of_inline_primitive_to_call_lowered_of_new_prim_func() -> None:
    mod = lower("""
        def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(5, 7), float32] {
          %0 = fn (%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] {
            add(%x, %y)
          };
          %0(%a, %a)
        }""")
    call = assert_call_lowered(mod.main.body, "test_fused_add", ["a", "a"])
    meta = metadata(call)
    assert meta["relay_attrs"]["Primitive"] == 1
    assert [gv.name_hint for gv in meta["all_prim_fn_vars"]] == ["test_fused_add"]
    assert isinstance(mod["test_fused_add"], PrimFunc)
    assert call.checked_type == TensorType((5, 7), "float32")


def test_lower_te_keeps_compiler_function_as_extern_when_its_codegen_returns_nothing(
    codegen_calls: list[Function],
) -> None:
    mod = lower("""
        def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(5, 7), float32] {
          %0 = fn (%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Primitive=1,
                   Compiler="test_pass_lower_te", global_symbol="test_add") -> Tensor[(5, 7), float32] {
            add(%x, %y)
          };
          %0(%a, %a)
        }""")
    call = assert_call_lowered(mod.main.body, "test_add", ["a", "a"])
    meta = metadata(call)
    assert meta["relay_attrs"]["Primitive"] == 1
    assert meta["relay_attrs"]["Compiler"] == "test_pass_lower_te"
    assert meta["relay_attrs"]["global_symbol"] == "test_add"
    assert len(meta["all_prim_fn_vars"]) == 0
    test_add = mod["test_add"]
    assert isinstance(test_add, Function)
    assert dict(test_add.attrs) == {"Extern": 1}
    assert len(codegen_calls) == 1 and codegen_calls[0].attrs["global_symbol"] == "test_add"
    assert "external_mods" not in mod.attrs


def test_lower_te_rewrites_call_of_extern_global_without_lowering_it() -> None:
    mod = lower("""
        def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(5, 7), float32] {
          @my_add(%a, %a)
        }
        def @my_add(%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Extern=1) -> Tensor[(5, 7), float32] {
          add(%x, %y)
        }""")
    call = assert_call_lowered(mod.main.body, "my_add", ["a", "a"])
    meta = metadata(call)
    assert meta["relay_attrs"]["Extern"] == 1
    assert len(meta["all_prim_fn_vars"]) == 0
    my_add = mod["my_add"]
    assert isinstance(my_add, Function)
    assert my_add.attrs["Extern"] == 1
    assert not any(isinstance(definition, PrimFunc) for _, definition in mod.items())


def test_lower_te_cross_links_extern_with_dynamic_result_to_its_shape_function() -> None:
    mod = lower("""
        def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(?, ?), float32] {
          @my_dyn(%a, %a)
        }
        def @my_dyn(%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Extern=1) -> Tensor[(?, ?), float32] {
          add(%x, %y)
        }""")
    call = assert_call_lowered(mod.main.body, "my_dyn", ["a", "a"])
    meta = metadata(call)
    assert meta["prim_shape_fn_var"].name_hint == "shape_func_add"
    assert meta["relay_attrs"]["Extern"] == 1
    assert list(meta["prim_shape_fn_states"]) == [2, 2]
    assert meta["prim_shape_fn_num_inputs"] == 2
    assert [gv.name_hint for gv in meta["all_prim_shape_fn_vars"]] == ["shape_func_add"]
    assert meta["prim_shape_fn_num_outputs"] == 1
    assert len(meta["all_prim_fn_vars"]) == 0
    my_dyn = mod["my_dyn"]
    assert isinstance(my_dyn, Function) and my_dyn.attrs["Extern"] == 1
    assert isinstance(mod["shape_func_add"], PrimFunc)


# -- where primitive functions are -------------------------------------------------------------


def test_lower_te_drops_let_binding_of_primitive_function() -> None:
    mod = lower("""
        def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
          let %f = fn (%x: Tensor[(4,), float32], Primitive=1) -> Tensor[(4,), float32] {
            multiply(%x, %x)
          };
          %f(%a)
        }""")
    assert not isinstance(mod.main.body, Let)
    assert_call_lowered(mod.main.body, "test_fused_multiply", ["a"])
    assert isinstance(mod["test_fused_multiply"], PrimFunc)


def test_lower_te_keeps_let_of_primitive_function_also_used_as_value() -> None:
    mod = lower("""
        def @main(%a: Tensor[(4,), float32]) {
          let %f = fn (%x: Tensor[(4,), float32], Primitive=1) -> Tensor[(4,), float32] {
            exp(%x)
          };
          (%f(%a), %f)
        }""")
    body = mod.main.body
    assert isinstance(body, Let)
    assert isinstance(body.body, Tuple)
    assert_call_lowered(body.body.fields[0], "test_fused_exp", ["a"])


def test_lower_te_replaces_global_primitive_function_by_its_prim_func() -> None:
    mod = lower("""
        def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
          %0 = @negate(%a);
          @negate(%0)
        }
        def @negate(%x: Tensor[(4,), float32], Primitive=1) -> Tensor[(4,), float32] {
          negative(%x)
        }""")
    outer = assert_call_lowered(mod.main.body, "test_fused_negative", [])
    inner = outer.args[1].fields[0]  # type: ignore[attr-defined]  # checked to be a Tuple
    assert_call_lowered(inner, "test_fused_negative", ["a"])
    assert "negate" not in mod
    assert [gv.name_hint for gv, _ in mod.items()] == ["main", "test_fused_negative"]


def test_lower_te_shares_one_prim_func_between_structurally_equal_primitives() -> None:
    seen: list[LoweredFunction] = []
    mod = lower("""
        def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(5, 7), float32] {
          %0 = fn (%x: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] { exp(%x) };
          %1 = %0(%a);
          %2 = fn (%y: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] { exp(%y) };
          %2(%1)
        }""", process_fn=seen.append)
    outer = assert_call_lowered(mod.main.body, "test_fused_exp", [])
    inner = assert_call_lowered(outer.args[1].fields[0], "test_fused_exp", ["a"])  # type: ignore[attr-defined]  # a Tuple
    assert outer.args[0] is inner.args[0]
    assert sum(isinstance(d, PrimFunc) for _, d in mod.items()) == 1
    assert [f.global_var.name_hint for f in seen] == ["test_fused_exp"]


def test_lower_te_numbers_distinct_primitives_with_the_same_name_in_evaluation_order() -> None:
    mod = lower("""
        def @main(%a: Tensor[(5, 7), float32], %b: Tensor[(7,), float32]) -> Tensor[(5, 7), float32] {
          %0 = fn (%x: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] { exp(%x) };
          %1 = %0(%a);
          %2 = fn (%y: Tensor[(5, 7), float32], %z: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] {
            add(%y, %z)
          };
          %3 = %2(%1, %a);
          %4 = fn (%y: Tensor[(5, 7), float32], %z: Tensor[(7,), float32], Primitive=1) -> Tensor[(5, 7), float32] {
            add(%y, %z)
          };
          %5 = fn (%w: Tensor[(7,), float32], Primitive=1) -> Tensor[(7,), float32] { exp(%w) };
          %6 = %5(%b);
          %4(%3, %6)
        }""")
    names = sorted(gv.name_hint for gv, d in mod.items() if isinstance(d, PrimFunc))
    assert names == ["test_fused_add", "test_fused_add_1", "test_fused_exp", "test_fused_exp_1"]
    last = assert_call_lowered(mod.main.body, "test_fused_add_1", [])
    first_add, second_exp = last.args[1].fields  # type: ignore[attr-defined]  # a Tuple
    assert_call_lowered(first_add, "test_fused_add", ["a"])
    assert_call_lowered(second_exp, "test_fused_exp_1", ["b"])


def test_lower_te_lowers_each_primitive_once_in_a_chain_10000_calls_deep() -> None:
    x = Var("x", TensorType((4,), "float32"))
    p = Var("p", TensorType((4,), "float32"))
    prim = Function((p,), Call(Op.get("exp"), (p,)), TensorType((4,), "float32"), Attrs(Primitive=1))
    body: object = x
    for _ in range(10_000):
        body = Call(prim, (body,))
    mod = IRModule.from_expr(Function((x,), body))  # type: ignore[arg-type]  # built as a Call chain
    lowered = LowerTE("deep")(mod)
    assert sum(isinstance(d, PrimFunc) for _, d in lowered.items()) == 1
    call = assert_call_lowered(lowered.main.body, "deep_fused_exp", [])
    assert call.checked_type == TensorType((4,), "float32")


# -- external codegens and hooks ---------------------------------------------------------------


def test_lower_te_collects_modules_returned_by_function_at_a_time_codegen_once_per_function() -> None:
    made: list[str] = []

    def codegen(func: Function) -> dict[str, str]:
        made.append(str(func.attrs["global_symbol"]))
        return {"symbol": str(func.attrs["global_symbol"])}

    text = """
        def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
          %0 = fn (%x: Tensor[(4,), float32], Primitive=1, Compiler="acme", global_symbol="acme_neg") -> Tensor[(4,), float32] {
            negative(%x)
          };
          %1 = %0(%a);
          %2 = fn (%y: Tensor[(4,), float32], Primitive=1, Compiler="acme", global_symbol="acme_neg") -> Tensor[(4,), float32] {
            negative(%y)
          };
          %2(%1)
        }"""
    with TARGETS.scoped(TargetKind("acme", codegen=codegen)):
        mod = lower(text)
    assert made == ["acme_neg"]
    assert mod.attrs["external_mods"] == [{"symbol": "acme_neg"}]
    outer = assert_call_lowered(mod.main.body, "acme_neg", [])
    assert_call_lowered(outer.args[1].fields[0], "acme_neg", ["a"])  # type: ignore[attr-defined]  # a Tuple


def test_lower_te_moves_global_compiler_function_to_its_global_symbol() -> None:
    with TARGETS.scoped(TargetKind("acme", codegen=lambda func: None)):
        mod = lower("""
            def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
              @outlined(%a)
            }
            def @outlined(%x: Tensor[(4,), float32], Primitive=1, Compiler="acme", global_symbol="acme_main_0") -> Tensor[(4,), float32] {
              negative(%x)
            }""")
    assert_call_lowered(mod.main.body, "acme_main_0", ["a"])
    assert "outlined" not in mod
    extern = mod["acme_main_0"]
    assert isinstance(extern, Function) and dict(extern.attrs) == {"Extern": 1}


def test_lower_te_reports_compiler_without_codegen_by_name() -> None:
    with pytest.raises(UnsupportedError, match=r'Compiler="nowhere".*relay\.ext\.nowhere'):
        lower("""
            def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
              %0 = fn (%x: Tensor[(4,), float32], Primitive=1, Compiler="nowhere", global_symbol="f") -> Tensor[(4,), float32] {
                negative(%x)
              };
              %0(%a)
            }""")


def test_lower_te_rejects_compiler_function_without_global_symbol(codegen_calls: list[Function]) -> None:
    with pytest.raises(CompileError, match="no global_symbol"):
        lower("""
            def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
              %0 = fn (%x: Tensor[(4,), float32], Primitive=1, Compiler="test_pass_lower_te") -> Tensor[(4,), float32] {
                negative(%x)
              };
              %0(%a)
            }""")


def test_lower_te_rejects_two_different_compiler_functions_with_one_global_symbol(
    codegen_calls: list[Function],
) -> None:
    with pytest.raises(CompileError, match="global_symbol twin .* already the name of a different global") as err:
        lower("""
            def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
              %0 = fn (%x: Tensor[(4,), float32], Primitive=1, Compiler="test_pass_lower_te", global_symbol="twin") -> Tensor[(4,), float32] {
                negative(%x)
              };
              %1 = fn (%x: Tensor[(4,), float32], Primitive=1, Compiler="test_pass_lower_te", global_symbol="twin") -> Tensor[(4,), float32] {
                exp(%x)
              };
              %1(%0(%a))
            }""")
    assert err.value.line == 7


HOOKED = """
    def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(5, 7), float32] {
      %0 = @hooked_add(%a, %a);
      @hooked_mul(%0, %a)
    }
    def @hooked_add(%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Primitive=1, Compiler="hooked",
                    global_symbol="hooked_add") -> Tensor[(5, 7), float32] {
      add(%x, %y)
    }
    def @hooked_mul(%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Primitive=1, Compiler="hooked",
                    global_symbol="hooked_mul") -> Tensor[(5, 7), float32] {
      multiply(%x, %y)
    }"""


def replace_compiler_functions_by_prim_funcs(mod: IRModule) -> IRModule:
    """A RelayToTIR hook in miniature: every `Compiler="hooked"` global becomes a PrimFunc."""
    out = mod.copy()
    for gv, func in mod.functions():
        if func.attrs.get("Compiler") == "hooked":
            prim_func = lower_primitive(func, gv.name_hint)
            out.add(gv, dataclasses.replace(prim_func, attrs=prim_func.attrs.with_attr("target", "hooked")))
    return out


def test_lower_te_runs_relay_to_tir_hook_once_and_rewrites_calls_of_its_prim_funcs() -> None:
    runs: list[str] = []

    def hook(mod: IRModule) -> IRModule:
        runs.append("hooked")
        return replace_compiler_functions_by_prim_funcs(mod)

    seen: list[LoweredFunction] = []
    with TARGETS.scoped(TargetKind("hooked", relay_to_tir=hook)):
        mod = lower(HOOKED, process_fn=seen.append)
    assert runs == ["hooked"]
    outer = assert_call_lowered(mod.main.body, "hooked_mul", ["a"])
    assert [gv.name_hint for gv in metadata(outer)["all_prim_fn_vars"]] == ["hooked_mul"]
    assert metadata(outer)["relay_attrs"]["target"] == "hooked"
    assert_call_lowered(outer.args[1].fields[0], "hooked_add", ["a", "a"])  # type: ignore[attr-defined]  # a Tuple
    assert isinstance(mod["hooked_add"], PrimFunc)
    assert sorted((f.global_var.name_hint, f.kind, f.target) for f in seen) == [
        ("hooked_add", "prim_func", "hooked"),
        ("hooked_mul", "prim_func", "hooked"),
    ]


def test_lower_te_gives_a_hook_prim_func_of_dynamic_result_the_shape_function_of_its_source() -> None:
    def hook(mod: IRModule) -> IRModule:
        out = mod.copy()
        for gv, func in mod.functions():
            if func.attrs.get("Compiler") == "hooked":
                prim_func = lower_primitive(func, gv.name_hint)
                out.add(gv, dataclasses.replace(prim_func, extra={te_compiler.SHAPE_SOURCE: func}))
        return out

    dynamic = HOOKED.replace("(5, 7)", "(?, 7)")
    with TARGETS.scoped(TargetKind("hooked", relay_to_tir=hook)):
        mod = lower(dynamic)
    outer = assert_call_lowered(mod.main.body, "hooked_mul", ["a"])
    meta = metadata(outer)
    # Named as an external function's (no module prefix), called with the shapes of both args.
    assert meta["prim_shape_fn_var"].name_hint == "shape_func_multiply"
    assert meta["prim_shape_fn_states"] == (2, 2) and meta["prim_shape_fn_num_outputs"] == 1
    assert isinstance(mod["shape_func_multiply"], PrimFunc)
    # Without the source, a static result or not, a PrimFunc call carries no shape keys.
    with TARGETS.scoped(TargetKind("hooked", relay_to_tir=replace_compiler_functions_by_prim_funcs)):
        plain = lower(dynamic)
    assert "prim_shape_fn_var" not in metadata(plain.main.body)


def test_lower_te_leaves_existing_call_lowered_unchanged() -> None:
    once = lower("""
        def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(5, 7), float32] {
          %0 = fn (%x: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] { exp(%x) };
          %0(%a)
        }""")
    twice = LowerTE("test")(once)
    assert twice.main is once.main
    assert [gv.name_hint for gv, _ in twice.items()] == ["main", "test_fused_exp"]


def test_lower_te_leaves_calls_of_ordinary_functions_and_operators_unchanged() -> None:
    mod = lower("""
        def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
          %0 = @helper(%a);
          negative(%0)
        }
        def @helper(%x: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
          %0 = fn (%p: Tensor[(4,), float32], Primitive=1) -> Tensor[(4,), float32] { exp(%p) };
          %0(%x)
        }""")
    body = mod.main.body
    assert isinstance(body, Call) and body.op is Op.get("negative")
    helper_call = body.args[0]
    assert isinstance(helper_call, Call) and isinstance(helper_call.op, GlobalVar)
    assert helper_call.op.name_hint == "helper"
    helper = mod["helper"]
    assert isinstance(helper, Function)
    assert_call_lowered(helper.body, "test_fused_exp", ["x"])
    assert body.checked_type == TensorType((4,), "float32")


# -- metadata ----------------------------------------------------------------------------------


def test_lower_te_marks_calls_of_reshape_only_primitives(
    monkeypatch: pytest.MonkeyPatch, codegen_calls: list[Function]
) -> None:
    monkeypatch.setattr(te_compiler, "lower_primitive", fake_lowering)
    mod = lower("""
        def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(35), float32] {
          %0 = fn (%x: Tensor[(5, 7), float32], Primitive=1, relay.reshape_only=1) -> Tensor[(35), float32] {
            reshape(%x, newshape=[35])
          };
          %1 = %0(%a);
          %2 = fn (%y: Tensor[(35), float32], Primitive=1, relay.reshape_only=1, Compiler="test_pass_lower_te",
                   global_symbol="ext_reshape") -> Tensor[(35), float32] {
            reshape(%y, newshape=[35])
          };
          %2(%1)
        }""")
    outer = assert_call_lowered(mod.main.body, "ext_reshape", [])
    inner = assert_call_lowered(outer.args[1].fields[0], "test_fused_reshape", ["a"])  # type: ignore[attr-defined]  # a Tuple
    assert metadata(inner)["relay.reshape_only"] == 1
    assert list(metadata(inner)) == ["relay_attrs", "all_prim_fn_vars", "relay.reshape_only"]
    assert "relay.reshape_only" not in metadata(outer)


def test_lower_te_names_shape_function_of_dynamic_primitive_after_the_module(
    monkeypatch: pytest.MonkeyPatch, codegen_calls: list[Function]
) -> None:
    monkeypatch.setattr(te_compiler, "lower_primitive", fake_lowering)
    mod = lower("""
        def @main(%a: Tensor[(?, 7), float32], %b: Tensor[(7,), float32]) -> Tensor[(?, 7), float32] {
          %0 = fn (%x: Tensor[(?, 7), float32], %y: Tensor[(7,), float32], Primitive=1) -> Tensor[(?, 7), float32] {
            exp(add(%x, %y))
          };
          %1 = %0(%a, %b);
          %2 = fn (%z: Tensor[(?, 7), float32], Primitive=1, Compiler="test_pass_lower_te", global_symbol="ext_neg") -> Tensor[(?, 7), float32] {
            negative(%z)
          };
          %2(%1)
        }""")
    outer = assert_call_lowered(mod.main.body, "ext_neg", [])
    inner = assert_call_lowered(outer.args[1].fields[0], "test_fused_add_exp", ["a", "b"])  # type: ignore[attr-defined]  # a Tuple
    inner_meta = metadata(inner)
    assert inner_meta["prim_shape_fn_var"].name_hint == "test_shape_func_add_exp"
    assert list(inner_meta["prim_shape_fn_states"]) == [2, 2]
    assert list(inner_meta) == [
        "relay_attrs", "all_prim_fn_vars", "prim_shape_fn_var", "prim_shape_fn_states",
        "prim_shape_fn_num_inputs", "prim_shape_fn_num_outputs", "all_prim_shape_fn_vars",
    ]
    assert metadata(outer)["prim_shape_fn_var"].name_hint == "shape_func_negative"
    shape_func = mod["test_shape_func_add_exp"]
    assert isinstance(shape_func, PrimFunc) and shape_func.attrs["shape_func"] == 1


def test_lower_te_reports_every_function_once_to_process_fn(codegen_calls: list[Function]) -> None:
    seen: list[LoweredFunction] = []
    mod = lower("""
        def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(?, ?), float32] {
          %0 = fn (%x: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] { exp(%x) };
          %1 = %0(%a);
          %2 = %0(%1);
          %3 = fn (%y: Tensor[(5, 7), float32], Primitive=1, Compiler="test_pass_lower_te", global_symbol="ext") -> Tensor[(5, 7), float32] {
            negative(%y)
          };
          %4 = %3(%2);
          %5 = @my_dyn(%4, %4);
          @my_dyn(%4, %a)
        }
        def @my_dyn(%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Extern=1) -> Tensor[(?, ?), float32] {
          add(%x, %y)
        }""", process_fn=seen.append)
    summary = [(f.global_var.name_hint, f.kind, f.target, f.compiler, sorted(gv.name_hint for gv in f.prim_funcs))
               for f in seen]
    assert summary == [
        ("test_fused_exp", "prim_func", "c", None, ["test_fused_exp"]),
        ("ext", "extern", "test_pass_lower_te", "test_pass_lower_te", []),
        ("my_dyn", "extern", "c", None, []),
        ("shape_func_add", "shape_func", "c", None, ["shape_func_add"]),
    ]
    assert seen[0].relay_function is not None and seen[0].relay_function.attrs["Primitive"] == 1
    assert isinstance(mod["shape_func_add"], PrimFunc)


def test_lower_te_takes_host_target_from_config() -> None:
    mod = lower("""
        def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
          %0 = fn (%x: Tensor[(4,), float32], Primitive=1) -> Tensor[(4,), float32] { exp(%x) };
          %0(%a)
        }""", config={"host": "c_host"})
    prim_func = mod["test_fused_exp"]
    assert isinstance(prim_func, PrimFunc) and prim_func.attrs["target"] == "c_host"


def test_lower_te_uses_module_name_as_prefix_and_records_its_timing() -> None:
    timer = PassTimer()
    mod = parse(HEADER + """
        def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
          %0 = fn (%x: Tensor[(4,), float32], Primitive=1) -> Tensor[(4,), float32] { exp(%x) };
          %0(%a)
        }""")
    with PassContext(instruments=(timer,)).scope():
        out = LowerTE("tvmgen_default")(mod)
    assert_call_lowered(out.main.body, "tvmgen_default_fused_exp", ["a"])
    assert [name for name, _ in timer.records] == ["LowerTE"]


def test_lower_te_does_not_rewrite_inside_functions_owned_by_an_external_compiler() -> None:
    source = parse(HEADER + """
        def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
          @owned(%a)
        }
        def @owned(%x: Tensor[(4,), float32], Compiler="acme", global_symbol="owned") -> Tensor[(4,), float32] {
          %0 = fn (%p: Tensor[(4,), float32], Primitive=1) -> Tensor[(4,), float32] { exp(%p) };
          %0(%x)
        }""")
    mod = LowerTE("test")(source)
    assert mod["owned"] is source["owned"]
    body = mod.main.body
    assert isinstance(body, Call) and isinstance(body.op, GlobalVar) and body.op.name_hint == "owned"


def test_primitive_with_dynamic_shape_is_refused_at_the_op_that_makes_it() -> None:
    # A `?` batch alone would run the packed kernel per row; a `?` inside the rows cannot.
    text = """def @main(%x: Tensor[(3, ?, 8), float32], %w: Tensor[(2, 8, 4), float32]) {
  %0 = fn (%p0: Tensor[(3, ?, 8), float32], %p1: Tensor[(2, 8, 4), float32], Primitive=1) {
    nn.relu(nn.contrib_dense_pack(%p0, %p1, units=8, weight_layout="NC4n"))
  };
  %0(%x, %w)
}
"""
    with pytest.raises(UnsupportedError, match=r"nn.contrib_dense_pack: its kernel needs static shapes") as info:
        lower(text)
    assert (info.value.line, info.value.column) == (4, 13)
    assert info.value.source_line is not None and "contrib_dense_pack" in info.value.source_line


def test_primitive_with_dynamic_rows_lowers_with_its_shape_function() -> None:
    text = """def @main(%x: Tensor[(?, 8), float32], %w: Tensor[(4, 8), float32]) {
  %0 = fn (%p0: Tensor[(?, 8), float32], %p1: Tensor[(4, 8), float32], Primitive=1) {
    nn.relu(nn.dense(%p0, %p1, units=4))
  };
  %0(%x, %w)
}
"""
    mod = lower(text)
    call = mod["main"].body
    meta = metadata(call)
    assert list(meta["prim_shape_fn_states"]) == [2, 2]  # both shapes are read, the weight's for its units
    kernel = mod[call.args[0].name_hint]
    assert isinstance(kernel, PrimFunc) and [v.name for v in kernel.scalar_params] == ["p0_dim0"]
