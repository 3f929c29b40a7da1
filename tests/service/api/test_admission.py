from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.api.admission import admit
from service.problems import ProblemError
from service.api.schemas import CompileRequest
from service.settings import Settings
from tests.service.support import SMALL_RELAY, make_settings, npz_b64

PROBLEMS = "https://relaycc.dev/problems/"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "store")


def refused(body: dict[str, object], settings: Settings) -> dict[str, object]:
    with pytest.raises(ProblemError) as raised:
        admit(CompileRequest.model_validate(body), settings)
    return raised.value.problem


def test_an_admitted_request_has_its_normal_form_and_id(settings: Settings) -> None:
    admitted = admit(CompileRequest(relay=SMALL_RELAY), settings)

    assert admitted.normal["relay"] == SMALL_RELAY
    assert admitted.normal["target"] == "c"
    assert admitted.module_id == admit(CompileRequest(relay=SMALL_RELAY, target=" c "), settings).module_id


def test_params_are_checked_against_main(settings: Settings) -> None:
    good = admit(CompileRequest(relay=SMALL_RELAY, params=npz_b64(y=np.ones((2, 3), "float32"))), settings)
    problem = refused({"relay": SMALL_RELAY, "params": npz_b64(y=np.ones((3, 3), "float32"))}, settings)
    unknown = refused({"relay": SMALL_RELAY, "params": npz_b64(w=np.ones((2, 3), "float32"))}, settings)

    assert good.normal["params"]["y"]["shape"] == [2, 3]
    assert problem["type"] == PROBLEMS + "input-error" and "parameter y" in problem["detail"]
    assert unknown["type"] == PROBLEMS + "input-error"


def test_a_model_with_too_many_nodes_is_refused(tmp_path: Path) -> None:
    problem = refused({"relay": SMALL_RELAY}, make_settings(tmp_path, max_nodes=3))

    assert problem["status"] == 413 and "RELAYCC_MAX_NODES" in problem["detail"]


def test_a_model_with_a_too_large_tensor_is_refused_at_its_location(tmp_path: Path) -> None:
    problem = refused({"relay": SMALL_RELAY}, make_settings(tmp_path, max_tensor_elements=5))

    assert problem["type"] == PROBLEMS + "model-too-large"
    assert "RELAYCC_MAX_TENSOR_ELEMENTS" in problem["detail"]


def test_params_over_the_element_limit_are_refused(tmp_path: Path) -> None:
    body = {"relay": SMALL_RELAY, "params": npz_b64(y=np.ones((2, 3), "float32"))}

    problem = refused(body, make_settings(tmp_path, max_tensor_elements=5))

    assert problem["type"] == PROBLEMS + "model-too-large"


def test_params_over_the_byte_limit_are_refused_naming_the_variable(tmp_path: Path) -> None:
    # 6 float32 elements: within the element limit, 24 bytes over a byte limit of 20.
    body = {"relay": SMALL_RELAY, "params": npz_b64(y=np.ones((2, 3), "float32"))}

    problem = refused(body, make_settings(tmp_path, max_tensor_bytes=20))

    assert problem["type"] == PROBLEMS + "model-too-large" and problem["status"] == 413
    assert "RELAYCC_MAX_TENSOR_BYTES" in problem["detail"]


def test_void_dtype_in_params_is_refused_before_decoding(settings: Settings) -> None:
    params = npz_b64(y=np.zeros(1, dtype="|V16"))

    problem = refused({"relay": SMALL_RELAY, "params": params}, settings)

    assert problem["type"] == PROBLEMS + "input-error" and problem["status"] == 400
    assert "array 'y' has dtype '|V16'" in problem["detail"]


CODEGEN = {"name": "acme", "patterns": [{"name": "relu", "pattern": "nn.relu(*)"}]}


def test_a_codegen_document_may_be_named_in_the_target(settings: Settings) -> None:
    admitted = admit(CompileRequest.model_validate(
        {"relay": SMALL_RELAY, "target": "acme, c", "codegens": [{"document": CODEGEN}]}
    ), settings)

    assert admitted.normal["target"] == "acme, c"
    assert admitted.normal["codegens"][0]["document"]["name"] == "acme"


def test_codegens_may_not_name_server_directories(settings: Settings) -> None:
    document = {**CODEGEN, "library": {"include_dirs": ["/etc"]}}

    problem = refused({"relay": SMALL_RELAY, "codegens": [{"document": document}]}, settings)

    assert problem["type"] == PROBLEMS + "input-error"
    assert "include_dirs" in problem["detail"]


def test_user_c_is_refused_when_the_service_does_not_allow_it(tmp_path: Path) -> None:
    document = {**CODEGEN, "library": {"sources": ["acme.c"]}}
    body = {"relay": SMALL_RELAY, "codegens": [{"document": document, "sources": {"acme.c": "int relu;"}}]}

    problem = refused(body, make_settings(tmp_path, allow_user_c=False))

    assert problem["type"] == PROBLEMS + "user-c-not-allowed"
    assert problem["status"] == 400


def test_a_codegen_document_with_errors_is_an_input_problem(settings: Settings) -> None:
    document = {"name": "acme", "patterns": [{"name": "bad", "pattern": "nn.no_such_op(*)"}]}

    problem = refused({"relay": SMALL_RELAY, "codegens": [{"document": document}]}, settings)

    assert problem["type"] == PROBLEMS + "input-error"
    assert "codegen acme" in problem["detail"]
