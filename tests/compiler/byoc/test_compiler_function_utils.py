import pytest

from compiler.byoc.compiler_function_utils import (
    MarkCompilerFunctionsAsExtern,
    OutlineCompilerFunctionsWithExistingGlobalSymbols,
)
from compiler.diagnostics import CompileError
from compiler.ir.structural import structural_equal
from compiler.parser import parse

HEADER = '#[version = "0.0.5"]\n'

# After relay.build-style inlining: both partitions are literals called in place in @main.
ACME_FN = """fn (%acme_0_i0: Tensor[(16, 8), float16], %acme_0_i1: Tensor[(12, 8), float16],
          %acme_0_i2: Tensor[(12), float16], Inline=1, Compiler="acme",
          global_symbol="tvmgen_default_acme_main_0", Primitive=1) {
    %10 = fn (%FunctionVar_0_0: Tensor[(16, 8), float16], %FunctionVar_0_1: Tensor[(12, 8), float16],
              %FunctionVar_0_2: Tensor[(12), float16], PartitionedFromPattern="nn.dense_add_",
              Composite="acme.dense_bias") {
      %11 = nn.dense(%FunctionVar_0_0, %FunctionVar_0_1, units=None);
      add(%11, %FunctionVar_0_2)
    };
    %10(%acme_0_i0, %acme_0_i1, %acme_0_i2)
  }"""

BLASX_FN = """fn (%blasx_3_i0: Tensor[(6, 4, 8), float16], %blasx_3_i1: Tensor[(6, 5, 8), float16],
          Inline=1, Compiler="blasx", global_symbol="tvmgen_default_blasx_main_3", Primitive=1) {
    %20 = fn (%FunctionVar_0_01: Tensor[(6, 4, 8), float16], %FunctionVar_0_11: Tensor[(6, 5, 8), float16],
              PartitionedFromPattern="nn.batch_matmul_", Composite="blasx.batch_matmul") {
      nn.batch_matmul(%FunctionVar_0_01, %FunctionVar_0_11, transpose_b=True)
    };
    %20(%blasx_3_i0, %blasx_3_i1)
  }"""

SIGNATURE = """def @main(%x: Tensor[(16, 8), float16], %w: Tensor[(12, 8), float16], %b: Tensor[(12), float16],
          %p: Tensor[(6, 4, 8), float16], %q: Tensor[(6, 5, 8), float16])"""

INLINED = HEADER + f"""
{SIGNATURE} {{
  %0 = {ACME_FN};
  %1 = %0(%x, %w, %b);
  %2 = {BLASX_FN};
  %3 = %2(%p, %q);
  (%1, %3)
}}
"""

ACME_OUTLINED = HEADER + f"""
{SIGNATURE} {{
  %1 = @tvmgen_default_acme_main_0(%x, %w, %b);
  %2 = {BLASX_FN};
  %3 = %2(%p, %q);
  (%1, %3)
}}
def @tvmgen_default_acme_main_0{ACME_FN[3:]}
"""

BOTH_OUTLINED = HEADER + f"""
{SIGNATURE} {{
  %1 = @tvmgen_default_acme_main_0(%x, %w, %b);
  %3 = @tvmgen_default_blasx_main_3(%p, %q);
  (%1, %3)
}}
def @tvmgen_default_acme_main_0{ACME_FN[3:]}
def @tvmgen_default_blasx_main_3{BLASX_FN[3:]}
"""


def test_outlining_with_a_filter_lifts_only_that_codegens_literals():
    after = OutlineCompilerFunctionsWithExistingGlobalSymbols("acme")(parse(INLINED))
    assert structural_equal(after, parse(ACME_OUTLINED)), after.astext()
    lifted = after["tvmgen_default_acme_main_0"]
    assert dict(lifted.attrs) == {
        "Inline": 1,
        "Compiler": "acme",
        "global_symbol": "tvmgen_default_acme_main_0",
        "Primitive": 1,
    }


def test_outlining_without_a_filter_lifts_every_compiler_literal():
    after = OutlineCompilerFunctionsWithExistingGlobalSymbols()(parse(INLINED))
    assert structural_equal(after, parse(BOTH_OUTLINED)), after.astext()


def test_let_bound_literal_is_outlined_and_its_let_dropped():
    before = HEADER + f"""
{SIGNATURE} {{
  let %f = {ACME_FN};
  let %r = %f(%x, %w, %b);
  %r
}}
"""
    expected = HEADER + f"""
{SIGNATURE} {{
  let %r = @tvmgen_default_acme_main_0(%x, %w, %b);
  %r
}}
def @tvmgen_default_acme_main_0{ACME_FN[3:]}
"""
    after = OutlineCompilerFunctionsWithExistingGlobalSymbols("acme")(parse(before))
    assert structural_equal(after, parse(expected)), after.astext()


