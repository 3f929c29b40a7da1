import json

import pytest

from compiler.diagnostics import InputError
from pathlib import Path

import numpy as np

from compiler.byoc.codegen_config import CodegenSpec
from compiler.driver import BuildOptions, Target, build, build_vector_lanes, lower, planned_passes
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


@pytest.fixture
def small_kernel_files(monkeypatch):
    """Files a quarter of the usual size: the test CNN's kernel C is near the size from which a
    build splits it (24 KB), and how near depends on the machine's tiles (AVX-512's are
    shorter for its small maps)."""
    from compiler.backend import kernel_files

    monkeypatch.setattr(kernel_files, "TARGET_FILE_BYTES", 8 * 1024)
    monkeypatch.setattr(kernel_files, "MIN_FILE_BYTES", 2 * 1024)
    monkeypatch.setattr(kernel_files, "MAX_FILE_BYTES", 16 * 1024)
    monkeypatch.setattr(kernel_files, "SPLIT_FROM_BYTES", 6 * 1024)


@pytest.mark.usefixtures("small_kernel_files")
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


# Where the assembler fails on the pool's bytes, the pool's object comes from its C file, which
# the driver writes only after the kernels have started compiling.
@pytest.mark.parametrize("assembler", [True, False])
def test_a_large_constant_pool_has_its_own_file_and_the_library_reads_it(tmp_path, monkeypatch, assembler):
    import numpy as np

    from compiler.backend.constants import SEPARATE_POOL_BYTES
    from compiler.runtime.module import CompiledModule
    from tests.compiler.runtime.test_build import compiler_without_assembler

    if not assembler:
        monkeypatch.setenv("CC", compiler_without_assembler(tmp_path.parent))
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


@pytest.mark.usefixtures("small_kernel_files")
def test_kernels_emitted_by_forked_workers_are_the_files_a_serial_emission_gives(tmp_path, monkeypatch):
    import compiler.driver as driver

    # Two workers beside the build's own process, whatever this machine has.
    monkeypatch.setattr(driver, "available_cores", lambda: 3)
    earlier = set(_child_processes())
    model = build((_tests_dir() / "models" / "cnn.relay").read_text(), tmp_path, build_library=False, cache=None)
    written = {p.name: p.read_text() for p in (tmp_path / "src").glob("default_lib*.c")}
    serial = model.c_sources()
    assert len(serial) > 2 and written == serial
    assert not set(_child_processes()) - earlier


def _child_processes() -> list[str]:
    """This process's children still alive or unreaped (Linux's /proc). Tests compare with the
    children from before their build: a service test run earlier in this worker may leave its
    queue's processes to be reaped later."""
    tasks = Path("/proc/self/task")
    return [pid for task in tasks.iterdir() for pid in (task / "children").read_text().split()]


@pytest.mark.usefixtures("small_kernel_files")
def test_a_build_into_an_earlier_outdir_leaves_only_its_own_files(tmp_path):
    build((_tests_dir() / "models" / "cnn.relay").read_text(), tmp_path, build_library=False, cache=None)
    assert len(list((tmp_path / "src").glob("default_lib*.c"))) > 2
    (tmp_path / "src" / "default_constants.c").write_text("/* from an earlier build */\n")
    (tmp_path / "src" / "default_notes.c").write_text("/* not ours to remove */\n")
    build(ADD, tmp_path, cache=None)
    assert sorted(p.name for p in (tmp_path / "src").glob("*.c")) == [
        "default_lib0.c", "default_lib1.c", "default_notes.c"]


def test_a_build_that_fails_while_its_files_compile_leaves_no_library_or_report(tmp_path):
    # The archive cannot be written (a directory holds its name) while the kernels compile.
    (tmp_path / "default.tar" / "occupied").mkdir(parents=True)
    earlier = set(_child_processes())
    with pytest.raises(OSError):
        build((_tests_dir() / "models" / "cnn.relay").read_text(), tmp_path, cache=None)
    assert not (tmp_path / "libdefault.so").exists() and not (tmp_path / "metadata.json").exists()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert not set(_child_processes()) - earlier  # neither compilers nor the kernels' emission workers


