"""The agents the gateway's MCP server test loads into real ``reactq worker`` processes.

``agents``: the pool the gateway serves as MCP tools (``helper``, with a tool;
``weather``, with a structured answer). ``caller``: an agent of another pool whose one
MCP server is that gateway's ``/mcp`` (``REACTQ_TEST_MCP_URL``, with the key in
``REACTQ_TEST_MCP_KEY``): reactq calling itself through MCP.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from reactq.worker import Agent, ToolContext, ToolMode, tool
from reactq.worker.agent.mcp import MCPClient, MCPProvider


@tool(read_only=True)
async def lookup(key: str, ctx: ToolContext) -> dict:
    """Look a key up (returns it with the turn's context)."""
    return {"key": key, "context": ctx.context}


@tool(requires_approval=True)
async def pay(amount: int) -> str:
    """Pay ``amount`` (a person approves it first)."""
    return f"paid {amount}"


class Weather(BaseModel):
    """The weather agent's answer."""

    city: str
    temp_c: int


helper = Agent(
    name="helper",
    description="Looks things up and answers questions about them.",
    model="scripted",
    system_prompt="You are the helper.",
    tools=[lookup, pay],
    tool_mode=ToolMode.NATIVE,
)

weather = Agent(
    name="weather",
    description="Reports the weather of a city, as data.",
    model="scripted",
    system_prompt="You are the weather agent.",
    tool_mode=ToolMode.NATIVE,
    output_type=Weather,
)

agents = [helper, weather]
"""The pool behind the gateway: ``--agents tests.mcp_servers.gateway_agents:agents``."""


def _pool_server() -> MCPClient:
    url = os.environ.get("REACTQ_TEST_MCP_URL", "http://127.0.0.1:9/mcp")
    key = os.environ.get("REACTQ_TEST_MCP_KEY", "")
    return MCPClient(url=url, headers={"Authorization": f"Bearer {key}"}, name="pool")


caller = Agent(
    name="caller",
    model="scripted",
    system_prompt="You are the caller: you ask the other pool's agents.",
    tool_mode=ToolMode.NATIVE,
    mcp_servers=[MCPProvider(_pool_server(), prefix="pool_")],
)
"""``--agents tests.mcp_servers.gateway_agents:caller``: its tools are the other pool's
agents (``pool_helper``, ``pool_weather``)."""
