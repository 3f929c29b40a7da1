"""Property-based tests of the HTTP API against its checked-in OpenAPI document (schemathesis).

Schemathesis generates requests from openapi/openapi.json, valid and invalid ones, sends them to
the app in-process (ASGI) and checks every answer: never a server error, and the status code,
content type, headers and body are those the document declares. The example count is bounded
so the whole run stays well under a minute.
"""

from __future__ import annotations

from collections.abc import Iterator

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.python.asgi import shutdown_lifespans

from service.app import create_app
from service.openapi import DOCUMENT_PATH
from service.settings import Settings, get_settings

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


# Loaded at collection: schemathesis makes one test per operation of the document. The app is
# served in-process; its settings (a temporary store) are given by the fixture below.
APP = create_app()
schema = schemathesis.openapi.from_path(DOCUMENT_PATH)
schema.app = APP


@pytest.fixture(scope="module", autouse=True)
def service_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = Settings(
        store=tmp_path_factory.mktemp("schemathesis") / "store",
        queue="embedded",
        workers=1,
        # A generated `?wait=` must not hold the run up, nor a generated model a worker.
        max_wait_seconds=1.0,
        compile_seconds=30.0,
        run_seconds=10.0,
    )
    APP.dependency_overrides[get_settings] = lambda: settings
    try:
        yield settings
    finally:
        # Schemathesis started the app's lifespan (and with it the worker pool) on first use.
        shutdown_lifespans()
        APP.dependency_overrides.clear()


@schema.parametrize()
@hypothesis.settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
def test_api_answers_every_generated_request_as_its_openapi_document_says(case: schemathesis.Case) -> None:
    case.call_and_validate(checks=CHECKS)



class LinkedCalls(schema.as_state_machine()):  # type: ignore[misc]
    """Sequences of calls that follow the document's links: a compile's answer gives the id the
    module routes then use, so they are tested on real modules, not only on unknown ids."""

    def validate_response(self, response, case, additional_checks=None, **kwargs):  # type: ignore[no-untyped-def]
        case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)


def test_api_follows_its_links_without_server_errors_or_schema_violations() -> None:
    LinkedCalls.run(settings=hypothesis.settings(
        max_examples=8,
        stateful_step_count=5,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    ))
