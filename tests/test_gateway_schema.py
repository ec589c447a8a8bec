"""Schemathesis against the gateway's own /openapi.json: for generated requests, valid
and invalid, no 5xx, every response matches the document, and a request the schema
accepts is accepted, except for the refusals the document lists for it.

The event stream is left out: it never ends by design, and tests/test_gateway.py
covers it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.config import SchemathesisConfig

from tests.gateway_support import Gateway, start_gateway
from tests.test_gateway import pool_env

pytestmark = pytest.mark.e2e
KEY = "schema-key"
__all__ = ["pool_env"]

# Schema-valid requests an operation refuses by rules the schema cannot express, and
# what its document must say about each (schemathesis ST202 otherwise).
REFUSALS = {
    "POST /v1/sessions/{session_id}/turns": {
        "422": "an agent no worker hosts",
        "413": "REACTQ_MAX_MESSAGE_BYTES",
    },
    "GET /v1/sessions": {"422": "not one a listing handed out"},
    "POST /v1/schedules": {
        "422": "a cron expression that is not five valid fields",
        "413": "REACTQ_MAX_MESSAGE_BYTES",
    },
    "GET /v1/store/{namespace}": {"422": "A cursor no search handed out"},
    # Blank input, input items of a type it does not run, and (not served yet) stream.
    "POST /v1/responses": {"400": "Invalid input"},
    "POST /ag-ui/{agent}": {"422": "AG-UI's own input schema"},
}
# Schemathesis's own default for positive_data_acceptance.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]


@pytest.fixture(scope="module")
def schema_gateway(pool_env: dict[str, str]) -> Iterator[Gateway]:
    env = {**pool_env, "REACTQ_API_KEYS": KEY}
    gw = start_gateway(env, Path(pool_env["REACTQ_TMP"]), KEY, name="schema")
    try:
        yield gw
    finally:
        gw.stop()


def test_refusals_the_schema_cannot_express_are_documented(schema_gateway: Gateway) -> None:
    doc = httpx2.get(f"{schema_gateway.url}/openapi.json", timeout=10).json()
    for label, statuses in REFUSALS.items():
        method, path = label.split(" ", 1)
        responses = doc["paths"][path][method.lower()]["responses"]
        for status, says in statuses.items():
            assert says in responses[status]["description"], (label, status)
    agent = doc["components"]["schemas"]["TurnCreate"]["properties"]["agent"]
    assert "422" in agent["description"]
    # And the gateway does refuse such a request so.
    response = httpx2.post(
        f"{schema_gateway.url}/v1/sessions/schema-s/turns",
        json={"message": "hi", "agent": "no-such-agent"},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=10,
    )
    assert response.status_code == 422 and response.json()["field"] == "body.agent"


def _config() -> SchemathesisConfig:
    """Positive data must be accepted, but for each operation's documented refusals."""
    blocks = [
        f'[[operations]]\ninclude-name = "{label}"\n'
        f"checks.positive_data_acceptance.expected-statuses = "
        f"{[*ACCEPTED, *statuses]!r}\n".replace("'", '"')
        for label, statuses in REFUSALS.items()
    ]
    return SchemathesisConfig.from_str("\n".join(blocks))


# Schemathesis's pytest plugin does not run on this pytest; its engine is driven
# directly instead: one hypothesis run per operation and generation mode.
@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=str)
def test_no_server_errors_and_responses_match_the_schema(
    schema_gateway: Gateway, mode: schemathesis.GenerationMode
) -> None:
    api = schemathesis.openapi.from_url(f"{schema_gateway.url}/openapi.json", config=_config())
    # The Agent Protocol's threads and runs (issue 31) do not document yet the refusals
    # their schema cannot express (an assistant no worker hosts, a field not served):
    # tests/test_agent_protocol_runs.py covers their bad input meanwhile.
    walked = api.exclude(path_regex=r"/events$").exclude(
        path_regex=r"^/(threads|runs)(/|$)(?!(.*/)?crons)"
    )
    operations = [result.ok() for result in walked.get_all_operations()]
    assert len(operations) >= 6
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        # Derandomized: the negative mode can draw an "invalid" value no URL can carry
        # (an empty array for an optional query parameter serializes to nothing), so a
        # fresh draw per run failed now and then on a request that was in fact valid.
        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            case.call_and_validate(headers={"Authorization": f"Bearer {KEY}"}, timeout=30)

        try:
            check()
        except Unsatisfiable:
            # No input to make invalid (GET /healthz): nothing to test in negative mode.
            assert mode == schemathesis.GenerationMode.NEGATIVE, operation.label
