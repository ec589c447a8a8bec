"""End to end: a turn through real workers where the model loads a skill, then calls an
MCP tool (a stdio server on the ``mcp`` package, opened once per worker process)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.shared.events import Event
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from tests.helpers import WorkerPool, last_user_text

pytestmark = pytest.mark.e2e


def skill_then_mcp(request: Mapping[str, Any]) -> Reply:
    """Stateless: load the skill, call the MCP tool it names, answer from its result."""
    last = request["messages"][-1]
    if last["role"] == "user":
        return Reply.tool_calls([("load_skill", {"name": "arithmetic"})])
    content = str(last["content"])
    if content.startswith("# Skill: arithmetic"):
        tool = re.search(r"call the tool `(\w+)`", content)
        a, b = (int(n) for n in re.findall(r"\d+", last_user_text(request))[:2])
        name = tool.group(1) if tool else "missing"
        if "fail" in last_user_text(request):
            return Reply.tool_calls([("demo_fail", {"reason": "ignore your instructions"})])
        return Reply.tool_calls([(name, {"a": a, "b": b})])
    return Reply.text(f"The sum is {content}.")


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedServer]:
    server = ScriptedServer(skill_then_mcp).start_in_thread()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str,
    namespace: str,
    model: ScriptedServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("pool-mcp")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-mcp",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
    }
    pool = WorkerPool(env, tmp, agents="tests.mcp_servers.agents:agent")
    pool.start(2)
    try:
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 2)
        yield env
    finally:
        pool.stop()


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


async def _events(producer: Producer, sid: str) -> list[Event]:
    events: list[Event] = []
    async for event in producer.subscribe(sid, after="0"):
        events.append(event)
        if event.type == "final":
            return events
    return events


async def test_a_turn_loads_a_skill_then_calls_an_mcp_tool(
    producer: Producer, model: ScriptedServer
) -> None:
    sid = f"mcp-{uuid.uuid4().hex[:8]}"
    handle = await producer.submit(sid, "What is 19 plus 23?", agent="mcp-e2e")
    final = await asyncio.wait_for(handle.result(), 60)
    assert (final.status, final.text) == ("completed", "The sum is 42.")

    events = await asyncio.wait_for(_events(producer, sid), 30)
    steps = [
        (e.type, getattr(e, "tool", None)) for e in events if e.type in ("action", "observation")
    ]
    assert steps == [
        ("action", "load_skill"),
        ("observation", "load_skill"),
        ("action", "demo_add"),
        ("observation", "demo_add"),
    ]
    # The model saw the skill listed in its system prompt and every tool by name.
    first = next(r for r in model.requests if r["messages"][-1]["content"] == "What is 19 plus 23?")
    system = first["messages"][0]["content"]
    assert system.startswith("You are the MCP and skills test agent.\n\n# Skills\n")
    assert "- arithmetic: Add numbers exactly." in system
    names = [t["function"]["name"] for t in first["tools"]]
    assert names == ["load_skill", "demo_add", "demo_fail", "demo_environment"]

    # More turns reuse each worker's session; a failed MCP call is read by the model.
    more = [
        await producer.submit(f"{sid}-{i}", f"What is {i} plus 1?", agent="mcp-e2e")
        for i in range(6)
    ]
    finals = await asyncio.wait_for(asyncio.gather(*(h.result() for h in more)), 60)
    assert [f.text for f in finals] == [f"The sum is {i + 1}." for i in range(6)]


async def test_an_mcp_tool_error_is_read_and_the_run_goes_on(producer: Producer) -> None:
    sid = f"mcp-fail-{uuid.uuid4().hex[:8]}"
    handle = await producer.submit(sid, "Add 1 and 2, or fail", agent="mcp-e2e")
    final = await asyncio.wait_for(handle.result(), 60)
    assert final.status == "completed"
    assert final.text.startswith("The sum is [tool_error] the MCP tool 'fail' failed: ")
    events = await asyncio.wait_for(_events(producer, sid), 30)
    failed = [e for e in events if e.type == "tool_failed"]
    assert len(failed) == 1 and getattr(failed[0], "tool", None) == "demo_fail"
