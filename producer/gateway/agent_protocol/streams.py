"""A run's stream in the Agent Protocol's modes, from its turn's typed events.

``RunStream`` follows one turn's events and says what each adds in every mode asked
for (several at once):

===================  ===========================================================
``metadata``         first: ``{"run_id", "attempt"}``
``values``           the thread's messages after each step (``{"messages": [...]}``)
``updates``          each step's: ``{"agent": {"messages": [ai]}}``, ``{"tools": ...}``
``messages-tuple``   SSE event ``messages``: ``[chunk, metadata]``, a token delta as
                     an ``AIMessageChunk``, a whole message for a step without deltas
``custom``           reactq's events that have no message: ``todos``,
                     ``file_change``, ``subagent``, ``usage``, ``reasoning``, ...
                     (``{"type", ...}``, the event's own fields)
``events``,          the graph's steps (``graph_trace``)
``tasks``,
``checkpoints``,
``debug``
===================  ===========================================================

A failed turn adds an ``error`` event, and every stream closes with ``end``. Each SSE
message's id is that of the reactq event it comes from (``ID/N`` for the N-th of the
event's messages but the last), so a client that resumes with ``Last-Event-ID``
misses nothing and gets nothing twice: the stream is rebuilt from the turn's first
event and the messages up to that id are not sent again (``frames``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from reactq.producer.gateway.agent_protocol.graph_trace import GRAPH_MODES, GraphTrace
from reactq.producer.gateway.agent_protocol.messages import (
    ai_message,
    human_message,
    message_id,
    tool_call,
    tool_message,
)
from reactq.producer.gateway.sse import KEEPALIVE
from reactq.shared.bus import stream_id_gt
from reactq.shared.events import (
    ActionEvent,
    ApprovalRequestedEvent,
    DeltaEvent,
    Event,
    FinalEvent,
    ObservationEvent,
    QueuedEvent,
    ReasoningEvent,
    ThoughtEvent,
    ToolFailedEvent,
)
from reactq.shared.turns import TurnStatus

__all__ = [
    "LAST_EVENT_ID",
    "MODES",
    "Part",
    "RunStream",
    "ends_stream",
    "frames",
    "interrupt",
    "interrupt_of",
    "modes_of",
    "sse",
]

LAST_EVENT_ID = r"^[0-9]{1,20}(-[0-9]{1,20})?(/[0-9]{1,4})?$"
"""What a ``Last-Event-ID`` of a run's stream looks like (``frames``)."""

MODES = frozenset(
    {"values", "updates", "messages-tuple", "messages", "metadata", "custom", *GRAPH_MODES}
)
"""The stream modes served (``messages`` is served as ``messages-tuple``)."""

CUSTOM = frozenset(
    {
        "reasoning",
        "model_fallback",
        "rate_limited",
        "file_change",
        "todos",
        "tool_progress",
        "usage",
        "compacted",
        "turns_left_out",
        "guardrail",
        "approval_decided",
        "subagent",
    }
)
"""The events the ``custom`` mode carries: reactq's own, that no message shows."""

_NOT_CUSTOM = frozenset({"v", "id", "session_id", "attempt", "seq"})

Part = tuple[str, Any]
"""One SSE message: its event name and its data."""


def modes_of(value: str | list[str] | None) -> list[str]:
    """The modes asked for (``values`` by default), in order, without repeats."""
    if value is None:
        return ["values"]
    asked = [value] if isinstance(value, str) else list(value)
    return list(dict.fromkeys("messages-tuple" if m == "messages" else m for m in asked))


def sse(event: str, data: Any, event_id: str | None = None) -> bytes:
    """One SSE message as the SDK parses it."""
    head = f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n"
    return (head + (f"id: {event_id}\n" if event_id else "") + "\n").encode()


