"""`POST /compile`: queue a build, or find the one an identical request already made."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from fastapi.concurrency import run_in_threadpool

from service.api.routes.docs import AUTHENTICATED, problem_responses
from service.api.schemas import CompileRequest, ModuleStatus
from service.api.security import ClientDep, client_identity
from service.state import StateDep
from service.store.module_store import IN_FLIGHT
from service.api.submission import submit_compile, wait_for_status
from service.api.views import module_path, module_status

router = APIRouter(tags=["compile"], dependencies=[Depends(client_identity)])

_DESCRIPTION = """\
Compiles a Relay text model for a target. The module id is the sha256 of the normalized request
and the compiler version: an identical request returns the same id and never compiles twice,
also when sent concurrently.

The Relay text is parsed and type-checked before anything is queued: a model that does not
parse or type-check is answered at once with `400` and a problem carrying `line`, `column` and
`source_line`. Otherwise the answer is `202 Accepted` with `Location: /modules/{id}` while the
job is queued or running, or `200` with the status once it is done (`succeeded` or `failed`;
a failed job's `error` holds the problem). With `?wait=SECONDS` the answer waits up to that
long for the job to finish.

A module whose stored artifacts failed their integrity check is built again by the next
identical request. While the module store cannot be written (read-only or full) a request that
would store something is answered `503` with a `store-unavailable` problem.
"""


# OpenAPI links from a compile's answer to what can be done with the module it names, so that
# clients and stateful API testers (schemathesis) can follow them with the real id.
_MODULE_LINKS = {
    name: {"operationId": operation, "parameters": {"module_id": "$response.body#/id"},
           "description": description}
    for name, operation, description in (
        ("GetModule", "get_module", "The status of the module."),
        ("GetMetadata", "get_metadata", "Its call_lowered report, once built."),
        ("ListArtifacts", "list_artifacts", "Its artifacts, once built."),
        ("Inspect", "inspect", "What its Relay text holds."),
        ("Run", "run", "Run it, once built."),
    )
}


@router.post(
    "/compile",
    summary="Compile a model",
    description=_DESCRIPTION,
    status_code=202,
    response_model=ModuleStatus,
    responses={
        200: {"description": "The module is done (succeeded or failed).", "model": ModuleStatus,
              "links": _MODULE_LINKS},
        202: {
            "description": "Queued or running; poll `Location`.",
            "headers": {"Location": {"description": "`/modules/{id}`", "schema": {"type": "string"}}},
            "links": _MODULE_LINKS,
        },
        **problem_responses(400, *AUTHENTICATED, 413, 422, 429, 503),
    },
)
async def compile_model(
    body: CompileRequest,
    state: StateDep,
    client: ClientDep,
    response: Response,
    wait: Annotated[
        float, Query(ge=0, le=300, description="Seconds to wait for the job to finish before answering.")
    ] = 0,
) -> ModuleStatus:
    status = await run_in_threadpool(submit_compile, body, client, state)
    if wait > 0:
        status = await wait_for_status(state, status, wait)
    view = module_status(status)
    if status["state"] in IN_FLIGHT:
        response.status_code = 202
        response.headers["Location"] = module_path(view.id)
        response.headers["Retry-After"] = "1"
    else:
        response.status_code = 200
        response.headers["Content-Location"] = module_path(view.id)
    return view
