"""`/`: the explorer, a page of plain files under service/explorer/ (no build step, nothing
loaded from elsewhere) that drives the API as any client would."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

PAGE_DIR = Path(__file__).resolve().parent.parent / "explorer"
ASSETS = "/explorer"

router = APIRouter(include_in_schema=False)


@router.get("/")
def explorer_page() -> FileResponse:
    return FileResponse(PAGE_DIR / "index.html", media_type="text/html")


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.mount(ASSETS, StaticFiles(directory=PAGE_DIR), name="explorer")
