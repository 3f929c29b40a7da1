import pytest

from compiler.ir.expr import Function, GlobalVar, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType


def identity() -> Function:
    x = Var("x", TensorType((1,), "float32"))
    return Function((x,), x)


def test_module_looks_up_functions_by_name_and_by_global_var():
    gv = GlobalVar("main")
    f = identity()
    mod = IRModule({gv: f})
    assert mod["main"] is f and mod[gv] is f
    assert mod.get_global_var("main") is gv
    assert "main" in mod and gv in mod


def test_module_refuses_a_second_global_var_with_the_same_name():
    mod = IRModule({GlobalVar("f"): identity()})
    with pytest.raises(ValueError, match="duplicate global @f"):
        mod.add(GlobalVar("f"), identity())


def test_module_iterates_in_name_order():
    mod = IRModule({GlobalVar("main"): identity(), GlobalVar("a_helper"): identity()})
    assert [gv.name_hint for gv in mod] == ["a_helper", "main"]


def test_fresh_global_appends_a_counter_when_the_name_is_taken():
    mod = IRModule({GlobalVar("f"): identity(), GlobalVar("f_1"): identity()})
    assert mod.fresh_global("f").name_hint == "f_2"
    assert mod.fresh_global("g").name_hint == "g"


def test_unknown_global_is_a_key_error_naming_it():
    with pytest.raises(KeyError, match="@nope"):
        IRModule()["nope"]


def test_a_module_without_main_is_a_located_error_naming_what_it_defines() -> None:
    from compiler.diagnostics import UnsupportedError
    from compiler.parser import parse

    mod = parse('#[version = "0.0.5"]\ndef @f(%x: Tensor[(2), float32]) { %x }\n', "nomain.relay")

    with pytest.raises(UnsupportedError) as info:
        mod.main  # noqa: B018  # the property is what raises
    assert info.value.one_line() == (
        "nomain.relay:2:1: error: the module has no @main (it defines @f); relaycc compiles, inspects and runs @main"
    )