@dataclass
class RunStream:
    """What each of one run's events adds to its stream (see the module's docstring)."""

    run_id: str
    thread_id: str
    modes: list[str]
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The thread's messages so far (those before the run, then the run's)."""
    _added: int = 0
    _text: str = ""
    _calls: list[dict[str, Any]] = field(default_factory=list)
    _streamed: bool = False
    _opened: bool = False
    _graph: GraphTrace | None = None

    def __post_init__(self) -> None:
        graph = GraphTrace(self.run_id, self.thread_id, frozenset(self.modes))
        self._graph = graph if graph.wanted else None

    def _meta(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "thread_id": self.thread_id, "langgraph_node": "agent"}

    def _next_id(self) -> str:
        return message_id(self.run_id, self._added + 1)

    def _add(self, node: str | None, message: dict[str, Any]) -> list[Part]:
        self._added += 1
        self.messages.append(message)
        out: list[Part] = []
        if node is not None and "updates" in self.modes:
            out.append(("updates", {node: {"messages": [message]}}))
        if node is not None and "messages-tuple" in self.modes and not self._streamed:
            out.append(("messages", [message, {**self._meta(), "langgraph_node": node}]))
        if "values" in self.modes:
            out.append(("values", {"messages": list(self.messages)}))
        self._streamed = False
        return out

    def _values(self) -> dict[str, Any]:
        return {"messages": list(self.messages)}

    def _flush_ai(self, ts: float) -> list[Part]:
        if not self._calls:
            return []
        message = ai_message(self._text, self._calls, self._next_id())
        self._text, self._calls = "", []
        return self._add_ai(message, ts)

    def _add_ai(self, message: dict[str, Any], ts: float) -> list[Part]:
        out = self._add("agent", message)
        if self._graph is not None:
            out += self._graph.model_ended(message, self._values(), ts)
        return out

    def _model_output(self, event: Event) -> list[Part]:
        if self._graph is None:
            return []
        return self._graph.model_started(self._values(), event.ts)

    def parts(self, event: Event) -> list[Part]:
        """The SSE messages ``event`` adds, in order."""
        out: list[Part] = []
        if not self._opened:
            self._opened = True
            if "metadata" in self.modes:
                out.append(("metadata", {"run_id": self.run_id, "attempt": event.attempt}))
        if isinstance(event, QueuedEvent):
            out += self._add(None, human_message(event.message, self._next_id()))
            if self._graph is not None:
                out += self._graph.started(self._values(), event.ts)
        elif isinstance(event, DeltaEvent):
            out += self._model_output(event)
            chunk = {"type": "AIMessageChunk", "content": event.text, "id": self._next_id()}
            if "messages-tuple" in self.modes:
                out.append(("messages", [chunk, self._meta()]))
            if self._graph is not None:
                out += self._graph.model_chunk(chunk)
            self._streamed = True
            self._text += event.text if not self._calls else ""
        elif isinstance(event, ThoughtEvent | ReasoningEvent):
            out += self._model_output(event)
            if isinstance(event, ThoughtEvent):
                self._text = event.text
        elif isinstance(event, ActionEvent):
            out += self._model_output(event)
            self._calls.append(tool_call(event.tool, event.args, event.call_id))
        elif isinstance(event, ObservationEvent | ToolFailedEvent):
            out += self._flush_ai(event.ts)
            failed = isinstance(event, ToolFailedEvent)
            content = event.error if isinstance(event, ToolFailedEvent) else event.output
            message = tool_message(
                content, event.call_id, event.tool, self._next_id(), failed=failed
            )
            out += self._add("tools", message)
            if self._graph is not None:
                out += self._graph.tool_ended(message)
        elif isinstance(event, ApprovalRequestedEvent):
            out += self._flush_ai(event.ts)
            interrupts = [interrupt_of(event)]
            if "updates" in self.modes:
                out.append(("updates", {"__interrupt__": interrupts}))
            if "values" in self.modes:
                out.append(("values", {**self._values(), "__interrupt__": interrupts}))
            if self._graph is not None:
                out += self._graph.interrupted(interrupts, self._values(), event.ts)
        elif isinstance(event, FinalEvent):
            out += self._final(event)
        if "custom" in self.modes and event.type in CUSTOM:
            out.append(("custom", event.model_dump(mode="json", exclude=set(_NOT_CUSTOM))))
        return out

    def _final(self, final: FinalEvent) -> list[Part]:
        out = self._flush_ai(final.ts)
        if final.status in (TurnStatus.COMPLETED, TurnStatus.MAX_ITERATIONS) and final.text:
            out += self._add_ai(ai_message(final.text, [], self._next_id()), final.ts)
        failed = final.status in (TurnStatus.ERROR, TurnStatus.REJECTED)
        if self._graph is not None:
            error = (final.code or final.status.value) if failed else None
            out += self._graph.ended(self._values(), final.ts, error)
        if failed:
            out.append(
                ("error", {"error": final.code or final.status.value, "message": final.text})
            )
        return out


def interrupt(turn_id: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """An Interrupt: the calls (``call_id``, ``tool``, ``arguments``) a turn waits on a
    person for; resume with ``command={"resume": ...}``."""
    requests = [
        {"call_id": c.get("call_id"), "tool": c.get("tool"), "arguments": c.get("arguments")}
        for c in calls
    ]
    return {"value": {"action_requests": requests}, "id": turn_id}


def interrupt_of(event: ApprovalRequestedEvent) -> dict[str, Any]:
    """The Interrupt of a turn's wait for a person."""
    return interrupt(event.turn_id, event.calls)


