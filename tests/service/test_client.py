"""service.client against a real `relaycc serve` (uvicorn) process: every endpoint, sync and async.

One server (tests/service/conftest.py `remote_server`, shared with the remote command's tests),
with API keys (so that owners and refusals are exercised) and a short start delay on every job
(so that a job is reliably seen waiting and its progress is streamed before it finishes). The
model is seed 001's two-layer perceptron.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from service.client import AsyncClient, Client, Module, ServiceError, relay_text
from tests.service.support import MODELS, ROOT, Server, small_relay

MLP = MODELS / "seed001_mlp.relay"


def mlp_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((8, 64)).astype("float32"),
        "w1": (rng.standard_normal((32, 64)) * 0.2).astype("float32"),
        "b1": rng.standard_normal(32).astype("float32"),
        "w2": (rng.standard_normal((10, 32)) * 0.2).astype("float32"),
        "b2": rng.standard_normal(10).astype("float32"),
    }


def mlp_numpy(x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    return np.maximum(x @ w1.T + b1, 0.0) @ w2.T + b2


@pytest.fixture(scope="module")
def server(remote_server: Server) -> Server:
    return remote_server


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[Client]:
    with Client(server.base, api_key="alpha") as client:
        yield client


@pytest.fixture(scope="module")
def mlp(client: Client) -> tuple[Module, list[dict[str, object]]]:
    """Seed 001's MLP compiled from its file, and the progress seen while waiting for it."""
    seen: list[dict[str, object]] = []
    module = client.compile(MLP, target="c", module_name="mlp", record_passes=True)
    module.wait(timeout=120, on_progress=lambda p: seen.append(dict(p)))
    return module, seen


def test_compile_then_wait_streams_progress_and_ends_succeeded(mlp: tuple[Module, list[dict[str, object]]]) -> None:
    module, seen = mlp

    assert module.last_status["state"] == "succeeded"
    order = ["starting", "compiling", "building C", "storing artifacts"]
    stages = [p["stage"] for p in seen]
    assert stages and stages[0] == "starting"  # the job's start delay is streamed
    assert [order.index(s) for s in stages] == sorted(order.index(s) for s in stages)
    counted = [p for p in seen if "total" in p]
    assert all(0 <= p["done"] <= p["total"] for p in counted)  # type: ignore[operator]


def test_status_metadata_inspect_and_artifacts_describe_the_built_mlp(mlp: tuple[Module, object]) -> None:
    module, _ = mlp

    status = module.status()
    report = module.metadata()
    inspection = module.inspect()
    names = {a["name"] for a in module.artifacts()}

    assert (status["state"], status["module_name"]) == ("succeeded", "mlp")
    assert report["format"] == "relaycc.metadata/1" and any("dense" in c["callee"] for c in report["calls"])
    assert [i["name"] for i in inspection["inputs"]] == ["x", "w1", "b1", "w2", "b2"]
    assert {"metadata.json", "lowered.relay", "libmlp.so", "src/mlp_lib0.c"} <= names


def test_download_writes_the_outdir_with_the_listed_digests(mlp: tuple[Module, object], tmp_path: Path) -> None:
    module, _ = mlp

    out = module.download(tmp_path / "out")

    for entry in module.artifacts():
        assert hashlib.sha256((out / entry["name"]).read_bytes()).hexdigest() == entry["sha256"]


def test_run_takes_and_gives_numpy_and_matches_the_numpy_mlp(mlp: tuple[Module, object]) -> None:
    module, _ = mlp
    inputs = mlp_inputs()

    outputs = module.run(inputs, threads=1, repeat=3)

    assert list(outputs) == ["out0"]
    np.testing.assert_allclose(outputs["out0"], mlp_numpy(**inputs), rtol=1e-4, atol=1e-4)
    assert module.last_latency is not None and module.last_latency["runs"] == 3


def test_the_ir_after_each_pass_and_a_kernel_profile_come_back_when_asked(mlp: tuple[Module, object]) -> None:
    module, _ = mlp
    passes = json.loads(module.artifact("passes.json"))
    assert passes and {"pass", "changed", "text"} <= set(passes[0])

    module.run(mlp_inputs(), profile=True)

    assert module.last_profile and all(row["us"] >= 0 for row in module.last_profile)


def test_modules_iterates_every_page_and_filters_by_state(client: Client, mlp: tuple[Module, object]) -> None:
    module, _ = mlp

    every = [m.id for m in client.modules(page_size=1)]
    succeeded = [m.id for m in client.modules(state="succeeded")]
    queued = [m.id for m in client.modules(state="queued")]

    assert module.id in every and len(every) == len(set(every))
    assert module.id in succeeded and module.id not in queued


