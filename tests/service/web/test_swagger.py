"""/docs works without internet: the page names no other host, and every asset it loads is
ours; /redoc (whose page always loads a logo from Redocly's CDN) is not served."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.service.support import make_app, make_settings


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with TestClient(make_app(make_settings(tmp_path_factory.mktemp("docs") / "store"))) as client:
        yield client


def test_docs_page_references_no_absolute_url(client: TestClient) -> None:
    page = client.get("/docs")

    assert page.status_code == 200
    assert "SwaggerUIBundle" in page.text
    assert not re.search(r"(?:https?:)?//[a-z]", page.text), page.text


def test_every_asset_the_docs_page_loads_is_served(client: TestClient) -> None:
    page = client.get("/docs").text
    assets = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]+)['"]""", page) + re.findall(r"""url:\s*'([^']+)'""", page)

    assert len(assets) >= 4  # the script, the stylesheet, the icon, the OpenAPI document
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200, asset
        assert response.content, asset


def test_redoc_is_not_served(client: TestClient) -> None:
    assert client.get("/redoc").status_code == 404
