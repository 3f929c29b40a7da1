"""Counts every HTTP request and times it, by route template (`/modules/{module_id}`), method
and status (service/metrics.py).

The route is the template the router matched, never the raw path: one series per route, however
many module ids clients send. A request no route matches (a 404 for an unknown path) is counted
under `unmatched`. It sits inside HeadAsGetMiddleware, which marks the `HEAD` it runs as a `GET`,
so that `HEAD` is counted as what the client sent.
"""

from __future__ import annotations

import time

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import metrics

UNMATCHED = "unmatched"
HEAD_MARK = "relaycc.head"


class RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers when the app raises before it starts a response

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            method = "HEAD" if scope.get(HEAD_MARK) else scope["method"]
            metrics.answered(_route(scope), method, status, time.perf_counter() - started)


def _route(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    # Answered before routing (a body over the limit): find the route it was meant for.
    app = scope.get("app")
    for candidate in getattr(getattr(app, "router", None), "routes", ()):
        match, _ = candidate.matches(scope)
        if match != Match.NONE and isinstance(getattr(candidate, "path", None), str):
            return str(candidate.path)
    return UNMATCHED
