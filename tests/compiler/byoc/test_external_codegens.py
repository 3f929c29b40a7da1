import dataclasses
from pathlib import Path

import pytest

from compiler.backend.targets import TARGETS
from compiler.backend.te_compiler import LowerTE
from compiler.byoc.codegen_config import CodegenSpec
from compiler.byoc.external_codegens import (
    ExternalCodegens,
    annotate_report,
    known_codegens,
    owned_prim_funcs,
    report_modules,
)
from compiler.diagnostics import InputError
from compiler.ir.expr import Call, Function
from compiler.ir.visitor import post_order
from compiler.parser import parse_file
from compiler.passes.infer_type import InferType
from compiler.tir.stmt import PrimFunc

TESTS = Path(__file__).resolve().parents[2]
TOY = TESTS / "codegens" / "toy_cg_thflow" / "toy_cg_thflow.json"
ACME_CONV = TESTS / "codegens" / "acme_conv" / "acme_conv.json"


def toy():
    return CodegenSpec.from_json_file(TOY)


def composites(func):
    return [n.attrs["Composite"] for n in post_order(func.body) if isinstance(n, Function) and "Composite" in n.attrs]


def test_resolve_orders_target_codegens_first_then_the_other_given_ones():
    acme = CodegenSpec.from_json_file(ACME_CONV)
    codegens = ExternalCodegens.resolve(("acme_conv",), (toy(), acme))
    assert codegens.names == ("acme_conv", "toy_cg_thflow")
    assert codegens.codegens[1].defined >= {"dense_bias", "dense_bias_relu"}


def test_a_builtin_codegens_shipped_sources_are_not_compiled_to_check_them():
    # cblas's source is ours (its spec test checks the symbols); only -lopenblas is looked for.
    codegens = ExternalCodegens.resolve(("cblas",), ())
    assert codegens.names == ("cblas",) and codegens.codegens[0].defined is None


def test_a_given_codegen_named_like_a_builtin_is_still_compiled_and_checked():
    spec = dataclasses.replace(toy(), name="cblas")
    codegens = ExternalCodegens.resolve(("cblas",), (spec,))
    assert codegens.codegens[0].defined >= {"dense_bias", "dense_bias_relu"}


def test_unknown_codegen_lists_the_known_ones():
    with pytest.raises(InputError, match=r"unknown external codegen 'npu'; known codegens: .*toy_cg_thflow"):
        ExternalCodegens.resolve(("npu",), (toy(),))
    assert {"cblas", "toy_cg_thflow"} <= set(known_codegens((toy(),)))


def test_a_codegen_given_twice_is_an_error():
    with pytest.raises(InputError, match="codegen toy_cg_thflow is given twice"):
        ExternalCodegens.resolve((), (toy(), toy()))


def test_target_kinds_follow_the_mode():
    codegens = ExternalCodegens.resolve((), (toy(), CodegenSpec.from_json_file(ACME_CONV)))
    relay_to_tir, function_at_a_time = codegens.target_kinds()
    assert relay_to_tir.relay_to_tir is not None and relay_to_tir.tir_to_runtime is not None
    assert relay_to_tir.codegen is None
    assert function_at_a_time.codegen is not None and function_at_a_time.relay_to_tir is None


def test_partition_takes_what_the_patterns_match_into_one_global_function():
    codegens = ExternalCodegens.resolve((), (toy(),))
    mod = codegens.partition(InferType()(parse_file(TESTS / "models" / "seed001_mlp.relay")), "default")
    func = mod["tvmgen_default_toy_cg_thflow_main_0"]
    assert func.attrs["Compiler"] == "toy_cg_thflow"
    assert sorted(composites(func)) == ["toy_cg_thflow.dense_bias", "toy_cg_thflow.dense_bias_relu"]
    assert isinstance(mod.main.body, Call) and mod.main.body.op.name_hint == "tvmgen_default_toy_cg_thflow_main_0"


