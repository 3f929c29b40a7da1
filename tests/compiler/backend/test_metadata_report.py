from compiler.backend.metadata_report import FORMAT, ValueNames, build_report, call_entries, to_json
from compiler.backend.te_compiler import LowerTE
from compiler.ir.attrs import Attrs
from compiler.ir.expr import GlobalVar
from compiler.parser import parse
from compiler.passes.fuse_ops import FuseOps
from compiler.passes.label_ops import LabelOps

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32]) {
  %0 = nn.dense(%x, %w, units=None);
  %1 = nn.relu(%0);
  %2 = split(%1, indices_or_sections=[1], axis=1);
  (%2.0, exp(%2.1), add(%x, 1f))
}"""


def lowered():
    return LowerTE("tvmgen_default")(LabelOps()(FuseOps()(parse(MODEL))))


def test_to_json_turns_attrs_and_global_vars_into_plain_values():
    value = Attrs(relay_attrs=Attrs(Primitive=1), all_prim_fn_vars=(GlobalVar("f"),))
    assert to_json(value) == {"relay_attrs": {"Primitive": 1}, "all_prim_fn_vars": ["f"]}


def test_call_entries_list_calls_in_execution_order_with_readable_args():
    entries = call_entries(lowered())
    assert [e["kind"] for e in entries] == ["prim_func"] * len(entries)
    assert entries[0]["args"] == ["%x", "%w"]
    # later calls read earlier results by their call index
    assert any(arg.startswith("%0") for e in entries[1:] for arg in e["args"])
    for e in entries:
        assert e["target"] == "c"
        assert e["metadata"]["all_prim_fn_vars"] == [e["callee"]]


def test_value_names_name_params_calls_and_constants():
    mod = lowered()
    names = ValueNames(mod.main)
    assert names[mod.main.params[0]] == "%x"


def test_build_report_has_the_contract_keys():
    report = build_report(module_name="default", host="c", external=[], lowered=lowered(),
                          functions={"f": {"kind": "prim_func"}}, memory={"workspace_bytes": 0},
                          passes=[("InferType", 0.123456)])
    assert report["format"] == FORMAT
    assert set(report) >= {"module_name", "target", "calls", "functions", "memory", "passes"}
    assert report["target"] == {"host": "c", "external": []}
    assert report["passes"] == [{"name": "InferType", "ms": 0.123}]