def test_diff_of_the_mlp_and_another_model_shows_each_kind_changed(
    client: Client, mlp: tuple[Module, object], polled: tuple[Module, list[dict[str, object]], bool]
) -> None:
    module, _ = mlp
    other, _, _ = polled

    diffs = client.diff(module, other.id)
    same = client.diff(module, module)

    assert set(diffs) == {"lowered", "c", "report"} and all(d["changed"] for d in diffs.values())
    assert "--- a/src/mlp_lib0.c" in diffs["c"]["diff"] and "+++ b/src/default_lib0.c" in diffs["c"]["diff"]
    assert any(line.startswith("+") and "relu" in line for line in diffs["lowered"]["diff"].splitlines())
    assert not any(d["changed"] for d in same.values())


def test_delete_removes_a_module_and_only_its_owner_may(server: Server, client: Client) -> None:
    module = client.compile(small_relay(1))
    module.wait(timeout=60)

    with Client(server.base, api_key="beta") as other, pytest.raises(ServiceError) as refused:
        Module(other, module.id).delete()
    module.delete()
    with pytest.raises(ServiceError) as gone:
        module.status()

    assert (refused.value.status, refused.value.slug) == (403, "forbidden")
    assert (gone.value.status, gone.value.slug) == (404, "not-found")


def test_a_parse_error_raises_with_its_line_and_column(client: Client) -> None:
    broken = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {\n  nn.relu(%x,\n}\n'

    with pytest.raises(ServiceError) as err:
        client.compile(broken)

    assert (err.value.status, err.value.slug) == (400, "parse-error")
    assert (err.value.line, err.value.column) == (4, 1)
    assert err.value.title and err.value.detail and "line 4, column 1" in str(err.value)


def test_a_wrong_key_and_an_unknown_module_raise_their_problems(server: Server, client: Client) -> None:
    with Client(server.base, api_key="gamma") as stranger, pytest.raises(ServiceError) as unauthorized:
        stranger.health() and stranger.modules().__next__()
    with pytest.raises(ServiceError) as unknown:
        client.module("0" * 64)

    assert (unauthorized.value.status, unauthorized.value.slug) == (401, "unauthorized")
    assert (unknown.value.status, unknown.value.slug) == (404, "not-found")


@pytest.fixture(scope="module")
def polled(client: Client) -> tuple[Module, list[dict[str, object]], bool]:
    """A small model waited for briefly (it times out: the job waits 0.5 s before it starts),
    then followed to its end by polling: the module, the progress seen, whether it timed out."""
    module = client.compile(small_relay(2))
    try:
        module.wait(timeout=0.1)
        timed_out = False
    except TimeoutError:
        timed_out = True
    seen: list[dict[str, object]] = []
    module._poll(None, lambda p: seen.append(dict(p)))
    return module, seen, timed_out


def test_wait_gives_up_after_its_timeout_and_polling_follows_the_job_to_its_end(
    polled: tuple[Module, list[dict[str, object]], bool]
) -> None:
    module, seen, timed_out = polled

    assert timed_out
    assert module.last_status["state"] == "succeeded" and module.wait(timeout=10)["state"] == "succeeded"
    assert {p["stage"] for p in seen} <= {"starting", "compiling", "building C", "storing artifacts"}


def test_the_async_client_round_trips_compile_wait_run_list_diff_and_delete(
    server: Server, mlp: tuple[Module, object]
) -> None:
    mlp_id = mlp[0].id

    async def scenario() -> None:
        async with AsyncClient(server.base, api_key="alpha") as client:
            seen: list[dict[str, object]] = []
            module = await client.compile(small_relay(5))
            final = await module.wait(timeout=120, on_progress=lambda p: seen.append(dict(p)))
            built_mlp = await client.module(mlp_id)
            inputs = mlp_inputs(1)
            outputs = await built_mlp.run(inputs)
            listed = [m.id async for m in client.modules(state="succeeded", page_size=2)]
            report = await module.metadata()
            diffs = await client.diff(module, module)
            with pytest.raises(ServiceError) as err:
                await client.compile("def @main( {")
            await module.delete()
            with pytest.raises(ServiceError) as gone:
                await module.status()

        assert final["state"] == "succeeded" and seen and seen[0]["stage"] == "starting"
        np.testing.assert_allclose(outputs["out0"], mlp_numpy(**inputs), rtol=1e-4, atol=1e-4)
        assert module.id in listed
        assert report["interface"]["inputs"][0]["name"] == "x"
        assert not any(d["changed"] for d in diffs.values())
        assert err.value.slug == "parse-error" and err.value.line == 1
        assert gone.value.status == 404

    asyncio.run(scenario())


def test_relay_is_text_unless_it_names_a_file(tmp_path: Path) -> None:
    (tmp_path / "m.relay").write_text(small_relay(4))

    assert relay_text(small_relay(0)) == small_relay(0)
    assert relay_text(MLP) == relay_text(str(MLP)) == MLP.read_text()
    assert relay_text(str(tmp_path / "missing.relay")) == str(tmp_path / "missing.relay")  # the service says why


def test_the_client_needs_neither_the_compiler_nor_the_service_installed() -> None:
    program = ("import sys, service.client\n"
               "print(sorted(m.split('.')[0] for m in sys.modules if m.split('.')[0] in "
               "('compiler', 'fastapi', 'starlette', 'pydantic', 'cffi')))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
