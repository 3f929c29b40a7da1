"""POST /compile: from a request to a stored, queued (or already built) module.

An identical request finds the module its twin created: it is answered from the store (a
cache hit) and never queued again, also when both arrive at once (the store's exclusive
creation decides which one queues the job). A module that failed only because its worker died
is queued again by the next identical request, until it has used up its attempts.
"""

from __future__ import annotations

import asyncio
import time

from service import metrics
from service.api.admission import admit
from service.api.schemas import CompileRequest
from service.state import ServiceState
from service.store.module_store import IN_FLIGHT, Status

_POLL_FIRST_SECONDS = 0.05
_POLL_MAX_SECONDS = 0.5


def submit_compile(body: CompileRequest, client: str, state: ServiceState) -> Status:
    """Admit, store and queue a compile request; the module's current status."""
    metrics.compile_requested()
    admitted = admit(body, state.settings)
    store = state.store
    existing = store.status(admitted.module_id)
    if existing is not None:
        metrics.cache_hit()
        if store.requeue(admitted.module_id, state.job_limits()):
            state.queue.submit_compile(admitted.module_id)
            return store.status(admitted.module_id) or existing
        return existing
    token = state.limiter.acquire(client)
    counted = False
    try:
        mid, created = store.create(admitted.normal, admitted.params, state.job_limits(), client)
        if created:
            state.limiter.bind(client, token, mid)
            counted = True
            state.queue.submit_compile(mid)
        else:
            metrics.cache_hit()  # an identical request created it meanwhile
    finally:
        if not counted:
            state.limiter.release(client, token)
    status = store.status(mid)
    assert status is not None
    return status


async def wait_for_status(state: ServiceState, status: Status, seconds: float) -> Status:
    """The module's status once it is finished, or after `seconds`, whichever comes first."""
    deadline = time.monotonic() + min(seconds, state.settings.max_wait_seconds)
    pause = _POLL_FIRST_SECONDS
    mid = str(status["id"])
    while status["state"] in IN_FLIGHT:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        await asyncio.sleep(min(pause, remaining))
        pause = min(pause * 2, _POLL_MAX_SECONDS)
        status = state.store.status(mid) or status
    return status
