import pytest

from compiler.diagnostics import InputError
from compiler.driver import BuildOptions, Target, build, lower
from compiler.parser import parse

ADD = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) { add(%x, %x) }"""


def test_target_lists_externals_first_and_host_last():
    assert Target.parse(" c ") == Target("c")
    with pytest.raises(InputError, match="unknown host target 'llvm'"):
        Target.parse("llvm")
    with pytest.raises(InputError, match="empty target"):
        Target.parse(" , ")


def test_options_validate_module_name_opt_level_and_alignment():
    with pytest.raises(InputError, match="C identifier"):
        BuildOptions(module_name="my-model").validated()
    with pytest.raises(InputError, match="opt level"):
        BuildOptions(opt_level=7).validated()
    with pytest.raises(InputError, match="power of two"):
        BuildOptions(workspace_byte_alignment=12).validated()


def test_options_from_config_reads_known_keys_and_rejects_others():
    options = BuildOptions.from_config({"opt_level": 1, "pass_config": {"relay.FuseOps.max_depth": 2},
                                        "cflags": ["-O2"], "workspace_byte_alignment": 64}, module_name="m")
    assert (options.opt_level, options.cflags, options.workspace_byte_alignment) == (1, ("-O2",), 64)
    assert options.module_name == "m"
    with pytest.raises(InputError, match="cflags must be a list of strings"):
        BuildOptions.from_config({"cflags": "-O2"})


def test_lower_without_executor_stops_after_lower_te():
    model = lower(parse(ADD), executor=False)
    assert model.aot is None and model.report["memory"] == {}
    assert [c["callee"] for c in model.report["calls"]] == ["tvmgen_default_fused_add"]


def test_module_name_prefixes_every_symbol(tmp_path):
    model = build(ADD, tmp_path, BuildOptions(module_name="net"))
    assert model.report["calls"][0]["callee"] == "tvmgen_net_fused_add"
    assert (tmp_path / "libnet.so").is_file() and (tmp_path / "include" / "tvmgen_net.h").is_file()
    assert "tvmgen_net_run" in (tmp_path / "include" / "tvmgen_net.h").read_text()


def test_pass_timings_are_recorded_in_order():
    passes = [p["name"] for p in lower(parse(ADD), executor=False).report["passes"]]
    assert passes.index("FuseOps") < passes.index("LabelOps") < passes.index("LowerTE")