def test_equal_literals_with_one_symbol_are_lifted_once():
    before = HEADER + f"""
{SIGNATURE} {{
  %0 = {ACME_FN};
  %1 = {ACME_FN};
  %2 = %0(%x, %w, %b);
  %3 = %1(%x, %w, %b);
  (%2, %3)
}}
"""
    expected = HEADER + f"""
{SIGNATURE} {{
  %2 = @tvmgen_default_acme_main_0(%x, %w, %b);
  %3 = @tvmgen_default_acme_main_0(%x, %w, %b);
  (%2, %3)
}}
def @tvmgen_default_acme_main_0{ACME_FN[3:]}
"""
    after = OutlineCompilerFunctionsWithExistingGlobalSymbols()(parse(before))
    assert structural_equal(after, parse(expected)), after.astext()


def test_literal_without_global_symbol_is_a_located_error():
    before = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = fn (%a: Tensor[(3), float32], Compiler="acme", Primitive=1) { nn.relu(%a) };
  %0(%x)
}
"""
    with pytest.raises(CompileError, match='Compiler="acme" has no global_symbol') as info:
        OutlineCompilerFunctionsWithExistingGlobalSymbols()(parse(before))
    assert (info.value.line, info.value.column) == (4, 8)


def test_one_symbol_for_two_different_functions_is_an_error():
    other = ACME_FN.replace("add(%11", "subtract(%11")
    before = HEADER + f"""
{SIGNATURE} {{
  %0 = {ACME_FN};
  %1 = {other};
  (%0(%x, %w, %b), %1(%x, %w, %b))
}}
"""
    with pytest.raises(CompileError, match="already names a different global definition"):
        OutlineCompilerFunctionsWithExistingGlobalSymbols()(parse(before))


def test_symbol_naming_an_ordinary_global_is_an_error():
    before = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = fn (%a: Tensor[(3), float32], Compiler="acme", global_symbol="helper") { nn.relu(%a) };
  @helper(%0(%x))
}
def @helper(%y: Tensor[(3), float32]) { exp(%y) }
"""
    with pytest.raises(CompileError, match='global_symbol "helper"'):
        OutlineCompilerFunctionsWithExistingGlobalSymbols()(parse(before))


def test_outlining_does_not_look_inside_primitive_or_compiler_functions():
    mod = parse(BOTH_OUTLINED)
    assert OutlineCompilerFunctionsWithExistingGlobalSymbols()(mod) is mod


def test_marking_replaces_all_attributes_by_extern_and_leaves_calls_alone():
    outlined = OutlineCompilerFunctionsWithExistingGlobalSymbols("acme")(parse(INLINED))
    after = MarkCompilerFunctionsAsExtern("acme")(outlined)
    extern = ACME_OUTLINED.replace(
        'Inline=1, Compiler="acme",\n          global_symbol="tvmgen_default_acme_main_0", Primitive=1', "Extern=1"
    )
    assert "Extern=1" in extern
    assert structural_equal(after, parse(extern)), after.astext()
    assert dict(after["tvmgen_default_acme_main_0"].attrs) == {"Extern": 1}
    assert after.main is outlined.main  # calls (and the inline blasx literal) are untouched


def test_marking_without_a_filter_marks_every_compiler_global_only():
    mod = parse(BOTH_OUTLINED + 'def @helper(%y: Tensor[(3), float32]) { exp(%y) }\n')
    after = MarkCompilerFunctionsAsExtern()(mod)
    assert dict(after["tvmgen_default_acme_main_0"].attrs) == {"Extern": 1}
    assert dict(after["tvmgen_default_blasx_main_3"].attrs) == {"Extern": 1}
    assert after["helper"] is mod["helper"]
    assert structural_equal(after["tvmgen_default_blasx_main_3"].body, mod["tvmgen_default_blasx_main_3"].body)


def test_marking_with_a_filter_leaves_other_codegens():
    mod = parse(BOTH_OUTLINED)
    after = MarkCompilerFunctionsAsExtern("blasx")(mod)
    assert after["tvmgen_default_acme_main_0"] is mod["tvmgen_default_acme_main_0"]
    assert dict(after["tvmgen_default_blasx_main_3"].attrs) == {"Extern": 1}
