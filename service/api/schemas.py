"""Bodies of the service's requests and responses (pydantic v2), with the examples the OpenAPI
document shows."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationInfo, field_validator, model_validator

from compiler import __version__
from service.problems import PROBLEM_BASE

MODULE_ID_EXAMPLE = "3f0c9a4e0d8b5c1f2a7e6d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a"

EXAMPLE_RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(2, 4), float32]) -> Tensor[(1, 2), float32] {
  nn.relu(nn.dense(%x, %w, units=None))
}
"""

JobState = Literal["queued", "running", "succeeded", "failed"]


class HealthStatus(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"status": "ok", "version": __version__}]}
    )

    status: Literal["ok"]
    version: str


class ReadyStatus(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{
            "status": "ready", "store": True, "queue": True, "sandbox": True, "user_c_allowed": False,
            "detail": "user C: this service has no API keys, and an open service compiles no client's C",
        }]}
    )

    status: Literal["ready", "not ready"]
    store: bool = Field(description="The module store is writable.")
    queue: bool = Field(description="Jobs submitted now will be executed.")
    reason: str | None = Field(
        default=None, description="When not ready: why (e.g. the module store is read-only or full)."
    )
    sandbox: bool = Field(default=False, description="Builds and runs happen in the bubblewrap sandbox.")
    user_c_allowed: bool = Field(default=False, description="Codegen documents may bring C sources.")
    detail: str = Field(default="", description="What an operator should know: why there is no "
                        "sandbox, why user C is refused.")


class Problem(BaseModel):
    """An error (RFC 9457 problem details). Parse and type errors add `line`, `column` and
    `source_line`; validation errors add `errors`."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [{
                "type": f"{PROBLEM_BASE}parse-error",
                "title": "Relay text does not parse",
                "status": 400,
                "detail": "expected ')' but found '{'",
                "line": 2,
                "column": 56,
                "source_line": "def @main(%x: Tensor[(1, 4), float32] -> Tensor[(1, 4), float32] {",
            }]
        },
    )

    type: str = Field(description="A URI that identifies the kind of problem; stable.")
    title: str = Field(description="A short summary of the kind of problem.")
    status: int = Field(description="The HTTP status code (advisory for a failed job's error).")
    detail: str | None = Field(default=None, description="What went wrong this time.")
    instance: str | None = None
    line: int | None = Field(default=None, description="1-based line in the Relay text.")
    column: int | None = Field(default=None, description="1-based column in the Relay text.")
    source_line: str | None = Field(default=None, description="The Relay text line the error is on.")
    errors: list[dict[str, JsonValue]] | None = Field(default=None, description="Validation errors, one per field.")


# --- POST /compile ----------------------------------------------------------------------------


class TvmcTarget(BaseModel):
    model_config = ConfigDict(extra="allow")

    kind: str = Field(description="A host target (`c`) or an external codegen name.")


class TvmcExecutor(BaseModel):
    model_config = ConfigDict(extra="allow")

    kind: str = "aot"


class TvmcRuntime(BaseModel):
    model_config = ConfigDict(extra="allow")

    kind: str = "crt"


class TargetConfig(BaseModel):
    """A tvmc-style `--config` object: targets (external codegens first, the host last),
    executor and pass config."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [{
                "targets": [{"kind": "c"}],
                "executor": {"kind": "aot", "workspace-byte-alignment": 16},
                "pass-config": {},
            }]
        },
    )

    targets: list[TvmcTarget] = Field(min_length=1)
    executor: TvmcExecutor | None = None
    runtime: TvmcRuntime | None = None
    pass_config: dict[str, JsonValue] = Field(default_factory=dict, alias="pass-config")


