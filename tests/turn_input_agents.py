"""Agents of the per-turn inputs tests (issue 15, items 1, 2 and 6), loaded into real
`reactq worker` processes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reactq.worker import Agent, ToolContext, tool
from reactq.worker.agent.interventions import Interventions, ToolCallInfo
from reactq.worker.agent.llm.scripted_server import Reply

USAGE = {"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50}
"""What every scripted reply reports: a turn of two model calls uses 100 tokens."""


@tool()
async def whoami(ctx: ToolContext) -> dict[str, Any]:
    """Who this turn acts for."""
    return {"tenant": ctx.context.get("tenant"), "plan": ctx.metadata.get("plan")}


def prompt(turn: ToolContext) -> str:
    return f"You serve tenant {turn.context.get('tenant', 'nobody')}."


def tag_result(call: ToolCallInfo, output: str) -> str:
    # An intervention sees the turn's context too.
    return f"(seen by the intervention for {call.context.get('tenant')})"


agent = Agent(
    name="ctx",
    model="scripted",
    system_prompt=prompt,
    tools=[whoami],
    interventions=Interventions(after_tool=tag_result),
    overridable={"model", "temperature", "max_iterations"},
)

budgeted = Agent(
    name="budgeted",
    model="scripted",
    system_prompt="You are on a budget.",
    tools=[whoami],
    session_max_tokens=150,
)

agents = [agent, budgeted]


def whoami_then_answer(request: Mapping[str, Any]) -> Reply:
    """Call ``whoami``, then answer with its result, the system prompt, the model and
    the temperature the request carried."""
    messages = request["messages"]
    if messages[-1]["role"] == "user":
        return Reply.tool_calls([("whoami", {})], usage=USAGE)
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    return Reply.text(
        f"tool={messages[-1]['content']} | system={system} | model={request['model']} "
        f"| temperature={request.get('temperature')}",
        usage=USAGE,
    )
