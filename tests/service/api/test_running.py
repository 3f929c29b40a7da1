"""POST /modules/{id}/run: the seed-001 MLP run by a worker, compared with numpy."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.e2e import models
from tests.service.support import MODELS, SMALL_RELAY, from_npz_b64, make_app, make_settings, npz_b64, wait_until_done

PROBLEMS = "https://relaycc.dev/problems/"
MLP_RELAY = (MODELS / "mlp_seed001.relay").read_text()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tmp_path_factory.mktemp("run") / "store", workers=2, allow_user_c=True)
    with TestClient(make_app(settings)) as client:
        yield client


def compiled(client: TestClient, **body: object) -> str:
    response = client.post("/compile?wait=60", json=body)
    assert response.status_code in (200, 202), response.text
    status = wait_until_done(client, response.json()["id"])
    assert status["state"] == "succeeded", status["error"]
    return str(status["id"])


@pytest.fixture(scope="module")
def mlp(client: TestClient) -> str:
    return compiled(client, relay=MLP_RELAY)


@pytest.fixture(scope="module")
def mlp_with_weights(client: TestClient) -> str:
    weights = models.mlp_seed001_inputs(seed=1)
    del weights["x"]
    return compiled(client, relay=MLP_RELAY, module_name="bound", params=npz_b64(**weights))


@pytest.fixture(scope="module")
def small(client: TestClient) -> str:
    return compiled(client, relay=SMALL_RELAY)


def test_run_with_npz_inputs_matches_numpy(client: TestClient, mlp: str) -> None:
    inputs = models.mlp_seed001_inputs(seed=3)

    response = client.post(f"/modules/{mlp}/run", json={"inputs_npz": npz_b64(**inputs), "repeat": 3})

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["outputs"] is None
    outputs = from_npz_b64(body["outputs_npz"])
    np.testing.assert_allclose(outputs["out0"], models.mlp_seed001_numpy(**inputs)[0], rtol=1e-4, atol=1e-4)
    assert body["latency"]["runs"] == 3
    assert 0 < body["latency"]["min_us"] <= body["latency"]["median_us"]


def test_run_with_json_inputs_and_params_bound_at_compile_time(client: TestClient, mlp_with_weights: str) -> None:
    weights = models.mlp_seed001_inputs(seed=1)
    x = models.mlp_seed001_inputs(seed=4)["x"]

    response = client.post(f"/modules/{mlp_with_weights}/run", json={"inputs": {"x": x.tolist()}})

    assert response.status_code == 200, response.text
    out = response.json()["outputs"]["out0"]
    assert (out["dtype"], out["shape"]) == ("float32", [64, 10])
    expected = models.mlp_seed001_numpy(x, weights["w1"], weights["b1"], weights["w2"], weights["b2"])[0]
    np.testing.assert_allclose(np.array(out["data"], dtype="float32"), expected, rtol=1e-4, atol=1e-4)


def test_output_format_can_differ_from_the_input_format(client: TestClient, small: str) -> None:
    inputs = {"x": [[1, -2, 3], [-4, 5, -6]], "y": [[1, 1, 1], [1, 1, 1]]}

    response = client.post(f"/modules/{small}/run", json={"inputs": inputs, "output_format": "npz"})

    outputs = from_npz_b64(response.json()["outputs_npz"])
    np.testing.assert_array_equal(outputs["out0"], [[2, 0, 4], [0, 6, 0]])


PAIR_RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32], %y: Tensor[(2), float32]) {
  (add(%x, %y), multiply(%x, %y))
}
"""


def test_run_returns_out0_out1_as_the_metadata_names_them(client: TestClient, small: str) -> None:
    pair = compiled(client, relay=PAIR_RELAY)
    for module_id, expected, fields in ((small, ["out0"], ["output"]), (pair, ["out0", "out1"], ["output0", "output1"])):
        interface = client.get(f"/modules/{module_id}/metadata").json()["interface"]
        assert [t["name"] for t in interface["outputs"]] == expected
        assert [t["c_name"] for t in interface["outputs"]] == fields  # the header's struct, TVM's names
        inputs = {"x": np.ones(interface["inputs"][0]["shape"], "float32").tolist(),
                  "y": np.full(interface["inputs"][1]["shape"], 2, "float32").tolist()}
        as_json = client.post(f"/modules/{module_id}/run", json={"inputs": inputs}).json()["outputs"]
        assert list(as_json) == expected
        as_npz = client.post(f"/modules/{module_id}/run", json={"inputs": inputs, "output_format": "npz"}).json()
        assert list(from_npz_b64(as_npz["outputs_npz"])) == expected
    np.testing.assert_array_equal(as_json["out1"]["data"], [2.0, 2.0])


