from __future__ import annotations

import json
from pathlib import Path

from service.openapi import DOCUMENT_PATH, main, render_openapi


def test_checked_in_openapi_document_matches_the_app() -> None:
    checked_in = DOCUMENT_PATH.read_text(encoding="utf-8") if DOCUMENT_PATH.exists() else ""

    assert checked_in == render_openapi(), (
        "openapi/openapi.json is out of date with the app; run `make openapi` and commit it"
    )


def test_openapi_main_writes_sorted_document_with_trailing_newline(tmp_path: Path) -> None:
    target = tmp_path / "out" / "openapi.json"

    assert main([str(target)]) == 0

    text = target.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    document = json.loads(text)
    assert document["info"]["title"] == "relaycc"
    assert text == json.dumps(document, indent=2, sort_keys=True) + "\n"