def test_a_kernel_file_the_compiler_rejects_is_named_in_the_error(tmp_path):
    from compiler.runtime.build import BuildError

    # A macro the kernels' standard headers refuse: every file fails, the first in order is told.
    with pytest.raises(BuildError, match=r"C compiler failed on default_lib0\.c"):
        build(ADD, tmp_path, BuildOptions(cflags=("-O1", "-fPIC", "-Dint32_t=float[")), cache=None)
    assert not (tmp_path / "libdefault.so").exists()


MLP = (Path(__file__).resolve().parents[1] / "models" / "seed001_mlp.relay").read_text()
TOY = Path(__file__).resolve().parents[1] / "codegens" / "toy_cg_thflow" / "toy_cg_thflow.json"


@pytest.mark.parametrize(("options", "params"), [
    (BuildOptions(), False),
    (BuildOptions(opt_level=0), False),
    (BuildOptions(opt_level=1), True),
    (BuildOptions(desired_layout="NHWC", disabled_passes=("Float16ComputeInFloat32", "AlterOpLayout")), False),
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


CONV = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 10, 10), float32], %w: Tensor[(8, 3, 3, 3), float32], %b: Tensor[(8), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]);
  nn.relu(nn.bias_add(%0, %b))
}"""


def _conv_numpy(x, w, b):
    import numpy as np

    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 8, 10, 10), np.float64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, i:i + 10, j:j + 10], w[:, :, i, j])
    return np.maximum(out + b[None, :, None, None], 0)


def test_desired_layout_nhwc_computes_the_convolution_in_nhwc_with_the_same_result(tmp_path):
    import numpy as np

    from compiler.runtime.module import CompiledModule

    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((8, 3, 3, 3)).astype("float32"),
              "b": rng.standard_normal(8).astype("float32")}
    x = rng.standard_normal((1, 3, 10, 10)).astype("float32")
    results = {}
    for layout in ("NCHW", "NHWC"):
        model = build(CONV, tmp_path / layout, BuildOptions(desired_layout=layout), params)
        results[layout] = CompiledModule(tmp_path / layout).run({"x": x}).outputs[0]
        transforms = [c for c in model.report["calls"] if "layout_transform" in c["callee"]]
        assert bool(transforms) == (layout == "NHWC")
    np.testing.assert_allclose(results["NHWC"], results["NCHW"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results["NHWC"], _conv_numpy(x, params["w"], params["b"]), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "AMD64"), reason="x86 flags")
def test_a_portable_build_sizes_its_tiles_for_the_vectors_its_flags_give(tmp_path):
    # -march=x86-64 is SSE2: 4 float32 lanes, so weights packed 8 channels at a time (two
    # vectors), whatever this machine's own vectors are; and it runs here as anywhere.
    from compiler.runtime.build import DEFAULT_CFLAGS
    from compiler.runtime.module import CompiledModule

    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((8, 3, 3, 3)).astype("float32"),
              "b": rng.standard_normal(8).astype("float32")}
    x = rng.standard_normal((1, 3, 10, 10)).astype("float32")
    flags = tuple("-march=x86-64" if f == "-march=native" else f for f in DEFAULT_CFLAGS)
    model = build(CONV, tmp_path, BuildOptions(cflags=flags), params)
    (conv,) = [c for c in model.report["calls"] if "conv2d" in c["callee"]]
    assert conv["metadata"]["relay_attrs"]["kernel_layout"].endswith("8o")
    got = CompiledModule(tmp_path).run({"x": x}).outputs[0]
    np.testing.assert_allclose(got, _conv_numpy(x, params["w"], params["b"]), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "AMD64"), reason="x86 flags")
def test_build_vector_lanes_follow_the_flags_unless_the_config_names_them():
    from compiler.runtime.vector_width import native_vector_lanes

    assert build_vector_lanes(BuildOptions(cflags=("-O2", "-march=x86-64"))) == 4
    assert build_vector_lanes(BuildOptions(cflags=("-O2", "-march=x86-64-v3"))) == 8
    assert build_vector_lanes(BuildOptions(cflags=("-O2", "-march=x86-64"), config={"tir.vector_lanes": 16})) == 16
    assert build_vector_lanes(BuildOptions()) == native_vector_lanes()


def test_a_desired_layout_that_is_not_a_data_layout_is_refused():
    with pytest.raises(InputError, match="desired layout 'NCWH' is not one of NCHW, NHWC"):
        BuildOptions(desired_layout="NCWH").validated()


def test_input_shapes_fix_the_unknown_batch_so_the_build_is_static(tmp_path):
    import numpy as np

    from compiler.runtime.module import CompiledModule

    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 4), float32], %w: Tensor[(3, 4), float32]) { nn.relu(nn.dense(%x, %w, units=3)) }"""
    model = build(text, tmp_path, BuildOptions(input_shapes={"x": (2, 4)}))
    assert model.report["interface"]["dynamic"] is False
    x = np.arange(8, dtype="float32").reshape(2, 4) - 3
    w = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
    (got,) = CompiledModule(tmp_path).run({"x": x, "w": w}).outputs
    np.testing.assert_allclose(got, np.maximum(x @ w.T, 0), rtol=1e-6)


