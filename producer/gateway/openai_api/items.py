"""A turn as the Responses API's output items, and its events as the API's streaming
events.

A turn's steps are items, in the order they happened:

- ``reasoning``: the reasoning text a model gave (``content`` of ``reasoning_text``);
- ``message``: what the model said (beside tool calls, or its answer);
- ``mcp_call``: each of the agent's own tool calls, with its ``output`` (or ``error``):
  the tool ran on the pool, a hosted call, so a client has nothing to run (a
  ``function_call`` item would ask the client to run it: the OpenAI Agents SDK fails
  on one for a tool it does not have);
- ``function_call``: a call of one of the request's own function tools (client
  tools): the client runs it and sends a ``function_call_output`` input item;
- ``mcp_approval_request``: a call waiting for a person; a later request with
  ``previous_response_id`` and an ``mcp_approval_response`` input item decides it.

A finished turn's items are read from its session's history (``history_items``), so
``GET /v1/responses/{id}`` shows what a stream showed (``StreamTranslator``). An
item's id is made from the turn and its place in the output, or from the tool call's
id, so both agree.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any, Literal

from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from reactq.shared.events import (
    ActionEvent,
    ApprovalRequestedEvent,
    DeltaEvent,
    Event,
    ObservationEvent,
    ReasoningEvent,
    ToolFailedEvent,
)
from reactq.shared.messages import ChatMessage

__all__ = [
    "APPROVAL_PREFIX",
    "SERVER_LABEL",
    "StreamTranslator",
    "call_id_of_approval",
    "history_items",
    "waiting_items",
]

APPROVAL_PREFIX = "mcpr_"
"""What an ``mcp_approval_request`` item's id puts before the tool call's id."""
SERVER_LABEL = "reactq"
"""The ``server_label`` of the agent's own tools' items: they run on the pool."""

_EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def call_id_of_approval(approval_request_id: str) -> str:
    """The tool call an ``mcp_approval_request`` item's id names."""
    return approval_request_id.removeprefix(APPROVAL_PREFIX)


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _message(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": status,
        "content": content if status == "completed" else [],
    }


