"""The /modules routes on the seed-001 MLP: status, metadata, artifacts, restarts."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.support import ROOT, MODELS, make_app, make_settings, small_relay, wait_until_done

PROBLEMS = "https://relaycc.dev/problems/"
REPO_ROOT = ROOT
MLP_RELAY = (MODELS / "mlp_seed001.relay").read_text()


@pytest.fixture(scope="module")
def mlp_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return make_settings(tmp_path_factory.mktemp("mlp") / "store")


@pytest.fixture(scope="module")
def mlp_client(mlp_settings: Settings) -> Iterator[TestClient]:
    with TestClient(make_app(mlp_settings)) as client:
        yield client


@pytest.fixture(scope="module")
def mlp_id(mlp_client: TestClient) -> str:
    response = mlp_client.post("/compile", json={"relay": MLP_RELAY, "module_name": "mlp"})
    assert response.status_code == 202
    status = wait_until_done(mlp_client, response.json()["id"])
    assert status["state"] == "succeeded", status["error"]
    return str(status["id"])


def test_status_of_a_built_module(mlp_client: TestClient, mlp_id: str) -> None:
    status = mlp_client.get(f"/modules/{mlp_id}").json()

    assert (status["state"], status["module_name"], status["target"]) == ("succeeded", "mlp", "c")
    assert status["error"] is None and status["progress"] is None
    assert status["finished_at"] >= status["started_at"] >= status["created_at"]


def test_metadata_is_the_call_lowered_report(mlp_client: TestClient, mlp_id: str) -> None:
    response = mlp_client.get(f"/modules/{mlp_id}/metadata")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    report = response.json()
    assert report["format"] == "relaycc.metadata/1"
    assert report["module_name"] == "mlp"
    assert [c["kind"] for c in report["calls"]] == ["prim_func"] * len(report["calls"])
    assert any("dense" in c["callee"] for c in report["calls"])


def test_artifact_list_names_the_outdir_files(mlp_client: TestClient, mlp_id: str) -> None:
    listing = mlp_client.get(f"/modules/{mlp_id}/artifacts").json()

    names = {a["name"] for a in listing["artifacts"]}
    assert {"metadata.json", "lowered.relay", "libmlp.so", "mlp.tar", "include/tvmgen_mlp.h",
            "src/mlp_lib0.c", "src/mlp_lib1.c"} <= names
    library = next(a for a in listing["artifacts"] if a["name"] == "libmlp.so")
    assert library["href"] == f"/modules/{mlp_id}/artifacts/libmlp.so"


@pytest.mark.parametrize(("name", "content_type"), [("libmlp.so", "application/octet-stream"),
                                                    ("mlp.tar", "application/x-tar")])
def test_artifact_download_has_a_sha256_etag_and_honours_if_none_match(
    mlp_client: TestClient, mlp_id: str, name: str, content_type: str
) -> None:
    response = mlp_client.get(f"/modules/{mlp_id}/artifacts/{name}")

    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    digest = hashlib.sha256(response.content).hexdigest()
    assert response.headers["etag"] == f'"{digest}"'

    cached = mlp_client.get(f"/modules/{mlp_id}/artifacts/{name}", headers={"If-None-Match": f'W/"{digest}"'})
    stale = mlp_client.get(f"/modules/{mlp_id}/artifacts/{name}", headers={"If-None-Match": '"other"'})

    assert cached.status_code == 304 and cached.content == b""
    assert cached.headers["etag"] == f'"{digest}"'
    assert stale.status_code == 200


def test_the_mlf_archive_holds_the_model_library_format(mlp_client: TestClient, mlp_id: str) -> None:
    content = mlp_client.get(f"/modules/{mlp_id}/artifacts/mlp.tar").content

    with tarfile.open(fileobj=io.BytesIO(content)) as archive:
        names = archive.getnames()
    assert any(n.endswith("metadata.json") for n in names)
    assert any(n.endswith("mlp_lib1.c") for n in names)


def test_a_nested_artifact_is_served_by_its_listed_name(mlp_client: TestClient, mlp_id: str) -> None:
    response = mlp_client.get(f"/modules/{mlp_id}/artifacts/include/tvmgen_mlp.h")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/x-c")
    assert "tvmgen_mlp_run" in response.text


@pytest.mark.parametrize("name", ["../status.json", "..%2Frequest.json", "request.json", "artifacts/metadata.json"])
def test_names_outside_the_artifact_list_are_not_found(mlp_client: TestClient, mlp_id: str, name: str) -> None:
    response = mlp_client.get(f"/modules/{mlp_id}/artifacts/{name}")

    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("module_id", ["0" * 64, "not-an-id", "..", "A" * 64])
def test_unknown_module_ids_answer_404_problem(mlp_client: TestClient, module_id: str) -> None:
    for path in ("", "/metadata", "/artifacts", "/artifacts/metadata.json", "/inspect"):
        if module_id == ".." and path == "":
            continue  # the client resolves /modules/.. to /, the explorer page
        response = mlp_client.get(f"/modules/{module_id}{path}")
        assert response.status_code == 404, path
        assert response.json()["type"] == PROBLEMS + "not-found"


def test_inspect_is_what_relaycc_inspect_json_prints_for_the_stored_text(
    mlp_client: TestClient, mlp_id: str, tmp_path: Path
) -> None:
    response = mlp_client.get(f"/modules/{mlp_id}/inspect")

    assert response.status_code == 200
    model = tmp_path / "mlp.relay"
    model.write_text(MLP_RELAY)
    cli = subprocess.run(
        [sys.executable, "-m", "compiler", "inspect", "--json", str(model)],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    assert cli.returncode == 0, cli.stderr
    assert response.json() == json.loads(cli.stdout)
    assert response.json()["compiles_to_c"] is True


def test_inspect_of_a_failed_module_says_why_it_runs_in_the_interpreter_only(tmp_path: Path) -> None:
    relay = """#[version = "0.0.5"]
