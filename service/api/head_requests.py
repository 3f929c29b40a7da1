"""`HEAD` wherever `GET` answers: the same status and headers (ETag, Content-Length, ...), no
body.

FastAPI's routes answer only the methods they declare, so `HEAD` on an artifact was `405`. A
route declaring both would appear twice in the OpenAPI document under one operation id; instead
this middleware runs `HEAD` as the `GET` it mirrors and drops the body on the way out, so every
`GET` route has it and none can forget it. The server (uvicorn) still sees the request as `HEAD`
and sends no body either.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGetMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def send_without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        # Marked, so that the request counters (service/api/request_metrics.py) say HEAD.
        await self.app({**scope, "method": "GET", "relaycc.head": True}, receive, send_without_body)
