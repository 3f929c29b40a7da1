"""The service end to end on an S3 store: `relaycc serve` with RELAYCC_STORE=s3://... against a
local S3 server (moto) compiles seed 001's MLP, serves its artifacts from the bucket and runs it."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import httpx
import numpy as np

from service.store.s3 import S3ModuleStore
from tests.e2e import models
from tests.service.s3_endpoint import S3Endpoint
from tests.service.support import MODELS, from_npz_b64, npz_b64, serving

MLP_RELAY = (MODELS / "mlp_seed001.relay").read_text()


def test_the_service_compiles_and_runs_seed_001_with_its_store_in_a_bucket(
    s3_endpoint: S3Endpoint, tmp_path: Path,
) -> None:
    url = f"s3://{s3_endpoint.new_bucket()}/relaycc"
    # RELAYCC_STORE names the bucket (spelled STORE: `store` is serving's directory argument);
    # the AWS_* variables come from the s3_endpoint fixture.
    bucket_env = {"STORE": url, "STORE_CACHE": str(tmp_path / "cache")}
    with serving(tmp_path / "unused", workers=1, **bucket_env) as server, \
            httpx.Client(base_url=server.base, timeout=60) as api:
        submitted = api.post("/compile", json={"relay": MLP_RELAY})
        assert submitted.status_code in (200, 202), submitted.text
        mid = submitted.json()["id"]
        deadline = time.monotonic() + 120
        while (status := api.get(f"/modules/{mid}").json())["state"] in ("queued", "running"):
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        assert status["state"] == "succeeded", status["error"]

        # The artifacts live in the bucket, with the sha256 the service serves as their ETag.
        bucket_store = S3ModuleStore.from_url(url, cache=tmp_path / "reader-cache")
        manifest = {entry["name"]: entry for entry in bucket_store.manifest(mid) or []}
        library = api.get(f"/modules/{mid}/artifacts/libdefault.so")
        assert library.status_code == 200
        assert hashlib.sha256(library.content).hexdigest() == manifest["libdefault.so"]["sha256"]
        assert manifest["libdefault.so"]["sha256"] in library.headers["etag"]

        inputs = models.mlp_seed001_inputs(seed=5)
        run = api.post(f"/modules/{mid}/run", json={"inputs_npz": npz_b64(**inputs)})
        assert run.status_code == 200, run.text
        x, w1, b1, w2, b2 = (inputs[name] for name in ("x", "w1", "b1", "w2", "b2"))
        expected = np.maximum(x @ w1.T + b1, 0) @ w2.T + b2
        np.testing.assert_allclose(from_npz_b64(run.json()["outputs_npz"])["out0"], expected, rtol=1e-4, atol=1e-4)

        again = api.post("/compile", json={"relay": MLP_RELAY})
        assert again.status_code == 200 and again.json()["id"] == mid