def test_disabled_passes_are_skipped_and_only_optional_ones_may_be_named():
    from compiler.parser import parse

    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) { add(%x, add(1f, 2f)) }"""
    folded = lower(parse(text), BuildOptions(), executor=False)
    kept = lower(parse(text), BuildOptions(disabled_passes=("FoldConstant",)), executor=False)
    assert "FoldConstant" in [p["name"] for p in folded.report["passes"]]
    assert "FoldConstant" not in [p["name"] for p in kept.report["passes"]]
    unfused = lower(parse(text), BuildOptions(disabled_passes=("FoldConstant", "FuseOps")), executor=False)
    assert len(unfused.report["calls"]) == 2 and len(kept.report["calls"]) == 1
    with pytest.raises(InputError, match="pass 'InferType' cannot be disabled"):
        BuildOptions(disabled_passes=("InferType",)).validated()
    with pytest.raises(InputError, match=r"unknown pass 'FoldConstnt' \(did you mean 'FoldConstant'\?\)"):
        BuildOptions(disabled_passes=("FoldConstnt",)).validated()


def test_pass_config_is_checked_against_the_registry_whatever_builds_the_options():
    with pytest.raises(InputError, match="unknown pass_config key 'relay.bogus.key'"):
        BuildOptions(config={"relay.bogus.key": 1}).validated()
    with pytest.raises(InputError, match="unknown pass_config key 'relay.bogus.key'"):
        BuildOptions.from_config({"pass_config": {"relay.bogus.key": 1}}).validated()
    assert BuildOptions(config={"tir.parallel": 0}).validated().config == {"tir.parallel": False}


def test_dump_code_writes_relay_tir_and_c_beside_the_artifacts(tmp_path):
    from compiler.driver import dump_code

    model = build(ADD, tmp_path, BuildOptions(module_name="m"))
    written = dump_code(model, tmp_path, ["relay", "tir", "c"])
    assert [p.name for p in written] == ["m.relay", "m.tir", "m.c"]
    assert "Primitive=1" in (tmp_path / "m.relay").read_text()
    assert "primfn tvmgen_m_fused_add" in (tmp_path / "m.tir").read_text()
    assert "// ---- m_lib0.c" in (tmp_path / "m.c").read_text()


DENSE = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(4, 8), float32]) { nn.relu(nn.dense(%x, %w, units=4)) }"""


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_cached_build_writes_the_files_of_a_fresh_one_and_says_so(tmp_path: Path):
    from compiler.runtime.compile_cache import CompileCache
    from compiler.runtime.module import CompiledModule

    cache = CompileCache(tmp_path / "cache")
    w = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    fresh = build(DENSE, tmp_path / "fresh", params={"w": w}, cache=cache, dump_kinds=("relay", "c"))
    again = build(DENSE, tmp_path / "again", params={"w": w}, cache=cache, dump_kinds=("relay", "c"))
    assert "build_cache" not in fresh.report and again.report["build_cache"]["hit"] is True
    first, second = _files(tmp_path / "fresh"), _files(tmp_path / "again")
    assert {"default.relay", "default.c", "libdefault.so", "default.tar"} <= set(first)
    report = json.loads(second.pop("metadata.json"))
    assert report.pop("build_cache")["key"] == again.report["build_cache"]["key"]
    assert report == json.loads(first.pop("metadata.json"))
    assert second == first
    # What a caller may still ask of the model is there, lowered again on demand.
    assert astext(again.lowered) == (tmp_path / "fresh" / "lowered.relay").read_text()
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    (out,) = CompiledModule(tmp_path / "again").run({"x": x}).outputs
    np.testing.assert_allclose(out, np.maximum(x @ w.T, 0), rtol=1e-5)


