"""`/modules/{id}`: a module's status, its metadata report, its artifacts, a description of its
model, and running it."""

from __future__ import annotations

import hashlib
import json

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse

from compiler import __version__
from compiler.diagnostics import CompileError
from compiler.driver import BuildOptions
from compiler.inspection import inspect_module
from compiler.parser import parse
from service.jobs.normalize import SOURCE_NAME

from service.problems import ProblemError, compile_error_problem
from service.api.routes.docs import ARTIFACT_CORRUPT_EXAMPLE, AUTHENTICATED, problem_responses
from service.api.running import run_module
from service.api.schemas import ArtifactList, MetadataReport, ModuleInspection, ModuleStatus, RunRequest, RunResponse
from service.api.security import ClientDep, client_identity
from service.state import ServiceState, StateDep
from service.store.module_store import Status
from service.api.views import artifact_list, module_status

router = APIRouter(prefix="/modules", tags=["modules"], dependencies=[Depends(client_identity)])

# Artifacts never change under a module id (it is a content hash), so caches may keep them.
_IMMUTABLE = "private, max-age=31536000, immutable"


def _status(state: ServiceState, module_id: str) -> Status:
    status = state.store.status(module_id)
    if status is None:
        raise ProblemError.of("not-found", f"no module {module_id}")
    return status


def _succeeded(state: ServiceState, module_id: str) -> Status:
    status = _status(state, module_id)
    if status["state"] != "succeeded":
        raise ProblemError.of(
            "module-not-ready", f"module {module_id} is {status['state']}; its artifacts exist once it has succeeded"
        )
    return status


@router.get(
    "/{module_id}",
    summary="Module status",
    description="The job's state (`queued`, `running`, `succeeded`, `failed`), its timings, the "
    "stage it is at while running, and the problem when it failed. Has an ETag that changes with "
    "the status; `If-None-Match` gives `304`, so a client polling it gets the body only when "
    "something changed. `HEAD` answers the headers alone (as on every `GET` route).",
    responses={
        304: {"description": "Not modified (the ETag matched)."},
        **problem_responses(*AUTHENTICATED, 404, 422),
    },
)
def get_module(module_id: str, state: StateDep, request: Request, response: Response) -> ModuleStatus:
    status = _status(state, module_id)
    etag = _status_etag(status)
    if _etag_matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers={"ETag": etag})  # type: ignore[return-value]  # sent as is
    response.headers["ETag"] = etag
    return module_status(status)


def _status_etag(status: Status) -> str:
    # The view is a function of the stored status (and of this service's version), so their
    # digest names the representation.
    text = json.dumps([__version__, status], sort_keys=True, default=str)
    return f'"{hashlib.sha256(text.encode()).hexdigest()[:32]}"'


@router.get(
    "/{module_id}/metadata",
    summary="Metadata report",
    description="The call_lowered metadata report (`metadata.json`) of a built module: every "
    "lowered call in execution order with its metadata, the functions, the memory plan and the "
    "pass timings. Has a sha256 ETag; `If-None-Match` gives `304`; `HEAD` answers the headers "
    "(ETag, Content-Length) alone. The file is checked against "
    "the sha256 recorded when the module was built: one that no longer matches (or is not JSON) "
    "is `500` `artifact-corrupt`, and the next identical `POST /compile` builds the module anew.",
    responses={
        200: {"description": "The report.", "model": MetadataReport},
        304: {"description": "Not modified (the ETag matched)."},
        **problem_responses(*AUTHENTICATED, 404, 409, 422, 500, examples={500: ARTIFACT_CORRUPT_EXAMPLE}),
    },
)
def get_metadata(module_id: str, state: StateDep, request: Request) -> Response:
    return _artifact_response(state, _succeeded(state, module_id), "metadata.json", request)


@router.get(
    "/{module_id}/artifacts",
    summary="List artifacts",
    description="The files of the module's OUTDIR (`metadata.json`, `lowered.relay`, `src/*.c`, "
    "`include/tvmgen_<name>.h`, `lib<name>.so`, `<name>.tar`) with size, sha256 and content type.",
    responses=problem_responses(*AUTHENTICATED, 404, 409, 422),
)
def list_artifacts(module_id: str, state: StateDep) -> ArtifactList:
    status = _succeeded(state, module_id)
    entries = state.store.manifest(module_id)
    if entries is None:  # changed since it was read
        return artifact_list(_succeeded(state, module_id))
    return artifact_list({**status, "artifacts": entries})