class CompileConfig(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"opt_level": 3, "cflags": ["-O2", "-march=native"]}]},
    )

    opt_level: int | None = Field(default=None, description="0 to 4; default 3.")
    pass_config: dict[str, JsonValue] | None = Field(
        default=None,
        description="PassContext config entries: only the keys `GET /targets` lists under `config.pass_config`, "
        "with values of their types; any other key is a 400 problem naming it (member `key`).",
    )
    cflags: list[str] | None = Field(
        default=None,
        description="C flags replacing the defaults; only flags from the allow-list (GET /targets) "
        "and -DNAME[=VALUE].",
    )
    workspace_byte_alignment: int | None = Field(default=None, description="A power of two; default 16.")
    disabled_pass: list[str] | None = Field(
        default=None, description="Passes skipped by name (tvmc's --disabled-pass); `GET /targets` lists which."
    )
    desired_layout: Literal["NCHW", "NHWC"] | None = Field(
        default=None, description="The data layout of the host's nn.conv2d (tvmc's --desired-layout)."
    )
    tuning_records: dict[str, JsonValue] | None = Field(
        default=None,
        description="A records document of `relaycc tune` (format relaycc.tuning/1; tvmc's --tuning-records): "
        "kernel schedules by kernel key. Kernels it does not name keep their rules; a bad document is a 400 "
        "problem with member `key` \"tuning_records\".",
    )


