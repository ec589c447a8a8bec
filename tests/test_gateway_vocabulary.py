"""One HTTP error vocabulary (issue 21 item 10), on a real gateway, pool and Redis.

Every refusal is an ``ErrorBody`` (``{code, message, ...}``) with a stable code: a
blank message, an unknown branch, a finished turn's cancel, a body that is not JSON,
a body over the limit; and ``/messages`` says where each message sits.
"""

from __future__ import annotations

import json
import subprocess

import httpx2
import pytest

from tests import test_gateway
from tests.gateway_support import REACTQ
from tests.helpers import ROOT
from tests.test_gateway import run_turn, sid, submit

pytestmark = pytest.mark.e2e

# test_gateway's fixtures: a pool, and a gateway with a 200000-byte body limit.
pool_env = test_gateway.pool_env
gateway = test_gateway.gateway
client = test_gateway.client


def _error(response: httpx2.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    body: dict[str, object] = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"], body
    return body


@pytest.mark.parametrize("message", ["", "   "])
def test_a_blank_message_is_empty_message(client: httpx2.Client, message: str) -> None:
    response = client.post(f"/v1/sessions/{sid()}/turns", json={"message": message, "agent": "e2e"})
    body = _error(response, 422, "empty_message")
    assert body["field"] == "body.message"


def test_an_unknown_branch_is_branch_not_found(client: httpx2.Client) -> None:
    session = sid()
    run_turn(client, session, "branch me")
    response = client.get(f"/v1/sessions/{session}/messages", params={"branch": "nope"})
    _error(response, 404, "branch_not_found")


def test_cancelling_a_finished_turn_is_turn_finished(
    client: httpx2.Client, pool_env: dict[str, str]
) -> None:
    session = sid()
    finals = run_turn(client, session, "finish first")
    turn_id = finals[-1].data["turn_id"]
    body = _error(client.post(f"/v1/turns/{turn_id}/cancel"), 409, "turn_finished")
    assert body.get("turn_id") == turn_id

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [REACTQ, "cancel", turn_id, *args],
            env=pool_env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    out = cli()
    assert out.returncode != 0, out
    assert "[turn_finished]" in out.stderr, out.stderr
    out = cli("--json")
    assert out.returncode != 0, out
    # The --json result keeps its shape; the error says its code on stderr.
    assert json.loads(out.stdout) == {
        "turn_id": turn_id,
        "outcome": "already_finished",
        "session_id": session,
        "status": "completed",
    }
    assert json.loads(out.stderr)["code"] == "turn_finished"


def test_a_body_that_is_not_json_says_so(client: httpx2.Client) -> None:
    response = client.post(
        f"/v1/sessions/{sid()}/turns",
        content=b'{"message": "hi", "agent":',
        headers={"Content-Type": "application/json"},
    )
    body = _error(response, 422, "invalid_json")
    assert body["field"] == "body"


def test_a_body_over_the_limit_is_an_error_body(client: httpx2.Client) -> None:
    # The module's gateway allows 200000 bytes of body.
    response = client.post(
        f"/v1/sessions/{sid()}/turns", json={"message": "x" * 250_000, "agent": "e2e"}
    )
    body = _error(response, 413, "request_too_large")
    assert body["field"] == "body"


def test_messages_carry_sequence_and_turn_id(client: httpx2.Client) -> None:
    session = sid()
    accepted = submit(client, session, "number me")
    run_turn(client, session, "and me")
    messages = client.get(f"/v1/sessions/{session}/messages").json()
    assert [m["sequence"] for m in messages] == list(range(1, len(messages) + 1))
    assert messages[0]["turn_id"] == accepted["turn_id"]
    assert {m["turn_id"] for m in messages} <= {accepted["turn_id"], messages[-1]["turn_id"]}
    assert messages[-1]["turn_id"] != accepted["turn_id"]
