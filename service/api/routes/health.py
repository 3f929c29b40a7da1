"""`GET /healthz` and `GET /readyz`: for load balancers and operators; never need an API key."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from compiler import __version__
from service.jobs.sandbox.policy import sandbox_status, user_c_refusal
from service.api.schemas import HealthStatus, ReadyStatus
from service.state import StateDep

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    summary="Liveness check",
    description="Answers while the service is up, with the compiler version it runs.",
)
def healthz() -> HealthStatus:
    return HealthStatus(status="ok", version=__version__)


@router.get(
    "/readyz",
    summary="Readiness check",
    description="`200` when the module store is writable (a file is written to and removed from "
    "its modules directory) and the job queue accepts work, `503` otherwise, with the reason.",
    responses={503: {"description": "Not ready.", "model": ReadyStatus}},
)
def readyz(state: StateDep) -> JSONResponse:
    store_problem = state.store.writable_problem()
    queue_ok = state.queue.ready()
    reasons = [r for r in (store_problem, None if queue_ok else "the job queue does not accept work") if r]
    sandboxed, sandbox_detail = sandbox_status(state.settings)
    refusal = user_c_refusal(state.settings)
    ready = ReadyStatus(
        status="not ready" if reasons else "ready", store=store_problem is None, queue=queue_ok,
        reason="; ".join(reasons) or None, sandbox=sandboxed, user_c_allowed=refusal is None,
        detail="; ".join(part for part in (
            f"sandbox: {sandbox_detail}", f"user C: {refusal}" if refusal else "") if part),
    )
    return JSONResponse(ready.model_dump(exclude_none=True), status_code=503 if reasons else 200)
