"""AG-UI on the gateway: a run's events as AG-UI events for front ends built on it
(CopilotKit, ``@ag-ui/client``'s ``HttpAgent``)::

    POST /ag-ui/{agent}    RunAgentInput JSON -> text/event-stream of AG-UI events

``threadId`` is the reactq session, the last ``user`` message the turn. Events are
``ag-ui-protocol``'s models, encoded by its ``EventEncoder``. Client-side tools are not
round-tripped yet. What is supported, partly or not: docs/guide/ag-ui.md.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, FastAPI, HTTPException
from fastapi.responses import StreamingResponse

from reactq.producer.gateway.deps import GUARDS, AgentName, GatewayDep, ScopeDep
from reactq.producer.gateway.errors import ERROR_RESPONSES
from reactq.producer.gateway.models import ErrorBody
from reactq.producer.gateway.scopes import session_visible, touches
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.shared.errors import ConfigError, InvalidTurnError, TurnRejectedError
from reactq.shared.events import (
    ActionEvent,
    DeltaEvent,
    FinalEvent,
    ObservationEvent,
    ThoughtEvent,
    TodosEvent,
)
from reactq.shared.events import BaseEvent as ReactqEvent
from reactq.shared.turns import SESSION_ID_RE, MultitaskStrategy, TurnStatus

__all__ = ["PREFIXES", "install", "lifespan", "router"]

PREFIXES: tuple[str, ...] = ("/ag-ui",)
"""Its paths: behind the API key, like ``/v1``."""

router = APIRouter(tags=["ag-ui"])


def _turn_text(run: RunAgentInput) -> str:
    """The last user message's text: the turn (earlier ones are the client's copy)."""
    for message in reversed(run.messages):
        if isinstance(message, UserMessage):
            content = message.content
            if isinstance(content, str):
                return content
            return "".join(getattr(part, "text", "") or "" for part in content)
    raise HTTPException(422, "RunAgentInput.messages has no user message to run as the turn")


def _session(scope: KeyScope | None, thread_id: str) -> str:
    """The thread as a session within the key's tenant."""
    prefix = scope.prefix if scope is not None and scope.prefix else ""
    return thread_id if thread_id.startswith(prefix) else prefix + thread_id


class _Mapper:
    """reactq's events of one turn -> AG-UI events (one open text message at a time)."""

    def __init__(self) -> None:
        self.message_id: str | None = None
        self.answered = False
        """Text went out since the last tool call (else the final's text is the answer)."""

    def close_text(self) -> list[BaseEvent]:
        if self.message_id is None:
            return []
        done = TextMessageEndEvent(message_id=self.message_id)
        self.message_id = None
        return [done]

    def text(self, delta: str) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if self.message_id is None:
            self.message_id = f"msg-{uuid.uuid4().hex}"
            out.append(TextMessageStartEvent(message_id=self.message_id, role="assistant"))
        self.answered = True
        if delta:
            out.append(TextMessageContentEvent(message_id=self.message_id, delta=delta))
        return out

    def map(self, event: ReactqEvent) -> list[BaseEvent]:
        if isinstance(event, DeltaEvent):
            return self.text(event.text)
        if isinstance(event, ThoughtEvent):
            # The thought repeats streamed deltas when there were some: close them instead.
            return (
                self.close_text()
                if self.message_id
                else [*self.text(event.text), *self.close_text()]
            )
        if isinstance(event, ActionEvent):
            call_id = event.call_id or f"call-{uuid.uuid4().hex}"
            args = event.args if isinstance(event.args, str) else _json(event.args)
            self.answered = False
            return [
                *self.close_text(),
                ToolCallStartEvent(tool_call_id=call_id, tool_call_name=event.tool),
                ToolCallArgsEvent(tool_call_id=call_id, delta=args),
                ToolCallEndEvent(tool_call_id=call_id),
            ]
        if isinstance(event, ObservationEvent):
            return [
                ToolCallResultEvent(
                    message_id=f"result-{uuid.uuid4().hex}",
                    tool_call_id=event.call_id,
                    content=event.output,
                    role="tool",
                )
            ]
        if isinstance(event, TodosEvent):
            return [StateSnapshotEvent(snapshot={"todos": event.items})]
        dumped = event.model_dump(mode="json")
        return [CustomEvent(name=f"reactq.{dumped['type']}", value=dumped)]


