from __future__ import annotations

from pathlib import Path

import pytest

from service.jobs.sandbox import bwrap
from service.jobs.sandbox.policy import sandbox_status, user_c_refusal
from service.state import ServiceState
from tests.service.support import make_settings


@pytest.fixture
def sandbox_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "probe", lambda uid=bwrap.DEFAULT_UID: bwrap.Availability(True, "bubblewrap"))


@pytest.fixture
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "probe", lambda uid=bwrap.DEFAULT_UID: bwrap.Availability(False, "user namespaces are refused"))


def test_an_open_service_refuses_user_c_by_default(tmp_path: Path, sandbox_works: None) -> None:
    refusal = user_c_refusal(make_settings(tmp_path))

    assert refusal is not None and "no API keys" in refusal


def test_a_service_with_api_keys_accepts_user_c_in_its_sandbox(tmp_path: Path, sandbox_works: None) -> None:
    assert user_c_refusal(make_settings(tmp_path, api_keys=("k",))) is None
    assert user_c_refusal(make_settings(tmp_path, allow_user_c=True)) is None


def test_the_operators_no_wins_over_api_keys(tmp_path: Path, sandbox_works: None) -> None:
    refusal = user_c_refusal(make_settings(tmp_path, api_keys=("k",), allow_user_c=False))

    assert refusal == "this service does not compile them (RELAYCC_ALLOW_USER_C=false)"


def test_user_c_is_refused_without_a_sandbox_even_when_allowed(tmp_path: Path, no_sandbox: None) -> None:
    refusal = user_c_refusal(make_settings(tmp_path, allow_user_c=True))

    assert refusal is not None and "user namespaces are refused" in refusal
    assert user_c_refusal(make_settings(tmp_path, allow_user_c=True, sandbox="off")) is not None


def test_sandbox_status_says_what_jobs_run_in(tmp_path: Path, no_sandbox: None) -> None:
    sandboxed, detail = sandbox_status(make_settings(tmp_path))

    assert not sandboxed
    assert detail == "user namespaces are refused; jobs run in forked children and user C is refused"


def test_a_service_that_requires_the_sandbox_does_not_start_without_one(tmp_path: Path, no_sandbox: None) -> None:
    with pytest.raises(RuntimeError, match="RELAYCC_SANDBOX=required"):
        ServiceState.start(make_settings(tmp_path / "store", sandbox="required"))

    assert not (tmp_path / "store").exists()
