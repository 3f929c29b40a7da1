"""What happens to a compile request in the API process before it is queued.

Cheap checks first, then the Relay text is parsed and type-checked here: a model that does
not parse or type-check is answered at once (400, with line and column) and never costs a
worker. What passes is put in its normal form (service/jobs/normalize.py), whose hash is the module
id.

Parsing in the API process is bounded by the Relay text limit; the node and tensor limits are
checked on the parsed module, before anything is stored.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from compiler.diagnostics import CompileError, InputError, UnsupportedError
from compiler.ir.expr import Expr
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, TensorType, TupleType, Type
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.bind_params import BindParams
from service.arrays import OverLimit, decode_b64_npz, over_limit_problem
from service.jobs.normalize import SOURCE_NAME, checked_options, codegen_specs, fold_tvmc_config, merge_config, normal_form
from service.problems import ProblemError, compile_error_problem
from service.jobs.sandbox.policy import user_c_refusal
from service.api.schemas import CompileRequest, TargetConfig
from service.settings import Settings
from service.store.module_store import module_id

# The parser adjusts process-wide state (recursion limit, garbage collector) while it runs;
# one parse at a time keeps concurrent requests from undoing each other's adjustments.
_PARSE_LOCK = threading.Lock()


@dataclass(frozen=True)
class Admitted:
    module_id: str
    normal: dict[str, object]
    params: dict[str, np.ndarray]


def admit(body: CompileRequest, settings: Settings) -> Admitted:
    """Check a compile request against the limits and the compiler; raise ProblemError with the
    answer when it is refused."""
    onnx_names: dict[str, str] | None = None
    if body.onnx is not None:
        relay, onnx_names = _imported(body.onnx, settings)
    else:
        assert body.relay is not None  # the request model requires one of them
        relay = body.relay
    relay_bytes = len(relay.encode("utf-8"))
    if relay_bytes > settings.max_relay_bytes:
        raise ProblemError.of(
            "model-too-large",
            f"the Relay text has {relay_bytes} bytes; the limit is {settings.max_relay_bytes} (RELAYCC_MAX_RELAY_BYTES)",
        )
    _check_codegens(body, settings)
    try:
        codegens = codegen_specs([c.model_dump() for c in body.codegens])
        options = checked_options(*_target_and_config(body), codegens)
        params = _params(body, settings)
        with _PARSE_LOCK:
            mod = parse(relay, SOURCE_NAME)
        _check_size(mod, settings)
        if params:
            BindParams(params)(mod)
    except CompileError as err:
        raise ProblemError(compile_error_problem(err)) from None
    normal = normal_form(relay, options, params, onnx_names, record_passes=body.record_passes)
    return Admitted(module_id(normal), normal, params)


def _imported(onnx_b64: str, settings: Settings) -> tuple[str, dict[str, str]]:
    """An ONNX model (base64) as Relay text, with Relay name → ONNX name for every input. The
    route runs this off the event loop (submit_compile is called in a thread)."""
    try:
        data = base64.b64decode(onnx_b64, validate=True)
    except (binascii.Error, ValueError):
        raise ProblemError(compile_error_problem(InputError("onnx: not valid base64"))) from None
    if len(data) > settings.max_relay_bytes:
        raise ProblemError.of(
            "model-too-large",
            f"the ONNX model has {len(data)} bytes; the limit is {settings.max_relay_bytes} (RELAYCC_MAX_RELAY_BYTES)",
        )
    try:
        from compiler.frontend.onnx import from_onnx, load_model
    except ImportError:
        raise ProblemError(compile_error_problem(UnsupportedError(
            "this service has no ONNX importer (install relaycc with the `onnx` extra)"))) from None
    from compiler.parser.printer import astext

    try:
        with _PARSE_LOCK:
            imported = from_onnx(load_model(data, "onnx"))
            text = astext(imported.module)
    except CompileError as err:
        raise ProblemError(compile_error_problem(err)) from None
    names = {p.name_hint: p.name_hint for p in imported.module.main.params}
    names.update(imported.onnx_names)
    return text, names


def _check_codegens(body: CompileRequest, settings: Settings) -> None:
    """Codegen documents come from clients: they may not name server directories, and bring C
    to compile (or libraries to link) only where the service allows it."""
    for index, codegen in enumerate(body.codegens):
        library = codegen.document.get("library")
        library = library if isinstance(library, dict) else {}
        for key in ("include_dirs", "library_dirs"):
            if library.get(key):
                raise ProblemError(compile_error_problem(InputError(
                    f"codegens[{index}]: library.{key} names directories on the server; send the "
                    "sources inline instead"
                )))
        brings_code = codegen.sources or library.get("sources") or library.get("libraries")
        refusal = user_c_refusal(settings) if brings_code else None
        if refusal is not None:
            raise ProblemError.of(
                "user-c-not-allowed", f"codegens[{index}] brings C sources or libraries, refused: {refusal}",
            )


def _target_and_config(body: CompileRequest) -> tuple[str, str, Mapping[str, object]]:
    given = body.config.model_dump(exclude_none=True)
    if isinstance(body.target, TargetConfig):
        tvmc = body.target
        target, implied = fold_tvmc_config(
            [t.model_dump() for t in tvmc.targets],
            tvmc.executor.model_dump() if tvmc.executor is not None else None,
            tvmc.runtime.model_dump() if tvmc.runtime is not None else None,
            tvmc.pass_config,
        )
        return target, body.module_name, merge_config(implied, given)
    return body.target, body.module_name, given


def _params(body: CompileRequest, settings: Settings) -> dict[str, np.ndarray]:
    if body.params is None:
        return {}
    try:
        return decode_b64_npz(body.params, "params", settings.max_tensor_elements, settings.max_tensor_bytes)
    except OverLimit as err:
        raise over_limit_problem(err) from None


def _check_size(mod: IRModule, settings: Settings) -> None:
    seen: set[Expr] = set()
    nodes = 0
    for _, func in mod.functions():
        for node in post_order(func, seen):
            nodes += 1
            if nodes > settings.max_nodes:
                raise ProblemError.of(
                    "model-too-large",
                    f"the model has more than {settings.max_nodes} expression nodes (RELAYCC_MAX_NODES)",
                )
            if node.has_type:
                elements = _largest_tensor(node.checked_type)
                if elements > settings.max_tensor_elements:
                    raise ProblemError.of(
                        "model-too-large",
                        f"a tensor of the model has {elements} elements; the limit is "
                        f"{settings.max_tensor_elements} (RELAYCC_MAX_TENSOR_ELEMENTS)",
                        **_location(node),
                    )


def _largest_tensor(ty: Type) -> int:
    """Elements of the largest tensor in `ty`, counting only static dimensions."""
    largest = 0
    stack = [ty]
    while stack:
        current = stack.pop()
        if isinstance(current, TensorType):
            count = 1
            for dim in current.shape:
                if dim is not ANY and isinstance(dim, int):
                    count *= dim
            largest = max(largest, count)
        elif isinstance(current, TupleType):
            stack.extend(current.fields)
        elif isinstance(current, FuncType):
            stack.extend(current.arg_types)
            stack.append(current.ret_type)
    return largest


def _location(node: Expr) -> dict[str, object]:
    span = node.span
    if span is None:
        return {}
    return {"line": span.line, "column": span.column, "source_line": span.source_line()}
