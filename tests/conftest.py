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


# The modules that take longest (the `--durations=0` of session 38's `make test`), run first.
# xdist hands out tests in collection order, and the slow service modules, collected last, kept
# one worker busy for a minute and a half at the end while the others had nothing left to do.
# A module missing from the list only runs in its usual place.
_LONGEST_FIRST = (
    "tests/compiler/backend/test_aot_dynamic.py",
    "tests/e2e/test_tvm_printed_models.py",
    "tests/compiler/ops/test_domains.py",
    "tests/service/jobs/test_celery_topology.py",
    "tests/compiler/ops/test_lowering.py",
    "tests/compiler/frontend/onnx/test_architectures.py",
    "tests/service/test_load.py",
    "tests/service/test_chaos.py",
    "tests/compiler/testing/test_onnx_conformance.py",
    "tests/service/web/test_explorer.py",
    "tests/service/api/test_running.py",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: k for k, path in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep their order