def ends_stream(event: Event) -> bool:
    """The turn's stream closes after it: its final, or its wait for a person."""
    return isinstance(event, FinalEvent | ApprovalRequestedEvent)


async def frames(
    stream: RunStream,
    events: AsyncIterator[Event] | Iterable[Event],
    *,
    after: str | None = None,
    heartbeat: float | None = None,
) -> AsyncIterator[bytes]:
    """The run's SSE bytes from its events (first to last), sending only what follows
    the event ``after`` (a ``Last-Event-ID``), then ``end``; a keep-alive comment after
    ``heartbeat`` seconds without one (so a proxy does not close a quiet stream)."""
    iterator = events.__aiter__() if isinstance(events, AsyncIterator) else _aiter(events)
    after_id, _, sub = (after or "").partition("/")
    sent_of_group = int(sub) if sub else None
    async for event in _beating(iterator, heartbeat):
        if event is None:
            yield KEEPALIVE
            continue
        group = stream.parts(event)
        seen = bool(after) and event.id is not None and not stream_id_gt(event.id, after_id)
        start = 0
        if seen:
            # Sent already: all of it, or up to its message ``sent_of_group``.
            partly = event.id == after_id and sent_of_group is not None
            start = sent_of_group + 1 if partly and sent_of_group is not None else len(group)
        for n in range(start, len(group)):
            name, data = group[n]
            last = n == len(group) - 1 or event.id is None
            yield sse(name, data, event.id if last else f"{event.id}/{n}")
        # A wait for a person the client saw already (a resumed run's) does not end it.
        if ends_stream(event) and (not seen or start < len(group)):
            break
    yield sse("end", None)


async def _beating(
    events: AsyncIterator[Event], heartbeat: float | None
) -> AsyncIterator[Event | None]:
    """``events``, with None after each ``heartbeat`` seconds without one. The next
    event is awaited in one task across the beats: cancelling it would end ``events``."""
    while True:
        step = asyncio.ensure_future(anext(events))
        try:
            while not (await asyncio.wait({step}, timeout=heartbeat))[0]:
                yield None
            event = step.result()
        except StopAsyncIteration:
            return
        finally:
            step.cancel()
        yield event


async def _aiter(events: Iterable[Event]) -> AsyncIterator[Event]:
    for event in events:
        yield event
