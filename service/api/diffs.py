"""`GET /modules/{a}/diff/{b}`: unified diffs of what two built modules differ in.

Three kinds: the lowered IR (`lowered.relay`), the C (every file under `src/`, one after the
other by name; a file only one module has is diffed against nothing) and the report
(`metadata.json` with its keys sorted and the pass timings left out, since they differ on every
build and would drown what changed). Files are read through the store, so each is checked
against the sha256 recorded when its module was built.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable

from service.api.schemas import ArtifactDiff
from service.problems import ProblemError
from service.store.module_store import ModuleStoreBase

# A diff longer than this is cut (and says so): the answer stays a size a page can show.
MAX_DIFF_CHARS = 4 << 20


def module_diffs(store: ModuleStoreBase, a: str, b: str) -> dict[str, ArtifactDiff]:
    return {
        "lowered": _diff(_texts(store, a, b, ["lowered.relay"])),
        "c": _diff(_texts(store, a, b, sorted(set(_sources(store, a)) | set(_sources(store, b))))),
        "report": _diff([("metadata.json", _report(store, a), _report(store, b))]),
    }


def _sources(store: ModuleStoreBase, mid: str) -> list[str]:
    entries = store.manifest(mid) or []
    return [str(e["name"]) for e in entries if str(e["name"]).startswith("src/") and str(e["name"]).endswith((".c", ".h"))]


def _texts(store: ModuleStoreBase, a: str, b: str, names: Iterable[str]) -> list[tuple[str, str | None, str | None]]:
    return [(name, _read(store, a, name), _read(store, b, name)) for name in names]


def _read(store: ModuleStoreBase, mid: str, name: str) -> str | None:
    found = store.artifact(mid, name)  # raises ArtifactCorrupt for a file that is not what was stored
    if found is None:
        return None
    return found[0].read_text(encoding="utf-8", errors="replace")


def _report(store: ModuleStoreBase, mid: str) -> str:
    report = store.metadata(mid)
    if report is None:
        raise ProblemError.of("module-not-ready", f"module {mid} is no longer built")
    passes = report.get("passes")
    if isinstance(passes, list):
        report["passes"] = [{k: v for k, v in p.items() if k != "ms"} if isinstance(p, dict) else p for p in passes]
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def _diff(files: list[tuple[str, str | None, str | None]]) -> ArtifactDiff:
    parts: list[str] = []
    size = 0
    for name, old, new in files:
        if old == new:
            continue
        lines = difflib.unified_diff(
            (old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
            fromfile=f"a/{name}" if old is not None else "/dev/null",
            tofile=f"b/{name}" if new is not None else "/dev/null",
        )
        for line in lines:
            if not line.endswith("\n"):
                line += "\n\\ No newline at end of file\n"
            size += len(line)
            if size > MAX_DIFF_CHARS:
                return ArtifactDiff(changed=True, diff="".join(parts), truncated=True)
            parts.append(line)
    return ArtifactDiff(changed=any(old != new for _, old, new in files), diff="".join(parts))
