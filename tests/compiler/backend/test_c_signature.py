from __future__ import annotations

import pytest

from compiler.backend.c_signature import CNames, check_func_name, prim_func_signature
from compiler.tir.expr import Buffer, Var
from compiler.tir.stmt import Allocate, PrimFunc, Seq


def test_names_are_sanitized_unique_and_never_reserved() -> None:
    names = CNames({"taken"})
    assert names.take("x") == "x"
    assert names.take("x") == "x_1"
    assert names.take("taken") == "taken_1"
    assert names.take("for") == "for_1"
    assert names.take("expf") == "expf_1"
    assert names.take("p.0") == "p_0"
    assert names.take("0x") == "v_0x"
    assert names.take("relaycc_tmp") == "v_relaycc_tmp"


def test_signature_orders_inputs_outputs_scalars_then_workspace() -> None:
    n = Var("n", "int64")
    x, y = Buffer("x", (n,), "int8"), Buffer("y", (n,), "float64")
    tmp = Buffer("workspace", (4,))
    func = PrimFunc("f", (x, y), Allocate(tmp, Seq(())), 1, scalar_params=(n,))
    assert prim_func_signature(func) == (
        "int32_t f(const int8_t* restrict x, double* restrict y, int64_t n, uint8_t* restrict workspace)")
    assert prim_func_signature(func, restrict=False, type_map={"float64": "uint64_t"}) == (
        "int32_t f(const int8_t* x, uint64_t* y, int64_t n, uint8_t* workspace)")


def test_function_without_parameters_takes_void() -> None:
    func = PrimFunc("g", (), Seq(()), 0)
    assert prim_func_signature(func) == "int32_t g(void)"


@pytest.mark.parametrize("name", ["1f", "a-b", "int", "relaycc_x", ""])
def test_function_names_must_be_usable_c_identifiers(name: str) -> None:
    with pytest.raises(ValueError, match="not a usable C identifier"):
        check_func_name(name)
