"""The agent and scripted model of the context-window tests (tests/test_context_pool.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from reactq.worker import Agent
from reactq.worker.agent.context_policy import DEFAULT_SUMMARY_PROMPT
from reactq.worker.agent.llm.scripted_server import Reply

WINDOW = 3000
"""The scripted model's window (tokens, four characters each) and the agent's."""
FACT = re.compile(r"FACT: [a-z0-9 ]+")

agent = Agent(
    name="ctx-long",
    model="scripted",
    system_prompt="You remember what the user tells you.",
    context_window=WINDOW,
)


def model(request: Mapping[str, Any]) -> Reply:
    """Summaries keep the facts they read; ``recall`` answers with every fact the request
    holds; anything else gets a short answer."""
    messages = request["messages"]
    if messages[0]["content"] == DEFAULT_SUMMARY_PROMPT:
        facts = sorted(set(FACT.findall(messages[-1]["content"])))
        return Reply.text("The user talked at length. " + ". ".join(facts))
    text = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    if text.startswith("recall"):
        found = sorted({f for m in messages for f in FACT.findall(m["content"] or "")})
        return Reply.text("recalled: " + "; ".join(found))
    return Reply.text("ok")
