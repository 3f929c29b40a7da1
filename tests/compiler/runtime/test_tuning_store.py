from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.runtime import tuning_store
from compiler.runtime.tuning_store import remember, store_path, stored_bytes, stored_document

FIRST = {"format": "relaycc.tuning/1", "threads": 2, "machine": {"cpu": "A"},
         "records": [{"key": "a" * 16, "schedule": {"tile_rows": 5}}, {"key": "b" * 16, "schedule": {}}]}
SECOND = {"format": "relaycc.tuning/1", "threads": 1, "machine": {"cpu": "A"},
          "records": [{"key": "b" * 16, "schedule": {"order": "rows"}}]}


def test_a_second_tuning_run_replaces_the_records_of_its_kernels_and_keeps_the_others(tmp_path: Path) -> None:
    remember(tmp_path, FIRST)
    remember(tmp_path, SECOND)

    stored = stored_document(tmp_path)
    assert stored is not None
    assert stored["records"] == [{"key": "a" * 16, "schedule": {"tile_rows": 5}, "threads": 2},
                                 {"key": "b" * 16, "schedule": {"order": "rows"}, "threads": 1}]


def test_each_cpu_has_its_own_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remember(tmp_path, FIRST)
    monkeypatch.setattr(tuning_store, "cpu_identity", lambda: "model name : another CPU\nflags : avx2")

    assert stored_document(tmp_path) is None
    assert len(list((tmp_path / "tuning").glob("*.json"))) == 1


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", json.dumps({"format": "other/1", "records": []})])
def test_a_store_that_is_not_a_records_document_reads_as_none(tmp_path: Path, text: str) -> None:
    path = store_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(text)

    assert stored_document(tmp_path) is None
    assert stored_bytes(tmp_path) == text.encode()


def test_an_empty_cache_has_no_records(tmp_path: Path) -> None:
    assert stored_document(tmp_path) is None and stored_bytes(tmp_path) == b""
