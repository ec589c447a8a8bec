"""reactq's events of one turn as AG-UI events.

One text message and one reasoning message are open at a time; a tool call is its
start, args and end, its result a ``TOOL_CALL_RESULT``. A *step* is one ReAct
iteration: what the model said and called, then its tools' results; the next step
starts with the model's next answer (``STEP_STARTED`` / ``STEP_FINISHED``, named
``step N``). A todo list is state: a ``STATE_DELTA`` (a JSON Patch on the client's
state object) or, when the client sent no object, a ``STATE_SNAPSHOT``. Any other
event is ``CUSTOM``, named ``reactq.<type>``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from reactq.shared.events import (
    ActionEvent,
    DeltaEvent,
    ObservationEvent,
    ReasoningEvent,
    ThoughtEvent,
    TodosEvent,
    ToolFailedEvent,
)
from reactq.shared.events import BaseEvent as ReactqEvent

__all__ = ["EventMapper"]

_STEP_CONTENT = (DeltaEvent, ReasoningEvent, ThoughtEvent, ActionEvent)
"""Events of a model's answer: after tool results, the first of them starts a step."""


def _json(value: object) -> str:
    return json.dumps(value if value is not None else {})


class EventMapper:
    """One turn's events -> AG-UI events.

    ``known``: calls the client has already (their TOOL_CALL events went out with the
    run before), not streamed again; ``known_results``: calls whose results it has (its
    frontend tools'). ``state``: the client's state object (None when it sent none):
    todo lists are patches on it."""

    def __init__(
        self,
        known: set[str] | None = None,
        state: dict[str, Any] | None = None,
        known_results: set[str] | None = None,
    ) -> None:
        self.message_id: str | None = None
        self.answered = False
        """Text went out since the last tool call (else the final's text is the answer)."""
        self.known = known or set()
        self.known_results = self.known if known_results is None else known_results
        self.state = state
        self.reasoning_id: str | None = None
        self.step = 0
        self._step_open = False
        self._after_tools = False

    def map(self, event: ReactqEvent) -> list[BaseEvent]:
        """The AG-UI events of one of the turn's events."""
        out: list[BaseEvent] = []
        if isinstance(event, _STEP_CONTENT):
            if self._after_tools or not self._step_open:
                out += [*self.close_text(), *self.close_step(), *self._open_step()]
        elif isinstance(event, ObservationEvent | ToolFailedEvent):
            self._after_tools = True
        if isinstance(event, ReasoningEvent):
            return out + (self.reasoning(event.text) if event.text else [])
        return [*out, *self.close_reasoning(), *self._map(event)]

    def answer(self, text: str) -> list[BaseEvent]:
        """The final answer of a turn that streamed none of it, in a step of its own
        after tool results."""
        out: list[BaseEvent] = []
        if self._after_tools or not self._step_open:
            out += [*self.close_text(), *self.close_step(), *self._open_step()]
        return [*out, *self.text(text)]

    def close_step(self) -> list[BaseEvent]:
        """The end of the step in progress (none when none is)."""
        if not self._step_open:
            return []
        self._step_open = False
        return [StepFinishedEvent(step_name=f"step {self.step}")]

    def _open_step(self) -> list[BaseEvent]:
        self.step += 1
        self._step_open, self._after_tools = True, False
        return [StepStartedEvent(step_name=f"step {self.step}")]

    def close_text(self) -> list[BaseEvent]:
        """The end of the text (and reasoning) message being streamed."""
        if self.message_id is None:
            return self.close_reasoning()
        done = TextMessageEndEvent(message_id=self.message_id)
        self.message_id = None
        return [done]

    def text(self, delta: str) -> list[BaseEvent]:
        """A piece of the assistant's text (opening its message first)."""
        out: list[BaseEvent] = []
        if self.message_id is None:
            self.message_id = f"msg-{uuid.uuid4().hex}"
            out.append(TextMessageStartEvent(message_id=self.message_id, role="assistant"))
        self.answered = True
        if delta:
            out.append(TextMessageContentEvent(message_id=self.message_id, delta=delta))
        return out

    def close_reasoning(self) -> list[BaseEvent]:
        """The end of the reasoning message being streamed."""
        if self.reasoning_id is None:
            return []
        done = [
            ReasoningMessageEndEvent(message_id=self.reasoning_id),
            ReasoningEndEvent(message_id=self.reasoning_id),
        ]
        self.reasoning_id = None
        return done

    def reasoning(self, delta: str) -> list[BaseEvent]:
        """A piece of the model's reasoning (opening its message first)."""
        out: list[BaseEvent] = [*self.close_text()]
        if self.reasoning_id is None:
            self.reasoning_id = f"reasoning-{uuid.uuid4().hex}"
            out += [
                ReasoningStartEvent(message_id=self.reasoning_id),
                ReasoningMessageStartEvent(message_id=self.reasoning_id),
            ]
        out.append(ReasoningMessageContentEvent(message_id=self.reasoning_id, delta=delta))
        return out

    def calls(self, calls: list[dict[str, Any]]) -> list[BaseEvent]:
        """Tool call start, args and end of each call (``call_id``, ``tool``, ``arguments``)."""
        out: list[BaseEvent] = []
        for call in calls:
            call_id = str(call.get("call_id") or f"call-{uuid.uuid4().hex}")
            args = call.get("arguments")
            out += [
                ToolCallStartEvent(tool_call_id=call_id, tool_call_name=str(call.get("tool"))),
                ToolCallArgsEvent(
                    tool_call_id=call_id, delta=args if isinstance(args, str) else _json(args)
                ),
                ToolCallEndEvent(tool_call_id=call_id),
            ]
        return out

    def _map(self, event: ReactqEvent) -> list[BaseEvent]:
        if isinstance(event, DeltaEvent):
            return self.text(event.text)
        if isinstance(event, ThoughtEvent):
            # The thought repeats streamed deltas when there were some: close them instead.
            return (
                self.close_text()
                if self.message_id
                else [*self.text(event.text), *self.close_text()]
            )
        if isinstance(event, ActionEvent) and event.call_id in self.known:
            return []  # the client has this call (it went out with the last run)
        if (
            isinstance(event, ObservationEvent | ToolFailedEvent)
            and event.call_id in self.known_results
        ):
            return []  # a frontend tool's result: the client gave it
        if isinstance(event, ActionEvent):
            self.answered = False
            call = {"call_id": event.call_id, "tool": event.tool, "arguments": event.args}
            return [*self.close_text(), *self.calls([call])]
        if isinstance(event, ObservationEvent | ToolFailedEvent):
            content = (
                event.output if isinstance(event, ObservationEvent) else f"error: {event.error}"
            )
            return [
                ToolCallResultEvent(
                    message_id=f"result-{uuid.uuid4().hex}",
                    tool_call_id=event.call_id,
                    content=content,
                    role="tool",
                )
            ]
        if isinstance(event, TodosEvent):
            if self.state is None:
                return [StateSnapshotEvent(snapshot={"todos": event.items})]
            # "add" sets the member whether or not the client's state has it already.
            patch = [{"op": "add", "path": "/todos", "value": event.items}]
            return [StateDeltaEvent.model_validate({"type": "STATE_DELTA", "delta": patch})]
        dumped = event.model_dump(mode="json")
        return [CustomEvent(name=f"reactq.{dumped['type']}", value=dumped)]
