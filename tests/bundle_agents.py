"""The agent the file tools' end-to-end test loads into real `reactq worker` processes,
and the stateless script its model follows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reactq.bundles import file_tools
from reactq.worker import Agent, ToolMode
from reactq.worker.agent.llm.scripted_server import Reply

NOTES = "notes/today.md"
README = "README.md"

# Every worker reads REACTQ_WORKSPACE_ROOT when it imports this module.
agent = Agent(
    name="files",
    model="scripted",
    system_prompt="You work on files in your workspace.",
    tools=file_tools(),
    tool_mode=ToolMode.NATIVE,
)


def _patches_wait(tool: str, arguments: dict[str, Any], ctx: object) -> bool:
    return tool == "apply_patch"


# The same tools; every apply_patch waits for a person (the turn parks).
gated = Agent(
    name="files-gated",
    model="scripted",
    system_prompt="You work on files in your workspace.",
    tools=file_tools(),
    tool_mode=ToolMode.NATIVE,
    approval=_patches_wait,
)

agents = [agent, gated]


def _last_call(messages: list[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            return str(call["function"]["name"])
    return ""


def _user_text(messages: list[Mapping[str, Any]]) -> str:
    return next(str(m["content"]) for m in reversed(messages) if m["role"] == "user")


def files_script(request: Mapping[str, Any]) -> Reply:
    """Turn "write": write a file, edit it, edit README.md (which the test made). Turn
    "read": read it and search it (two read-only calls in one step). Turn "review":
    read it, then edit it. Each answers with its last two tool results."""
    messages = list(request["messages"])
    asked = _user_text(messages)
    last = _last_call(messages) if messages[-1]["role"] == "tool" else ""
    if messages[-1]["role"] == "user":
        if asked.startswith("write"):
            return Reply.tool_calls(
                [("write_file", {"path": NOTES, "content": "hello from turn 1\n"})]
            )
        if asked.startswith("review"):
            return Reply.tool_calls([("read_file", {"path": NOTES})])
        return Reply.tool_calls(
            [
                ("read_file", {"path": NOTES}),
                ("search_files", {"pattern": "edited$"}),
            ]
        )
    if asked.startswith("write") and last == "write_file":
        return Reply.tool_calls(
            [("edit_file", {"path": NOTES, "old_text": "turn 1", "new_text": "turn 1, edited"})]
        )
    if asked.startswith("write") and last == "edit_file" and "README" not in str(messages):
        edit = {"path": README, "old_text": "original", "new_text": "original, by turn 1"}
        return Reply.tool_calls([("edit_file", edit)])
    if asked.startswith("review") and last == "read_file":
        edit = {"path": NOTES, "old_text": "edited", "new_text": "edited, reviewed"}
        return Reply.tool_calls([("edit_file", edit)])
    results = [str(m["content"]) for m in messages if m["role"] == "tool"]
    return Reply.text(" | ".join(results[-2:]))
