"""Agents of the text-edge tests (issue 28, item 4), loaded into real `reactq worker`
processes, and the stateless script their model follows: the user's message says what
poison the model answers with, or which poison a tool returns.

``say N``: the model answers ``MODEL_TEXT[N]`` (raw bytes inside a JSON string: escaped
lone surrogates, NUL, bytes that are not UTF-8), in its content, its reasoning and the
arguments of a call to ``poison``. ``call N``: it calls ``poison(index=N)``, which returns
``TOOL_VALUES[N]``. ``args N``: it calls ``poison`` with the raw arguments ``ARGS[N]``.
``fail N``: it calls ``fail(index=N)``, which raises ``TOOL_ERRORS[N]``. ``write P``: it
calls ``write_file`` on the path whose JSON spelling is ``P``. Anything else: a plain
answer. After a tool result: ``done``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from sqlalchemy.exc import StatementError

from reactq.bundles import file_tools
from reactq.worker import Agent, tool
from reactq.worker.agent.llm.scripted_server import Reply

DEEP = "[" * 1000 + "]" * 1000

MODEL_TEXT: list[bytes] = [
    b"lone \\ud800 high",
    b"lone \\udc80 low",
    b"split \\ud83d",
    b"nul \\u0000 inside",
    b"not utf-8 \xff\xfe here",
    b"cesu \xed\xa0\x80 bytes",
]
"""What ``say N`` puts inside the answer's JSON strings, as bytes on the wire."""

TOOL_VALUES: list[Any] = [
    "lone \ud800",
    {"k\udc80": ["x\udfff", 10**400]},
    "nul \x00 text",
    2**63,
    10**400,
    json.loads("[" * 900 + "]" * 900),
    b"\xff\xfe bytes",
]
"""What ``call N`` makes the ``poison`` tool return."""

ARGS: list[str] = [
    '{"index": 0, "note": "\\ud800"}',
    '{"index": 0, "note\\udc80": 1}',
    '{"index": 0, "note": "a\\u0000b"}',
    '{"index": 0, "n": ' + str(10**400) + "}",
    '{"index": ' + str(2**63) + "}",
    '{"index": 0, "deep": ' + DEEP + "}",
]
"""The raw arguments of ``args N`` (the model's text, as it wrote it)."""

TOOL_ERRORS: list[BaseException] = [
    ValueError("bad \ud800 input"),
    StatementError("(sqlite3.ProgrammingError) bad", "INSERT INTO t", {"secret": 1}, None),
    sqlite3.IntegrityError("UNIQUE constraint failed: secret.id"),
    RuntimeError("nul \x00 in error"),
]
"""What ``fail N`` raises."""


@tool
async def poison(index: int, note: Any = None, n: Any = None, deep: Any = None) -> Any:
    """Return test value ``index``."""
    return TOOL_VALUES[index % len(TOOL_VALUES)]


@tool
async def fail(index: int) -> str:
    """Raise test error ``index``."""
    raise TOOL_ERRORS[index % len(TOOL_ERRORS)]


agent = Agent(
    name="edges",
    model="scripted",
    system_prompt="You test edges.",
    tools=[poison, fail, *file_tools()],
)

streamed = Agent(
    name="edges-streamed",
    model="scripted",
    system_prompt="You test edges.",
    tools=[poison, fail],
    stream=True,
)

agents = [agent, streamed]


def _said(text: bytes) -> bytes:
    """A completion whose content, reasoning and one call's arguments hold ``text``."""
    arguments = b'{\\"index\\": 0, \\"note\\": \\"' + text + b'\\"}'
    return (
        b'{"id": "c1", "object": "chat.completion", "choices": [{"index": 0, '
        b'"finish_reason": "tool_calls", "message": {"role": "assistant", '
        b'"content": "' + text + b'", "reasoning_content": "' + text + b'", '
        b'"tool_calls": [{"id": "call_1", "type": "function", "function": '
        b'{"name": "poison", "arguments": "' + arguments + b'"}}]}}], '
        b'"usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}'
    )


def script(request: Mapping[str, Any]) -> Reply:
    """The model of these agents (module doc)."""
    messages = request["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return Reply.text("done")
    text = str(last["content"]) if last["role"] == "user" else ""
    verb, _, arg = text.partition(" ")
    if verb == "say":
        if request.get("stream"):
            return Reply.text(f"streamed \ud800 and \udc80 {arg}")
        return Reply.raw(200, _said(MODEL_TEXT[int(arg) % len(MODEL_TEXT)]))
    if verb == "call":
        return Reply.tool_calls([("poison", {"index": int(arg)})])
    if verb == "args":
        return Reply.tool_calls([("poison", ARGS[int(arg) % len(ARGS)])])
    if verb == "fail":
        return Reply.tool_calls([("fail", {"index": int(arg)})])
    if verb == "write":
        return Reply.tool_calls([("write_file", f'{{"path": {arg}, "content": "x"}}')])
    return Reply.text(f"answer to: {text[:60]}")
