"""`GET /metrics`: Prometheus text."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse

from service.api import metrics
from service.api.routes.docs import AUTHENTICATED, problem_responses
from service.api.security import client_identity
from service.state import StateDep

router = APIRouter(tags=["metrics"], dependencies=[Depends(client_identity)])

_EXAMPLE = """# HELP relaycc_jobs Compile jobs in the store by state.
# TYPE relaycc_jobs gauge
relaycc_jobs{state="succeeded"} 3
# TYPE relaycc_queue_depth gauge
relaycc_queue_depth 0
"""


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    description="Jobs by state, a histogram of compile seconds, queue depth, cache hits and "
    "request counters, in the Prometheus text format (0.0.4).",
    response_class=PlainTextResponse,
    responses={
        200: {"description": "Metrics.", "content": {"text/plain": {"schema": {"type": "string"}, "example": _EXAMPLE}}},
        **problem_responses(*AUTHENTICATED),
    },
)
async def get_metrics(state: StateDep) -> PlainTextResponse:
    text = await run_in_threadpool(metrics.render, state)
    return PlainTextResponse(text, media_type=metrics.CONTENT_TYPE)
