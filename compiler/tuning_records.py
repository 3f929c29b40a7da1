"""Tuning records: the schedules `relaycc tune` measured best, by kernel key.

A records file is JSON (tvmc's `--tuning-records` takes one too, in TVM's own format):

    {"format": "relaycc.tuning/1",
     "machine": {"cpu": "AMD EPYC", "vector_lanes": 8},
     "threads": 1,
     "records": [{"key": "9c0e5a1f2b3d4e60", "kernel": "tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add",
                  "schedule": {"tile_rows": 5}, "us": 812.0, "rule_us": 866.5}]}

`key` is LowerTE's `schedule_key` of the kernel's primitive function; `schedule` holds the knobs
of compiler/ops/kernels/schedule.py that differ from the rules (an empty one: the rules won).
`kernel`, `us` and `rule_us` are for people: the name the kernel had in the tuned model, its
least time with the schedule and with the rules. A build applies the schedules of the keys it
meets and ignores the rest, so one file may serve many models.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from compiler.diagnostics import InputError, read_json_file
from compiler.ops.kernels.schedule import check_schedule

FORMAT = "relaycc.tuning/1"
_KEY = re.compile(r"[0-9a-f]{16}")


def schedules_from(document: object, where: str) -> dict[str, dict[str, object]]:
    """The schedules of a records document by key; InputError naming `where` and the entry."""
    if not isinstance(document, Mapping):
        raise InputError(f"{where}: a tuning records file is a JSON object")
    if document.get("format") != FORMAT:
        raise InputError(f"{where}: format must be {FORMAT!r}, got {document.get('format')!r}")
    records = document.get("records")
    if not isinstance(records, list):
        raise InputError(f"{where}: records must be a list")
    schedules: dict[str, dict[str, object]] = {}
    for i, record in enumerate(records):
        at = f"{where}: records[{i}]"
        if not isinstance(record, Mapping):
            raise InputError(f"{at}: a record is a JSON object")
        key = record.get("key")
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise InputError(f"{at}: key must be 16 lowercase hex digits, got {key!r}")
        try:
            schedules[key] = check_schedule(record.get("schedule", {}), f"{at}.schedule")
        except ValueError as err:
            raise InputError(str(err)) from None
    return schedules


def load_records(path: Path) -> dict[str, dict[str, object]]:
    """The schedules of the records file at `path`."""
    return schedules_from(read_json_file(path, "tuning records"), str(path))
