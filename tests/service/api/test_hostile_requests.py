"""Hostile requests at the HTTP level, each with its exact clean outcome: the status code and
the problem `type`, never a 5xx, never a server path in the answer.

The service under test has small array limits (so a zip bomb that would inflate past them fits
in a test) and a small body limit; one module is built once for the routes that need one.
"""

from __future__ import annotations

import base64
import io
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote_to_bytes

import anyio
import numpy as np
import pytest
from fastapi.testclient import TestClient

import service.api.admission
import service.api.running
from tests.service.support import SMALL_RELAY, make_app, make_settings, npz_b64, wait_until_done

PROBLEMS = "https://relaycc.dev/problems/"
MAX_BODY = 4 * 1024 * 1024
MAX_TENSOR_BYTES = 1024 * 1024
MAX_ELEMENTS = 1 << 20


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile") / "store"


@pytest.fixture(scope="module")
def client(store: Path) -> Iterator[TestClient]:
    settings = make_settings(
        store, max_body_bytes=MAX_BODY, max_tensor_bytes=MAX_TENSOR_BYTES, max_tensor_elements=MAX_ELEMENTS,
    )
    with TestClient(make_app(settings), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def module_id(client: TestClient) -> str:
    response = client.post("/compile?wait=60", json={"relay": SMALL_RELAY})
    status = wait_until_done(client, response.json()["id"])
    assert status["state"] == "succeeded", status
    return str(status["id"])


def problem_of(response: object, status: int, slug: str, store: Path) -> dict[str, object]:
    """The answer's problem, after checking it is exactly `status` and `slug` and shows no path
    of the server."""
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"] == "application/problem+json"  # type: ignore[attr-defined]
    assert str(store) not in response.text and str(Path.cwd()) not in response.text  # type: ignore[attr-defined]
    problem: dict[str, object] = response.json()  # type: ignore[attr-defined]
    assert problem["type"] == PROBLEMS + slug, problem
    assert problem["status"] == status
    return problem


# --- archives built by hand -------------------------------------------------------------------


def _npy_member(descr: str, shape: tuple[int, ...], data: bytes = b"") -> bytes:
    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(member, {"descr": descr, "fortran_order": False, "shape": shape})
    return member.getvalue() + data


def _b64_zip(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> str:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return base64.b64encode(archive.getvalue()).decode("ascii")


def _pickled_object_array() -> str:
    buffer = io.BytesIO()
    np.savez(buffer, y=np.array([{"a": 1}, None], dtype=object))
    return base64.b64encode(buffer.getvalue()).decode("ascii")


# 16 MiB of zeros that deflate to about 16 KiB: 16 times the byte limit once inflated.
ZIP_BOMB = _b64_zip({"y.npy": _npy_member("<f4", (1 << 22,), bytes(16 << 20))}, zipfile.ZIP_DEFLATED)
# One element of 512 MiB: the .npz that took the API process to 2.2 GB.
VOID_ELEMENT = _b64_zip({"y.npy": _npy_member("|V536870912", (1,))})
# A few bytes whose header claims 10^12 elements.
HUGE_SHAPE = _b64_zip({"y.npy": _npy_member("<f4", (10**6, 10**6))})
# A header claiming 1 MiB of data (within the limits) in a member holding 8 bytes.
SHORT_MEMBER = _b64_zip({"y.npy": _npy_member("<f8", (1 << 16,), bytes(8))})

# (archive, status, problem type, what the detail names)
HOSTILE_ARCHIVES = {
    "malformed-base64": ("not base64!", 400, "input-error", "not valid base64"),
    "base64-bad-padding": ("QUJ", 400, "input-error", "not valid base64"),
    "base64-non-ascii": ("Zm9v\u00e9", 400, "input-error", "not valid base64"),
    "base64-of-garbage": (base64.b64encode(b"not a zip").decode(), 400, "input-error", "cannot read arrays"),
    "zip-bomb": (ZIP_BOMB, 413, "model-too-large", "RELAYCC_MAX_TENSOR_BYTES"),
    "pickled-object-array": (_pickled_object_array(), 400, "input-error", "Python objects"),
    "huge-shape": (HUGE_SHAPE, 413, "model-too-large", "RELAYCC_MAX_TENSOR_ELEMENTS"),
    "void-dtype": (VOID_ELEMENT, 400, "input-error", "dtype '|V536870912'"),
    "member-shorter-than-header": (SHORT_MEMBER, 400, "input-error", "declares 524288 bytes"),
}


@pytest.mark.parametrize("case", list(HOSTILE_ARCHIVES))
def test_hostile_params_archives_are_refused_cleanly(client: TestClient, store: Path, case: str) -> None:
    archive, status, slug, named = HOSTILE_ARCHIVES[case]

    response = client.post("/compile", json={"relay": SMALL_RELAY, "params": archive})

    assert named in str(problem_of(response, status, slug, store)["detail"])


@pytest.mark.parametrize("case", list(HOSTILE_ARCHIVES))
def test_hostile_inputs_npz_archives_are_refused_cleanly(
    client: TestClient, store: Path, module_id: str, case: str
) -> None:
    archive, status, slug, named = HOSTILE_ARCHIVES[case]

    response = client.post(f"/modules/{module_id}/run", json={"inputs_npz": archive})

    assert named in str(problem_of(response, status, slug, store)["detail"])


def test_void_dtype_in_inputs_is_refused_before_decoding(
    client: TestClient, store: Path, module_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reading any member's data would fail the test: the refusal comes from the header.
    monkeypatch.setattr(zipfile.ZipExtFile, "readinto", lambda *args: pytest.fail("array data was read"))

    response = client.post(f"/modules/{module_id}/run", json={"inputs_npz": VOID_ELEMENT})

    problem = problem_of(response, 400, "input-error", store)
    assert problem["detail"] == (
        "inputs_npz: array 'y' has dtype '|V536870912'; only bool, integer and float arrays are accepted"
    )


def _understated_zip(arrays: dict[str, np.ndarray], padding: int) -> str:
    """An .npz whose members each hold `padding` zero bytes after their array, deflated, while
    the zip directory declares only the array's own size: a member that inflates far past what
    its directory entry says."""
    archive = io.BytesIO()
    declared: dict[str, int] = {}
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, array)
            declared[name + ".npy"] = len(member.getvalue())
            zf.writestr(name + ".npy", member.getvalue() + bytes(padding))
    data = bytearray(archive.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        for info in zf.infolist():
            # Patch the central directory's uncompressed size, which ZipFile believes.
            size = info.file_size.to_bytes(4, "little")
            at = data.index(b"PK\x01\x02")
            while True:
                name_length = int.from_bytes(data[at + 28 : at + 30], "little")
                if data[at + 46 : at + 46 + name_length].decode() == info.filename:
                    break
                at = data.index(b"PK\x01\x02", at + 4)
            assert data[at + 24 : at + 28] == size
            data[at + 24 : at + 28] = declared[info.filename].to_bytes(4, "little")
    return base64.b64encode(bytes(data)).decode("ascii")


def test_a_member_inflating_past_its_directory_entry_is_refused_without_inflating_it(
    client: TestClient, store: Path, module_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = np.arange(6, dtype="float32").reshape(2, 3) - 3
    y = np.ones((2, 3), "float32")
    # Each member inflates to 64 MiB, far past the 1 MiB byte limit of this service.
    archive = _understated_zip({"x": x, "y": y}, padding=64 << 20)
    inflated: list[int] = []
    read = zipfile.ZipExtFile.read

    def counting_read(self: zipfile.ZipExtFile, n: int = -1) -> bytes:
        chunk = read(self, n)
        inflated.append(len(chunk))
        return chunk

    monkeypatch.setattr(zipfile.ZipExtFile, "read", counting_read)

    response = client.post(f"/modules/{module_id}/run", json={"inputs_npz": archive})

    # Read up to the size the directory declares, where the member's checksum does not match.
    problem = problem_of(response, 400, "input-error", store)
    assert "Bad CRC-32 for file 'x.npy'" in str(problem["detail"])
    assert sum(inflated) < 64 * 1024


# --- paths --------------------------------------------------------------------------------------


async def _asgi_get(app: object, raw_path: bytes) -> tuple[int, bytes, dict[bytes, bytes]]:
    """GET `raw_path` as a server would hand it to the app: not normalised (an HTTP client
    removes `..` segments before sending; an attacker's client does not), percent-decoded in
    `path` as uvicorn does."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": unquote_to_bytes(raw_path).decode("utf-8", "replace"), "raw_path": raw_path,
        "query_string": b"", "root_path": "", "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000), "server": ("testserver", 80),
    }
    status = 0
    headers: dict[bytes, bytes] = {}
    body = b""
    requested = False
    finished = anyio.Event()

    async def receive() -> dict[str, object]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        # A streaming response listens for the client going away: it does once answered.
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        nonlocal status, body
        if message["type"] == "http.response.start":
            status = int(message["status"])  # type: ignore[call-overload]
            headers.update(dict(message.get("headers", [])))  # type: ignore[arg-type]
        elif message["type"] == "http.response.body":
            body += message.get("body", b"")  # type: ignore[operator]
            if not message.get("more_body", False):
                finished.set()

    await app(scope, receive, send)  # type: ignore[operator]
    return status, body, headers


class _Raw:
    def __init__(self, status: int, body: bytes, headers: dict[bytes, bytes]):
        self.status_code = status
        self.text = body.decode("utf-8", "replace")
        self.headers = {name.decode(): value.decode() for name, value in headers.items()}

    def json(self) -> dict[str, object]:
        import json

        return dict(json.loads(self.text))


def raw_get(client: TestClient, raw_path: str) -> _Raw:
    assert client.portal is not None
    return _Raw(*client.portal.call(_asgi_get, client.app, raw_path.encode("ascii")))


ARTIFACT_NAMES = [
    "..",
    "../status.json",
    "../request.json",
    "../../../../etc/passwd",
    "src/../../status.json",
    "%2e%2e%2fstatus.json",
    "%2e%2e/status.json",
    "..%2fstatus.json",
    "..%2Frequest.json",
    "src%2f..%2f..%2fstatus.json",
    "..%5cstatus.json",
    "%252e%252e%252fstatus.json",
    "/etc/passwd",
    "%2fetc%2fpasswd",
    "//etc/passwd",
    "metadata.json%00",
    "metadata.json%00.c",
]


@pytest.mark.parametrize("name", ARTIFACT_NAMES)
def test_artifact_names_outside_the_list_are_not_found(
    client: TestClient, store: Path, module_id: str, name: str
) -> None:
    response = raw_get(client, f"/modules/{module_id}/artifacts/{name}")

    problem_of(response, 404, "not-found", store)
    assert "root:" not in response.text and '"state"' not in response.text


def test_a_listed_artifact_is_still_served_by_its_name(client: TestClient, module_id: str) -> None:
    response = raw_get(client, f"/modules/{module_id}/artifacts/metadata.json")

    assert response.status_code == 200
    assert response.json()["format"] == "relaycc.metadata/1"


def _module_ids(module_id: str) -> list[str]:
    return [
        module_id.upper(),
        module_id[:10],
        module_id + "0",
        module_id[:-2] + "..",
        "..",
        "%2e%2e",
        "..%2f..%2fetc",
        "0" * 63 + "g",
        "0" * 64 + "%2f..",
        "%00" + "0" * 61,
    ]


@pytest.mark.parametrize("index", range(10))
@pytest.mark.parametrize("route", ["", "/metadata", "/artifacts", "/artifacts/metadata.json", "/inspect"])
def test_module_ids_that_are_not_64_hex_digits_are_not_found(
    client: TestClient, store: Path, module_id: str, route: str, index: int
) -> None:
    bad = _module_ids(module_id)[index]

    problem_of(raw_get(client, f"/modules/{bad}{route}"), 404, "not-found", store)


def test_running_a_module_id_that_is_not_hex_is_not_found(client: TestClient, store: Path, module_id: str) -> None:
    for bad in _module_ids(module_id)[:4]:
        response = client.post(f"/modules/{bad}/run", json={"inputs": {}})
        problem_of(response, 404, "not-found", store)


# --- numbers --------------------------------------------------------------------------------------


@pytest.mark.parametrize("repeat", [10**6, 2**63, 10**30])
def test_a_huge_repeat_is_refused_naming_the_limit(client: TestClient, store: Path, module_id: str, repeat: int) -> None:
    response = client.post(f"/modules/{module_id}/run", json={"inputs": {}, "repeat": repeat})

    assert "RELAYCC_MAX_RUN_REPEAT" in str(problem_of(response, 422, "validation-error", store)["detail"])


@pytest.mark.parametrize("repeat", ["1e400", "-1", "0", "NaN", "\"many\"", "1.5"])
def test_a_repeat_that_is_not_a_positive_integer_is_a_validation_error(
    client: TestClient, store: Path, module_id: str, repeat: str
) -> None:
    response = client.post(
        f"/modules/{module_id}/run", content=f'{{"inputs": {{}}, "repeat": {repeat}}}'.encode(),
        headers={"content-type": "application/json"},
    )

    problem = problem_of(response, 422, "validation-error", store)
    assert problem["detail"].startswith("body")  # type: ignore[union-attr]


@pytest.mark.parametrize("wait", ["-1", "-0.001", "nan", "NaN", "inf", "-inf", "1e400", "301", "soon"])
def test_a_negative_nan_or_unbounded_wait_is_a_validation_error(client: TestClient, store: Path, wait: str) -> None:
    response = client.post(f"/compile?wait={wait}", json={"relay": SMALL_RELAY})

    problem = problem_of(response, 422, "validation-error", store)
    assert problem["detail"].startswith("query.wait")  # type: ignore[union-attr]


# --- bodies -------------------------------------------------------------------------------------


def test_a_body_over_the_limit_is_refused_by_its_declared_length(client: TestClient, store: Path) -> None:
    response = client.post("/compile", content=b"{" + b" " * MAX_BODY + b"}",
                           headers={"content-type": "application/json"})

    assert "RELAYCC_MAX_BODY_BYTES" in str(problem_of(response, 413, "body-too-large", store)["detail"])


def test_a_body_over_the_limit_without_a_length_is_refused_at_the_limit(client: TestClient, store: Path) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"relay": "'
        for _ in range(MAX_BODY // 65536 + 2):
            yield b"x" * 65536

    response = client.post("/compile", content=chunks(), headers={"content-type": "application/json"})

    assert "RELAYCC_MAX_BODY_BYTES" in str(problem_of(response, 413, "body-too-large", store)["detail"])


@pytest.mark.parametrize("body", [b'{"relay": "\xff"}', b'{"relay": ', b"\xff\xfe{", b"[]", b"null"],
                         ids=["not-utf8", "truncated", "bad-bom", "array", "null"])
def test_a_body_that_is_not_a_json_object_is_a_validation_error(client: TestClient, store: Path, body: bytes) -> None:
    response = client.post("/compile", content=body, headers={"content-type": "application/json"})

    problem_of(response, 422, "validation-error", store)


# --- large bodies are decoded off the event loop --------------------------------------------------


class _BlockedDecoder:
    """Stands in for an array decoder: waits until released, then decodes as the real one."""

    def __init__(self, decode: object):
        self.decode = decode
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.entered.set()
        # Bounded, so that a decoder run on the event loop ends (and the test then fails)
        # instead of hanging: /healthz could only answer after it returned.
        self.release.wait(timeout=20)
        self.returned.set()
        return self.decode(*args, **kwargs)  # type: ignore[operator]


def _healthz_while_blocked(client: TestClient, decoder: _BlockedDecoder, send: object) -> tuple[int, bool]:
    answers: list[int] = []
    sender = threading.Thread(target=lambda: answers.append(send().status_code))  # type: ignore[operator]
    sender.start()
    try:
        assert decoder.entered.wait(timeout=60), "the decoder was never called"
        health = client.get("/healthz")
        still_decoding = not decoder.returned.is_set()
    finally:
        decoder.release.set()
        sender.join(timeout=60)
    assert answers, "the blocked request never answered"
    return health.status_code, still_decoding


def test_healthz_answers_while_run_inputs_are_decoded(
    client: TestClient, module_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoder = _BlockedDecoder(service.api.running.decode_b64_npz)
    monkeypatch.setattr(service.api.running, "decode_b64_npz", decoder)
    inputs = npz_b64(x=np.ones((2, 3), "float32"), y=np.ones((2, 3), "float32"))

    status, still_decoding = _healthz_while_blocked(
        client, decoder, lambda: client.post(f"/modules/{module_id}/run", json={"inputs_npz": inputs}),
    )

    assert status == 200 and still_decoding


def test_healthz_answers_while_compile_params_are_decoded(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = _BlockedDecoder(service.api.admission.decode_b64_npz)
    monkeypatch.setattr(service.api.admission, "decode_b64_npz", decoder)
    params = npz_b64(y=np.ones((2, 3), "float32"))

    status, still_decoding = _healthz_while_blocked(
        client, decoder, lambda: client.post("/compile", json={"relay": SMALL_RELAY, "params": params}),
    )

    assert status == 200 and still_decoding
