"""The agent the file tools' end-to-end test loads into real `reactq worker` processes,
and the stateless script its model follows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reactq.bundles import file_tools
from reactq.worker import Agent, ToolMode
from reactq.worker.agent.llm.scripted_server import Reply

NOTES = "notes/today.md"

# Every worker reads REACTQ_WORKSPACE_ROOT when it imports this module.
agent = Agent(
    name="files",
    model="scripted",
    system_prompt="You work on files in your workspace.",
    tools=file_tools(),
    tool_mode=ToolMode.NATIVE,
)


def _last_call(messages: list[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            return str(call["function"]["name"])
    return ""


def files_script(request: Mapping[str, Any]) -> Reply:
    """Turn "write": write a file, then edit it. Turn "read": read it and search it
    (two read-only calls in one step), then answer with what they returned."""
    messages = list(request["messages"])
    if messages[-1]["role"] == "user":
        if str(messages[-1]["content"]).startswith("write"):
            return Reply.tool_calls(
                [("write_file", {"path": NOTES, "content": "hello from turn 1\n"})]
            )
        return Reply.tool_calls(
            [
                ("read_file", {"path": NOTES}),
                ("search_files", {"pattern": "edited$"}),
            ]
        )
    if _last_call(messages) == "write_file":
        return Reply.tool_calls(
            [("edit_file", {"path": NOTES, "old_text": "turn 1", "new_text": "turn 1, edited"})]
        )
    results = [str(m["content"]) for m in messages if m["role"] == "tool"]
    return Reply.text(" | ".join(results[-2:]))