def test_a_changed_parameter_misses_the_build_cache(tmp_path: Path):
    from compiler.runtime.compile_cache import CompileCache

    cache = CompileCache(tmp_path / "cache")
    w = np.ones((4, 8), np.float32)
    build(DENSE, tmp_path / "a", params={"w": w}, cache=cache)
    changed = w.copy()
    changed[3, 7] = 2.0
    model = build(DENSE, tmp_path / "b", params={"w": changed}, cache=cache)
    assert "build_cache" not in model.report
    assert (tmp_path / "a" / "libdefault.so").read_bytes() != (tmp_path / "b" / "libdefault.so").read_bytes()


def test_without_a_cache_no_build_is_kept(tmp_path: Path):
    build(ADD, tmp_path / "out", cache=None)
    assert "build_cache" not in build(ADD, tmp_path / "out", cache=None).report


def test_the_build_key_changes_with_every_input_of_the_build(tmp_path: Path):
    from compiler.driver import build_key

    library = tmp_path / "lib"
    library.mkdir()
    (library / "acme.h").write_text("#define ACME_SCALE 2\n")
    (library / "acme.c").write_text('#include "acme.h"\nint acme_relu(void) { return ACME_SCALE; }\n')
    doc = {"name": "acme", "patterns": [{"name": "relu", "pattern": "nn.relu(*)", "symbol": "acme_relu"}],
           "library": {"sources": ["acme.c"]}}
    (library / "acme.json").write_text(json.dumps(doc))

    def codegen() -> CodegenSpec:
        return CodegenSpec.from_json_file(library / "acme.json")

    w = np.ones((4, 8), np.float32)
    base = dict(source=("relay", DENSE.encode()), options=BuildOptions(codegens=(codegen(),)),
                params={"w": w}, source_name="m.relay", executor=True, build_library=True, dump_kinds=())

    def key(**changes: object) -> str | None:
        return build_key(**{**base, **changes})

    original = key()
    assert original is not None and key() == original
    variants = {
        "text": key(source=("relay", DENSE.replace("nn.relu", "nn.relu").encode() + b" ")),
        "kind": key(source=("onnx", DENSE.encode())),
        "param value": key(params={"w": np.where(np.arange(32).reshape(4, 8) == 31, 2.0, w).astype(np.float32)}),
        "param dtype": key(params={"w": w.astype(np.float16)}),
        "param name": key(params={"v": w}),
        "no params": key(params=None),
        "target": key(options=BuildOptions(target="acme, c", codegens=(codegen(),))),
        "opt level": key(options=BuildOptions(opt_level=2, codegens=(codegen(),))),
        "pass config": key(options=BuildOptions(config={"relay.FuseOps.max_depth": 2}, codegens=(codegen(),))),
        "cflags": key(options=BuildOptions(cflags=("-O2",), codegens=(codegen(),))),
        "module name": key(options=BuildOptions(module_name="m", codegens=(codegen(),))),
        "alignment": key(options=BuildOptions(workspace_byte_alignment=64, codegens=(codegen(),))),
        "disabled pass": key(options=BuildOptions(disabled_passes=("FoldConstant",), codegens=(codegen(),))),
        "layout": key(options=BuildOptions(desired_layout="NHWC", codegens=(codegen(),))),
        "input shapes": key(options=BuildOptions(input_shapes={"x": (2, 8)}, codegens=(codegen(),))),
        "no codegen": key(options=BuildOptions()),
        "dumps": key(dump_kinds=("c",)),
        "lower only": key(executor=False, build_library=False),
        "source name": key(source_name="n.relay"),
    }
    (library / "acme.json").write_text(json.dumps({**doc, "passes": ["FoldConstant"]}))
    variants["codegen document"] = key(options=BuildOptions(codegens=(codegen(),)))
    (library / "acme.json").write_text(json.dumps(doc))
    (library / "acme.c").write_text('#include "acme.h"\nint acme_relu(void) { return -ACME_SCALE; }\n')
    variants["codegen library source"] = key(options=BuildOptions(codegens=(codegen(),)))
    (library / "acme.c").write_text('#include "acme.h"\nint acme_relu(void) { return ACME_SCALE; }\n')
    assert key(options=BuildOptions(codegens=(codegen(),))) == original
    (library / "acme.h").write_text("#define ACME_SCALE 3\n")
    variants["codegen header"] = key(options=BuildOptions(codegens=(codegen(),)))
    assert None not in variants.values()
    assert len({original, *variants.values()}) == len(variants) + 1


