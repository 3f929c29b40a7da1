"""Builds the FastAPI application; `uvicorn --factory service.app:create_app` serves it."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.routing import APIRoute

from compiler import __version__
from service.routes import health


def create_app() -> FastAPI:
    app = FastAPI(
        title="relaycc",
        version=__version__,
        description="Compiles TVM Relay text models to C on demand.",
        generate_unique_id_function=_operation_id,
    )
    app.include_router(health.router)
    return app


def _operation_id(route: APIRoute) -> str:
    # Clients generated from the document get the handler's name (`healthz`), not FastAPI's
    # default of name, path and method run together.
    return route.name
