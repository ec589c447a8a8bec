"""Issue 32: the gateway's MCP server (``/mcp``) driven by the official ``mcp`` SDK's
client over Streamable HTTP against a real pool (`reactq serve`, real workers, the
scripted model), on the stateless 2026-07-28 core and on 2025-11-25 sessions; and
reactq calling itself through MCP: an agent of another pool whose MCP server is this
gateway's ``/mcp``."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from reactq.shared.events import EVENT_ADAPTER, Event
from reactq.worker.agent.llm.replies import Reply
from tests.conftest import free_port
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import last_user_text, running_pool

pytestmark = pytest.mark.e2e

KEY = "mcp-key"
HELPER_ONLY = "mcp-helper-only"
TENANT = "mcp-tenant"
READ_ONLY = "mcp-read-only"
KEYS = f"{KEY},helper:{HELPER_ONLY};agents=helper,acme:{TENANT};prefix=acme-,viewer:{READ_ONLY};ro"
MODES = ["auto", "legacy"]
"""The SDK's default (it discovers the stateless 2026-07-28 core), and a 2025-11-25
session (``initialize``)."""


def pool_model(request: Mapping[str, Any]) -> Reply:
    """The weather agent answers its data; the helper calls ``lookup`` then answers with
    what it returned and how many user messages it has seen. ``fail`` gets a 400 from
    the model; ``sleep=S`` makes each step take S seconds."""
    text = last_user_text(request)
    delay = next((float(w[6:]) for w in text.split() if w.startswith("sleep=")), 0.0)
    if "fail" in text:
        return Reply.error(400, "the scripted model refuses")
    if "weather agent" in str(request["messages"][0]["content"]):
        return Reply.text(json.dumps({"city": text, "temp_c": 21}))
    last = request["messages"][-1]
    if last["role"] == "user" and text.startswith("pay"):
        return Reply.tool_calls([("pay", {"amount": 5})])
    if last["role"] == "user":
        return Reply.tool_calls([("lookup", {"key": text})]).but(delay=delay)
    seen = sum(1 for m in request["messages"] if m["role"] == "user")
    return Reply.text(f"answer to: {text} (seen {seen}) tool said: {last['content']}")


def caller_model(request: Mapping[str, Any]) -> Reply:
    """The caller asks the other pool's helper (an MCP tool), then relays its answer."""
    last = request["messages"][-1]
    if last["role"] == "user":
        return Reply.tool_calls([("pool_helper", {"message": last_user_text(request)})])
    return Reply.text(f"relayed: {last['content']}")


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("mcp-server")
    with running_pool(
        redis_url,
        f"{namespace}-mcp",
        tmp,
        pool_model,
        agents="tests.mcp_servers.gateway_agents:agents",
    ) as env:
        gw = start_gateway({**env, "REACTQ_API_KEYS": KEYS}, Path(tmp), KEY)
        try:
            yield gw
        finally:
            gw.stop()


