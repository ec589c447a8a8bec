"""Issue 28, item 4, on real parts: a `reactq serve` process, real worker processes on
SQLite, the scripted model, Redis. Text that cannot be stored (a lone surrogate, NUL,
bytes that are not UTF-8) and other poison (10**400, 2**63, JSON 1000 levels deep) from
the model, from tools and through every write route of the gateway is refused (422) or
repaired where it enters; afterwards the session's next turn completes and every listing
answers 200, also over data an older version stored."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reactq.shared.messages import ChatMessage
from reactq.shared.state import open_store
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests import text_edge_agents
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import scripted_pool

pytestmark = pytest.mark.e2e
KEY = "edges-key-1"
AGENT = "edges"
FINAL = {"completed", "error", "cancelled", "max_iterations", "rejected", "blocked"}


@pytest.fixture(scope="module")
def stack(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Gateway, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("edges")
    server = ScriptedServer(text_edge_agents.script)
    with scripted_pool(
        redis_url,
        f"{namespace}-edges",
        tmp,
        server,
        agents="tests.text_edge_agents:agents",
        REACTQ_WORKSPACE_ROOT=str(tmp / "workspaces"),
        REACTQ_API_KEYS=KEY,
    ) as (env, pool):
        gateway = start_gateway(env, tmp, KEY, name="edges", timeout=120)
        try:
            yield gateway, env
        finally:
            gateway.stop()
            if any(p.poll() not in (None, 0) for p in pool.procs):
                print(pool.logs())


@pytest.fixture(scope="module")
def client(stack: tuple[Gateway, dict[str, str]]) -> Iterator[httpx2.Client]:
    with stack[0].client() as c:
        yield c


def sid() -> str:
    return f"te-{uuid.uuid4().hex[:10]}"


def turn(
    client: httpx2.Client, session_id: str, message: str, agent: str = AGENT
) -> dict[str, Any]:
    """Submit a turn and wait (with a deadline) for its end; its status body."""
    accepted = client.post(
        f"/v1/sessions/{session_id}/turns", json={"message": message, "agent": agent}
    )
    assert accepted.status_code == 202, accepted.text
    turn_id = accepted.json()["turn_id"]
    deadline = time.monotonic() + 60
    while True:
        status = client.get(f"/v1/turns/{turn_id}")
        assert status.status_code == 200, status.text
        body: dict[str, Any] = status.json()
        if body["status"] in FINAL:
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def listings_answer(client: httpx2.Client, session_id: str) -> None:
    """Every listing that can show the session's data answers 200 with JSON."""
    for path in [
        "/v1/sessions",
        f"/v1/sessions/{session_id}",
        f"/v1/sessions/{session_id}/turns",
        f"/v1/sessions/{session_id}/messages",
        f"/v1/store/edges.{session_id}",
        "/v1/schedules",
    ]:
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
        response.json()


def next_turn_completes(client: httpx2.Client, session_id: str, agent: str = AGENT) -> None:
    final = turn(client, session_id, "hello again", agent)
    assert final["status"] == "completed", final
    listings_answer(client, session_id)


# --- (c) the gateway's write routes refuse what UTF-8 cannot carry ---------------------------


