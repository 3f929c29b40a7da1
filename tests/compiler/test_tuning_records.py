from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.diagnostics import InputError
from compiler.tuning_records import FORMAT, load_records, schedules_from


def write_records(path: Path, records: object, fmt: str = FORMAT) -> Path:
    path.write_text(json.dumps({"format": fmt, "records": records}))
    return path


def test_records_load_as_schedules_by_key(tmp_path: Path) -> None:
    path = write_records(tmp_path / "r.json", [
        {"key": "0123456789abcdef", "kernel": "k", "schedule": {"tile_rows": 5}, "us": 1.0, "rule_us": 2.0},
        {"key": "fedcba9876543210", "schedule": {}},
    ])

    assert load_records(path) == {"0123456789abcdef": {"tile_rows": 5}, "fedcba9876543210": {}}


def test_invalid_json_is_reported_at_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"format": "relaycc.tuning/1",\n "records": [}\n')

    with pytest.raises(InputError, match=r"r\.json:2:14: invalid tuning records JSON"):
        load_records(path)


@pytest.mark.parametrize(("records", "fmt", "message"), [
    ([], "tvm.autotvm/1", "format must be 'relaycc.tuning/1'"),
    ({"key": "x"}, FORMAT, "records must be a list"),
    (["x"], FORMAT, r"records\[0\]: a record is a JSON object"),
    ([{"key": "12AB"}], FORMAT, r"records\[0\]: key must be 16 lowercase hex digits, got '12AB'"),
    ([{"key": "0" * 16, "schedule": {"tiles": 3}}], FORMAT, r"records\[0\]\.schedule: unknown schedule knob 'tiles'"),
])
def test_a_bad_records_file_names_the_entry(tmp_path: Path, records: object, fmt: str, message: str) -> None:
    path = write_records(tmp_path / "r.json", records, fmt)

    with pytest.raises(InputError, match=message):
        load_records(path)


def test_a_document_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(InputError, match="a tuning records file is a JSON object"):
        schedules_from([1], "given")
