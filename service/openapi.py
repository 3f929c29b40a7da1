"""Writes the service's OpenAPI document to openapi/openapi.json (`python -m service.openapi`).

The document is checked in; a test fails when it no longer matches the app.

It sits next to app.py rather than in service/api/ because it needs the whole app
(`create_app`), which imports service/api/: inside api/ it would import the layer above it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from service.app import create_app

DOCUMENT_PATH = Path(__file__).resolve().parent.parent / "openapi" / "openapi.json"


def render_openapi() -> str:
    """The app's OpenAPI document as stable text: sorted keys, two-space indent, final newline."""
    return json.dumps(create_app().openapi(), indent=2, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the service's OpenAPI document.")
    parser.add_argument("output", nargs="?", type=Path, default=DOCUMENT_PATH)
    path: Path = parser.parse_args(argv).output
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_openapi(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
