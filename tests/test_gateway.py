"""The HTTP gateway on real parts: `reactq serve` + a real worker + the scripted model.

Every endpoint and error code, SSE replay / resume / heartbeat, auth, CORS, the
OpenAPI document, the bind guard, and the `--gateway` CLI paths.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from reactq.producer.client import Producer
from reactq.shared.bus import stream_id_gt
from reactq.shared.settings import Settings
from tests.conftest import free_port
from tests.gateway_support import (
    REACTQ,
    SSE,
    Gateway,
    SSEReader,
    read_until,
    slow_lookup,
    start_gateway,
)
from tests.helpers import ROOT, running_pool

pytestmark = pytest.mark.e2e
KEY = "gw-test-key-1"


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("gateway")
    with running_pool(redis_url, f"{namespace}-gw", tmp, slow_lookup) as env:
        yield {**env, "REACTQ_TMP": str(tmp)}


@pytest.fixture(scope="module")
def gateway(pool_env: dict[str, str]) -> Iterator[Gateway]:
    env = {
        **pool_env,
        "REACTQ_API_KEYS": f"other-key,{KEY}",
        "REACTQ_SSE_HEARTBEAT_SECONDS": "0.3",
        "REACTQ_MAX_REQUEST_BYTES": "200000",
        "REACTQ_MAX_MESSAGE_BYTES": "100000",
        "REACTQ_CORS_ORIGINS": "http://app.example",
    }
    gw = start_gateway(env, Path(pool_env["REACTQ_TMP"]), KEY)
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def client(gateway: Gateway) -> Iterator[httpx2.Client]:
    with gateway.client() as c:
        yield c


def sid() -> str:
    return f"gw-{uuid.uuid4().hex[:10]}"


def submit(client: httpx2.Client, session: str, message: str, **extra: object) -> dict[str, str]:
    response = client.post(
        f"/v1/sessions/{session}/turns", json={"message": message, "agent": "e2e", **extra}
    )
    assert response.status_code == 202, response.text
    body: dict[str, str] = response.json()
    return body


def is_final(message: SSE) -> bool:
    return message.event == "final"


def run_turn(client: httpx2.Client, session: str, message: str) -> list[SSE]:
    accepted = submit(client, session, message)
    return read_until(client, accepted["events_url"], is_final)


# --- health, auth, documents ---------------------------------------------------------


def test_health_and_readiness(client: httpx2.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {
        "status": "ready",
        "checks": {"redis": "ok", "broker": "ok", "state_store": "ok"},
    }


@pytest.mark.parametrize("auth", [None, "Bearer wrong", "Bearer gw-test-key", "Basic Z3c6eA=="])
def test_v1_wants_a_valid_key_and_leaks_nothing(gateway: Gateway, auth: str | None) -> None:
    session = f"secret-session-{uuid.uuid4().hex[:6]}"
    headers = {"Authorization": auth} if auth else {}
    with httpx2.Client(base_url=gateway.url, headers=headers, timeout=10) as anon:
        for method, path in [
            ("POST", f"/v1/sessions/{session}/turns"),
            ("GET", f"/v1/sessions/{session}/events"),
            ("GET", f"/v1/sessions/{session}/messages"),
            ("GET", "/v1/turns/t_x"),
            ("POST", "/v1/turns/t_x/cancel"),
        ]:
            response = anon.request(method, path, json={"message": "hi", "agent": "e2e"})
            assert response.status_code == 401, (method, path, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["code"] == "unauthorized"
            assert session not in response.text


def test_openapi_document_is_3_1_and_describes_the_api(client: httpx2.Client) -> None:
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    paths = doc["paths"]
    assert set(paths) >= {
        "/v1/sessions/{session_id}/turns",
        "/v1/sessions/{session_id}/events",
        "/v1/sessions/{session_id}/messages",
        "/v1/turns/{turn_id}",
        "/v1/turns/{turn_id}/cancel",
        "/healthz",
        "/readyz",
    }
    post = paths["/v1/sessions/{session_id}/turns"]["post"]
    assert {"202", "401", "409", "413", "422"} <= set(post["responses"])
    events = paths["/v1/sessions/{session_id}/events"]["get"]
    assert "text/event-stream" in events["responses"]["200"]["content"]
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "FinalEvent" in doc["components"]["schemas"]


def test_the_page_and_its_assets_are_served(client: httpx2.Client) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "/static/app.js" in page.text and "http" not in page.text.replace("http-equiv", "")
    assert "Last-Event-ID" in client.get("/static/app.js").text
    assert client.get("/static/app.css").status_code == 200


def test_cors_allows_only_the_configured_origins(client: httpx2.Client) -> None:
    def preflight(origin: str) -> httpx2.Response:
        return client.options(
            "/v1/turns/t_x",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "authorization",
            },
        )

    allowed = preflight("http://app.example")
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "http://app.example"
    refused = preflight("http://evil.example")
    assert "access-control-allow-origin" not in refused.headers


# --- submitting turns -------------------------------------------------------------------


def test_submit_then_stream_the_turn_until_its_final(client: httpx2.Client) -> None:
    session = sid()
    accepted = submit(client, session, "hello gateway", metadata={"from": "test"})
    assert accepted["session_id"] == session and accepted["status"] == "queued"
    assert accepted["turn_id"].startswith("t_")
    messages = read_until(client, accepted["events_url"], is_final)
    kinds = [m.event for m in messages if m.event != "usage"]
    assert kinds == ["queued", "started", "action", "observation", "final"]
    for m in messages:
        assert m.id == m.data["id"] and m.event == m.data["type"]
        assert m.data["turn_id"] == accepted["turn_id"]
    assert messages[-1].data["text"] == "answer to: hello gateway"
    assert messages[-1].data["status"] == "completed"


def test_invalid_input_is_422_naming_the_field(client: httpx2.Client) -> None:
    cases = [
        ("bad id!", {"message": "hi", "agent": "e2e"}, "path.session_id"),
        (sid(), {"agent": "e2e"}, "body.message"),
        (sid(), {"message": "", "agent": "e2e"}, "body.message"),
        (sid(), {"message": "   ", "agent": "e2e"}, "body.message"),
        (sid(), {"message": "hi", "agent": "e2e", "strategy": "shout"}, "body.strategy"),
        (sid(), {"message": "hi", "agent": "ghost"}, "body.agent"),
        (sid(), {"message": "hi", "agent": "e2e", "extra": 1}, "body.extra"),
    ]
    for session, body, field in cases:
        response = client.post(f"/v1/sessions/{session}/turns", json=body)
        assert response.status_code == 422, (body, response.text)
        error = response.json()
        assert error["field"] == field, error
        assert error["message"] and error["code"]
    response = client.post(
        f"/v1/sessions/{sid()}/turns",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422 and response.json()["code"] == "invalid_json"


def test_bodies_over_the_limit_are_413(client: httpx2.Client) -> None:
    huge = client.post(
        f"/v1/sessions/{sid()}/turns", json={"message": "x" * 300_000, "agent": "e2e"}
    )
    assert huge.status_code == 413 and huge.json()["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:
        yield b'{"message": "'
        for _ in range(30):
            yield b"y" * 10_000
        yield b'", "agent": "e2e"}'

    chunked = client.post(
        f"/v1/sessions/{sid()}/turns",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert chunked.status_code == 413
    # Under the body limit, over the message limit: 413 naming the message.
    message = client.post(
        f"/v1/sessions/{sid()}/turns", json={"message": "z" * 150_000, "agent": "e2e"}
    )
    assert message.status_code == 413 and message.json()["field"] == "body.message"


def test_reject_strategy_conflict_is_409(client: httpx2.Client) -> None:
    session = sid()
    first = submit(client, session, "slow first")
    refused = client.post(
        f"/v1/sessions/{session}/turns",
        json={"message": "second", "agent": "e2e", "strategy": "reject"},
    )
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert body["code"] == "turn_rejected" and body["turn_id"].startswith("t_")
    status = client.get(f"/v1/turns/{body['turn_id']}").json()
    assert status["status"] == "rejected"
    read_until(client, first["events_url"], is_final)


def test_turn_status_attempt_and_final(client: httpx2.Client) -> None:
    session = sid()
    accepted = submit(client, session, "status please")
    read_until(client, accepted["events_url"], is_final)
    info = client.get(f"/v1/turns/{accepted['turn_id']}").json()
    assert info["turn_id"] == accepted["turn_id"] and info["session_id"] == session
    assert info["status"] == "completed" and info["attempt"] == 1
    assert info["final"]["text"] == "answer to: status please"
    missing = client.get("/v1/turns/t_nope")
    assert missing.status_code == 404 and missing.json()["code"] == "turn_not_found"
    assert client.get("/v1/turns/bad%20id").status_code == 422


def test_cancel_a_running_turn(client: httpx2.Client) -> None:
    session = sid()
    accepted = submit(client, session, "slow cancel me")
    # Wait until it runs, then cancel it.
    read_until(client, accepted["events_url"], lambda m: m.event == "started")
    response = client.post(f"/v1/turns/{accepted['turn_id']}/cancel")
    if not hasattr(Producer, "cancel"):
        assert response.status_code == 501 and response.json()["code"] == "not_implemented"
        return
    final = read_until(client, accepted["events_url"], is_final)[-1]
    if response.status_code == 409:
        # It finished before the request arrived: nothing to cancel.
        assert response.json()["code"] == "turn_finished", response.text
    else:
        assert response.status_code == 202, response.text
        body = response.json()
        assert body["session_id"] == session
        assert body["outcome"] in ("cancelling", "cancelled")
        assert final.data["status"] == "cancelled"
    assert client.post("/v1/turns/t_unknown/cancel").status_code == 404


def test_messages_of_a_session(client: httpx2.Client) -> None:
    session = sid()
    run_turn(client, session, "remember this")
    messages = client.get(f"/v1/sessions/{session}/messages").json()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == "remember this"
    assert messages[-1]["content"] == "answer to: remember this"
    trunk = client.get(f"/v1/sessions/{session}/messages", params={"branch": "trunk"})
    assert trunk.json() == messages
    missing = client.get(f"/v1/sessions/{sid()}/messages")
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"


def test_unknown_routes_are_json_errors(client: httpx2.Client) -> None:
    response = client.get("/v1/nothing")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


# --- the event stream -------------------------------------------------------------------


def test_replay_resume_with_last_event_id_and_after(client: httpx2.Client) -> None:
    session = sid()
    run_turn(client, session, "one")
    run_turn(client, session, "two")
    url = f"/v1/sessions/{session}/events"
    everything = read_until(client, url, lambda m: is_final(m) and "two" in m.data["text"])
    ids = [m.id for m in everything]
    assert all(i is not None for i in ids) and len(set(ids)) == len(ids)
    assert all(stream_id_gt(str(b), str(a)) for a, b in itertools.pairwise(ids))
    cut = len(everything) // 2
    last = everything[cut - 1].id
    assert last is not None
    # Resume from the header, from ?after=, and the header wins over ?after=.
    for headers, query in [
        ({"Last-Event-ID": last}, ""),
        ({}, f"?after={last}"),
        ({"Last-Event-ID": last}, "?after=0"),
    ]:
        rest = read_until(
            client, url + query, lambda m: is_final(m) and "two" in m.data["text"], headers
        )
        assert [m.id for m in rest] == ids[cut:]
    bad = client.get(url, params={"after": "yesterday"})
    assert bad.status_code == 422 and bad.json()["field"] == "query.after"


def test_resume_across_a_forced_disconnect_mid_turn(client: httpx2.Client) -> None:
    session = sid()
    accepted = submit(client, session, "slow and steady")
    url = f"/v1/sessions/{session}/events?after=0"
    first = read_until(client, url, lambda m: m.event == "action")
    # The connection is gone (closed by the reader mid-turn); resume from its last id.
    rest = read_until(client, url, is_final, headers={"Last-Event-ID": first[-1].id or ""})
    got = [m.id for m in first + rest]
    assert len(set(got)) == len(got)
    full = read_until(client, url, is_final)
    assert got == [m.id for m in full]
    assert rest[-1].data["turn_id"] == accepted["turn_id"]


def test_live_only_and_heartbeats(gateway: Gateway, client: httpx2.Client) -> None:
    session = sid()
    run_turn(client, session, "before")
    url = f"/v1/sessions/{session}/events?after=$"
    with gateway.client() as other, client.stream("GET", url) as response:
        lines = response.iter_lines()
        head = []
        # Idle: keep-alive comments arrive (the heartbeat is 0.3 s here).
        for line in lines:
            head.append(line)
            if line.startswith(": keep-alive"):
                break
        assert head[0] == "retry: 1000"
        submit(other, session, "after")
        got = []
        for message in SSEReader(lines):
            got.append(message)
            if is_final(message):
                break
    assert got[0].event == "queued" and got[0].data["message"] == "after"
    assert all(m.data["message"] != "before" for m in got if m.event == "queued")


def test_turn_filter_needs_a_known_turn(client: httpx2.Client) -> None:
    session = sid()
    response = client.get(f"/v1/sessions/{session}/events", params={"turn_id": "t_nope"})
    assert response.status_code == 404 and response.json()["code"] == "turn_not_found"


# --- serve and the CLI --------------------------------------------------------------------


def test_serve_refuses_a_public_bind_without_keys(pool_env: dict[str, str]) -> None:
    env = {k: v for k, v in pool_env.items() if k != "REACTQ_API_KEYS"}
    out = subprocess.run(
        [REACTQ, "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        env={**_base_env(), **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "refusing to bind 0.0.0.0 without API keys" in out.stderr and "--insecure" in out.stderr


def test_serve_without_keys_on_loopback_says_so(pool_env: dict[str, str], tmp_path: Path) -> None:
    gw = start_gateway(pool_env, tmp_path, None, name="nokeys")
    try:
        assert "no API keys configured" in gw.logs() and "loopback only" in gw.logs()
        with gw.client() as open_client:
            assert open_client.get("/v1/turns/t_nope").status_code == 404
    finally:
        gw.stop()


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("REACTQ_")}


def test_cli_send_and_watch_through_the_gateway(gateway: Gateway, pool_env: dict[str, str]) -> None:
    # No Redis URL for the CLI: it can only reach the pool through the gateway.
    env = {**_base_env(), "REACTQ_API_KEY": KEY, "REACTQ_REDIS_URL": "redis://127.0.0.1:1/0"}
    session = sid()
    out = subprocess.run(
        [REACTQ, "send", session, "via http", "--agent", "e2e", "--gateway", gateway.url, "--json"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events[0]["type"] == "queued" and events[-1]["text"] == "answer to: via http"

    bad = subprocess.run(
        [REACTQ, "send", session, "x", "--agent", "ghost", "--gateway", gateway.url],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "no worker hosts agent 'ghost'" in bad.stderr

    with subprocess.Popen(
        [REACTQ, "watch", session, "--from", "0", "--json", "--gateway", gateway.url],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    ) as watch:
        assert watch.stdout is not None
        seen = []
        for line in watch.stdout:
            seen.append(json.loads(line))
            if seen[-1]["type"] == "final":
                break
        watch.terminate()
    assert [e["id"] for e in seen] == [e["id"] for e in events]


def test_sync_producer_submits_and_waits(pool_env: dict[str, str]) -> None:
    from reactq.producer.sync import SyncProducer

    with SyncProducer(Settings.from_env(pool_env)) as producer:
        handle = producer.submit(sid(), "sync hello", agent="e2e")
        kinds = [e.type for e in handle.events() if e.type != "usage"]
        assert kinds == ["queued", "started", "action", "observation", "final"]
        assert handle.result(timeout=30).text == "answer to: sync hello"
        # The final is published just before the worker records the status: wait for it.
        deadline = time.monotonic() + 10
        while producer.turn_status(handle.turn_id) != "completed":
            assert time.monotonic() < deadline, "the turn's status never became completed"
            time.sleep(0.05)
        history = producer.history(handle.session_id)
        assert history[-1].content == "answer to: sync hello"
