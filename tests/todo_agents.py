"""Agents the todo-list and tool-catalogue tests load into real `reactq worker`
processes, and the stateless scripts their model follows."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reactq.bundles import todo_tools
from reactq.worker import Agent, ToolContext, ToolMode, tool
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.mcp import MCPClient, MCPProvider
from reactq.worker.agent.tools import ToolCategory

ROOT = Path(__file__).resolve().parent.parent


@tool(read_only=True)
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(writes=True)
async def save(path: str, text: str, ctx: ToolContext) -> str:
    """Save text under a path (a WRITE tool)."""
    return f"saved {len(text)} characters to {path} for {ctx.session_id}"


planner = Agent(
    name="planner",
    model="scripted",
    system_prompt="You plan your work.",
    tools=[lookup, *todo_tools()],
    tool_mode=ToolMode.NATIVE,
)

demo_server = MCPClient(
    command=[sys.executable, "-m", "tests.mcp_servers.demo", "stdio"], cwd=ROOT, name="demo"
)

# A read-only reviewer: the model never sees ``save`` (WRITE) nor ``demo_echo`` (an MCP
# tool without readOnlyHint); ``demo_add`` is READ by its server's annotation.
reviewer = Agent(
    name="reviewer",
    model="scripted",
    system_prompt="You review, and change nothing.",
    tools=[lookup, save, *todo_tools()],
    mcp_servers=[MCPProvider(demo_server, prefix="demo_", allow=["add", "echo"])],
    tool_categories={ToolCategory.READ, ToolCategory.META},
    tool_mode=ToolMode.NATIVE,
)

agents = [planner, reviewer]

PLAN = [
    {"id": "1", "text": "read the spec", "status": "in_progress"},
    {"id": "2", "text": "write the code"},
    {"id": 7, "text": "an id that is not a string"},
    "not an item",
]


def system_prompt(request: Mapping[str, Any]) -> str:
    """The request's system message."""
    first = request["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


def plan_script(request: Mapping[str, Any]) -> Reply:
    """Turn "plan": write the list (with malformed items), then answer with the system
    prompt's todo section as the next call saw it. Turn "save": call ``save`` (which a
    reviewer may not), then answer with the error it read. Anything else: answer with
    the system prompt's todo section."""
    messages = list(request["messages"])
    last = messages[-1]
    if last["role"] == "user":
        if str(last["content"]).startswith("plan"):
            return Reply.tool_calls([("update_todos", {"todos": PLAN})])
        if str(last["content"]).startswith("save"):
            return Reply.tool_calls([("save", {"path": "a.txt", "text": "hi"})])
    if last["role"] == "tool":
        return Reply.text(f"tool said: {last['content']}")
    section = system_prompt(request).partition("# Your todo list")[2]
    return Reply.text(f"todo section:{section}")
