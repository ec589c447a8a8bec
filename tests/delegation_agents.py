"""Agents that delegate, for tests/test_pool_delegation.py (real worker processes)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from reactq.worker import Agent, ToolContext, ToolMode, tool
from reactq.worker.agent.delegation import Subagent
from reactq.worker.agent.llm.replies import Reply
from tests.helpers import last_user_text


@tool()
async def note(text: str, ctx: ToolContext) -> str:
    """Write a note (returns it)."""
    return f"noted: {text}"


def _agent(name: str, **knobs: Any) -> Agent:
    return Agent(
        name=name,
        model="scripted",
        system_prompt=f"You are {name}.",
        tools=[note],
        tool_mode=ToolMode.NATIVE,
        overridable={"max_total_tokens"},
        **knobs,
    )


orchestrator = _agent(
    "orchestrator",
    subagents=["researcher", Subagent("coder", max_total_tokens=100)],
    max_parallel=2,
)
researcher = _agent("researcher", subagents=["deep"])
coder = _agent("coder")
deep = _agent("deep", subagents=["deeper", "researcher"], max_delegation_depth=2)
deeper = _agent("deeper", subagents=["researcher"])

agents = [orchestrator, researcher, coder, deep, deeper]
"""``--agents tests.delegation_agents:agents``."""

BIG = {"prompt_tokens": 400, "completion_tokens": 400, "total_tokens": 800}


def script(request: Mapping[str, Any]) -> Reply:
    """Every agent's model. The user's text says what to do:

    ``ask AGENT[,AGENT...]: TASK`` delegate TASK (``delegate`` for one agent,
    ``delegate_parallel`` for several), then answer ``got: <the tool's result>``;
    anything else: answer ``<agent> did: TASK`` (``sleep=S`` in it makes each call take
    S seconds; ``big`` makes it call ``note`` first, with a large usage).
    """
    messages = request["messages"]
    name = re.sub(r"^You are (\w+)\..*", r"\1", messages[0]["content"], flags=re.S)
    text = last_user_text(request)
    delay = 0.0
    for word in text.split():
        if word.startswith("sleep="):
            delay = float(word.removeprefix("sleep="))
    start = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = [m["content"] for m in messages[start:] if m["role"] == "tool"]
    asked = re.match(r"ask ([\w,]+): (.*)", text, flags=re.S)
    if asked is not None:
        if results:
            return Reply.text(f"{name} got: {results[-1]}")
        who, task = asked.group(1).split(","), asked.group(2)
        if len(who) == 1:
            return Reply.tool_calls([("delegate", {"agent": who[0], "task": task})])
        tasks = [{"agent": a, "task": f"{task} ({a})"} for a in who]
        return Reply.tool_calls([("delegate_parallel", {"tasks": tasks})])
    if "big" in text and not results:
        return Reply.tool_calls([("note", {"text": text})], usage=BIG)
    return Reply.text(f"{name} did: {text}").but(delay=delay)


workers = [researcher, coder]
"""The children's agents alone (a worker that hosts no parent)."""
