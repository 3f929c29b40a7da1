from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.service.support import make_app, make_settings


def test_targets_list_hosts_codegens_and_allowed_flags(client: TestClient) -> None:
    response = client.get("/targets")

    assert response.status_code == 200
    info = response.json()
    assert info["hosts"] == ["c"]
    assert info["executors"] == ["aot"]
    assert info["codegen_documents"] is True
    assert "-O3" in info["allowed_cflags"] and "-o" not in info["allowed_cflags"]
    for codegen in info["codegens"]:
        assert codegen["mode"] in ("relay_to_tir", "function_at_a_time")
        for pattern in codegen["patterns"]:
            assert set(pattern) == {"name", "pattern", "symbol", "attrs"}


def test_targets_list_the_configuration_registry(client: TestClient) -> None:
    config = client.get("/targets").json()["config"]

    assert config["opt_level"] == {"minimum": 0, "maximum": 4, "default": 3}
    by_name = {entry["name"]: entry for entry in config["pass_config"]}
    assert by_name["relay.FuseOps.max_depth"]["type"] == "int" and by_name["relay.FuseOps.max_depth"]["default"] == 256
    assert by_name["relay.backend.use_auto_scheduler"]["support"] == "ignored"
    assert config["allowed_cflags"] == client.get("/targets").json()["allowed_cflags"]


def test_targets_say_when_user_c_is_not_allowed(tmp_path: Path) -> None:
    with TestClient(make_app(make_settings(tmp_path / "store", allow_user_c=False))) as client:
        assert client.get("/targets").json()["user_c_allowed"] is False


def test_an_open_service_refuses_user_c_unless_told_to_allow_it(tmp_path: Path) -> None:
    with TestClient(make_app(make_settings(tmp_path / "open"))) as client:
        assert client.get("/targets").json()["user_c_allowed"] is False
    with TestClient(make_app(make_settings(tmp_path / "keys", api_keys=("k",)))) as client:
        info = client.get("/targets", headers={"Authorization": "Bearer k"}).json()
        assert info["user_c_allowed"] is sandbox_ready()


def sandbox_ready() -> bool:
    from service.jobs.sandbox.bwrap import probe

    return probe().ok


def test_targets_list_every_operator_as_relaycc_ops_does(client: TestClient) -> None:
    from compiler.ops.catalog import catalog

    operators = client.get("/targets").json()["operators"]
    assert [op["name"] for op in operators] == [entry["name"] for entry in catalog()]
    pool = next(op for op in operators if op["name"] == "nn.max_pool2d")
    assert pool["family"] == "pool" and pool["compiled"] == "loops"
    strides = next(a for a in pool["attrs"] if a["name"] == "strides")
    assert strides == {"name": "strides", "kind": "ints", "required": False, "default": [1, 1]}
