"""`GET /healthz` and `GET /readyz`: for load balancers and operators; never need an API key."""

from __future__ import annotations

import os
import uuid

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from compiler import __version__
from service.sandbox.policy import sandbox_status, user_c_refusal
from service.schemas import HealthStatus, ReadyStatus
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
    description="`200` when the module store is writable and the job queue accepts work, "
    "`503` otherwise.",
    responses={503: {"description": "Not ready.", "model": ReadyStatus}},
)
def readyz(state: StateDep) -> JSONResponse:
    store_ok = _writable(state.store.modules)
    queue_ok = state.queue.ready()
    sandboxed, sandbox_detail = sandbox_status(state.settings)
    refusal = user_c_refusal(state.settings)
    ready = ReadyStatus(
        status="ready" if store_ok and queue_ok else "not ready", store=store_ok, queue=queue_ok,
        sandbox=sandboxed, user_c_allowed=refusal is None,
        detail="; ".join(part for part in (
            f"sandbox: {sandbox_detail}", f"user C: {refusal}" if refusal else "") if part),
    )
    return JSONResponse(ready.model_dump(), status_code=200 if ready.status == "ready" else 503)


def _writable(directory: os.PathLike[str]) -> bool:
    probe = os.path.join(directory, f".ready-{uuid.uuid4().hex}")
    try:
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError:
        return False
    return True
