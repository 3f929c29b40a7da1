"""docker/docker-compose.yml and docker/Dockerfile, checked without docker: the structure that
`docker compose up --scale worker=N` relies on. tests/service/jobs/test_celery_topology.py runs the
same topology as processes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from service.store.s3 import S3_ENVIRONMENT, parse_url  # noqa: E402 - after the yaml skip

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER = REPO_ROOT / "docker"
Compose = dict[str, object]


@pytest.fixture(scope="module")
def compose() -> Compose:
    document = yaml.safe_load((DOCKER / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def _service(compose: Compose, name: str) -> dict[str, object]:
    services = compose["services"]
    assert isinstance(services, dict)
    service = services[name]
    assert isinstance(service, dict)
    return service


def _environment(service: dict[str, object]) -> dict[str, str]:
    env = service["environment"]
    if isinstance(env, list):  # the KEY=VALUE list spelling
        return dict(entry.split("=", 1) for entry in env)
    assert isinstance(env, dict)
    return {str(key): str(value) for key, value in env.items()}


def test_compose_has_the_api_the_workers_redis_and_minio(compose: Compose) -> None:
    services = compose["services"]
    assert isinstance(services, dict)
    assert set(services) == {"api", "worker", "redis", "minio", "minio-bucket"}


def test_api_serves_the_app_with_uvicorn(compose: Compose) -> None:
    command = _service(compose, "api")["command"]
    assert isinstance(command, list)
    assert command[:3] == ["uvicorn", "--factory", "service.app:create_app"]
    assert "0.0.0.0" in command
    # X-Forwarded-For is for the app to judge (RELAYCC_TRUSTED_PROXIES), not for uvicorn.
    assert "--no-proxy-headers" in command


def test_worker_runs_the_celery_app(compose: Compose) -> None:
    command = _service(compose, "worker")["command"]
    assert isinstance(command, list)
    assert command[:4] == ["celery", "-A", "service.jobs.celery_app", "worker"]


def test_worker_can_be_scaled(compose: Compose) -> None:
    # A fixed container name or a published port would make a second replica fail to start.
    worker = _service(compose, "worker")
    assert "container_name" not in worker
    assert "ports" not in worker


def test_api_and_workers_share_the_store_and_the_broker(compose: Compose) -> None:
    api, worker = _service(compose, "api"), _service(compose, "worker")
    for service in (api, worker):
        env = _environment(service)
        assert env["RELAYCC_QUEUE"] == "celery"
        assert re.fullmatch(r"redis://redis:6379/\d+", env["RELAYCC_REDIS_URL"])
    assert _environment(api) == _environment(worker)


def test_the_store_is_the_minio_bucket_and_the_service_has_every_variable_the_store_reads(
    compose: Compose,
) -> None:
    env = _environment(_service(compose, "api"))
    bucket, _ = parse_url(env["RELAYCC_STORE"])
    assert set(S3_ENVIRONMENT) <= set(env)
    assert env["AWS_ENDPOINT_URL"] == "http://minio:9000"
    minio = _environment(_service(compose, "minio"))
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"])
    # The bucket exists before the service starts: made by the one-shot minio-bucket service.
    made = " ".join(map(str, _service(compose, "minio-bucket")["command"]))  # type: ignore[arg-type]
    assert f"mb --ignore-existing store/{bucket}" in made
    assert _service(compose, "api")["depends_on"]["minio-bucket"] == {"condition": "service_completed_successfully"}  # type: ignore[index]
    declared = compose["volumes"]
    assert isinstance(declared, dict) and "minio-data" in declared


def test_every_service_has_a_healthcheck(compose: Compose) -> None:
    for name in ("api", "worker", "redis", "minio"):
        healthcheck = _service(compose, name)["healthcheck"]
        assert isinstance(healthcheck, dict)
        test = healthcheck["test"]
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL")


def test_api_and_workers_start_once_redis_is_healthy_and_the_bucket_exists(compose: Compose) -> None:
    for name in ("api", "worker"):
        assert _service(compose, name)["depends_on"] == {
            "redis": {"condition": "service_healthy"},
            "minio-bucket": {"condition": "service_completed_successfully"},
        }


def test_images_are_built_from_the_repository_with_the_dockerfile(compose: Compose) -> None:
    for name in ("api", "worker"):
        build = _service(compose, name)["build"]
        assert isinstance(build, dict)
        context = (DOCKER / str(build["context"])).resolve()
        assert context == REPO_ROOT
        assert (context / str(build["dockerfile"])).is_file()


def test_dockerfile_installs_the_project_on_python_311_with_a_c_compiler() -> None:
    text = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.MULTILINE)
    for package in ("gcc", "libopenblas-dev"):
        assert re.search(rf"apt-get install[^\n]*\b{re.escape(package)}\b", text)
    assert re.search(r"^RUN pip install \.$", text, re.MULTILINE)
    copies = re.findall(r"^COPY (.+)$", text, re.MULTILINE)
    assert copies
    for line in copies:
        for source in line.split()[:-1]:  # the last word is the destination
            assert (REPO_ROOT / source).exists(), f"COPY {source}: no such path in the repository"
