"""`GET /modules/{id}/events`: a job's progress as server-sent events.

The stream polls the module's status (one small file read) a few times a second and sends a
`progress` event each time the progress changes, then one `state` event with the final
status once the job has succeeded or failed, and ends. While nothing changes it sends an SSE
comment now and then, so that proxies and clients see a live connection. A client that goes
away ends the polling at the next poll.

A stream lasts at most MAX_STREAM_SECONDS; then it ends without a `state` event, and the client
connects again (an EventSource does so by itself, after the `retry` delay the stream names
first). uvicorn lets open responses finish before it stops, so an endless stream of a job
that waits in the queue would hold a shutting-down service up.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from service.api.routes.docs import AUTHENTICATED, problem_responses
from service.api.security import client_identity
from service.api.views import module_status
from service.problems import ProblemError, make_problem
from service.state import StateDep
from service.store.module_store import IN_FLIGHT, ModuleStoreBase

router = APIRouter(prefix="/modules", tags=["modules"], dependencies=[Depends(client_identity)])

POLL_SECONDS = 0.2
HEARTBEAT_SECONDS = 15.0
MAX_STREAM_SECONDS = 30.0
RETRY_MILLISECONDS = 500
EVENT_STREAM = "text/event-stream"
# One event of the stream, as SSE-aware tools (schemathesis) read it: its name and its data.
_EVENT_SCHEMA = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "enum": ["progress", "state", "error"]},
        "data": {"type": "string", "contentMediaType": "application/json",
                 "description": "JSON: the progress object, the final status, or a problem."},
    },
}


@router.get(
    "/{module_id}/events",
    summary="Follow a job",
    description="Server-sent events (`text/event-stream`): a `progress` event (data: the status's "
    "`progress` object, `{stage, done, total, ...}`) each time it changes, then one `state` event "
    "(data: the module's status, as `GET /modules/{id}` shows it) once the job has succeeded or "
    "failed, and the stream ends; a module already done gets the `state` event at once. Comment "
    "lines (`: heartbeat`) keep a quiet connection alive. A stream ends after 30 s without a `state` "
    "event while the job is still in flight: connect again (an EventSource does so by itself).",
    response_class=StreamingResponse,
    responses={
        200: {"description": "The event stream.", "content": {EVENT_STREAM: {"schema": _EVENT_SCHEMA}}},
        **problem_responses(*AUTHENTICATED, 404, 422),
    },
)
async def module_events(module_id: str, state: StateDep, request: Request) -> StreamingResponse:
    if state.store.status(module_id) is None:
        raise ProblemError.of("not-found", f"no module {module_id}")
    return StreamingResponse(
        _events(state.store, module_id, request), media_type=EVENT_STREAM,
        # Proxies that buffer (nginx) would hold the events back until the end.
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(store: ModuleStoreBase, module_id: str, request: Request) -> AsyncIterator[str]:
    last_progress: object = None
    started = last_sent = time.monotonic()
    yield f"retry: {RETRY_MILLISECONDS}\n\n"
    while time.monotonic() - started < MAX_STREAM_SECONDS:
        status = await anyio.to_thread.run_sync(store.status, module_id)
        if status is None:  # deleted meanwhile
            yield _event("error", make_problem("not-found", f"module {module_id} was deleted"))
            return
        if status["state"] not in IN_FLIGHT:
            yield _event("state", module_status(status).model_dump(mode="json"))
            return
        progress = status.get("progress")
        if progress is not None and progress != last_progress:
            last_progress = progress
            last_sent = time.monotonic()
            yield _event("progress", progress)
        elif time.monotonic() - last_sent >= HEARTBEAT_SECONDS:
            last_sent = time.monotonic()
            yield ": heartbeat\n\n"
        if await request.is_disconnected():
            return
        await anyio.sleep(POLL_SECONDS)


def _event(name: str, data: object) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
