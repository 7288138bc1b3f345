"""Property 5 (API shape): schemathesis drives every JSON operation of a real `campaign serve`
(uvicorn, demo data, an API token) with generated inputs, valid and invalid, bounded in examples.
No server error, and every response matches the OpenAPI schema: status codes, content types and
the error body the server really sends ({"detail": str, "field"?: str}).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.support.servers import LiveServer, start_live_server, stop_live_server

# A campaign file is YAML text: any string fits the schema, most are not campaign files (422).
# An Apprise URL is valid when Apprise's plugin for its scheme accepts its tokens: no schema says that (422).
SEMANTIC = {
    "POST /api/campaigns/import": [positive_data_acceptance],
    "POST /api/notifications": [positive_data_acceptance],
}
EXAMPLES = 12  # per operation; the suite stays a few minutes on two cores


class _Server(LiveServer):
    """The live server, an API token and where failures are written."""

    def __init__(self, live: LiveServer, log_dir: Path) -> None:
        super().__init__(live.proc, live.url, live.login_url, live.env, live.log)
        self.token = live.cli("token", "create", "schemathesis").stdout.strip()
        self.log_dir = log_dir


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("schemathesis")
    server = _Server(start_live_server(tmp, f"sqlite:///{tmp / 'st.db'}", "--demo", "--no-runner"), tmp)
    try:
        yield server
    finally:
        stop_live_server(server)


def _conformance_check(operation, token: str):
    """A Hypothesis test of one operation: every generated request gets a response its schema allows."""
    excluded = SEMANTIC.get(operation.label, [])

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, excluded_checks=excluded)

    return check


def test_api_conforms_to_its_schema(board):
    # Each operation in turn (schemathesis' pytest plugin does not load under this pytest version).
    schema = schemathesis.openapi.from_url(f"{board.url}/openapi.json")
    failures: list[str] = []
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result.err()
        operations.append(result.ok())
    assert len(operations) > 10
    for operation in operations:
        check = _conformance_check(operation, board.token)
        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:
            failures.append(f"{operation.label}: {exc}")
    report = "\n\n".join(failures)
    (board.log_dir / "schemathesis-failures.txt").write_text(report)
    assert not failures, report


def test_the_documented_422_is_the_one_sent(board):
    import httpx

    doc = httpx.get(f"{board.url}/openapi.json").json()
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    error = doc["components"]["schemas"]["Error"]
    assert error["properties"]["detail"]["type"] == "string"
    r = httpx.post(
        f"{board.url}/api/campaigns",
        json={"slug": "x", "name": "X", "hidden_size": 2**63},
        headers={"Authorization": f"Bearer {board.token}"},
    )
    assert r.status_code == 422 and isinstance(r.json()["detail"], str) and r.json()["field"] == "hidden_size"
    create = doc["paths"]["/api/campaigns"]["post"]["responses"]
    assert {"401", "409", "413", "422"} <= set(create)