class CodegenRequest(BaseModel):
    """An external codegen: its JSON document (DESIGN.md) and the C sources it names, inline."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{
                "document": {
                    "name": "acme_npu",
                    "mode": "relay_to_tir",
                    "patterns": [{"name": "dense_relu", "pattern": "nn.relu(nn.dense(*, *))", "symbol": "dense_relu"}],
                    "calling_convention": "dltensor",
                    "library": {"sources": ["acme.c"]},
                },
                "sources": {"acme.c": "int dense_relu(void) { return 0; }\n"},
            }]
        },
    )

    document: dict[str, JsonValue] = Field(
        description="The codegen document (name, mode, patterns, passes, calling_convention, library). "
        "`library.include_dirs` and `library.library_dirs` name server paths and are refused."
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="File name (as listed under library.sources) → C text."
    )


class CompileRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"relay": EXAMPLE_RELAY, "target": "c", "module_name": "default"}]
        },
    )

    onnx: str | None = Field(
        default=None,
        description="Instead of `relay`: base64 of an ONNX model (opset 13 or later), imported as "
        "`relaycc import` does; the report's `interface.inputs[*].onnx_name` keeps its input names, "
        "and runs take inputs by either name.",
    )
    relay: str | None = Field(
        default=None, validate_default=True, description="The model in Relay text (`#[version = \"0.0.5\"]`)."
    )
    target: str | TargetConfig = Field(
        default="c",
        description="A target string (external codegens first, the host last: `\"acme_npu, c\"`) "
        "or a tvmc-style config object.",
    )
    module_name: str = Field(
        default="default", max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Names the C symbols (`tvmgen_<name>_run`) and the library (`lib<name>.so`).",
    )
    params: str | None = Field(
        default=None,
        description="Base64 of an .npz archive: arrays bound to @main's parameters of the same "
        "name as constants at compile time.",
    )
    codegens: list[CodegenRequest] = Field(default_factory=list, description="External codegen documents.")
    config: CompileConfig = Field(default_factory=CompileConfig)
    record_passes: bool = Field(
        default=False,
        description="Also store the module as Relay text after every pass as the artifact `passes.json`: "
        "a list of `{\"pass\": name, \"changed\": bool, \"text\": Relay text, or null when the pass "
        "left the text as it was}` in the order the passes ran. A different module id than without it.",
    )

    @field_validator("relay")
    @classmethod
    def _one_model(cls, relay: str | None, info: ValidationInfo) -> str | None:
        # On `relay` (validated after `onnx`), so a request without a model is located at
        # body.relay, as it was before `onnx` existed.
        if (relay is None) == (info.data.get("onnx") is None):
            raise ValueError("give the model as `relay` (Relay text) or as `onnx` (base64), exactly one")
        return relay


class ModuleLinks(BaseModel):
    self: str
    metadata: str
    artifacts: str
    run: str


class Timings(BaseModel):
    queued_seconds: float | None = Field(default=None, description="From queueing to the start of the latest attempt.")
    compile_seconds: float | None = Field(default=None, description="The compiler's own time.")
    total_seconds: float | None = Field(default=None, description="The whole job, artifacts stored.")


class Progress(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"stage": "building C", "done": 2, "total": 3}]}
    )

    stage: str = Field(description="`starting`, `compiling` (the passes), `building C` (the C compiler) or "
                       "`storing artifacts`.")
    done: int | None = Field(default=None, description="Steps of this stage finished: passes of the plan while "
                             "`compiling`, C files while `building C`.")
    total: int | None = Field(default=None, description="Steps of this stage in all; `done` reaches it.")
    last_pass: str | None = Field(default=None, description="While compiling: the pass that finished last.")
    passes_done: int | None = Field(default=None, description="While compiling: how many passes have finished "
                                    "(passes run inside others included, so it may pass `total`).")


class ModuleStatus(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{
                "id": MODULE_ID_EXAMPLE,
                "state": "succeeded",
                "module_name": "default",
                "target": "c",
                "compiler_version": __version__,
                "created_at": "2024-05-01T12:00:00Z",
                "started_at": "2024-05-01T12:00:00.050000Z",
                "finished_at": "2024-05-01T12:00:01.800000Z",
                "attempts": 1,
                "progress": None,
                "timings": {"queued_seconds": 0.05, "compile_seconds": 1.6, "total_seconds": 1.7},
                "error": None,
                "links": {
                    "self": f"/modules/{MODULE_ID_EXAMPLE}",
                    "metadata": f"/modules/{MODULE_ID_EXAMPLE}/metadata",
                    "artifacts": f"/modules/{MODULE_ID_EXAMPLE}/artifacts",
                    "run": f"/modules/{MODULE_ID_EXAMPLE}/run",
                },
            }]
        }
    )

    id: str = Field(description="sha256 of the normalized request and the compiler version.")
    state: JobState
    module_name: str
    target: str
    compiler_version: str
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = Field(description="Compile attempts started so far.")
    progress: Progress | None = Field(default=None, description="While running: the current stage.")
    timings: Timings
    error: Problem | None = Field(default=None, description="Why the job failed, when it did.")
    links: ModuleLinks


class ModuleList(BaseModel):
    """A page of `GET /modules`."""

    modules: list[ModuleStatus] = Field(description="Newest first.")
    next_cursor: str | None = Field(default=None, description="Pass as `cursor` for the next page; null on the last.")
    next: str | None = Field(default=None, description="The next page's URL (same filter and limit); null on the last.")


class ArtifactDiff(BaseModel):
    changed: bool = Field(description="Whether the two modules differ in this artifact.")
    diff: str = Field(description="A unified diff (empty when unchanged); `a/` is the first module, `b/` the second.")
    truncated: bool = Field(default=False, description="The diff was cut at the service's size limit.")


class ModuleDiff(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{
                "a": MODULE_ID_EXAMPLE, "b": MODULE_ID_EXAMPLE.replace("3f0c", "77aa"),
                "diffs": {
                    "lowered": {"changed": False, "diff": "", "truncated": False},
                    "c": {"changed": True, "truncated": False, "diff": "--- a/src/default_lib1.c\n"
                          "+++ b/src/default_lib1.c\n@@ -3 +3 @@\n-  float x = 1.0f;\n+  float x = 2.0f;\n"},
                    "report": {"changed": False, "diff": "", "truncated": False},
                },
            }]
        }
    )

    a: str
    b: str
    diffs: dict[Literal["lowered", "c", "report"], ArtifactDiff] = Field(
        description="`lowered`: lowered.relay; `c`: every file under src/ (generated C and codegen "
        "libraries), file by file; `report`: metadata.json with keys sorted and pass timings left out."
    )


class ArtifactInfo(BaseModel):
    name: str = Field(description="Path inside the OUTDIR, e.g. `libdefault.so` or `src/default_lib1.c`.")
    bytes: int
    sha256: str = Field(description="Also the artifact's ETag.")
    content_type: str
    href: str


class ArtifactList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{
                "module_id": MODULE_ID_EXAMPLE,
                "artifacts": [{
                    "name": "libdefault.so",
                    "bytes": 20256,
                    "sha256": "9b74c9897bac770ffc029102a200c5de0f0e3d3b0c5f1a1e0b8e5e0c0f6d1a2b",
                    "content_type": "application/octet-stream",
                    "href": f"/modules/{MODULE_ID_EXAMPLE}/artifacts/libdefault.so",
                }],
            }]
        }
    )

    module_id: str
    artifacts: list[ArtifactInfo]


class MetadataReport(BaseModel):
    """The call_lowered metadata report (DESIGN.md); shown here by its main members."""

    model_config = ConfigDict(extra="allow")

    format: str = Field(description="`relaycc.metadata/1`.")
    module_name: str
    target: dict[str, JsonValue]
    calls: list[dict[str, JsonValue]]
    functions: dict[str, JsonValue]
    memory: dict[str, JsonValue]
    passes: list[dict[str, JsonValue]]


# --- GET /modules/{id}/inspect -------------------------------------------------------------


class InspectedTensor(BaseModel):
    name: str = Field(description="A parameter name (without `%`), or `out0`, `out1`, ...")
    shape: list[int | Literal["?"]] | None = Field(default=None, description="Dims; `?` for a dynamic one.")
    dtype: str | None = None
    type: str | None = Field(default=None, description="The Relay type, for a value that is not a tensor.")


class InspectedFunction(BaseModel):
    name: str = Field(description="The global's name, without `@`.")
    params: int | None = None
    attrs: dict[str, str] | None = Field(default=None, description="The function's attributes, as text.")
    kind: str | None = Field(default=None, description="For a definition that is not a Relay function.")


class ModuleInspection(BaseModel):
    """What `relaycc inspect --json` prints for the module's Relay text."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{
                "inputs": [{"name": "x", "shape": [1, 4], "dtype": "float32"},
                           {"name": "w", "shape": [2, 4], "dtype": "float32"}],
                "outputs": [{"name": "out0", "shape": [1, 2], "dtype": "float32"}],
                "operators": {"nn.dense": 1, "nn.relu": 1},
                "functions": [{"name": "main", "params": 2, "attrs": {}}],
                "compiles_to_c": True,
                "interpreter_only_because": None,
            }]
        }
    )

    inputs: list[InspectedTensor]
    outputs: list[InspectedTensor]
    operators: dict[str, int] = Field(description="Operator name to number of calls, over every function.")
    functions: list[InspectedFunction]
    compiles_to_c: bool = Field(description="Whether the pipeline gets through the AOT executor codegen.")
    interpreter_only_because: str | None = Field(
        description="The located error that stops compilation (the model then runs in the interpreter only)."
    )


