"""Settings every test process shares.

Builds go through the compile cache (compiler/runtime/compile_cache.py). The suite gets a cache
of its own, made by the controlling process before the xdist workers start (they inherit it) and
removed at the end: models compiled by several tests share their objects within a run, and no
run reads objects a previous one (or the user's own builds) left behind. Set RELAYCC_CACHE_DIR
to choose another (`off` for none).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

_OWN_CACHE = pytest.StashKey[str]()

# pytest keeps the assert-rewritten code of the test modules beside them only where bytecode may
# be written; under PYTHONDONTWRITEBYTECODE (set on our CI machines) each test process of every
# run rewrote and compiled all ~280 test modules again, half of collecting the suite. This
# conftest is imported before any test module. The Makefile's compileall writes our other
# modules' bytecode for the same reason.
sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or "RELAYCC_CACHE_DIR" in os.environ:
        return
    path = tempfile.mkdtemp(prefix="relaycc-test-cache-")
    os.environ["RELAYCC_CACHE_DIR"] = path
    config.stash[_OWN_CACHE] = path


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_OWN_CACHE, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