def _json(value: object) -> str:
    import json

    return json.dumps(value if value is not None else {})


async def _stream(
    gateway: Gateway, scope: KeyScope | None, agent: str, run: RunAgentInput
) -> AsyncIterator[str]:
    encoder = EventEncoder()
    yield encoder.encode(RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id))
    session_id = _session(scope, run.thread_id)
    try:
        text = _turn_text(run)
    except HTTPException as exc:  # a schema-valid run with no user message: in-stream
        yield encoder.encode(RunErrorEvent(message=str(exc.detail), code="invalid_run"))
        return
    try:
        handle = await gateway.producer.submit(
            session_id,
            text,
            agent=agent,
            strategy=MultitaskStrategy.ENQUEUE,
            metadata={"via": "ag-ui", "ag_ui_run_id": run.run_id},
            tenant=scope,
        )
    except (InvalidTurnError, TurnRejectedError, ConfigError) as exc:
        yield encoder.encode(RunErrorEvent(message=exc.message, code=exc.code))
        return
    mapper = _Mapper()
    async for event in handle.events():
        if isinstance(event, FinalEvent):
            done = event.status is TurnStatus.COMPLETED
            tail = mapper.text(event.text) if done and event.text and not mapper.answered else []
            for out in [*tail, *mapper.close_text()]:
                yield encoder.encode(out)
            if done:
                yield encoder.encode(RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id))
            else:
                yield encoder.encode(
                    RunErrorEvent(message=event.text or event.status.value, code=event.code)
                )
            return
        for out in mapper.map(event):
            yield encoder.encode(out)
    yield encoder.encode(RunErrorEvent(message="the turn's events ended before its final"))


async def _refused(run: RunAgentInput, why: str) -> AsyncIterator[str]:
    encoder = EventEncoder()
    yield encoder.encode(RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id))
    yield encoder.encode(RunErrorEvent(message=why, code="invalid_session_id"))


@router.post(
    "/ag-ui/{agent}",
    dependencies=[touches(agent="path.agent")],
    summary="Run a turn as an AG-UI run",
    response_class=StreamingResponse,
    responses={
        422: {
            "model": ErrorBody,
            "description": "Invalid input, including what AG-UI's own input schema refuses "
            "beyond this document's rules (a message whose ``role`` names no AG-UI message "
            "type); ``field`` and ``errors`` say which and why",
        }
    },
)
async def run_agent(
    agent: AgentName, run: RunAgentInput, gateway: GatewayDep, scope: ScopeDep
) -> StreamingResponse:
    """Run the last user message as a turn of ``agent`` in the session ``threadId`` and
    stream its events as AG-UI events (``text/event-stream``)."""
    if scope is not None and scope.read_only:
        raise HTTPException(403, f"the API key {scope.name!r} is read-only: it cannot run turns")
    if not SESSION_ID_RE.fullmatch(_session(scope, run.thread_id)):
        # A thread id reactq cannot name a session with: the run's own error, in-stream.
        return StreamingResponse(
            _refused(run, "threadId must be 1-128 characters from [A-Za-z0-9._:-]"),
            media_type=EventEncoder().get_content_type(),
        )
    if not await session_visible(gateway, scope, _session(scope, run.thread_id)):
        raise HTTPException(404, f"no thread {run.thread_id!r}")
    return StreamingResponse(
        _stream(gateway, scope, agent, run), media_type=EventEncoder().get_content_type()
    )


def install(app: FastAPI) -> None:
    """Add its routes to ``app`` behind the key."""
    app.include_router(router, dependencies=GUARDS, responses=ERROR_RESPONSES)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Nothing runs beside the app for it."""
    yield
