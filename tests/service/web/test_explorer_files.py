"""The explorer's files (service/explorer/): served as they are, nothing from elsewhere, and no
way for module text to become markup."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.web.explorer import PAGE_DIR
from tests.service.support import make_app, make_settings

SCRIPTS = sorted(PAGE_DIR.glob("*.js"))


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with TestClient(make_app(make_settings(tmp_path_factory.mktemp("page") / "store"))) as client:
        yield client


def test_the_page_and_every_module_it_imports_are_served(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    referenced = set(re.findall(r'(?:src|href)="(/explorer/[^"]+)"', page.text))
    for script in SCRIPTS:
        referenced |= {f"/explorer/{name}" for name in re.findall(r'from "\./([\w.]+)"', script.read_text())}

    assert {f"/explorer/{s.name}" for s in SCRIPTS} <= referenced  # no file is left out
    for path in referenced:
        assert client.get(path).status_code == 200, path


@pytest.mark.parametrize("path", [PAGE_DIR / "index.html", PAGE_DIR / "explorer.css", *SCRIPTS], ids=lambda p: p.name)
def test_no_file_loads_anything_from_another_host(path) -> None:
    text = path.read_text()
    # The SVG namespace is a name, not a request.
    assert not re.search(r"(?:https?:)?//[a-z]", text.replace("http://www.w3.org/2000/svg", "")), path.name


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_no_script_parses_strings_as_markup(path) -> None:
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", path.read_text()), path.name