@asynccontextmanager
async def connect(gateway: Gateway, mode: str, key: str = KEY) -> AsyncIterator[Client]:
    """The SDK's client on the gateway's ``/mcp``, with ``key``."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0)
    )
    transport = streamable_http_client(f"{gateway.url}/mcp", http_client=http)
    async with http, Client(transport, mode=mode) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def meta_of(result: CallToolResult, name: str) -> Any:
    assert result.meta is not None
    return result.meta[f"reactq/{name}"]


@pytest.mark.parametrize("mode", MODES)
def test_list_call_continue_and_progress(gateway: Gateway, mode: str) -> None:
    async def scenario() -> None:
        async with connect(gateway, mode) as client:
            expected = "2026-07-28" if mode != "legacy" else "2025-11-25"
            assert client.protocol_version == expected
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert sorted(tools) == ["helper", "weather"]
            helper = tools["helper"]
            assert helper.description == "Looks things up and answers questions about them."
            assert helper.input_schema["required"] == ["message"]
            assert set(helper.input_schema["properties"]) == {"message", "session_id", "context"}
            assert helper.output_schema is None
            assert tools["weather"].output_schema is not None
            assert tools["weather"].output_schema["required"] == ["city", "temp_c"]

            updates: list[tuple[float, str | None]] = []

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                updates.append((progress, message))

            first = await client.call_tool(
                "helper",
                {"message": "colour", "context": {"tier": "gold"}},
                progress_callback=on_progress,
            )
            assert not first.is_error
            assert text_of(first).startswith("answer to: colour (seen 1)")
            assert '"tier": "gold"' in text_of(first)  # the context reached the tool
            session_id, turn_id = meta_of(first, "session_id"), meta_of(first, "turn_id")
            assert meta_of(first, "status") == "completed"
            events: list[Event] = [EVENT_ADAPTER.validate_json(m or "") for _, m in updates]
            assert {e.turn_id for e in events} == {turn_id}
            kinds = [e.type for e in events]
            assert kinds[0] == "queued" and "started" in kinds and "action" in kinds
            assert "final" not in kinds  # the final is the result
            assert [p for p, _ in updates] == list(range(1, len(updates) + 1))

            again = await client.call_tool("helper", {"message": "again", "session_id": session_id})
            assert text_of(again).startswith("answer to: again (seen 2)")
            assert meta_of(again, "session_id") == session_id

            data = await client.call_tool("weather", {"message": "Paris"})
            assert not data.is_error
            assert data.structured_content == {"city": "Paris", "temp_c": 21}
            assert json.loads(text_of(data)) == {"city": "Paris", "temp_c": 21}

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_a_call_cancels_its_turn(gateway: Gateway, mode: str) -> None:
    async def scenario() -> str:
        started = asyncio.Event()
        turn: list[str] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            event = EVENT_ADAPTER.validate_json(message or "")
            turn.append(event.turn_id)
            if event.type == "started":
                started.set()

        async with connect(gateway, mode) as client:
            call = asyncio.create_task(
                client.call_tool(
                    "helper", {"message": "sleep=30 long"}, progress_callback=on_progress
                )
            )
            await asyncio.wait_for(started.wait(), 20)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        return turn[0]

    turn_id = asyncio.run(scenario())
    with gateway.client() as http:
        for _ in range(200):
            info = http.get(f"/v1/turns/{turn_id}").json()
            if info["status"] not in ("queued", "running"):
                break
            asyncio.run(asyncio.sleep(0.05))
    assert info["status"] == "cancelled"


def test_failures_are_tool_errors_and_an_unknown_tool_the_protocols(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with connect(gateway, "2026-07-28") as client:
            failed = await client.call_tool("helper", {"message": "fail now"})
            assert failed.is_error and "the turn ended error" in text_of(failed)
            assert meta_of(failed, "status") == "error"

            for bad, why in [
                ({}, "'message' is required"),
                ({"message": "  "}, "'message' is required"),
                ({"message": "x", "session_id": "../etc"}, "'session_id' must be"),
                ({"message": "x", "context": [1]}, "'context' must be a JSON object"),
                ({"message": "x", "colour": 1}, "unknown argument 'colour'"),
            ]:
                result = await client.call_tool("helper", bad)
                assert result.is_error and why in text_of(result), (bad, text_of(result))

            parked = await client.call_tool("helper", {"message": "pay the bill"})
            assert parked.is_error and meta_of(parked, "status") == "awaiting_approval"
            decide = f"/v1/turns/{meta_of(parked, 'turn_id')}/decisions"
            assert decide in text_of(parked) and "pay" in text_of(parked)

            with pytest.raises(MCPError) as unknown:
                await client.call_tool("nobody", {"message": "x"})
            assert unknown.value.code == -32602 and "nobody" in unknown.value.message

    asyncio.run(scenario())


def test_keys_and_tenants(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with connect(gateway, "2026-07-28", HELPER_ONLY) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["helper"]
            with pytest.raises(MCPError) as hidden:
                await client.call_tool("weather", {"message": "Paris"})
            assert hidden.value.code == -32602

        async with connect(gateway, "legacy", TENANT) as client:
            mine = await client.call_tool("helper", {"message": "hello"})
            assert meta_of(mine, "session_id").startswith("acme-")
            other = await client.call_tool("helper", {"message": "x", "session_id": "someone-else"})
            assert other.is_error and "no session 'someone-else'" in text_of(other)

        async with connect(gateway, "2026-07-28", READ_ONLY) as client:
            refused = await client.call_tool("helper", {"message": "x"})
            assert refused.is_error and "read-only" in text_of(refused)

        with pytest.raises(Exception):  # noqa: B017  the SDK raises its own HTTP error
            async with connect(gateway, "legacy", "not-a-key") as client:
                await client.list_tools()

    asyncio.run(scenario())
    # 401 in the gateway's shape, before the SDK sees the request; a path under /mcp is
    # answered as JSON-RPC.
    with gateway.client("not-a-key") as http:
        assert http.post("/mcp", json={}).status_code == 401
    # A 2025-11-25 session is its key's: another key finds no such session.
    accept = {"Accept": "application/json, text/event-stream"}
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    with gateway.client() as http:
        opened = http.post("/mcp", json=hello, headers=accept)
        assert opened.status_code == 200
        session = {**accept, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    with gateway.client(TENANT) as http:
        assert http.post("/mcp", json=listing, headers=session).status_code == 404
    with gateway.client() as http:
        missing = http.post("/mcp/elsewhere", json={})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == -32600


def test_reactq_calls_itself_through_mcp(
    gateway: Gateway, redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A worker of another pool hosts ``caller``, whose MCP server is this gateway: its
    turn calls the helper of this pool as a tool (a 2025-11-25 session, reactq's
    ``MCPClient``), and relays the answer."""
    tmp = tmp_path_factory.mktemp("mcp-caller")
    extra = {"REACTQ_TEST_MCP_URL": f"{gateway.url}/mcp", "REACTQ_TEST_MCP_KEY": KEY}
    with running_pool(
        redis_url,
        f"{namespace}-mcpcaller",
        tmp,
        caller_model,
        agents="tests.mcp_servers.gateway_agents:caller",
        **extra,
    ) as env:
        other = start_gateway(
            {**env, "REACTQ_API_KEYS": KEY}, Path(tmp), KEY, name="caller-gateway"
        )
        try:
            with other.client() as http:
                tools = http.get("/v1/agents/caller/tools").json()["tools"]
                assert {t["name"] for t in tools} == {"pool_helper", "pool_weather"}
                sid = f"caller-{uuid.uuid4().hex[:8]}"
                accepted = http.post(
                    f"/v1/sessions/{sid}/turns", json={"message": "ping", "agent": "caller"}
                ).json()
                final = wait_final(http, accepted["turn_id"])
        finally:
            other.stop()
    assert final["status"] == "completed"
    assert final["text"].startswith("relayed: answer to: ping (seen 1)")


