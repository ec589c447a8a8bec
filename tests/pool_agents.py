"""Agents the end-to-end tests load into real `reactq worker` processes."""

from __future__ import annotations

import asyncio

from reactq.worker import Agent, ToolContext, ToolMode, tool


@tool(read_only=True)
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


def _record(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


@tool()
async def tick(path: str, n: int, ctx: ToolContext) -> str:
    """Record a side effect: one line per run of the call in the file at ``path``."""
    _record(path, f"tick {n} attempt={ctx.attempt} resumed={ctx.resumed}")
    return f"ticked {n}"


@tool()
async def stall(path: str, ctx: ToolContext) -> str:
    """Record a side effect, then (on the first attempt) hang until the worker is killed."""
    _record(path, f"stall attempt={ctx.attempt} resumed={ctx.resumed}")
    if ctx.attempt == 1:
        await asyncio.sleep(120)
    return "stalled"


@tool(requires_approval=True)
async def pay(path: str, amount: int, ctx: ToolContext) -> str:
    """Pay ``amount`` (a side effect a person must approve first)."""
    _record(path, f"pay {amount} attempt={ctx.attempt} resumed={ctx.resumed}")
    return f"paid {amount}"


durable = Agent(
    name="durable",
    model="scripted",
    system_prompt="You are the durability test agent.",
    tools=[tick, stall, pay],
    tool_mode=ToolMode.NATIVE,
)

agents = [agent, durable]
"""Every agent here: ``--agents tests.pool_agents:agents``."""
