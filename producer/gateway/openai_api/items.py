"""A turn as the Responses API's output items, and its events as the API's streaming
events.

A turn's steps are items, in the order they happened:

- ``reasoning``: the reasoning text a model gave (``content`` of ``reasoning_text``);
- ``message``: what the model said (beside tool calls, or its answer);
- ``function_call`` and ``function_call_output``: each of the agent's own tool calls
  and its result (the tool ran on the pool: a client has nothing to run);
- ``mcp_approval_request``: a call waiting for a person; a later request with
  ``previous_response_id`` and an ``mcp_approval_response`` input item decides it.

A finished turn's items are read from its session's history (``history_items``), so
``GET /v1/responses/{id}`` shows what a stream showed (``StreamTranslator``). An
item's id is made from the turn and its place in the output, or from the tool call's
id, so both agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
    "StreamTranslator",
    "approval_items",
    "call_id_of_approval",
    "history_items",
]

APPROVAL_PREFIX = "mcpr_"
"""What an ``mcp_approval_request`` item's id puts before the tool call's id."""
SERVER_LABEL = "reactq"
"""The ``server_label`` of an approval request: the agent's tools run on the pool."""

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
        "content": content if text or status == "completed" else [],
    }


def _reasoning(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def _call(call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _call_output(call_id: str, name: str, output: str) -> dict[str, Any]:
    return {
        "type": "function_call_output",
        "id": f"fco_{call_id}",
        "call_id": call_id,
        "name": name,
        "output": output,
        "status": "completed",
    }


def _approval(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "mcp_approval_request",
        "id": APPROVAL_PREFIX + str(call.get("call_id")),
        "name": str(call.get("tool")),
        "arguments": _arguments(call.get("arguments")),
        "server_label": SERVER_LABEL,
    }


def approval_items(calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``mcp_approval_request`` items of the calls a turn waits on a person for
    (each ``call_id``, ``tool``, ``arguments``)."""
    return [_approval(c) for c in calls]


def history_items(
    turn_id: str, messages: Sequence[ChatMessage], final_text: str | None
) -> list[dict[str, Any]]:
    """The output items of a finished turn from its session's history: each of its
    assistant and tool messages, in order. ``final_text`` is the turn's answer: an item
    of its own when no message of the history says it (a guardrail's refusal)."""
    items: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for m in messages:
        if m.turn_id != turn_id:
            continue
        if m.role == "assistant":
            if m.reasoning:
                items.append(_reasoning(f"rs_{turn_id}_{len(items)}", m.reasoning))
            if m.content:
                items.append(_message(f"msg_{turn_id}_{len(items)}", m.content))
            for call in m.tool_calls or ():
                names[call.id] = call.name
                items.append(_call(call.id, call.name, call.arguments))
        elif m.role == "tool" and m.tool_call_id:
            name = names.get(m.tool_call_id, m.name or "")
            items.append(_call_output(m.tool_call_id, name, m.content or ""))
    said = [i for i in items if i["type"] == "message"]
    if final_text and (not said or said[-1]["content"][0]["text"] != final_text):
        items.append(_message(f"msg_{turn_id}_{len(items)}", final_text))
    return items


class StreamTranslator:
    """A turn's events as the Responses API's streaming events (each checked by the
    ``openai`` SDK's ``ResponseStreamEvent``), numbered by ``sequence_number``; the
    items they built are ``items``."""

    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.items: list[dict[str, Any]] = []
        self._sequence = 0
        self._open: Literal["message", "reasoning"] | None = None
        self._text = ""
        self._names: dict[str, str] = {}

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
        if isinstance(event, ActionEvent):
            self._names[event.call_id] = event.tool
            arguments = _arguments(event.args)
            index = len(self.items)
            item = _call(event.call_id, event.tool, arguments)
            where = {"item_id": item["id"], "output_index": index}
            return [
                *self.close(),
                self._add(_call(event.call_id, event.tool, "", "in_progress")),
                self.event("response.function_call_arguments.delta", delta=arguments, **where),
                self.event("response.function_call_arguments.done", arguments=arguments, **where),
                self._done(item),
            ]
        if isinstance(event, ObservationEvent | ToolFailedEvent):
            output = event.output if isinstance(event, ObservationEvent) else event.error
            item = _call_output(event.call_id, self._names.get(event.call_id, event.tool), output)
            return [*self.close(), self._add(item), self._done(item)]
        if isinstance(event, ApprovalRequestedEvent):
            out = self.close()
            for item in approval_items(event.calls):
                out += [self._add(item), self._done(item)]
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
        """The events that end the item being streamed (none when none is)."""
        if self._open is None:
            return []
        item_id, index = self._item_id(), len(self.items)
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        if self._open == "message":
            item = _message(item_id, self._text)
            part = item["content"][0]
            out = [
                self.event("response.output_text.done", text=self._text, logprobs=[], **where),
                self.event("response.content_part.done", part=part, **where),
            ]
        else:
            item = _reasoning(item_id, self._text)
            out = [
                self.event("response.reasoning_text.done", text=self._text, **where),
                self.event(
                    "response.content_part.done",
                    part={"type": "reasoning_text", "text": self._text},
                    **where,
                ),
            ]
        self._open, self._text = None, ""
        return [*out, self._done(item)]

    def _item_id(self) -> str:
        prefix = "msg" if self._open == "message" else "rs"
        return f"{prefix}_{self.turn_id}_{len(self.items)}"

    def _delta(
        self, kind: Literal["message", "reasoning"], text: str, fresh: bool = False
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._open != kind or fresh:
            out += self.close()
            self._open = kind
            item_id, index = self._item_id(), len(self.items)
            where = {"item_id": item_id, "output_index": index, "content_index": 0}
            if kind == "message":
                out.append(self._announce(_message(item_id, "", "in_progress"), index))
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            else:
                item = {**_reasoning(item_id, ""), "content": []}
                out.append(self._announce(item, index))
                part = {"type": "reasoning_text", "text": ""}
            out.append(self.event("response.content_part.added", part=part, **where))
        self._text += text
        where = {"item_id": self._item_id(), "output_index": len(self.items), "content_index": 0}
        if kind == "message":
            out.append(self.event("response.output_text.delta", delta=text, logprobs=[], **where))
        else:
            out.append(self.event("response.reasoning_text.delta", delta=text, **where))
        return out

    def _announce(self, item: dict[str, Any], index: int) -> dict[str, Any]:
        return self.event("response.output_item.added", item=item, output_index=index)

    def _add(self, item: dict[str, Any]) -> dict[str, Any]:
        return self._announce(item, len(self.items))

    def _done(self, item: dict[str, Any]) -> dict[str, Any]:
        self.items.append(item)
        return self.event("response.output_item.done", item=item, output_index=len(self.items) - 1)
