"""/docs and /redoc work without internet: the pages name no other host, and every asset they
load is ours."""

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


@pytest.mark.parametrize("path, marker", [("/docs", "SwaggerUIBundle"), ("/redoc", "<redoc")])
def test_docs_page_references_no_absolute_url(client: TestClient, path: str, marker: str) -> None:
    page = client.get(path)

    assert page.status_code == 200
    assert marker in page.text
    assert not re.search(r"(?:https?:)?//[a-z]", page.text), page.text


@pytest.mark.parametrize("path, least", [("/docs", 4), ("/redoc", 3)])
def test_every_asset_the_docs_page_loads_is_served(client: TestClient, path: str, least: int) -> None:
    page = client.get(path).text
    assets = re.findall(r"""(?:src|href|spec-url)\s*=\s*['"]([^'"]+)['"]""", page) + re.findall(r"""url:\s*'([^']+)'""", page)

    assert len(assets) >= least  # the script (and stylesheet), the icon, the OpenAPI document
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200, asset
        assert response.content, asset
