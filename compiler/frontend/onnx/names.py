"""ONNX value names as Relay identifiers.

ONNX allows any string (`gpu_0/data_0`, `input.1`, `0`); Relay parameters are
`[A-Za-z_][A-Za-z0-9_]*` here, which are also C identifiers once prefixed, so the generated
header can name them. The importer keeps the original name beside the sanitized one.
"""

from __future__ import annotations

import re

_BAD = re.compile(r"[^A-Za-z0-9_]")


def relay_identifier(name: str, taken: set[str]) -> str:
    """A Relay identifier for ONNX name `name`, distinct from those in `taken` (then added)."""
    base = _BAD.sub("_", name) or "input"
    if base[0].isdigit():
        base = f"v{base}"
    candidate, n = base, 1
    while candidate in taken:
        candidate = f"{base}_{n}"
        n += 1
    taken.add(candidate)
    return candidate