# --- POST /modules/{id}/run -----------------------------------------------------------------


class RunRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"inputs": {"x": [[1.0, 2.0, 3.0, 4.0]], "w": [[0.5, 0.5, 0.5, 0.5], [-1, 0, 1, 0]]}}]
        },
    )

    inputs: dict[str, JsonValue] | None = Field(
        default=None,
        description="Inputs as JSON nested lists, keyed by @main's parameter names (without `%`); "
        "the dtype is the model's. Non-finite floats may be given as \"NaN\", \"Infinity\", \"-Infinity\".",
    )
    inputs_npz: str | None = Field(default=None, description="Inputs as base64 of an .npz archive instead.")
    repeat: int = Field(default=1, ge=1, description="Run this many times; latency is the median.")
    threads: int | None = Field(
        default=None, ge=1,
        description="Threads for the model's kernels and BLAS calls (at most RELAYCC_MAX_RUN_THREADS); "
        "by default as many as the worker has cores.",
    )
    output_format: Literal["json", "npz"] | None = Field(
        default=None, description="How outputs come back; by default the way the inputs came."
    )
    profile: bool = Field(
        default=False,
        description="Also time every kernel call of the executor (after one run that is not timed), as "
        "`relaycc run --profile` does; the answer's `profile` lists them. Models with control flow have no "
        "kernel timing: a 400 problem says so.",
    )

    @model_validator(mode="after")
    def _one_way_of_giving_inputs(self) -> RunRequest:
        if self.inputs is not None and self.inputs_npz is not None:
            raise ValueError("give `inputs` or `inputs_npz`, not both")
        return self


class OutputTensor(BaseModel):
    dtype: str
    shape: list[int]
    data: JsonValue = Field(description="Nested lists; non-finite floats as \"NaN\", \"Infinity\", \"-Infinity\".")


