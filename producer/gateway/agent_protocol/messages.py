"""LangChain's message dicts, the Agent Protocol's ``messages``, from reactq's history and
events, and a run's input message from theirs.

A message is ``{"type": "human" | "ai" | "tool", "content", "id", ...}``: an ``ai`` one
has ``tool_calls`` (``{"name", "args", "id", "type": "tool_call"}``), a ``tool`` one
``tool_call_id`` (and ``name``). Ids are stable, so a message streamed during a run
has the id the thread's state shows later: ``{turn_id}-{n}`` for the n-th message of a
turn (the human one is 1), ``m-{sequence}`` for one with no turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from reactq.producer.gateway.errors import GatewayError
from reactq.shared.messages import ChatMessage

__all__ = [
    "ai_message",
    "human_message",
    "input_message",
    "message_id",
    "thread_messages",
    "tool_call",
    "tool_message",
]

_TYPES = {"user": "human", "assistant": "ai", "tool": "tool"}
_HUMAN = frozenset({"human", "user"})


def message_id(turn_id: str, n: int) -> str:
    """The id of the ``n``-th message (1-based) a turn added."""
    return f"{turn_id}-{n}"


def tool_call(name: str, args: Any, call_id: str) -> dict[str, Any]:
    """A LangChain tool call; ``args`` as a dict (JSON text is parsed; anything else
    that is not an object is kept under ``"input"``)."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = {"input": args}
    if not isinstance(args, dict):
        args = {} if args is None else {"input": args}
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def human_message(content: Any, mid: str) -> dict[str, Any]:
    """A ``human`` message."""
    return {"type": "human", "content": content, "id": mid, "additional_kwargs": {}}


def ai_message(content: str, tool_calls: list[dict[str, Any]], mid: str) -> dict[str, Any]:
    """An ``ai`` message (its ``tool_calls`` possibly empty)."""
    return {
        "type": "ai",
        "content": content,
        "id": mid,
        "tool_calls": tool_calls,
        "invalid_tool_calls": [],
        "additional_kwargs": {},
    }


def tool_message(
    content: str, call_id: str, name: str, mid: str, *, failed: bool = False
) -> dict[str, Any]:
    """A ``tool`` message answering ``call_id``."""
    return {
        "type": "tool",
        "content": content,
        "id": mid,
        "tool_call_id": call_id,
        "name": name,
        "status": "error" if failed else "success",
        "additional_kwargs": {},
    }


def _converted(message: ChatMessage, mid: str) -> dict[str, Any] | None:
    if message.role == "user":
        if message.parts:
            parts = [part.model_dump(exclude_none=True) for part in message.parts]
            return human_message(parts, mid)
        return human_message(message.content or "", mid)
    if message.role == "assistant":
        calls = [tool_call(c.name, c.arguments, c.id) for c in message.tool_calls or ()]
        return ai_message(message.content or "", calls, mid)
    if message.role == "tool":
        return tool_message(
            message.content or "", message.tool_call_id or "", message.name or "", mid
        )
    return None


def thread_messages(
    history: Iterable[ChatMessage], *, without_turn: str | None = None
) -> list[dict[str, Any]]:
    """The history as LangChain messages (system messages and compaction summaries left
    out), without ``without_turn``'s messages when given."""
    out: list[dict[str, Any]] = []
    per_turn: dict[str, int] = {}
    for n, message in enumerate(history, start=1):
        if message.summary_of is not None or message.role not in _TYPES:
            continue
        if message.turn_id is not None:
            per_turn[message.turn_id] = per_turn.get(message.turn_id, 0) + 1
            if message.turn_id == without_turn:
                continue
            mid = message_id(message.turn_id, per_turn[message.turn_id])
        else:
            mid = f"m-{message.sequence or n}"
        converted = _converted(message, mid)
        if converted is not None:
            out.append(converted)
    return out


def input_message(value: Any) -> str | list[Any]:
    """The turn's user message from a run's ``input``: its last human message (``role``
    ``user`` or ``type`` ``human``), text or content parts. 422 for anything else."""
    messages = value.get("messages") if isinstance(value, Mapping) else None
    if isinstance(messages, Mapping | str):
        messages = [messages]
    if not isinstance(messages, list) or not messages:
        raise GatewayError(
            'input must be {"messages": [{"role": "user", "content": ...}]}',
            status=422,
            error_code="invalid_input",
            field="input",
        )
    last = messages[-1]
    if isinstance(last, str):
        return last
    if isinstance(last, Mapping) and (last.get("role") in _HUMAN or last.get("type") in _HUMAN):
        content = last.get("content")
        if isinstance(content, str | list) and content:
            return content
    raise GatewayError(
        "the input's last message must be a user (human) message with content",
        status=422,
        error_code="invalid_input",
        field="input.messages",
    )
