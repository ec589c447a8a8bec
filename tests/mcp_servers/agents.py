"""The agent the MCP + skills end-to-end test loads into real ``reactq worker`` processes."""

from __future__ import annotations

import sys
from pathlib import Path

from reactq.worker import Agent, ToolMode
from reactq.worker.agent.mcp import MCPClient, MCPProvider

ROOT = Path(__file__).resolve().parent.parent.parent

demo_server = MCPClient(
    command=[sys.executable, "-m", "tests.mcp_servers.demo", "stdio"], cwd=ROOT, name="demo"
)

agent = Agent(
    name="mcp-e2e",
    model="scripted",
    system_prompt="You are the MCP and skills test agent.",
    tool_mode=ToolMode.NATIVE,
    skills_dir=ROOT / "tests" / "skills" / "pool",
    mcp_servers=[MCPProvider(demo_server, prefix="demo_", allow=["add", "fail", "environment"])],
)
