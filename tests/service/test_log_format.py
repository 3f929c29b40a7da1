from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import httpx

from service.log_format import JsonFormatter, configure_process, job
from tests.service.support import serving

MARKER = "zebracorn7731"
VALUE = 4417.3125  # exact in float32, and in no log line by chance
MODEL = f"""#[version = "0.0.5"]
// {MARKER} in the source text
def @main(%{MARKER}_x: Tensor[(2, 2), float32]) -> Tensor[(2, 2), float32] {{
  nn.relu(%{MARKER}_x)
}}
"""


def test_a_json_line_has_time_level_logger_message_and_the_job_it_was_logged_in() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("relaycc.test-log-format")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with job("abc123"):
            logger.info("started %d", 1, extra={"payload": "never written"})
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)

    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert set(inside) == {"time", "level", "logger", "message", "job_id"}
    assert inside["message"] == "started 1" and inside["job_id"] == "abc123" and inside["level"] == "INFO"
    assert "job_id" not in outside and outside["level"] == "WARNING"


def test_configure_process_replaces_the_root_handlers(capsys) -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        configure_process("json")
        logging.getLogger("relaycc.x").info("hello")
        assert json.loads(capsys.readouterr().err.strip())["message"] == "hello"
    finally:
        root.handlers[:] = saved
        root.setLevel(level)


def test_the_json_log_of_a_compile_and_a_run_carries_job_ids_and_no_source_inputs_or_outputs(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with serving(store, workers=1, log_format="json") as server:
        port = server.base.rsplit(":", 1)[1]
        built = httpx.post(f"{server.base}/compile?wait=60", json={"relay": MODEL}, timeout=90).json()
        assert built["state"] == "succeeded", built
        ran = httpx.post(f"{server.base}/modules/{built['id']}/run",
                         json={"inputs": {f"{MARKER}_x": [[VALUE, 1.0], [2.0, 3.0]]}}, timeout=60)
        assert ran.status_code == 200, ran.text
        assert ran.json()["outputs"]["out0"]["data"][0][0] == VALUE
    text = (tmp_path / f"server-{port}.log").read_text()

    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    compile_lines = [line for line in lines if line.get("job_id") == built["id"]]
    assert [line["message"] for line in compile_lines][-1] == "compile job succeeded"
    run_lines = [line for line in lines if str(line.get("job_id", "")).startswith("run-")]
    assert any(built["id"] in line["message"] and "succeeded" in line["message"] for line in run_lines)
    assert MARKER not in text
    assert str(VALUE) not in text and "4417" not in text
