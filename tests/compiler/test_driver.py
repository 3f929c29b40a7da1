import pytest

from compiler.diagnostics import InputError
from pathlib import Path

import numpy as np

from compiler.byoc.codegen_config import CodegenSpec
from compiler.driver import BuildOptions, Target, build, lower, planned_passes
from compiler.ir.device import VirtualDevice
from compiler.parser import astext, parse
from compiler.parser.metadata import encode_metadata

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


def test_target_accepts_external_codegens_it_knows_and_lists_them_otherwise():
    assert Target.parse("acme, c", ["acme"]) == Target("c", ("acme",))
    assert str(Target.parse("acme,c", ["acme"])) == "acme, c"
    with pytest.raises(InputError, match=r"unknown external codegen 'npu' in target 'npu, c'; known codegens: acme"):
        Target.parse("npu, c", ["acme"])
    with pytest.raises(InputError, match="names an external codegen twice"):
        Target.parse("acme, acme, c", ["acme"])


def test_build_options_carry_codegen_specs():
    from compiler.byoc.codegen_config import CodegenSpec

    spec = CodegenSpec("acme")
    options = BuildOptions.from_config({}, target="acme, c", codegens=[spec])
    assert options.codegens == (spec,) and options.validated() is options
    with pytest.raises(InputError, match="unknown external codegen 'acme'"):
        BuildOptions(target="acme, c").validated()


def test_external_module_sources_are_separate_files_and_their_prim_funcs_leave_the_host_file():
    from pathlib import Path

    from compiler.byoc.codegen_config import CodegenSpec

    tests = Path(__file__).resolve().parents[1]
    spec = CodegenSpec.from_json_file(tests / "codegens" / "toy_cg_thflow" / "toy_cg_thflow.json")
    model = lower(parse((tests / "models" / "seed001_mlp.relay").read_text()),
                  BuildOptions(target="toy_cg_thflow, c", codegens=(spec,)))
    sources = model.c_sources()
    assert list(sources) == ["default_lib0.c", "default_lib1.c", "toy_cg_thflow_extern_calls.c"]
    assert "tvmgen_default_toy_cg_thflow_main_0(" not in sources["default_lib1.c"]
    assert "int32_t tvmgen_default_toy_cg_thflow_main_0(" in sources["toy_cg_thflow_extern_calls.c"]
    assert model.report["target"]["external"] == ["toy_cg_thflow"]


def test_device_placement_is_stripped_before_lowering():
    text = """#[version = "0.0.5"]
def @main(%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(2), float32]) {
  %0 = on_device(%x, virtual_device=meta[VirtualDevice][0]);
  device_copy(add(%0, %0), src_virtual_device=meta[VirtualDevice][0], dst_virtual_device=meta[VirtualDevice][1])
}
#[metadata]
""" + encode_metadata([], [VirtualDevice(1, 0), VirtualDevice(2, 0)])
    model = lower(parse(text), executor=False)
    lowered = astext(model.lowered)
    assert "on_device" not in lowered and "device_copy" not in lowered and "VirtualDevice" not in lowered
    assert [p["name"] for p in model.report["passes"]][:1] == ["StripDevices"]


# --- the C files of a build ---------------------------------------------------------------------

def _tests_dir():
    from pathlib import Path

    return Path(__file__).resolve().parents[1]


def _archive_sources(path):
    import tarfile

    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.name.startswith("./codegen/host/src/")}


def test_kernels_in_several_files_all_build_and_the_archive_lists_every_file(tmp_path):
    import numpy as np

    from compiler.runtime.interpreter import run_main
    from compiler.runtime.module import CompiledModule

    text = (_tests_dir() / "models" / "cnn.relay").read_text()
    model = build(text, tmp_path, cache=None)
    names = sorted(p.name for p in (tmp_path / "src").glob("*.c"))
    kernel_files = [n for n in names if n != "default_lib0.c"]
    assert len(kernel_files) >= 2 and kernel_files == [f"default_lib{k}.c" for k in range(1, len(kernel_files) + 1)]
    archived = _archive_sources(tmp_path / "default.tar")
    assert sorted(archived.values()) == sorted((tmp_path / "src" / n).read_bytes() for n in names)
    rng = np.random.default_rng(0)
    main = parse(text)["main"]
    inputs = {p.name_hint: rng.uniform(0.5, 1.5, tuple(int(d) for d in p.type_annotation.shape)).astype("float32")
              for p in main.params}
    got = CompiledModule(tmp_path).run(inputs).outputs
    np.testing.assert_allclose(got[0], run_main(parse(text), inputs)[0], rtol=1e-4, atol=1e-6)
    assert model.report["calls"]


