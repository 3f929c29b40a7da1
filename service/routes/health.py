"""`GET /healthz`: tells a load balancer or an operator that the service answers."""

from __future__ import annotations

from fastapi import APIRouter

from compiler import __version__
from service.schemas import HealthStatus

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    summary="Liveness check",
    description="Answers while the service is up, with the compiler version it runs.",
)
def healthz() -> HealthStatus:
    return HealthStatus(status="ok", version=__version__)
