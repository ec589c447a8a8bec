"""The agent the memory tools' end-to-end test loads into a real `reactq worker`, and
the stateless script its model follows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reactq.bundles import memory_tools
from reactq.worker import Agent, ToolMode
from reactq.worker.agent.llm.scripted_server import Reply
from tests.helpers import last_user_text

# Each turn's facts go to its user's namespace, whichever session the turn is in.
agent = Agent(
    name="assistant",
    model="scripted",
    system_prompt="You remember what users tell you.",
    tools=memory_tools(namespace=lambda ctx: ("users", ctx.metadata["user_id"])),
    tool_mode=ToolMode.NATIVE,
)
# A turn of ``desk`` delegates to ``notebook``, whose facts go to one fixed namespace:
# the child turn acts for its parent's tenant, so that namespace is the tenant's.
desk = Agent(
    name="desk",
    model="scripted",
    system_prompt="You pass notes on.",
    subagents=["notebook"],
    tool_mode=ToolMode.NATIVE,
)
notebook = Agent(
    name="notebook",
    model="scripted",
    system_prompt="You keep the team's notes.",
    tools=memory_tools(namespace=("team", "notes")),
    tool_mode=ToolMode.NATIVE,
)
agents = [agent, desk, notebook]
"""``--agents tests.memory_agents:agents``."""


def memory_script(request: Mapping[str, Any]) -> Reply:
    """A "remember: FACT" turn calls ``remember`` ("remember[KEY]: FACT" under KEY), a
    "recall: QUERY" turn ``recall``, a "delegate: TASK" turn delegates TASK to
    ``notebook``; the answer is the tool's result."""
    messages = list(request["messages"])
    if messages[-1]["role"] == "user":
        text = last_user_text(request)
        verb, _, rest = text.partition(": ")
        if verb == "remember":
            return Reply.tool_calls([("remember", {"fact": rest})])
        if verb == "delegate":
            return Reply.tool_calls([("delegate", {"agent": "notebook", "task": rest})])
        if verb.startswith("remember[") and verb.endswith("]"):
            key = verb.removeprefix("remember[").removesuffix("]")
            return Reply.tool_calls([("remember", {"fact": rest, "key": key})])
        return Reply.tool_calls([("recall", {"query": rest})])
    return Reply.text(str(messages[-1]["content"]))