def test_a_large_constant_pool_has_its_own_file_and_the_library_reads_it(tmp_path):
    import numpy as np

    from compiler.backend.constants import SEPARATE_POOL_BYTES
    from compiler.runtime.module import CompiledModule

    rng = np.random.default_rng(1)
    weight = rng.standard_normal((600, 512)).astype("float32")
    assert weight.nbytes >= SEPARATE_POOL_BYTES
    text = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 512), float32]) {\n'
            "  nn.dense(%x, meta[relay.Constant][0], units=600)\n}\n"
            "#[metadata]\n" + encode_metadata([weight], []) + "\n")
    build(text, tmp_path, cache=None)
    lib0 = (tmp_path / "src" / "default_lib0.c").read_text()
    assert "extern const uint8_t tvmgen_default_constant_pool[" in lib0 and len(lib0) < 10_000
    pool_file = tmp_path / "src" / "default_constants.c"
    assert pool_file.stat().st_size > 4 * weight.nbytes
    assert pool_file.read_bytes() in _archive_sources(tmp_path / "default.tar").values()
    x = rng.standard_normal((2, 512)).astype("float32")
    got = CompiledModule(tmp_path).run({"x": x}).outputs[0]
    np.testing.assert_allclose(got, x @ weight.T, rtol=1e-4, atol=1e-4)


def test_a_build_into_an_earlier_outdir_leaves_only_its_own_files(tmp_path):
    build((_tests_dir() / "models" / "cnn.relay").read_text(), tmp_path, build_library=False, cache=None)
    assert len(list((tmp_path / "src").glob("default_lib*.c"))) > 2
    (tmp_path / "src" / "default_constants.c").write_text("/* from an earlier build */\n")
    (tmp_path / "src" / "default_notes.c").write_text("/* not ours to remove */\n")
    build(ADD, tmp_path, cache=None)
    assert sorted(p.name for p in (tmp_path / "src").glob("*.c")) == [
        "default_lib0.c", "default_lib1.c", "default_notes.c"]


MLP = (Path(__file__).resolve().parents[1] / "models" / "seed001_mlp.relay").read_text()
TOY = Path(__file__).resolve().parents[1] / "codegens" / "toy_cg_thflow" / "toy_cg_thflow.json"


@pytest.mark.parametrize(("options", "params"), [
    (BuildOptions(), False),
    (BuildOptions(opt_level=0), False),
    (BuildOptions(opt_level=1), True),
])
def test_planned_passes_are_the_passes_a_host_build_runs(options, params):
    bound = {"w1": np.ones((32, 64), "float32")} if params else {}

    model = lower(parse(MLP), options, bound)

    assert planned_passes(options, params=params) == [p["name"] for p in model.report["passes"]]


@pytest.mark.parametrize("target", ["toy_cg_thflow, c", "cblas, c"])
def test_planned_passes_of_a_byoc_build_are_its_passes_in_order_less_those_run_inside_others(target):
    options = BuildOptions(target=target, codegens=(CodegenSpec.from_json_file(TOY),))
    ran = [p["name"] for p in lower(parse(MLP), options).report["passes"]]
    plan = planned_passes(options)

    assert "PartitionGraph" in plan and plan[-1] == ran[-1] == "LowerTE"
    rest = iter(ran)
    assert all(name in rest for name in plan)  # in order, as a subsequence
    # What the plan leaves out runs inside LowerTE (the codegen's hook outlines its functions).
    assert len(ran) - len(plan) == 1
