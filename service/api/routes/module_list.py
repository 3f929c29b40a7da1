"""`GET /modules` (the stored modules, a page at a time), `DELETE /modules/{id}` and
`GET /modules/{a}/diff/{b}`.

With API keys a client lists, and may delete, only the modules it submitted (the key that
created the job, recorded as the status's `client`); on an open service every client is
anyone, so every module is listed and any client may delete one.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Response
from fastapi.concurrency import run_in_threadpool

from service.api.diffs import module_diffs
from service.api.routes.docs import (
    ARTIFACT_CORRUPT_EXAMPLE,
    AUTHENTICATED,
    BAD_CURSOR_EXAMPLE,
    MODULE_BUSY_EXAMPLE,
    problem_responses,
)
from service.api.schemas import JobState, ModuleDiff, ModuleList
from service.api.security import ClientDep, client_identity
from service.api.views import module_status
from service.problems import ProblemError
from service.settings import SettingsDep
from service.state import StateDep
from service.store.module_store import ModuleBusy, Status

router = APIRouter(prefix="/modules", tags=["modules"], dependencies=[Depends(client_identity)])

MAX_PAGE = 100


@router.get(
    "",
    summary="List modules",
    description="The stored modules, newest first, a page at a time: `limit` per page, and "
    "`cursor` from the previous page's `next_cursor` for the next one. `state` keeps the modules "
    "in that state. With API keys, only the modules the calling key submitted are listed.",
    responses=problem_responses(400, *AUTHENTICATED, 422, examples={400: BAD_CURSOR_EXAMPLE}),
)
async def list_modules(
    state: StateDep,
    settings: SettingsDep,
    client: ClientDep,
    job_state: Annotated[JobState | None, Query(alias="state", description="Only modules in this state.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Modules per page.")] = 20,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page.")] = None,
) -> ModuleList:
    before = _decode_cursor(cursor) if cursor is not None else None
    owner = client if settings.api_keys else None
    statuses, more = await run_in_threadpool(
        state.store.newest_first, state=job_state, client=owner, before=before, limit=limit
    )
    next_cursor = _encode_cursor(statuses[-1]) if more and statuses else None
    next_url = None
    if next_cursor is not None:
        query = {"limit": limit, "cursor": next_cursor, **({"state": job_state} if job_state else {})}
        next_url = "/modules?" + urlencode(query)
    return ModuleList(modules=[module_status(s) for s in statuses], next_cursor=next_cursor, next=next_url)


def _encode_cursor(status: Status) -> str:
    key = [status["created_at"], status["id"]]
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        created, mid = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(created, bool) or not isinstance(created, (int, float)) or not isinstance(mid, str):
            raise ValueError("not a cursor")
        return float(created), mid
    except (ValueError, TypeError, binascii.Error, RecursionError):
        raise ProblemError.of(
            "bad-cursor", "cursor: not a cursor this service gave; pass a page's `next_cursor` as it is"
        ) from None


@router.delete(
    "/{module_id}",
    summary="Delete a module",
    description="Removes the module, its request and its artifacts; `204` when done. An "
    "identical `POST /compile` afterwards builds it anew. A module whose job is queued or "
    "running is `409` `module-busy` (its worker is writing into it): wait for it to finish. "
    "With API keys, only the key that submitted the module may delete it (`403` otherwise). "
    "A run of the module already started keeps the library it loaded.",
    status_code=204,
    responses={
        204: {"description": "Deleted."},
        **problem_responses(*AUTHENTICATED, 403, 404, 409, 422, 503, examples={409: MODULE_BUSY_EXAMPLE}),
    },
)
async def delete_module(module_id: str, state: StateDep, settings: SettingsDep, client: ClientDep) -> Response:
    def owned(status: Status) -> None:
        if settings.api_keys and status.get("client") != client:
            raise ProblemError.of("forbidden", f"module {module_id} was submitted by another client; only it may delete the module")

    try:
        await run_in_threadpool(state.store.delete, module_id, owned)
    except KeyError:
        raise ProblemError.of("not-found", f"no module {module_id}") from None
    except ModuleBusy as busy:
        raise ProblemError.of(
            "module-busy", f"module {module_id} is {busy.state}; it can be deleted once its job has finished",
            headers={"Retry-After": "1"},
        ) from None
    return Response(status_code=204)


@router.get(
    "/{a}/diff/{b}",
    summary="Diff two modules",
    description="Unified diffs of two built modules' lowered IR (`lowered.relay`), C (every file "
    "under `src/`) and report (`metadata.json`, keys sorted, without the pass timings): one diff "
    "per kind, `a/` the first module and `b/` the second. Both must have succeeded (`409` "
    "otherwise). Each file is checked against its recorded sha256 (`500` `artifact-corrupt`).",
    responses=problem_responses(*AUTHENTICATED, 404, 409, 422, 500, examples={500: ARTIFACT_CORRUPT_EXAMPLE}),
)
async def diff_modules(a: str, b: str, state: StateDep) -> ModuleDiff:
    for mid in (a, b):
        status = state.store.status(mid)
        if status is None:
            raise ProblemError.of("not-found", f"no module {mid}")
        if status["state"] != "succeeded":
            raise ProblemError.of("module-not-ready", f"module {mid} is {status['state']}; it can be diffed once it has succeeded")
    diffs = await run_in_threadpool(module_diffs, state.store, a, b)
    return ModuleDiff.model_validate({"a": a, "b": b, "diffs": diffs})
