"""Schemathesis against the gateway's own /openapi.json: for generated requests, valid
and invalid, no 5xx and every response matches the document.

The event stream is left out: it never ends by design, and tests/test_gateway.py
covers it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from tests.gateway_support import Gateway, start_gateway
from tests.test_gateway import pool_env

pytestmark = pytest.mark.e2e
KEY = "schema-key"
__all__ = ["pool_env"]


@pytest.fixture(scope="module")
def schema_gateway(pool_env: dict[str, str]) -> Iterator[Gateway]:
    env = {**pool_env, "REACTQ_API_KEYS": KEY}
    gw = start_gateway(env, Path(pool_env["REACTQ_TMP"]), KEY, name="schema")
    try:
        yield gw
    finally:
        gw.stop()


# Schemathesis's pytest plugin does not run on this pytest; its engine is driven
# directly instead: one hypothesis run per operation and generation mode.
@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=str)
def test_no_server_errors_and_responses_match_the_schema(
    schema_gateway: Gateway, mode: schemathesis.GenerationMode
) -> None:
    api = schemathesis.openapi.from_url(f"{schema_gateway.url}/openapi.json")
    operations = [
        result.ok() for result in api.exclude(path_regex=r"/events$").get_all_operations()
    ]
    assert len(operations) >= 6
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            case.call_and_validate(
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=30,
                # Schema-valid is not always acceptable: an agent no worker hosts, a
                # blank message or one over the byte limit are refused (422/413) by
                # rules the schema cannot express.
                excluded_checks=[schemathesis.checks.positive_data_acceptance],
            )

        try:
            check()
        except Unsatisfiable:
            # No input to make invalid (GET /healthz): nothing to test in negative mode.
            assert mode == schemathesis.GenerationMode.NEGATIVE, operation.label