def @main(%c: bool, %x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  ref_read(ref(negative(%x)))
}
"""
    with TestClient(make_app(make_settings(tmp_path / "store"))) as client:
        module_id = client.post("/compile", json={"relay": relay}).json()["id"]
        assert wait_until_done(client, module_id)["state"] == "failed"
        info = client.get(f"/modules/{module_id}/inspect").json()

    assert info["inputs"] == [{"name": "c", "shape": [], "dtype": "bool"}, {"name": "x", "shape": [2], "dtype": "float32"}]
    assert info["operators"] == {"negative": 1}
    assert info["compiles_to_c"] is False
    assert info["interpreter_only_because"].startswith("relay:3:3: error: ")


def test_a_module_that_is_not_built_has_no_artifacts_yet(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", job_start_delay_seconds=30)
    with TestClient(make_app(settings)) as client:
        module_id = client.post("/compile", json={"relay": small_relay(10)}).json()["id"]
        metadata = client.get(f"/modules/{module_id}/metadata")
        artifacts = client.get(f"/modules/{module_id}/artifacts")

    assert metadata.status_code == artifacts.status_code == 409
    assert metadata.json()["type"] == PROBLEMS + "module-not-ready"


def test_a_restarted_service_still_serves_a_finished_module(tmp_path: Path) -> None:
    # One service per store: the first stops before the second starts.
    settings = make_settings(tmp_path / "store")
    with TestClient(make_app(settings)) as client:
        module_id = _built(client, small_relay(14))
        before = client.get(f"/modules/{module_id}/artifacts/libdefault.so")

    with TestClient(make_app(settings)) as restarted:
        status = restarted.get(f"/modules/{module_id}").json()
        after = restarted.get(f"/modules/{module_id}/artifacts/libdefault.so")
        again = restarted.post("/compile", json={"relay": small_relay(14)})

    assert status["state"] == "succeeded"
    assert after.content == before.content
    assert again.status_code == 200 and again.json()["id"] == module_id


def test_a_restarted_service_compiles_the_jobs_left_in_flight(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", job_start_delay_seconds=30)
    with TestClient(make_app(settings)) as client:
        module_id = client.post("/compile", json={"relay": small_relay(11)}).json()["id"]
        status = wait_until_done_or_running(client, module_id)
        assert status["state"] == "running"
    # The service stopped mid-compile; it comes back without the delay.
    settings.job_start_delay_seconds = 0
    with TestClient(make_app(settings)) as client:
        status = wait_until_done(client, module_id)

    assert status["state"] == "succeeded", status["error"]
    assert status["attempts"] == 2


def test_a_job_whose_worker_is_killed_fails_and_the_next_job_succeeds(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", job_start_delay_seconds=30)
    with TestClient(make_app(settings)) as client:
        doomed = client.post("/compile", json={"relay": small_relay(12)}).json()["id"]
        running = wait_until_done_or_running(client, doomed)
        worker_pid = _worker_pid(settings, doomed)

        os.kill(worker_pid, signal.SIGKILL)

        failed = wait_until_done(client, doomed)
        settings.job_start_delay_seconds = 0
        following = client.post("/compile?wait=60", json={"relay": small_relay(13)}).json()
        # The same request again retries the job whose worker died.
        retried = client.post("/compile?wait=60", json={"relay": small_relay(12)}).json()

    assert running["state"] == "running"
    assert failed["state"] == "failed"
    assert failed["error"]["type"] == PROBLEMS + "worker-died"
    assert str(worker_pid) in failed["error"]["detail"]
    assert following["state"] == "succeeded", following["error"]
    assert (retried["id"], retried["state"], retried["attempts"]) == (doomed, "succeeded", 2)


def wait_until_done_or_running(client: TestClient, module_id: str, timeout: float = 30.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        status = client.get(f"/modules/{module_id}").json()
        if status["state"] != "queued" or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def _worker_pid(settings: Settings, module_id: str) -> int:
    import json

    status = json.loads((settings.store / "modules" / module_id / "status.json").read_text())
    return int(status["worker"]["pid"])


def _built(client: TestClient, relay: str) -> str:
    response = client.post("/compile?wait=60", json={"relay": relay})
    status = wait_until_done(client, response.json()["id"])
    assert status["state"] == "succeeded", status["error"]
    return str(status["id"])


def _tamper(settings: Settings, module_id: str, name: str, data: bytes = b"TAMPERED-BYTES") -> None:
    with open(settings.store / "modules" / module_id / "artifacts" / name, "ab") as stream:
        stream.write(data)


def test_tampered_library_is_refused_with_a_problem_naming_the_module(
    client: TestClient, settings: Settings
) -> None:
    module_id = _built(client, small_relay(40))
    url = f"/modules/{module_id}/artifacts/libdefault.so"
    etag = client.get(url).headers["etag"]
    _tamper(settings, module_id, "libdefault.so")

    revalidated = client.get(url, headers={"If-None-Match": etag})
    afterwards = client.get(url)
    status = client.get(f"/modules/{module_id}").json()

    assert revalidated.status_code == 500
    assert revalidated.headers["content-type"] == "application/problem+json"
    problem = revalidated.json()
    assert problem["type"] == PROBLEMS + "artifact-corrupt"
    assert module_id in problem["detail"] and "libdefault.so" in problem["detail"]
    assert "TAMPERED" not in revalidated.text and str(settings.store.resolve()) not in revalidated.text
    # Set aside: never served again, and the module says why.
    assert afterwards.status_code == 409
    assert status["state"] == "failed" and status["error"]["type"] == PROBLEMS + "artifact-corrupt"


def test_tampered_metadata_is_refused_and_never_served_as_json(client: TestClient, settings: Settings) -> None:
    module_id = _built(client, small_relay(41))
    _tamper(settings, module_id, "metadata.json", b"\n<not json>")

    response = client.get(f"/modules/{module_id}/metadata")

    assert response.status_code == 500
    assert response.json()["type"] == PROBLEMS + "artifact-corrupt"
    assert "not json" not in response.text


def test_the_next_identical_compile_rebuilds_a_module_whose_artifacts_were_corrupt(
    client: TestClient, settings: Settings
) -> None:
    module_id = _built(client, small_relay(42))
    original = client.get(f"/modules/{module_id}/artifacts/libdefault.so")
    _tamper(settings, module_id, "libdefault.so")
    assert client.get(f"/modules/{module_id}/artifacts/libdefault.so").status_code == 500

    again = client.post("/compile", json={"relay": small_relay(42)})
    rebuilt = wait_until_done(client, module_id)
    served = client.get(f"/modules/{module_id}/artifacts/libdefault.so")
    metrics = client.get("/metrics").text

    assert again.status_code == 202 and again.json()["id"] == module_id
    assert rebuilt["state"] == "succeeded", rebuilt["error"]
    assert served.status_code == 200
    assert served.headers["etag"] == f'"{hashlib.sha256(served.content).hexdigest()}"'
    assert served.content == original.content
    assert "relaycc_artifact_integrity_failures_total 1" in metrics


def test_running_a_corrupted_library_answers_artifact_corrupt_not_an_input_error(
    client: TestClient, settings: Settings
) -> None:
    module_id = _built(client, small_relay(43))
    library = settings.store / "modules" / module_id / "artifacts" / "libdefault.so"
    library.write_bytes(b"\x7fELF but not a library any more")

    response = client.post(f"/modules/{module_id}/run", json={"inputs_npz": _zeros_npz()})

    assert response.status_code == 500
    assert response.json()["type"] == PROBLEMS + "artifact-corrupt"
    assert module_id in response.json()["detail"]
    assert str(settings.store.resolve()) not in response.text and "/artifacts/" not in response.json()["detail"]


def test_a_module_stored_without_digests_is_served_with_digests_recorded_on_first_use(
    client: TestClient, settings: Settings
) -> None:
    module_id = _built(client, small_relay(44))
    path = settings.store / "modules" / module_id / "status.json"
    status = json.loads(path.read_text())
    for entry in status["artifacts"]:
        del entry["sha256"]
    path.write_text(json.dumps(status))

    listing = client.get(f"/modules/{module_id}/artifacts")
    library = client.get(f"/modules/{module_id}/artifacts/libdefault.so")

    assert listing.status_code == 200
    entry = next(a for a in listing.json()["artifacts"] if a["name"] == "libdefault.so")
    assert entry["sha256"] == hashlib.sha256(library.content).hexdigest()
    assert library.headers["etag"] == f'"{entry["sha256"]}"'
    assert all("sha256" in e for e in json.loads(path.read_text())["artifacts"])


def test_a_status_with_a_missing_key_answers_404_and_the_module_can_be_built_again(
    client: TestClient, settings: Settings
) -> None:
    module_id = _built(client, small_relay(45))
    path = settings.store / "modules" / module_id / "status.json"
    status = json.loads(path.read_text())
    del status["id"]
    path.write_text(json.dumps(status))

    answers = [client.get(f"/modules/{module_id}{suffix}") for suffix in ("", "/metadata", "/artifacts")]
    again = client.post("/compile?wait=60", json={"relay": small_relay(45)})

    assert [a.status_code for a in answers] == [404, 404, 404]
    assert again.status_code == 200 and again.json()["state"] == "succeeded"


def _zeros_npz() -> str:
    import numpy as np

    from tests.service.support import npz_b64

    zeros = np.zeros((2, 3), dtype="float32")
    return npz_b64(x=zeros, y=zeros)


def test_inspecting_a_module_whose_stored_request_is_corrupt_answers_404(client: TestClient, settings: Settings) -> None:
    module_id = client.post("/compile", json={"relay": small_relay(46)}).json()["id"]
    wait_until_done(client, module_id)
    (settings.store / "modules" / module_id / "request.json").write_text('{"no": "relay"}')

    response = client.get(f"/modules/{module_id}/inspect")

    assert response.status_code == 404
    assert response.json()["type"] == PROBLEMS + "not-found"
