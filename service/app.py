"""Builds the FastAPI application; `uvicorn --factory service.app:create_app` serves it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.types import Scope

from compiler import __version__
from service.api import error_handlers
from service.api.body_limit import BodyLimitMiddleware
from service.api.body_parsing import parse_bodies_off_loop
from service.api.head_requests import HeadAsGetMiddleware
from service.api.request_metrics import RequestMetricsMiddleware
from service.api.routes import compile as compile_routes
from service.api.routes import events, health, metrics, module_list, modules, targets
from service.state import ServiceState, settings_of
from service.web import explorer, swagger

_DESCRIPTION = """\
Compiles TVM Relay text models to C on demand.

`POST /compile` queues a build (or finds the identical one already made) and answers with the
module id; `GET /modules/{id}` follows the job; the metadata report and the artifacts (C
sources, header, `lib<name>.so`, the Model Library Format tar) are downloaded from
`/modules/{id}/...`, and `POST /modules/{id}/run` runs the built library in a worker process.

Every error is `application/problem+json` (RFC 9457) with a stable `type` URI; parse and type
errors carry `line`, `column` and `source_line`. When the service is started with
`RELAYCC_API_KEYS`, every route but `/healthz` and `/readyz` needs `Authorization: Bearer <key>`.
"""


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state = ServiceState.start(settings_of(app))
    app.state.relaycc = state
    try:
        yield
    finally:
        state.close()


def create_app() -> FastAPI:
    app = FastAPI(
        title="relaycc",
        version=__version__,
        description=_DESCRIPTION,
        generate_unique_id_function=_operation_id,
        lifespan=_lifespan,
        # Served by service/web/swagger.py from files we ship; FastAPI's load from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=_max_body_bytes)
    app.add_middleware(RequestMetricsMiddleware)
    # Outermost: a HEAD request goes through everything a GET does (API keys included).
    app.add_middleware(HeadAsGetMiddleware)
    error_handlers.install(app)
    for router in (compile_routes.router, module_list.router, modules.router, events.router, targets.router,
                   health.router, metrics.router):
        parse_bodies_off_loop(router)
        app.include_router(router)
    swagger.install(app)
    explorer.install(app)
    return app


def _max_body_bytes(scope: Scope) -> int:
    return settings_of(scope["app"]).max_body_bytes


def _operation_id(route: APIRoute) -> str:
    # Clients generated from the document get the handler's name (`healthz`), not FastAPI's
    # default of name, path and method run together.
    return route.name
