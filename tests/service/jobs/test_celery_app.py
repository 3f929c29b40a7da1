"""The Celery back end without a broker: its configuration, and its tasks run eagerly (in the
test process) against a temporary store. tests/service/jobs/test_celery_topology.py runs it for real,
with Redis and worker processes."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from celery.exceptions import TimeLimitExceeded

import service.jobs.celery_app as celery_app
from service.arrays import decode_npz, encode_npz
from service.jobs.celery_app import CeleryQueue, RelayccCelery, celery_config, time_limits
from service.jobs.normalize import checked_options, normal_form
from service.jobs.worker import run_compile_job
from service.problems import make_problem
from service.settings import Settings
from service.store.module_store import JobLimits, ModuleStore, worker_identity
from tests.service.support import SMALL_RELAY

MAX_ATTEMPTS = 3


def _settings(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {"store": tmp_path / "store", "workers": 1, "compile_seconds": 120.0}
    values.update(overrides)
    return Settings.model_validate(values)


def _eager_app(settings: Settings) -> RelayccCelery:
    app = RelayccCelery(lambda: settings)
    app.conf.update(task_always_eager=True, task_store_eager_result=False)
    return app


def _stored_job(store: ModuleStore) -> str:
    limits = JobLimits(compile_seconds=60.0, memory_bytes=1 << 30, max_attempts=MAX_ATTEMPTS)
    module_id, created = store.create({"relay": "model", "module_name": "default"}, {}, limits, "test")
    assert created
    return module_id


def test_config_delivers_a_job_again_when_its_worker_dies(tmp_path: Path) -> None:
    config = celery_config(_settings(tmp_path))

    assert config["task_acks_late"] is True
    assert config["task_reject_on_worker_lost"] is True
    assert config["worker_prefetch_multiplier"] == 1
    assert config["worker_max_tasks_per_child"] == celery_app.MAX_TASKS_PER_CHILD
    assert config["accept_content"] == ["json"]


def test_time_limits_come_after_the_jobs_own_and_before_redelivery(tmp_path: Path) -> None:
    settings = _settings(tmp_path, compile_seconds=120.0)
    config = celery_config(settings)
    soft, hard = time_limits(settings)

    assert settings.compile_seconds < soft < hard
    assert (config["task_soft_time_limit"], config["task_time_limit"]) == (soft, hard)
    transport = config["broker_transport_options"]
    assert isinstance(transport, dict) and transport["visibility_timeout"] > hard


def test_broker_and_result_backend_are_the_redis_url(tmp_path: Path) -> None:
    config = celery_config(_settings(tmp_path, redis_url="redis://cache.internal:6380/2"))

    assert config["broker_url"] == config["result_backend"] == "redis://cache.internal:6380/2"


def test_app_reads_settings_only_when_celery_first_needs_its_configuration(tmp_path: Path) -> None:
    settings = _settings(tmp_path, redis_url="redis://127.0.0.1:6390/0")
    reads: list[Settings] = []

    def source() -> Settings:
        reads.append(settings)
        return settings

    app = RelayccCelery(source)
    assert reads == []

    assert app.conf.broker_url == "redis://127.0.0.1:6390/0"
    assert app.conf.task_time_limit == time_limits(settings)[1]
    assert len(reads) == 1


def test_compile_task_builds_the_stored_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(tmp_path)
    store = ModuleStore(settings.store)
    module_id = _stored_job(store)
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(celery_app, "run_compile_job", lambda root, mid: seen.append((root.location, mid)))

    _eager_app(settings).compile_task.apply_async((module_id,))

    assert seen == [(str(settings.store), module_id)]


def test_job_whose_compile_child_crashes_every_time_fails_after_its_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path)
    store = ModuleStore(settings.store)
    module_id = _stored_job(store)
    runs: list[int] = []

    def crashing_job(root: str, mid: str) -> None:
        # What run_compile_job records when the isolated compile process is killed.
        if store.begin_attempt(mid, worker_identity()) is None:
            return
        runs.append(1)
        store.fail(mid, make_problem("worker-died", "the process compiling the module died"), retryable=True)

    monkeypatch.setattr(celery_app, "run_compile_job", crashing_job)

    # Eager: every resubmission runs at once, inside this call; a loop would never return.
    _eager_app(settings).compile_task.apply_async((module_id,))

    status = store.status(module_id)
    assert status is not None
    assert len(runs) == MAX_ATTEMPTS
    assert (status["state"], status["attempts"]) == ("failed", MAX_ATTEMPTS)


def test_hard_time_limit_fails_the_running_job_with_a_time_limit_problem(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = ModuleStore(settings.store)
    module_id = _stored_job(store)
    assert store.begin_attempt(module_id, worker_identity()) is not None
    app = RelayccCelery(lambda: settings)

    app.compile_task.on_failure(TimeLimitExceeded(180.0), "task-id", (module_id,), {}, None)

    status = store.status(module_id)
    assert status is not None and status["state"] == "failed"
    error = status["error"]
    assert isinstance(error, dict) and str(error["type"]).endswith("/time-limit")


def test_a_failure_report_leaves_a_finished_job_alone(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = ModuleStore(settings.store)
    module_id = _stored_job(store)
    assert store.begin_attempt(module_id, worker_identity()) is not None
    work = store.new_work_dir(module_id)
    (work / "metadata.json").write_text("{}")
    store.succeed(module_id, work, {})

    RelayccCelery(lambda: settings).compile_task.on_failure(
        TimeLimitExceeded(180.0), "task-id", (module_id,), {}, None
    )

    status = store.status(module_id)
    assert status is not None and status["state"] == "succeeded"


def test_run_task_answers_a_problem_for_a_module_that_is_not_built(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = ModuleStore(settings.store)
    module_id = _stored_job(store)

    result = _eager_app(settings).run_task.apply_async((module_id, "", 1, 10.0, 1 << 30)).get()

    assert isinstance(result, dict)
    assert str(result["problem"]["type"]).endswith("/module-not-ready")


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_queue_is_not_ready_without_redis(tmp_path: Path) -> None:
    queue = CeleryQueue(_settings(tmp_path, redis_url=f"redis://127.0.0.1:{_closed_port()}/0"))
    try:
        assert queue.ready() is False
    finally:
        queue.close()


def test_closed_queue_refuses_jobs(tmp_path: Path) -> None:
    queue = CeleryQueue(_settings(tmp_path))
    queue.close()

    submissions: list[Callable[[], object]] = [
        lambda: queue.submit_compile("0" * 64),
        lambda: queue.submit_run("0" * 64, b"", repeat=1, seconds=1.0, memory_bytes=1 << 30),
    ]
    for submit in submissions:
        with pytest.raises(RuntimeError):
            submit()
    assert queue.ready() is False


def test_run_task_answers_artifact_corrupt_for_a_module_whose_library_was_tampered_with(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = ModuleStore(settings.store)
    module_id = _stored_job(store)
    store.begin_attempt(module_id, worker_identity())
    work = store.new_work_dir(module_id)
    (work / "metadata.json").write_text("{}")
    (work / "libdefault.so").write_bytes(b"\x7fELF")
    store.succeed(module_id, work, {})
    with open(store.modules / module_id / "artifacts" / "libdefault.so", "ab") as stream:
        stream.write(b"tampered")

    result = _eager_app(settings).run_task.apply_async((module_id, "", 1, 10.0, 1 << 30)).get()

    assert isinstance(result, dict)
    assert str(result["problem"]["type"]).endswith("/artifact-corrupt")
    assert str(settings.store) not in str(result["problem"]["detail"])


def test_a_celery_worker_does_not_log_task_return_values_at_info() -> None:
    import logging

    from celery import signals

    assert celery_app.app is not None  # importing it connected its signal handlers
    trace = logging.getLogger("celery.app.trace")
    trace.setLevel(logging.NOTSET)
    # What `celery worker` sends once its logging is set up.
    signals.after_setup_logger.send(sender=None, logger=logging.getLogger("celery"), loglevel=logging.INFO,
                                    logfile=None, format="", colorize=False)

    assert not trace.isEnabledFor(logging.INFO)  # "Task ... succeeded in 0.1s: <return value>"
    assert trace.isEnabledFor(logging.ERROR)



def test_run_task_puts_the_outputs_in_the_store_and_answers_only_their_reference(tmp_path: Path) -> None:
    settings = _settings(tmp_path, sandbox="off")
    store = ModuleStore(settings.store)
    # Forked from this test process, whose address space counts against the limit.
    limits = JobLimits(compile_seconds=60.0, memory_bytes=4 << 30, max_attempts=1, sandbox="off")
    normal = normal_form(SMALL_RELAY, checked_options("c", "default", {}), {})
    module_id, _ = store.create(normal, {}, limits, "test")
    run_compile_job(str(settings.store), module_id)
    status = store.status(module_id)
    assert status is not None and status["state"] == "succeeded", status["error"] if status else None
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, dtype=np.float32)
    inputs = base64.b64encode(encode_npz({"x": x, "y": y})).decode("ascii")

    result = _eager_app(settings).run_task.apply_async((module_id, inputs, 1, 30.0, 4 << 30, "off")).get()

    # What Redis would carry back: a reference, no tensor.
    assert set(result) == {"outputs_ref"} and len(json.dumps(result)) < 100
    outputs = decode_npz(store.take_run_output(result["outputs_ref"]), "outputs")
    np.testing.assert_allclose(outputs["out0"], np.maximum(x + y, 0), rtol=1e-6)
