"""Agents the end-to-end tests load into real `reactq worker` processes."""

from __future__ import annotations

from reactq.worker import Agent, ToolContext, ToolMode, tool


@tool()
async def lookup(key: str, ctx: ToolContext) -> dict:
    """Look a key up (returns it with the turn that asked)."""
    return {"key": key, "turn": ctx.turn_id, "attempt": ctx.attempt}


agent = Agent(
    name="e2e",
    model="scripted",
    system_prompt="You are the end-to-end test agent.",
    tools=[lookup],
    tool_mode=ToolMode.NATIVE,
)