def test_partition_runs_the_codegens_passes_on_its_functions_only():
    codegens = ExternalCodegens.resolve((), (CodegenSpec.from_json_file(ACME_CONV),))
    mod = codegens.partition(InferType()(parse_file(TESTS / "models" / "seed002_two_convs.relay")), "default")
    layouts = {
        gv.name_hint: [n.attrs["data_layout"] for n in post_order(f.body) if isinstance(n, Call) and n.op_name == "nn.conv2d"]
        for gv, f in mod.functions()
    }
    assert layouts == {"main": ["NCHW"], "tvmgen_default_acme_conv_main_0": ["NHWC"]}


def test_external_modules_and_report_of_a_lowered_module():
    codegens = ExternalCodegens.resolve((), (toy(),))
    mod = InferType()(parse_file(TESTS / "models" / "seed001_mlp_partitioned.relay"))
    with TARGETS.scoped(*codegens.target_kinds()):
        lowered = LowerTE("tvmgen_default")(codegens.partition(mod, "default"))
    [func] = owned_prim_funcs(lowered, "toy_cg_thflow")
    assert isinstance(func, PrimFunc)
    [module] = codegens.external_modules(lowered, 16)
    assert module.symbols == ("tvmgen_default_toy_cg_thflow_main_0",)
    assert report_modules([module], codegens) == [{
        "name": "toy_cg_thflow", "symbols": ["tvmgen_default_toy_cg_thflow_main_0"],
        "calls": ["dense_bias", "dense_bias_relu"],
        "sources": ["src/toy_cg_thflow_extern_calls.c", "src/toy_cg_thflow/toy_cg_thflow.c"]}]
    report = {
        "calls": [{"callee": "tvmgen_default_toy_cg_thflow_main_0", "kind": "prim_func", "target": "toy_cg_thflow"}],
        "functions": {"tvmgen_default_toy_cg_thflow_main_0": {"kind": "prim_func", "target": "c", "compiler": None}},
    }
    annotate_report(report, lowered, codegens)
    assert report["calls"][0] == {"callee": "tvmgen_default_toy_cg_thflow_main_0", "kind": "extern",
                                  "target": "toy_cg_thflow", "compiler": "toy_cg_thflow"}
    assert report["functions"]["tvmgen_default_toy_cg_thflow_main_0"] == {
        "kind": "extern", "target": "toy_cg_thflow", "compiler": "toy_cg_thflow"}


def test_no_codegens_change_nothing():
    codegens = ExternalCodegens.resolve((), ())
    mod = InferType()(parse_file(TESTS / "models" / "seed001_mlp.relay"))
    assert codegens.partition(mod, "default") is mod
    assert codegens.target_kinds() == []


def test_codegens_the_model_was_partitioned_for_must_be_known():
    codegens = ExternalCodegens.resolve((), (), partitioned_for=("cblas",))
    assert codegens.names == ("cblas",)
    with pytest.raises(InputError, match='the model has functions for Compiler="toy_cg_thflow", a codegen that is '
                                         "neither built in nor given with --codegen"):
        ExternalCodegens.resolve((), (), partitioned_for=("toy_cg_thflow",))
    assert ExternalCodegens.resolve((), (toy(),), partitioned_for=("toy_cg_thflow",)).names == ("toy_cg_thflow",)


def test_an_unknown_codegen_of_a_partitioned_function_is_reported_at_that_function():
    from compiler.backend.targets import compiler_spans
    from compiler.parser import parse

    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) -> Tensor[(2, 4), float32] {
  %0 = fn (%a: Tensor[(2, 3), float32], %b: Tensor[(4, 3), float32], Primitive=1, Compiler="acme") -> Tensor[(2, 4), float32] {
    nn.dense(%a, %b, units=None)
  };
  %0(%x, %w)
}""", "partitioned.relay")
    spans = compiler_spans(mod)
    with pytest.raises(InputError) as info:
        ExternalCodegens.resolve((), (), partitioned_for=("acme",), spans=spans)
    assert info.value.message.startswith('the model has functions for Compiler="acme", a codegen that is neither')
    assert (info.value.line, info.value.column) == (3, 8)