def _reasoning(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def _hosted(
    call_id: str,
    name: str,
    arguments: str,
    output: str | None = None,
    error: str | None = None,
    status: str = "completed",
) -> dict[str, Any]:
    """An ``mcp_call`` item: one of the agent's own tool calls, run on the pool."""
    item: dict[str, Any] = {
        "type": "mcp_call",
        "id": f"mcp_{call_id}",
        "name": name,
        "arguments": arguments,
        "server_label": SERVER_LABEL,
        "status": "failed" if error is not None else status,
        "output": output,
        "error": None,
    }
    if error is not None:
        item["error"] = {
            "type": "mcp_tool_execution_error",
            "content": [{"type": "text", "text": error}],
        }
    return item


def _function_call(call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    """A ``function_call`` item: a call of one of the client's own tools."""
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _approval(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "mcp_approval_request",
        "id": APPROVAL_PREFIX + str(call.get("call_id")),
        "name": str(call.get("tool")),
        "arguments": _arguments(call.get("arguments")),
        "server_label": SERVER_LABEL,
    }


def waiting_items(
    calls: Sequence[dict[str, Any]], client_tools: Collection[str] = ()
) -> list[dict[str, Any]]:
    """The items of the calls a turn waits for (each ``call_id``, ``tool``,
    ``arguments``): a client tool's call is a ``function_call`` for the client to run,
    any other an ``mcp_approval_request`` for a person to decide."""
    return [
        _function_call(str(c.get("call_id")), str(c.get("tool")), _arguments(c.get("arguments")))
        if c.get("tool") in client_tools
        else _approval(c)
        for c in calls
    ]


def history_items(
    turn_id: str,
    messages: Sequence[ChatMessage],
    final_text: str | None,
    client_tools: Collection[str] = (),
) -> list[dict[str, Any]]:
    """The output items of a finished turn from its session's history: each of its
    assistant and tool messages, in order. ``final_text`` is the turn's answer: an item
    of its own when no message of the history says it (a guardrail's refusal)."""
    items: list[dict[str, Any]] = []
    calls: dict[str, int] = {}
    for m in messages:
        if m.turn_id != turn_id:
            continue
        if m.role == "assistant":
            if m.reasoning:
                items.append(_reasoning(f"rs_{turn_id}_{len(items)}", m.reasoning))
            if m.content:
                items.append(_message(f"msg_{turn_id}_{len(items)}", m.content))
            for call in m.tool_calls or ():
                calls[call.id] = len(items)
                if call.name in client_tools:
                    items.append(_function_call(call.id, call.name, call.arguments))
                else:
                    items.append(_hosted(call.id, call.name, call.arguments, status="incomplete"))
        elif m.role == "tool" and m.tool_call_id in calls:
            at = calls[m.tool_call_id]
            if items[at]["type"] == "mcp_call":
                items[at] = {**items[at], "status": "completed", "output": m.content or ""}
            else:
                items.append(
                    {
                        "type": "function_call_output",
                        "id": f"fco_{m.tool_call_id}",
                        "call_id": m.tool_call_id,
                        "output": m.content or "",
                        "status": "completed",
                    }
                )
    said = [i for i in items if i["type"] == "message"]
    if final_text and (not said or said[-1]["content"][0]["text"] != final_text):
        items.append(_message(f"msg_{turn_id}_{len(items)}", final_text))
    return items


class StreamTranslator:
    """A turn's events as the Responses API's streaming events (each checked by the
    ``openai`` SDK's ``ResponseStreamEvent``), numbered by ``sequence_number``; the
    items they built are ``items``.

    ``client_tools``: the names of the request's own function tools; ``known``: calls
    the client has already (the ones it just gave results for), not streamed again."""

    def __init__(
        self, turn_id: str, client_tools: Collection[str] = (), known: Collection[str] = ()
    ) -> None:
        self.turn_id = turn_id
        self.items: list[dict[str, Any]] = []
        self.client_tools = frozenset(client_tools)
        self.known = frozenset(known)
        self._sequence = 0
        self._open: Literal["message", "reasoning"] | None = None
        self._open_at = 0
        self._text = ""
        self._calls: dict[str, int] = {}
        """Open hosted calls: call id -> its place in the output."""

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """The next streaming event of type ``kind``, checked by the SDK's model."""
        body = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        _EVENTS.validate_python(body)
        return body

    def feed(self, event: Event) -> list[dict[str, Any]]:
        """The streaming events one of the turn's events makes."""
        if isinstance(event, ReasoningEvent) and event.text:
            return self._delta("reasoning", event.text)
        if isinstance(event, DeltaEvent) and event.text:
            return self._delta("message", event.text)
        if isinstance(event, ActionEvent | ObservationEvent | ToolFailedEvent):
            if event.call_id in self.known:
                return []
            if isinstance(event, ActionEvent):
                return [*self.close(), *self._call_started(event)]
            return [*self.close(), *self._call_ended(event)]
        if isinstance(event, ApprovalRequestedEvent):
            out = self.close()
            for item in waiting_items(event.calls, self.client_tools):
                out += self._whole(item)
            return out
        return []

    def answer(self, text: str) -> list[dict[str, Any]]:
        """The answer of a turn that streamed none of it (an agent that does not stream,
        a guardrail's refusal): one message, whole."""
        said = [i for i in self.items if i["type"] == "message"]
        if not text or (said and said[-1]["content"][0]["text"] == text):
            return self.close()
        return [*self.close(), *self._delta("message", text, fresh=True), *self.close()]

    def close(self) -> list[dict[str, Any]]:
        """The events that end the text or reasoning being streamed (none when none is)."""
        if self._open is None:
            return []
        item_id, index = self._item_id(), self._open_at
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        if self._open == "message":
            item = _message(item_id, self._text)
            out = [
                self.event("response.output_text.done", text=self._text, logprobs=[], **where),
                self.event("response.content_part.done", part=item["content"][0], **where),
            ]
        else:
            item = _reasoning(item_id, self._text)
            part = {"type": "reasoning_text", "text": self._text}
            out = [
                self.event("response.reasoning_text.done", text=self._text, **where),
                self.event("response.content_part.done", part=part, **where),
            ]
        self._open, self._text = None, ""
        return [*out, self._done(index, item)]

    def _call_started(self, event: ActionEvent) -> list[dict[str, Any]]:
        arguments = _arguments(event.args)
        if event.tool in self.client_tools:
            return self._whole(_function_call(event.call_id, event.tool, arguments))
        item = _hosted(event.call_id, event.tool, arguments, status="in_progress")
        index = self._add(item)
        self._calls[event.call_id] = index
        where = {"item_id": item["id"], "output_index": index}
        return [
            self.event("response.output_item.added", item=item, output_index=index),
            self.event("response.mcp_call_arguments.delta", delta=arguments, **where),
            self.event("response.mcp_call_arguments.done", arguments=arguments, **where),
            self.event("response.mcp_call.in_progress", **where),
        ]

    def _call_ended(self, event: ObservationEvent | ToolFailedEvent) -> list[dict[str, Any]]:
        failed = isinstance(event, ToolFailedEvent)
        output = None if isinstance(event, ToolFailedEvent) else event.output
        error = event.error if isinstance(event, ToolFailedEvent) else None
        index = self._calls.pop(event.call_id, None)
        if index is None:  # its action went out before this stream began
            return self._whole(_hosted(event.call_id, event.tool, "{}", output, error))
        prior = self.items[index]
        item = _hosted(event.call_id, prior["name"], prior["arguments"], output, error)
        where = {"item_id": item["id"], "output_index": index}
        ended = "response.mcp_call.failed" if failed else "response.mcp_call.completed"
        return [self.event(ended, **where), self._done(index, item)]

    def _item_id(self) -> str:
        prefix = "msg" if self._open == "message" else "rs"
        return f"{prefix}_{self.turn_id}_{self._open_at}"

    def _delta(
        self, kind: Literal["message", "reasoning"], text: str, fresh: bool = False
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._open != kind or fresh:
            out += self.close()
            self._open = kind
            self._open_at = len(self.items)
            item_id = self._item_id()
            if kind == "message":
                item = _message(item_id, "", "in_progress")
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            else:
                item = {**_reasoning(item_id, ""), "content": []}
                part = {"type": "reasoning_text", "text": ""}
            index = self._add(item)
            where = {"item_id": item_id, "output_index": index, "content_index": 0}
            out += [
                self.event("response.output_item.added", item=item, output_index=index),
                self.event("response.content_part.added", part=part, **where),
            ]
        self._text += text
        where = {"item_id": self._item_id(), "output_index": self._open_at, "content_index": 0}
        if kind == "message":
            out.append(self.event("response.output_text.delta", delta=text, logprobs=[], **where))
        else:
            out.append(self.event("response.reasoning_text.delta", delta=text, **where))
        return out

    def _add(self, item: dict[str, Any]) -> int:
        """Reserve the item's place in the output (its final form replaces it when done)."""
        self.items.append(item)
        return len(self.items) - 1

    def _whole(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """An item that is whole at once: added, its arguments for a function call, done."""
        index = self._add(item)
        out = [self.event("response.output_item.added", item=item, output_index=index)]
        if item["type"] == "function_call":
            where = {"item_id": item["id"], "output_index": index}
            out += [
                self.event(
                    "response.function_call_arguments.delta", delta=item["arguments"], **where
                ),
                self.event(
                    "response.function_call_arguments.done", arguments=item["arguments"], **where
                ),
            ]
        return [*out, self._done(index, item)]

    def _done(self, index: int, item: dict[str, Any]) -> dict[str, Any]:
        self.items[index] = item
        return self.event("response.output_item.done", item=item, output_index=index)