def test_the_build_key_follows_the_c_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from compiler.driver import build_key

    def key() -> str | None:
        return build_key(("relay", ADD.encode()), BuildOptions(), None, source_name="m", executor=True,
                         build_library=True, dump_kinds=())

    original = key()
    wrapper = tmp_path / "my-cc"
    wrapper.write_text('#!/bin/sh\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    assert key() != original
    monkeypatch.setenv("CC", "cc")
    monkeypatch.setenv("NM", str(wrapper))
    assert key() != original


def test_a_cached_byoc_build_brings_the_codegens_library_sources_and_header(tmp_path: Path):
    from compiler.runtime.compile_cache import CompileCache

    conv = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]))
}"""
    spec = CodegenSpec.from_json_file(_tests_dir() / "codegens" / "acme_npu" / "acme_npu.json")
    options = BuildOptions(target="acme_npu, c", codegens=(spec,))
    cache = CompileCache(tmp_path / "cache")
    build(conv, tmp_path / "fresh", options, cache=cache)
    again = build(conv, tmp_path / "again", options, cache=cache)
    assert again.report["build_cache"]["hit"] is True
    first, second = _files(tmp_path / "fresh"), _files(tmp_path / "again")
    assert "src/acme_npu/acme_npu.c" in first and "include/relaycc_dlpack.h" in first
    second.pop("metadata.json"), first.pop("metadata.json")
    assert second == first


def test_a_config_carries_tuning_records_as_schedules() -> None:
    document = {"format": "relaycc.tuning/1", "records": [{"key": "0123456789abcdef", "schedule": {"tile_rows": 4}}]}

    options = BuildOptions.from_config({"tuning_records": document})

    assert options.schedules == {"0123456789abcdef": {"tile_rows": 4}}


def test_bad_tuning_records_in_a_config_name_the_key() -> None:
    from compiler.config_registry import ConfigError

    with pytest.raises(ConfigError, match=r"config tuning_records: format must be 'relaycc.tuning/1'") as raised:
        BuildOptions.from_config({"tuning_records": {"format": "autotvm"}})
    assert raised.value.key == "tuning_records"