class Latency(BaseModel):
    median_us: float
    min_us: float
    runs: int


class KernelTime(BaseModel):
    kernel: str = Field(description="The kernel (PrimFunc or external function) the executor calls.")
    calls: int = Field(description="How many times one run calls it.")
    us: float = Field(description="Its time per run in microseconds (mean over the timed runs), calls summed.")
    percent: float = Field(description="Its share of the whole run.")
    shape: list[int | str] | None = Field(default=None, description="The shape of its result (`?` for a dimension "
                                          "known at run time), when the report has it.")
    gflops: float | None = Field(default=None, description="GFLOP/s of its products (2 operations per "
                                 "multiply-add of a convolution, dense or matmul); null for a kernel without one.")


class RunResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{
                "outputs": {"out0": {"dtype": "float32", "shape": [1, 2], "data": [[5.0, 2.0]]}},
                "outputs_npz": None,
                "latency": {"median_us": 1.8, "min_us": 1.8, "runs": 1},
            }]
        }
    )

    outputs: dict[str, OutputTensor] | None = Field(
        default=None, description="out0, out1, ... in the order of @main's result (JSON format)."
    )
    outputs_npz: str | None = Field(default=None, description="Base64 .npz with out0, out1, ... (npz format).")
    latency: Latency
    profile: list[KernelTime] | None = Field(
        default=None, description="With `profile`: one entry per kernel, slowest first."
    )


# --- GET /targets -----------------------------------------------------------------------------


class PatternInfo(BaseModel):
    name: str
    pattern: str = Field(description="In the pattern language of DESIGN.md, e.g. `nn.relu(nn.dense(*, *))`.")
    symbol: str = Field(description="The C function a match calls.")
    attrs: list[str] = Field(default_factory=list, description="Op attributes passed to the symbol.")


class CodegenInfo(BaseModel):
    name: str
    mode: Literal["relay_to_tir", "function_at_a_time"] = Field(
        description="IRModule at a time (each composite an external call) or function at a time."
    )
    patterns: list[PatternInfo]


class OperatorAttrInfo(BaseModel):
    name: str
    kind: str = Field(description="int, float, bool, str, dtype, ints, int_or_ints, nested_ints or any.")
    required: bool
    default: Any = Field(default=None, description="TVM's default, when the attribute has one.")


class OperatorInfo(BaseModel):
    name: str
    family: str = Field(description="The op family module under compiler/ops/.")
    inputs: int | None = Field(description="Positional arguments; null for a variable number.")
    pattern: str = Field(description="FuseOps pattern kind, e.g. ELEMWISE or OUT_ELEMWISE_FUSABLE.")
    compiled: Literal["loops", "decomposed", "interpreter"] = Field(
        description="loops: compiled to its own loop nest; decomposed: rewritten into other ops first; "
        "interpreter: runs only in the reference interpreter."
    )
    attrs: list[OperatorAttrInfo]


class TargetsInfo(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{
                "hosts": ["c"],
                "executors": ["aot"],
                "codegens": [],
                "codegen_documents": True,
                "user_c_allowed": True,
                "allowed_cflags": ["-O2", "-O3", "-march=native"],
            }]
        }
    )

    hosts: list[str] = Field(description="Host targets: the last entry of a target string.")
    executors: list[str]
    codegens: list[CodegenInfo] = Field(description="Built-in external codegens, usable by name in a target string.")
    codegen_documents: bool = Field(description="Whether `codegens` documents are accepted by POST /compile.")
    user_c_allowed: bool = Field(description="Whether codegen documents may bring C sources (the "
                                 "service allows it and runs jobs in its sandbox; `GET /readyz` says why not).")
    allowed_cflags: list[str]
    config: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="The configuration registry, as `relaycc config --json` prints it: the `config` keys, "
        "the opt_level range, every pass_config key with its type, default, whether it is used, "
        "accepted and ignored (TVM's, no effect here) or refused, and what it does.",
    )
    operators: list[OperatorInfo] = Field(
        default_factory=list, description="Every supported operator, as `relaycc ops --json` lists it."
    )