def test_a_patch_with_a_lone_surrogate_is_422_and_stores_nothing(client: httpx2.Client) -> None:
    # Before: 500, and stored: from then on GET /v1/sessions answered 500 for every key
    # that could see the session.
    s = sid()
    assert turn(client, s, "hi")["status"] == "completed"
    response = client.patch(
        f"/v1/sessions/{s}",
        content=b'{"metadata": {"k": "\\ud800"}}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "body.metadata", response.json()
    assert client.get(f"/v1/sessions/{s}").json()["metadata"] == {}
    next_turn_completes(client, s)


def test_a_store_put_with_a_lone_surrogate_is_422_and_stores_nothing(
    client: httpx2.Client,
) -> None:
    s = sid()
    response = client.put(
        f"/v1/store/edges.{s}/doc",
        content=b'{"value": {"k": ["ok", "\\udc80"]}}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    error = response.json()
    assert (error["code"], error["field"]) == ("invalid_text", "body.value"), error
    assert "value.k[1]" in error["message"]
    listed = client.get(f"/v1/store/edges.{s}")
    assert listed.status_code == 200, listed.text
    assert listed.json()["documents"] == []


def test_an_error_never_echoes_what_it_cannot_encode(client: httpx2.Client) -> None:
    # Before: a validation error naming a key that held a lone surrogate could not be
    # encoded, and the connection dropped without an answer.
    s = sid()
    for body in [
        b'{"message": "hi", "agent": "edges", "bogus\\ud800": 1}',
        b'{"from_sequence": 0, "name": "\\udfff"}',
    ]:
        path = f"/v1/sessions/{s}/turns" if b"message" in body else f"/v1/sessions/{s}/branches"
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 422, response.text
        assert "\ufffd" in response.text or "surrogate" in response.text


# --- (g) data an older version stored -------------------------------------------------------


async def _store_old_poison(url: str, session_id: str) -> None:
    store = await open_store(url)
    try:
        await store.ensure_session(session_id, AGENT)
        await store.update_metadata(session_id, {"k\udc80": "v\ud800"})
        await store.append(
            session_id,
            [
                ChatMessage(role="user", content="old \ud800 question", turn_id="t_old1"),
                ChatMessage(role="assistant", content="old \udc80 answer", turn_id="t_old1"),
            ],
        )
        await store.put_document(("edges", session_id), "doc", {"k": "\ud800"})
    finally:
        await store.close()


def test_a_session_an_older_version_stored_with_lone_surrogates_still_works(
    stack: tuple[Gateway, dict[str, str]], client: httpx2.Client
) -> None:
    # Before: GET /v1/sessions answered 500 (for every key that could see the session),
    # the store's listing too, and every later turn ended llm_undecodable.
    s = sid()
    asyncio.run(_store_old_poison(stack[1]["REACTQ_DATABASE_URL"], s))
    listings_answer(client, s)
    # Repaired on the way out (how many U+FFFD a key becomes is the driver's business).
    [(key, value)] = client.get(f"/v1/sessions/{s}").json()["metadata"].items()
    assert key.startswith("k\ufffd") and value == "v\ufffd", (key, value)
    next_turn_completes(client, s)


# --- (a), (b), (e), (f) through real workers ------------------------------------------------


@pytest.mark.parametrize("index", range(len(text_edge_agents.MODEL_TEXT)))
def test_a_poisoned_answer_is_repaired_and_the_next_turn_completes(
    client: httpx2.Client, index: int
) -> None:
    s = sid()
    final = turn(client, s, f"say {index}")
    assert final["status"] == "completed", final
    next_turn_completes(client, s)


def test_a_model_chosen_path_with_a_lone_surrogate_writes_a_repaired_name(
    stack: tuple[Gateway, dict[str, str]], client: httpx2.Client
) -> None:
    # Before: the file was written under a name of raw bytes, then the model read
    # "[tool_error] DBAPIError ... INSERT INTO file_actions ..." and undo skipped it.
    s = sid()
    final = turn(client, s, 'write "a\\udc80.txt"')
    assert final["status"] == "completed", final
    root = Path(stack[1]["REACTQ_WORKSPACE_ROOT"]) / s
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == ["a\ufffd.txt"]
    undone = client.post(f"/v1/turns/{final['turn_id']}/undo")
    assert undone.status_code == 200, undone.text
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == []
    refused = turn(client, s, 'write "a\\u0000.txt"')
    assert refused["status"] == "completed", refused
    messages = client.get(f"/v1/sessions/{s}/messages").json()
    assert "[workspace_error]" in messages[-2]["content"], messages[-2]
    next_turn_completes(client, s)


def test_a_storage_error_reaches_the_model_as_a_code(client: httpx2.Client) -> None:
    s = sid()
    for index in (1, 2):
        assert turn(client, s, f"fail {index}")["status"] == "completed"
    contents = [m["content"] for m in client.get(f"/v1/sessions/{s}/messages").json()]
    tool_results = [c for c in contents if c and c.startswith("[")]
    assert all(c.startswith("[tool_storage_error]") for c in tool_results), tool_results
    assert not any("secret" in c or "INSERT" in c for c in tool_results), tool_results


# --- the property ---------------------------------------------------------------------------

_FRAGMENTS: list[bytes] = [
    b'"\\ud800"',
    b'"a\\udc80b"',
    b'"x\\u0000y"',
    b'{"\\udfff": 1}',
    str(10**400).encode(),
    str(2**63).encode(),
    b"[" * 1000 + b"]" * 1000,
    b'"\xff\xfe"',
]
"""Poison as JSON text on the wire (the last: bytes that are not UTF-8)."""

_WRITES: list[tuple[str, str, bytes]] = [
    ("POST", "/v1/sessions/{s}/turns", b'{"message": @, "agent": "edges"}'),
    (
        "POST",
        "/v1/sessions/{s}/turns",
        b'{"message": "hi", "agent": "edges", "metadata": {"k": @}}',
    ),
    ("POST", "/v1/sessions/{s}/turns", b'{"message": "hi", "agent": "edges", "context": {"k": @}}'),
    ("PATCH", "/v1/sessions/{s}", b'{"metadata": {"k": @}}'),
    ("PUT", "/v1/store/edges.{s}/doc", b'{"value": {"k": @}}'),
    (
        "POST",
        "/v1/schedules",
        b'{"session_id": "{s}", "agent": "edges", "message": @, "every": 3600}',
    ),
    (
        "POST",
        "/v1/schedules",
        b'{"session_id": "{s}", "agent": "edges", "message": "hi", "every": 3600, '
        b'"metadata": {"k": @}}',
    ),
    ("POST", "/v1/turns/t_nosuchturn0/decisions", b'{"decisions": {"c1": @}, "by": @}'),
    ("POST", "/v1/sessions/{s}/branches", b'{"from_sequence": 0, "name": @}'),
    ("PUT", "/v1/sessions/{s}/active_branch", b'{"branch": @}'),
]
"""Every write route with a body, the poison's place marked ``@``."""

_ACTIONS = st.one_of(
    st.tuples(st.just("say"), st.integers(0, len(text_edge_agents.MODEL_TEXT) - 1)),
    st.tuples(st.just("call"), st.integers(0, len(text_edge_agents.TOOL_VALUES) - 1)),
    st.tuples(st.just("args"), st.integers(0, len(text_edge_agents.ARGS) - 1)),
    st.tuples(st.just("fail"), st.integers(0, len(text_edge_agents.TOOL_ERRORS) - 1)),
    st.tuples(st.just("stream"), st.integers(0, 3)),
    st.tuples(
        st.just("http"),
        st.tuples(st.integers(0, len(_WRITES) - 1), st.integers(0, len(_FRAGMENTS) - 1)),
    ),
)


def _poison(client: httpx2.Client, s: str, action: tuple[str, Any]) -> None:
    kind, arg = action
    if kind == "http":
        method, path, template = _WRITES[arg[0]]
        body = template.replace(b"{s}", s.encode()).replace(b"@", _FRAGMENTS[arg[1]])
        response = client.request(
            method,
            path.format(s=s),
            content=body,
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code in (200, 201, 202, 404, 409, 413, 422), (
            method,
            path,
            body[:120],
            response.status_code,
            response.text[:300],
        )
        response.json()  # an answer, and JSON, even for a refusal
        return
    agent = "edges-streamed" if kind == "stream" else AGENT
    verb = "say" if kind == "stream" else kind
    final = turn(client, s, f"{verb} {arg}", agent=agent)
    assert final["status"] in FINAL, final


@settings(
    max_examples=24,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(action=_ACTIONS)
def test_after_any_poison_the_next_turn_completes_and_every_listing_answers(
    client: httpx2.Client, action: tuple[str, Any]
) -> None:
    s = sid()
    agent = "edges-streamed" if action[0] == "stream" else AGENT
    assert turn(client, s, "hi", agent)["status"] == "completed"
    _poison(client, s, action)
    next_turn_completes(client, s, agent)


def test_every_write_route_with_every_poison_answers_json_not_500(client: httpx2.Client) -> None:
    # The HTTP half of the property, exhaustively: cheap (no turn runs), so every pair.
    s = sid()
    assert turn(client, s, "hi")["status"] == "completed"
    for route in range(len(_WRITES)):
        for fragment in range(len(_FRAGMENTS)):
            _poison(client, s, ("http", (route, fragment)))
    listings_answer(client, s)
    json.dumps(client.get(f"/v1/sessions/{s}").json())