def test_non_finite_outputs_come_back_as_strings(client: TestClient, small: str) -> None:
    inputs = {"x": [["Infinity", 0, 0], [0, 0, 0]], "y": [["-Infinity", 0, 0], [0, 0, 0]]}

    response = client.post(f"/modules/{small}/run", json={"inputs": inputs})

    assert response.status_code == 200, response.text
    assert response.json()["outputs"]["out0"]["data"][0][0] == "NaN"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"inputs": {"z": [1]}}, "unknown input 'z'"),
        ({"inputs": {"x": [[1, 2, 3]], "y": [[1, 2, 3]]}}, "expected shape (2, 3)"),
        ({"inputs": {"x": [[1, 2], [3]], "y": [[1]]}}, "cannot read as a float32 tensor"),
        ({"inputs": {"x": [[0, 0, 0], [0, 0, 0]]}}, "missing input 'y'"),
        ({"inputs_npz": "AAAA"}, "inputs_npz: cannot read arrays"),
    ],
)
def test_bad_inputs_answer_400_input_problem(
    client: TestClient, small: str, body: dict[str, object], message: str
) -> None:
    response = client.post(f"/modules/{small}/run", json=body)

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == PROBLEMS + "input-error"
    assert message in response.json()["detail"]


def test_inputs_given_two_ways_at_once_are_a_validation_error(client: TestClient, small: str) -> None:
    response = client.post(f"/modules/{small}/run", json={"inputs": {}, "inputs_npz": npz_b64()})

    assert response.status_code == 422
    assert response.json()["type"] == PROBLEMS + "validation-error"


def test_repeat_over_the_limit_is_refused(client: TestClient, small: str) -> None:
    response = client.post(f"/modules/{small}/run", json={"inputs": {}, "repeat": 10**6})

    assert response.status_code == 422
    assert "RELAYCC_MAX_RUN_REPEAT" in response.json()["detail"]


def test_run_on_one_thread_gives_the_same_outputs(client: TestClient, mlp: str) -> None:
    inputs = models.mlp_seed001_inputs(seed=4)

    response = client.post(f"/modules/{mlp}/run", json={"inputs_npz": npz_b64(**inputs), "threads": 1})

    assert response.status_code == 200, response.text
    outputs = from_npz_b64(response.json()["outputs_npz"])
    np.testing.assert_allclose(outputs["out0"], models.mlp_seed001_numpy(**inputs)[0], rtol=1e-4, atol=1e-4)


def test_threads_over_the_limit_are_refused(client: TestClient, small: str) -> None:
    response = client.post(f"/modules/{small}/run", json={"inputs": {}, "threads": 33})

    assert response.status_code == 422
    assert "RELAYCC_MAX_RUN_THREADS" in response.json()["detail"]


def test_running_an_unknown_module_answers_404(client: TestClient) -> None:
    response = client.post(f"/modules/{'0' * 64}/run", json={"inputs": {}})

    assert response.status_code == 404
    assert response.json()["type"] == PROBLEMS + "not-found"