@router.get(
    "/{module_id}/artifacts/{name:path}",
    summary="Download an artifact",
    description="One file of the artifact list, by its name there (e.g. `libdefault.so`, "
    "`src/default_lib1.c`); any other name is `404`. The ETag is the sha256 recorded when the "
    "module was built; `If-None-Match` with it gives `304`; `HEAD` answers the headers (ETag, "
    "Content-Length) alone. The file is checked against that "
    "sha256 first: one that no longer matches is `500` `artifact-corrupt` (the bytes are never "
    "served), and the next identical `POST /compile` builds the module anew.",
    response_class=FileResponse,
    responses={
        200: {
            "description": "The file.",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                "application/x-tar": {"schema": {"type": "string", "format": "binary"}},
                "application/json": {"schema": {"type": "object"}},
                "text/plain": {"schema": {"type": "string"}},
                "text/x-c": {"schema": {"type": "string"}},
            },
        },
        304: {"description": "Not modified (the ETag matched)."},
        **problem_responses(*AUTHENTICATED, 404, 409, 422, 500, examples={500: ARTIFACT_CORRUPT_EXAMPLE}),
    },
)
def get_artifact(module_id: str, name: str, state: StateDep, request: Request) -> Response:
    return _artifact_response(state, _succeeded(state, module_id), name, request)


def _artifact_response(state: ServiceState, status: Status, name: str, request: Request) -> Response:
    # Checked against its recorded sha256 before anything is answered, 304 included: a
    # tampered file raises ArtifactCorrupt (a 500 problem naming the module).
    found = state.store.artifact(str(status["id"]), name)
    if found is None:
        raise ProblemError.of("not-found", f"module {status['id']} has no artifact {name!r}")
    path, entry = found
    etag = f'"{entry["sha256"]}"'
    headers = {"ETag": etag, "Cache-Control": _IMMUTABLE}
    if _etag_matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    return FileResponse(path, media_type=str(entry["content_type"]), headers=headers)


def _etag_matches(header: str | None, etag: str) -> bool:
    """If-None-Match uses the weak comparison: `W/"x"` matches `"x"`; `*` matches anything."""
    if header is None:
        return False
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False


@router.get(
    "/{module_id}/inspect",
    summary="Describe the model",
    description="What `relaycc inspect --json` prints for the module's Relay text: `@main`'s inputs "
    "and outputs, the operators used with counts, the global functions and their attributes, and "
    "whether the model compiles to AOT C for the host target `c` or runs in the interpreter only "
    "(with the located error that stops it). Available in every state of the module's job; "
    "no C is built.",
    # Members the description does not have (`type` of a tensor input) are left out, as the CLI does.
    response_model_exclude_unset=True,
    responses=problem_responses(*AUTHENTICATED, 404, 422),
)
async def inspect(module_id: str, state: StateDep) -> ModuleInspection:
    _status(state, module_id)
    try:
        relay = state.store.request(module_id)["relay"]
    except KeyError:  # gone meanwhile, or its request was corrupt (and is now quarantined)
        raise ProblemError.of("not-found", f"no module {module_id}") from None
    assert isinstance(relay, str)
    info = await run_in_threadpool(_inspect_relay, relay)
    return ModuleInspection.model_validate(info)


def _inspect_relay(relay: str) -> dict[str, object]:
    # The text was parsed and type-checked when the request came in; a module stored by an
    # older compiler has another id, so this only fails if the compiler itself changed.
    try:
        return inspect_module(parse(relay, SOURCE_NAME), BuildOptions())
    except CompileError as err:
        raise ProblemError(compile_error_problem(err)) from None


@router.post(
    "/{module_id}/run",
    summary="Run a built module",
    description="Runs the module's library in a worker process with the given inputs (JSON "
    "nested lists keyed by parameter name, or base64 .npz) and answers with the outputs "
    "(`out0`, `out1`, ... in the order of @main's result, as named in the metadata's "
    "`interface.outputs`) the same way, plus the measured latency. A run that crashes is "
    "`500`, one over the time limit `504`. The artifacts are checked against their recorded "
    "sha256 before the library is loaded: a mismatch is `500` `artifact-corrupt`, and the next "
    "identical `POST /compile` builds the module anew.",
    responses=problem_responses(400, *AUTHENTICATED, 404, 409, 413, 422, 429, 500, 504),
)
async def run(module_id: str, body: RunRequest, state: StateDep, client: ClientDep) -> RunResponse:
    return await run_module(module_id, body, client, state)