def wait_final(http: httpx2.Client, turn_id: str) -> dict[str, Any]:
    """The turn's final event, once it has one (20 s at most)."""
    for _ in range(400):
        info = http.get(f"/v1/turns/{turn_id}").json()
        if info.get("final"):
            return dict(info["final"])
        asyncio.run(asyncio.sleep(0.05))
    raise AssertionError(f"turn {turn_id} did not end: {info}")


def test_without_the_sdk_the_gateway_serves_and_mcp_says_why(
    gateway: Gateway, redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A gateway whose Python cannot import ``mcp`` (a package of that name on its path
    that refuses to import): ``/v1`` works, ``/mcp`` answers 501 naming the extra."""
    tmp = tmp_path_factory.mktemp("no-mcp")
    shim = tmp / "shim" / "mcp"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named mcp')\n")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-mcp",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "PYTHONPATH": str(tmp / "shim"),
    }
    bare = start_gateway(env, Path(tmp), None, port=free_port(), name="no-mcp")
    try:
        with bare.client() as http:
            assert http.get("/v1/agents").status_code == 200
            answer = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert answer.status_code == 501
            assert "pip install 'reactq[mcp]'" in answer.json()["error"]["message"]
    finally:
        bare.stop()


def test_redis_down_is_an_error_in_the_protocols_shape(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A gateway whose Redis does not answer: the listing is a JSON-RPC error, a call a
    tool error, neither an HTTP 500."""
    tmp = tmp_path_factory.mktemp("mcp-no-redis")
    env = {
        "REACTQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "REACTQ_API_KEYS": KEY,
    }
    down = start_gateway(env, Path(tmp), KEY, name="no-redis")

    async def scenario() -> None:
        async with connect(down, "2026-07-28") as client:
            with pytest.raises(MCPError) as listing:
                await client.list_tools()
            assert listing.value.code == -32603
            assert "Redis does not answer" in listing.value.message
            call = await client.call_tool("helper", {"message": "x"})
            assert call.is_error and "Redis does not answer" in text_of(call)

    try:
        asyncio.run(scenario())
    finally:
        down.stop()
