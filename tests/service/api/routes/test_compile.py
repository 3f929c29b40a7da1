"""POST /compile through the app: answers, errors and limits."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.support import (
    SMALL_RELAY,
    fill,
    make_app,
    make_settings,
    remount,
    small_relay,
    tmpfs,
    wait_until_done,
)

PROBLEMS = "https://relaycc.dev/problems/"


def test_compile_answers_202_with_location_then_200_once_built(client: TestClient) -> None:
    first = client.post("/compile", json={"relay": small_relay(1)})

    assert first.status_code == 202
    body = first.json()
    assert first.headers["location"] == f"/modules/{body['id']}"
    assert body["state"] in ("queued", "running")
    assert len(body["id"]) == 64
    wait_until_done(client, body["id"])

    again = client.post("/compile", json={"relay": small_relay(1)})

    assert again.status_code == 200
    assert again.json()["id"] == body["id"]
    assert again.json()["state"] == "succeeded"


def test_compile_with_wait_answers_once_the_job_is_done(client: TestClient) -> None:
    response = client.post("/compile?wait=60", json={"relay": small_relay(2), "module_name": "tiny"})

    assert response.status_code == 200
    status = response.json()
    assert (status["state"], status["module_name"], status["attempts"]) == ("succeeded", "tiny", 1)
    assert status["timings"]["compile_seconds"] > 0
    assert status["links"]["artifacts"] == f"/modules/{status['id']}/artifacts"


def test_parse_error_answers_400_problem_with_line_and_column(client: TestClient) -> None:
    relay = SMALL_RELAY.replace("nn.relu(add(%x, %y))", "nn.relu(add(%x, %y)")

    response = client.post("/compile", json={"relay": relay})

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == PROBLEMS + "parse-error"
    assert (problem["line"], problem["column"]) == (4, 1)
    assert problem["source_line"] == "}"
    assert problem["status"] == 400


def test_type_error_answers_400_problem_with_its_location(client: TestClient) -> None:
    relay = SMALL_RELAY.replace("Tensor[(2, 3), float32]) -> Tensor", "Tensor[(5, 7), float32]) -> Tensor")

    response = client.post("/compile", json={"relay": relay})

    assert response.status_code == 400
    problem = response.json()
    assert problem["type"] == PROBLEMS + "type-error"
    assert problem["line"] == 3
    assert "add(%x, %y)" in problem["source_line"]


def test_nothing_is_stored_for_a_request_refused_before_queueing(client: TestClient, tmp_path: Path) -> None:
    client.post("/compile", json={"relay": "#[version = \"0.0.5\"]\ndef @main( {"})

    assert not list((tmp_path / "store" / "modules").iterdir())


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({}, "body.relay"),
        ({"relay": SMALL_RELAY, "colour": "blue"}, "body.colour"),
        ({"relay": SMALL_RELAY, "module_name": "not a name"}, "body.module_name"),
        ({"relay": SMALL_RELAY, "config": {"opt_level": "high"}}, "body.config.opt_level"),
    ],
)
def test_malformed_body_answers_422_problem(client: TestClient, body: dict[str, object], where: str) -> None:
    response = client.post("/compile", json=body)

    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == PROBLEMS + "validation-error"
    assert problem["detail"].startswith(where)
    assert problem["errors"][0]["loc"][:2] == where.split(".")[:2]


def test_body_that_is_not_json_answers_422_problem(client: TestClient) -> None:
    response = client.post("/compile", content=b"{not json", headers={"content-type": "application/json"})

    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"


def test_body_over_the_limit_answers_413(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", max_body_bytes=1000)
    with TestClient(make_app(settings)) as client:
        response = client.post("/compile", json={"relay": SMALL_RELAY + "//" + "x" * 2000})

    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == PROBLEMS + "body-too-large"


def test_relay_text_over_its_limit_answers_413(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", max_relay_bytes=100)
    with TestClient(make_app(settings)) as client:
        response = client.post("/compile", json={"relay": SMALL_RELAY})

    assert response.status_code == 413
    assert response.json()["type"] == PROBLEMS + "model-too-large"
    assert "RELAYCC_MAX_RELAY_BYTES" in response.json()["detail"]


def test_a_tvmc_config_target_names_the_same_module_as_the_equivalent_string(client: TestClient) -> None:
    as_string = client.post("/compile", json={
        "relay": small_relay(3), "target": "c", "config": {"workspace_byte_alignment": 32, "pass_config": {"relay.FuseOps.max_depth": 8}},
    })
    as_object = client.post("/compile", json={
        "relay": small_relay(3),
        "target": {"targets": [{"kind": "c"}], "executor": {"kind": "aot", "workspace-byte-alignment": 32},
                   "pass-config": {"relay.FuseOps.max_depth": 8}},
    })

    assert as_string.json()["id"] == as_object.json()["id"]
    assert as_object.json()["target"] == "c"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target": "acme_npu, c"}, "unknown external codegen 'acme_npu'"),
        ({"target": "cuda"}, "unknown host target"),
        ({"target": {"targets": [{"kind": "c"}], "executor": {"kind": "graph"}}}, "executor 'graph'"),
        ({"config": {"cflags": ["-o", "/etc/passwd"]}}, "C flag '-o' is not allowed"),
        ({"config": {"opt_level": 9}}, "opt level"),
        ({"params": "bm90IGFuIG5weg=="}, "params: cannot read arrays"),
    ],
)
def test_bad_options_answer_400_input_problem(client: TestClient, change: dict[str, object], message: str) -> None:
    response = client.post("/compile", json={"relay": SMALL_RELAY, **change})

    assert response.status_code == 400
    assert response.json()["type"] == PROBLEMS + "input-error"
    assert message in response.json()["detail"]


@pytest.mark.parametrize(
    ("config", "key", "message"),
    [
        ({"pass_config": {"relay.bogus.key": 1}}, "pass_config.relay.bogus.key", "unknown pass_config key"),
        ({"pass_config": {"tir.disable_vectorize": "yes"}}, "pass_config.tir.disable_vectorize", "takes a boolean"),
        ({"pass_config": {"relay.FuseOps.max_dpth": 2}}, "pass_config.relay.FuseOps.max_dpth",
         "did you mean 'relay.FuseOps.max_depth'?"),
        ({"disabled_pass": ["FoldConstnt"]}, "disabled_pass", "did you mean 'FoldConstant'?"),
        ({"cflags": ["-fplugin=x.so"]}, "cflags", "C flag '-fplugin=x.so' is not allowed"),
        ({"tuning_records": {"format": "relaycc.tuning/1", "records": [{"key": "0" * 16, "schedule": {"rows": 2}}]}},
         "tuning_records", "config tuning_records: records[0].schedule: unknown schedule knob 'rows'"),
    ],
)
def test_a_bad_configuration_key_is_a_400_problem_naming_it(
    client: TestClient, config: dict[str, object], key: str, message: str
) -> None:
    response = client.post("/compile", json={"relay": SMALL_RELAY, "config": config})

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["key"] == key
    assert message in response.json()["detail"]


def test_tvm_keys_of_a_tvmc_config_are_accepted_with_their_types(client: TestClient) -> None:
    response = client.post("/compile", json={
        "relay": SMALL_RELAY,
        "target": {"targets": [{"kind": "c"}], "pass-config": {"relay.backend.use_auto_scheduler": True,
                                                               "tir.disable_vectorize": False}},
    })
    assert response.status_code in (200, 202), response.text


def test_a_job_that_fails_later_is_done_with_its_problem(client: TestClient) -> None:
    response = client.post("/compile?wait=60", json={"relay": small_relay(4), "config": {"cflags": ["-Dfloat=("]}})

    assert response.status_code == 200
    status = response.json()
    assert status["state"] == "failed"
    assert status["error"]["type"] == PROBLEMS + "build-error"
    assert client.get(f"/modules/{status['id']}").json()["error"] == status["error"]


def test_too_many_jobs_from_one_client_answer_429(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", max_jobs_per_client=1, job_start_delay_seconds=30)
    with TestClient(make_app(settings)) as client:
        first = client.post("/compile", json={"relay": small_relay(5)})
        second = client.post("/compile", json={"relay": small_relay(6)})
        same_as_first = client.post("/compile", json={"relay": small_relay(5)})

    assert first.status_code == 202
    assert second.status_code == 429
    assert second.json()["type"] == PROBLEMS + "too-many-jobs"
    assert second.headers["retry-after"] == "1"
    # Asking again for a job already in flight creates nothing, so it is not limited.
    assert same_as_first.status_code == 202


def test_compile_on_a_read_only_store_answers_503_store_unavailable_and_cached_modules_still_answer(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "store", "4m") as store:
        with TestClient(make_app(make_settings(store))) as client:
            built = client.post("/compile?wait=60", json={"relay": small_relay(50)}).json()
            remount(store, "ro")
            try:
                refused = client.post("/compile", json={"relay": small_relay(51)})
                cached = client.post("/compile", json={"relay": small_relay(50)})
                served = client.get(f"/modules/{built['id']}/artifacts/libdefault.so")
            finally:
                remount(store, "rw")
            after = client.post("/compile?wait=60", json={"relay": small_relay(51)})

    assert built["state"] == "succeeded"
    assert refused.status_code == 503
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"]
    problem = refused.json()
    assert problem["type"] == PROBLEMS + "store-unavailable"
    assert "read-only" in problem["detail"] and str(store) not in refused.text
    assert cached.status_code == 200 and cached.json()["state"] == "succeeded"
    assert served.status_code == 200
    assert after.status_code == 200 and after.json()["state"] == "succeeded"


def test_compile_on_a_full_store_answers_503_saying_it_is_full_and_leaves_nothing_half_written(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "store", "4m") as store:
        with TestClient(make_app(make_settings(store))) as client:
            filler = fill(store)
            refused = client.post("/compile", json={"relay": small_relay(52)})
            left = sorted(p.name for p in (store / "modules").iterdir())
            filler.unlink()
            after = client.post("/compile?wait=60", json={"relay": small_relay(52)})

    assert refused.status_code == 503
    assert refused.json()["type"] == PROBLEMS + "store-unavailable"
    assert "full" in refused.json()["detail"] and str(store) not in refused.text
    assert left == []
    assert after.status_code == 200 and after.json()["state"] == "succeeded"


@pytest.mark.parametrize(("code", "words"), [(errno.EROFS, "read-only"), (errno.ENOSPC, "full")])
def test_compile_answers_503_when_a_store_write_fails_for_lack_of_space_or_a_read_only_store(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, code: int, words: str
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code), "/srv/relaycc/store/modules/x")

    monkeypatch.setattr(os, "fsync", refuse)
    response = client.post("/compile", json={"relay": small_relay(53)})

    assert response.status_code == 503
    assert response.json()["type"] == PROBLEMS + "store-unavailable"
    assert words in response.json()["detail"] and "/srv" not in response.text


def test_a_c_compiler_error_names_the_source_by_its_artifact_name_not_its_server_path(
    client: TestClient, settings: Settings
) -> None:
    response = client.post("/compile?wait=60", json={"relay": small_relay(54), "config": {"cflags": ["-Dfloat=("]}})

    error = response.json()["error"]
    assert error["type"] == PROBLEMS + "build-error"
    assert "src/default_lib0.c:" in error["detail"]
    assert str(settings.store) not in response.text and "/modules/" not in error["detail"]


def _onnx_b64() -> str:
    import base64

    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["input.1"], ["y"])], "g",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return base64.b64encode(model.SerializeToString()).decode()


def test_compile_takes_an_onnx_model_whose_runs_name_inputs_as_onnx_does(client: TestClient) -> None:
    response = client.post("/compile?wait=60", json={"onnx": _onnx_b64(), "module_name": "from_onnx"})

    assert response.status_code == 200, response.text
    module_id = response.json()["id"]
    interface = client.get(f"/modules/{module_id}/metadata").json()["interface"]
    assert interface["inputs"][0]["name"] == "input_1" and interface["inputs"][0]["onnx_name"] == "input.1"
    for name in ("input.1", "input_1"):
        run = client.post(f"/modules/{module_id}/run", json={"inputs": {name: [[-1.0, 2.0, -3.0]]}})
        assert run.status_code == 200, run.text
        assert run.json()["outputs"]["out0"]["data"] == [[0.0, 2.0, 0.0]]


def test_compile_with_both_relay_and_onnx_or_neither_is_refused(client: TestClient) -> None:
    both = client.post("/compile", json={"relay": SMALL_RELAY, "onnx": _onnx_b64()})
    neither = client.post("/compile", json={"module_name": "x"})

    for response in (both, neither):
        assert response.status_code in (400, 422)
        assert "exactly one" in response.json()["detail"]


def test_compile_of_onnx_bytes_that_are_not_a_model_is_an_input_problem(client: TestClient) -> None:
    response = client.post("/compile", json={"onnx": "AAAA"})

    assert response.status_code == 400
    assert response.json()["type"] == PROBLEMS + "input-error"
    assert "not an ONNX model" in response.json()["detail"]


def test_a_compile_request_may_carry_tuning_records(client: TestClient) -> None:
    records = {"format": "relaycc.tuning/1", "records": [{"key": "0123456789abcdef", "schedule": {"tile_rows": 4}}]}

    response = client.post("/compile?wait=60", json={"relay": small_relay(31), "config": {"tuning_records": records}})

    assert response.status_code == 200, response.text
    assert response.json()["state"] == "succeeded"
