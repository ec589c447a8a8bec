"""Agents of the guardrail tests (issue 15, item 5), loaded into real `reactq worker`
processes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reactq.worker import Agent
from reactq.worker.agent.guardrails import GuardrailResult
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.tools import ToolContext


async def no_secrets(text: str, turn: ToolContext) -> GuardrailResult:
    """Blocks any text that mentions a secret, unless the tenant is trusted."""
    if "secret" in text.lower() and turn.context.get("tenant") != "trusted":
        return GuardrailResult.block("mentions a secret", refusal="I can't discuss that.")
    return GuardrailResult.allow()


agent = Agent(
    name="guarded",
    model="scripted",
    input_guardrails=[no_secrets],
    output_guardrails=[no_secrets],
)

agents = [agent]


def echo_or_leak(request: Mapping[str, Any]) -> Reply:
    """Answers ``the secret is 42`` to "leak", else echoes the question."""
    question = str(request["messages"][-1]["content"])
    if "leak" in question:
        return Reply.text("The secret is 42.")
    return Reply.text(f"You asked: {question}")
