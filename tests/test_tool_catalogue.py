"""Issue 19, item 4: tool categories and the catalogue.

Every tool is READ, WRITE or META; an agent may expose only some categories (a
read-only reviewer), and its model then never sees the others while a call to one
is refused. A real worker publishes its agents' catalogues in the registry; a real
`reactq serve` answers ``GET /v1/agents`` and ``GET /v1/agents/{name}/tools`` from
it (a key limited to some agents sees only those), and so does ``reactq tools``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from reactq import Agent, Registry, Tool, ToolCategory, tool
from reactq.bundles import file_tools, image_tools, memory_tools, todo_tools
from reactq.shared.state.memory.store import MemoryStateStore
from reactq.worker.agent import AgentLoop, LoopConfig
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import run_cli, running_pool
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user
from tests.todo_agents import plan_script

API_KEYS = "admin:admin-key,planners:planner-key;agents=planner"


# -- declaring categories -----------------------------------------------------------


def test_a_tool_is_write_unless_declared_read_only() -> None:
    @tool
    def refund_order(order: str) -> str:
        """Refund an order."""
        return order

    @tool(read_only=True)
    def look(key: str) -> str:
        """Look."""
        return key

    @tool(writes=True)
    def put(key: str) -> str:
        """Put."""
        return key

    @tool(category="meta")
    def plan(step: str) -> str:
        """Plan."""
        return step

    assert (refund_order.category, refund_order.writes) == (ToolCategory.WRITE, True)
    assert refund_order.info().category is ToolCategory.WRITE
    assert Tool(look.fn).category is ToolCategory.WRITE
    assert (look.category, look.writes) == (ToolCategory.READ, False)
    assert (put.category, put.writes) == (ToolCategory.WRITE, True)
    assert (plan.category, plan.writes) == (ToolCategory.META, True)  # runs alone
    # The older spellings still say what they said.
    assert Tool(look.fn, writes=False).category is ToolCategory.READ
    assert Tool(look.fn, category=ToolCategory.READ).category is ToolCategory.READ
    assert Tool(look.fn, writes=True, category="meta").category is ToolCategory.META
    assert Tool(look.fn, read_only=True, writes=False).category is ToolCategory.READ
    assert look.info().source == "local" and look.info().origin is None
    with pytest.raises(ValueError, match="writes=True conflicts with category=READ"):
        Tool(look.fn, writes=True, category=ToolCategory.READ)
    with pytest.raises(ValueError, match="read_only=True conflicts with category=WRITE"):
        Tool(look.fn, read_only=True, category="write")
    with pytest.raises(ValueError, match="writes=True conflicts with read_only=True"):
        tool(read_only=True, writes=True)(look.fn)
    with pytest.raises(ValueError, match="unknown category 'delete'"):
        Tool(look.fn, category="delete")
    with pytest.raises(ValueError, match="unknown tool category 'admin'"):
        Agent(name="x", tools=[look], tool_categories={"read", "admin"})
    registry = Registry([look, put, plan], categories={ToolCategory.READ})
    assert registry.names == ["look"]
    assert registry.hidden_category("put") is ToolCategory.WRITE
    assert registry.hidden_category("look") is None


def test_the_bundles_declare_their_read_only_tools(tmp_path: Path) -> None:
    def categories(tools: list[Tool]) -> dict[str, str]:
        return {t.name: t.category.value for t in tools}

    assert categories(file_tools(tmp_path, download=True)) == {
        "read_file": "read",
        "list_files": "read",
        "search_files": "read",
        "glob_files": "read",
        "write_file": "write",
        "edit_file": "write",
        "apply_patch": "write",
        "download_file": "write",
    }
    assert categories(memory_tools("notes", store=MemoryStateStore())) == {
        "remember": "write",
        "recall": "read",
        "forget": "write",
    }
    assert categories(image_tools(tmp_path)) == {"image_info": "read", "analyze_image": "read"}
    assert categories(todo_tools()) == {"update_todos": "meta", "list_todos": "meta"}


running: list[str] = []
overlapped: list[tuple[str, str]] = []


async def _take_turns(name: str, key: str) -> str:
    """Yield to the loop a few times: a call started beside this one runs meanwhile."""
    overlapped.extend((name, other) for other in running)
    running.append(name)
    for _ in range(5):
        await asyncio.sleep(0)
    running.remove(name)
    return f"{name} {key}"


@tool
async def refund(order: str) -> str:
    """Refund an order (no knobs: a WRITE tool)."""
    return await _take_turns("refund", order)


@tool(read_only=True)
async def status(order: str) -> str:
    """An order's status."""
    return await _take_turns("status", order)


@pytest.mark.parametrize(
    ("calls", "overlaps"),
    [
        ([("refund", "1"), ("refund", "2")], []),
        ([("status", "1"), ("refund", "2"), ("status", "3")], []),
        ([("status", "1"), ("status", "2")], [("status", "status")]),
    ],
)
async def test_a_tool_without_knobs_runs_alone_and_read_only_ones_side_by_side(
    calls: list[tuple[str, str]], overlaps: list[tuple[str, str]]
) -> None:
    overlapped.clear()
    asked = [(name, {"order": key}) for name, key in calls]
    handler = scripted(Reply.tool_calls(asked), Reply.text("done"))
    async with endpoint(handler) as (_server, llm):
        bus = ListBus()
        loop = AgentLoop(llm, Registry([refund, status]), LoopConfig(model="m"))
        result = await loop.run([user("x")], emitter_for(bus))
    assert result.text == "done"
    assert overlapped == overlaps
    assert [o.output for o in bus.of("observation")] == [f"{n} {k}" for n, k in calls]


