"""`/docs`: Swagger UI from the `fastapi-offline` package's files, not from a CDN.

FastAPI's own `/docs` loads its script from jsDelivr; the app turns it off and this router
serves the page with the package's files under `/docs-assets`. Only the files are used: the app
stays a plain FastAPI. There is no `/redoc`: ReDoc's page always loads the Redocly logo from
their CDN.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"
_FILES = Path(fastapi_offline.__file__).resolve().parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/docs")
def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="relaycc — API",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon.png",
    )


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.mount(ASSETS, StaticFiles(directory=_FILES), name="docs-assets")