def test_inputs_over_the_element_limit_answer_413(tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = make_settings(tmp_path_factory.mktemp("limits") / "store", max_tensor_elements=8)
    with TestClient(make_app(settings)) as client:
        module_id = compiled(client, relay=SMALL_RELAY)
        response = client.post(f"/modules/{module_id}/run", json={"inputs": {"x": [[0] * 3] * 2, "y": [[0] * 3] * 2}})

    assert response.status_code == 413
    assert response.json()["type"] == PROBLEMS + "model-too-large"


def test_inputs_over_the_byte_limit_answer_413_naming_the_variable(tmp_path_factory: pytest.TempPathFactory) -> None:
    # 12 float32 elements, within the element limit; 48 bytes, over a byte limit of 40.
    settings = make_settings(tmp_path_factory.mktemp("bytes") / "store", max_tensor_bytes=40)
    inputs = {"x": [[0] * 3] * 2, "y": [[0] * 3] * 2}
    with TestClient(make_app(settings)) as client:
        module_id = compiled(client, relay=SMALL_RELAY)
        as_json = client.post(f"/modules/{module_id}/run", json={"inputs": inputs})
        as_npz = client.post(f"/modules/{module_id}/run", json={
            "inputs_npz": npz_b64(x=np.zeros((2, 3), "float32"), y=np.zeros((2, 3), "float32"))})

    for response in (as_json, as_npz):
        assert response.status_code == 413, response.text
        assert response.json()["type"] == PROBLEMS + "model-too-large"
        assert "RELAYCC_MAX_TENSOR_BYTES" in response.json()["detail"]


CODEGENS = MODELS.parent / "codegens" / "toy_cg_thflow"


def test_a_model_compiled_with_an_external_codegen_and_inline_c_runs(client: TestClient) -> None:
    import json

    document = json.loads((CODEGENS / "toy_cg_thflow.json").read_text())
    sources = {"toy_cg_thflow.c": (CODEGENS / "toy_cg_thflow.c").read_text()}
    module_id = compiled(client, relay=MLP_RELAY, target="toy_cg_thflow, c",
                         codegens=[{"document": document, "sources": sources}])
    inputs = models.mlp_seed001_inputs(seed=5)

    response = client.post(f"/modules/{module_id}/run", json={"inputs_npz": npz_b64(**inputs)})
    report = client.get(f"/modules/{module_id}/metadata").json()

    assert response.status_code == 200, response.text
    outputs = from_npz_b64(response.json()["outputs_npz"])
    np.testing.assert_allclose(outputs["out0"], models.mlp_seed001_numpy(**inputs)[0], rtol=1e-4, atol=1e-4)
    assert report["target"]["external"] == ["toy_cg_thflow"]


def test_a_model_with_an_unknown_batch_runs_any_batch_and_names_a_shape_it_cannot_take(client: TestClient) -> None:
    weights = models.mlp_seed001_inputs(seed=1)
    relay = MLP_RELAY.replace("%x: Tensor[(64, ", "%x: Tensor[(?, ", 1)
    assert relay != MLP_RELAY
    module = compiled(client, relay=relay, module_name="any_batch")
    for batch in (1, 5):
        inputs = dict(weights, x=weights["x"][:batch])
        response = client.post(f"/modules/{module}/run", json={"inputs_npz": npz_b64(**inputs)})
        assert response.status_code == 200, response.text
        out = from_npz_b64(response.json()["outputs_npz"])["out0"]
        np.testing.assert_allclose(out, models.mlp_seed001_numpy(**inputs)[0], rtol=1e-4, atol=1e-4)
    wrong = dict(weights, x=weights["x"][:2, :3])
    response = client.post(f"/modules/{module}/run", json={"inputs_npz": npz_b64(**wrong)})
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == "input x: expected shape (?, 800), got (2, 3)"


def test_run_with_profile_times_every_kernel_the_report_calls(client: TestClient, mlp: str) -> None:
    inputs = models.mlp_seed001_inputs(seed=4)

    response = client.post(f"/modules/{mlp}/run", json={"inputs_npz": npz_b64(**inputs), "profile": True})
    report = client.get(f"/modules/{mlp}/metadata").json()
    plain = client.post(f"/modules/{mlp}/run", json={"inputs_npz": npz_b64(**inputs)})

    assert response.status_code == 200, response.text
    body = response.json()
    outputs = from_npz_b64(body["outputs_npz"])
    np.testing.assert_allclose(outputs["out0"], models.mlp_seed001_numpy(**inputs)[0], rtol=1e-4, atol=1e-4)
    profile = body["profile"]
    assert {row["kernel"] for row in profile} == {call["callee"] for call in report["calls"]}
    assert all(row["calls"] >= 1 and row["us"] >= 0 and 0 <= row["percent"] for row in profile)
    assert [row["us"] for row in profile] == sorted((row["us"] for row in profile), reverse=True)
    # Each kernel's result shape from the report, and GFLOP/s where it does a product (the MLP's denses).
    assert all(row["shape"] == report["functions"][row["kernel"]]["out_shape"] for row in profile)
    assert any(row["gflops"] is not None and row["gflops"] > 0 for row in profile)
    assert plain.json()["profile"] is None


def test_profile_of_a_model_with_an_unknown_batch_times_its_kernels(client: TestClient) -> None:
    weights = models.mlp_seed001_inputs(seed=1)
    module = compiled(client, relay=MLP_RELAY.replace("%x: Tensor[(64, ", "%x: Tensor[(?, ", 1), module_name="any_batch")

    response = client.post(f"/modules/{module}/run", json={"inputs_npz": npz_b64(**weights), "profile": True})

    assert response.status_code == 200, response.text
    report = client.get(f"/modules/{module}/metadata").json()
    profile = response.json()["profile"]
    assert {row["kernel"] for row in profile} == {call["callee"] for call in report["calls"]}