# -- through a worker and the gateway ---------------------------------------------------


@pytest.fixture(scope="module")
def pool(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], ScriptedServer, Path]]:
    tmp = tmp_path_factory.mktemp("catalogue")
    server = ScriptedServer(plan_script)
    with running_pool(
        redis_url,
        f"{namespace}-cat",
        tmp,
        plan_script,
        agents="tests.todo_agents:agents",
        server=server,
    ) as env:
        yield env, server, tmp


@pytest.fixture(scope="module")
def gateway(pool: tuple[dict[str, str], ScriptedServer, Path]) -> Iterator[Gateway]:
    env, _server, tmp = pool
    gw = start_gateway({**env, "REACTQ_API_KEYS": API_KEYS}, tmp, "admin-key")
    try:
        yield gw
    finally:
        gw.stop()


def _get(gateway: Gateway, path: str, key: str = "admin-key") -> httpx2.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx2.get(f"{gateway.url}{path}", headers=headers, timeout=20)


def _by_name(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in tools}


def test_the_gateway_lists_the_pools_agents_and_their_tools(gateway: Gateway) -> None:
    listed = _get(gateway, "/v1/agents")
    assert listed.status_code == 200, listed.text
    agents = {a["name"]: a for a in listed.json()["agents"]}
    assert set(agents) == {"planner", "reviewer"}
    assert agents["planner"]["live"] is True and agents["planner"]["tools"] == 3
    assert agents["reviewer"]["tool_categories"] == ["meta", "read"]

    answer = _get(gateway, "/v1/agents/reviewer/tools")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["agent"] == "reviewer" and body["tool_categories"] == ["meta", "read"]
    tools = _by_name(body["tools"])
    # save (WRITE) and demo_echo (MCP, no readOnlyHint) are not the reviewer's to see.
    assert list(tools) == ["lookup", "update_todos", "list_todos", "demo_add"]
    assert (tools["lookup"]["category"], tools["lookup"]["source"]) == ("read", "local")
    assert tools["lookup"]["parameters"]["properties"]["key"]["type"] == "string"
    assert tools["update_todos"] | {"parameters": None, "description": None} == {
        "name": "update_todos",
        "description": None,
        "category": "meta",
        "source": "bundle",
        "origin": "todos",
        "parameters": None,
        "requires_approval": False,
        "timeout": None,
    }
    assert (tools["demo_add"]["category"], tools["demo_add"]["source"]) == ("read", "mcp")
    assert tools["demo_add"]["origin"] == "demo"
    assert set(tools["demo_add"]["parameters"]["properties"]) == {"a", "b"}

    missing = _get(gateway, "/v1/agents/nobody/tools")
    assert missing.status_code == 404 and missing.json()["code"] == "unknown_agent"


def test_a_key_limited_to_some_agents_sees_only_those(gateway: Gateway) -> None:
    listed = _get(gateway, "/v1/agents", key="planner-key")
    assert [a["name"] for a in listed.json()["agents"]] == ["planner"]
    assert _get(gateway, "/v1/agents/planner/tools", key="planner-key").status_code == 200
    hidden = _get(gateway, "/v1/agents/reviewer/tools", key="planner-key")
    assert hidden.status_code == 404 and hidden.json()["code"] == "unknown_agent"
    assert _get(gateway, "/v1/agents", key="wrong-key").status_code == 401


def test_reactq_tools_lists_an_agents_tools(
    pool: tuple[dict[str, str], ScriptedServer, Path],
) -> None:
    env = pool[0]
    shown = run_cli(env, "tools", "reviewer")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("reviewer: only meta, read tools")
    rows = {line.split()[0]: line.split()[1:3] for line in lines[1:]}
    assert rows == {
        "lookup": ["read", "local"],
        "update_todos": ["meta", "bundle:todos"],
        "list_todos": ["meta", "bundle:todos"],
        "demo_add": ["read", "mcp:demo"],
    }
    as_json = run_cli(env, "tools", "planner", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert [t["name"] for t in json.loads(as_json.stdout)["tools"]] == [
        "lookup",
        "update_todos",
        "list_todos",
    ]
    agents = run_cli(env, "agents")
    assert agents.returncode == 0 and agents.stdout.startswith("planner  live")
    unknown = run_cli(env, "tools", "nobody")
    assert unknown.returncode == 2  # an error, as for an unknown session
    assert unknown.stderr.startswith("reactq: error: no worker hosts an agent named 'nobody'")
    assert unknown.stderr.rstrip().endswith("[unknown_agent]")


def test_a_read_only_agent_never_sees_a_write_tool_and_a_call_to_one_is_refused(
    pool: tuple[dict[str, str], ScriptedServer, Path],
) -> None:
    env, server, _tmp = pool
    sent = run_cli(env, "send", "review-1", "save it", "--agent", "reviewer", timeout=90)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert "tool said: [tool_denied] 'save' is a write tool" in sent.stdout
    assert "may use only meta, read tools" in sent.stdout
    (first,) = [r for r in server.requests if r["messages"][-1].get("content") == "save it"]
    offered = [t["function"]["name"] for t in first["tools"]]
    assert offered == ["lookup", "update_todos", "list_todos", "demo_add"]
