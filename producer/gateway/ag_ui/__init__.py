"""AG-UI on the gateway: a run's events as AG-UI events for front ends built on it
(CopilotKit, ``@ag-ui/client``'s ``HttpAgent``)::

    POST /ag-ui/{agent}    RunAgentInput JSON -> text/event-stream of AG-UI events

``threadId`` is the reactq session, the last ``user`` message the turn. Events are
``ag-ui-protocol``'s models, encoded by its ``EventEncoder``. The input's ``tools`` are
frontend tools (client tools, ``shared/client_tools.py``): the model's call to one ends
the run with its tool call events, the turn parked; the client's next run, ending with
``tool`` messages for those calls, gives their results and streams the rest of the
turn. What is supported, partly or not: docs/guide/ag-ui.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import (
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, FastAPI, HTTPException
from fastapi.responses import StreamingResponse

from reactq.producer.gateway.ag_ui.events import EventMapper
from reactq.producer.gateway.deps import GUARDS, AgentName, GatewayDep, ScopeDep
from reactq.producer.gateway.errors import ERROR_RESPONSES, GatewayError
from reactq.producer.gateway.models import ErrorBody
from reactq.producer.gateway.resume import events_after_decisions
from reactq.producer.gateway.scopes import session_visible, touches
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.shared.errors import ApprovalError, ConfigError, InvalidTurnError, TurnRejectedError
from reactq.shared.events import ApprovalRequestedEvent, FinalEvent
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


def _tool_results(run: RunAgentInput) -> dict[str, ToolMessage]:
    """The ``tool`` messages after the last assistant message: the client's results of
    the frontend tool calls the previous run ended with."""
    found: dict[str, ToolMessage] = {}
    for message in reversed(run.messages):
        if not isinstance(message, ToolMessage):
            break
        found[message.tool_call_id] = message
    return found


def _client_tools(run: RunAgentInput) -> list[dict[str, Any]]:
    """The run's frontend tools as client tools (the submit refuses one reactq cannot
    offer a model, such as a name outside ``[A-Za-z0-9_-]{1,64}``)."""
    return [
        {"name": t.name, "description": t.description}
        | ({"parameters": t.parameters} if isinstance(t.parameters, dict) else {})
        for t in run.tools or ()
    ]


def _decisions(run: RunAgentInput) -> dict[str, bool | str]:
    """The run's ``resume`` entries as decisions on the calls its interrupts named:
    ``resolved`` approves (unless its payload says ``{"approved": false}``),
    ``cancelled`` denies (with the payload's ``reason``, if any)."""
    out: dict[str, bool | str] = {}
    for entry in run.resume or ():
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        reason = payload.get("reason")
        denial: bool | str = reason if isinstance(reason, str) and reason else False
        if entry.status == "resolved" and payload.get("approved", True) is not False:
            out[entry.interrupt_id] = True
        else:
            out[entry.interrupt_id] = denial
    return out


class _Resumed:
    """A waiting turn given what the client's run answered: its events from there on,
    and the calls the client has (their TOOL_CALL events went out with the last run)
    or whose results it has (its frontend tools')."""

    def __init__(
        self, events: AsyncIterator[ReactqEvent], calls: set[str], results: set[str]
    ) -> None:
        self.events, self.calls, self.results = events, calls, results


async def _resume(
    gateway: Gateway,
    session_id: str,
    results: dict[str, ToolMessage],
    decisions: dict[str, bool | str],
    frontend: set[str],
) -> _Resumed:
    """Give the thread's waiting turn the client's tool results and its decisions on
    the interrupts. GatewayError when no call of the thread waits for them."""
    producer = gateway.producer
    asked = set(results) | set(decisions)
    pending = [
        p
        for p in await producer.pending_approvals(session_id)
        # A tool result answers a frontend tool's call only: a call of the agent's own
        # tools is decided (an interrupt), never given a result by the client.
        if (p.call_id in results and p.tool in frontend) or p.call_id in decisions
    ]
    if not pending:
        raise GatewayError(
            "no call of this thread waits for these tool results or interrupt answers: "
            f"{sorted(asked)}",
            status=409,
            error_code="no_waiting_call",
        )
    turn_id = pending[0].turn_id
    mine = [p for p in pending if p.turn_id == turn_id]
    answered = {p.call_id for p in mine}
    given = {p.call_id for p in mine if p.call_id in results and p.tool in frontend}
    decided = {c: d for c, d in decisions.items() if c in answered and c not in given}
    if decided:
        await producer.decide(turn_id, decided, by="ag-ui")
    for call_id in sorted(given):
        message = results[call_id]
        if message.error:
            await producer.complete_tool(turn_id, call_id, error=message.error, by="ag-ui")
        else:
            await producer.complete_tool(turn_id, call_id, message.content, by="ag-ui")
    events = events_after_decisions(producer, session_id, turn_id, answered)
    return _Resumed(events, answered, given)


def _interrupted(calls: list[dict[str, Any]], run: RunAgentInput) -> RunFinishedEvent:
    """The end of a run whose turn waits for a person's decision on ``calls``."""
    interrupts = [
        Interrupt(
            id=str(c.get("call_id")),
            reason="approval",
            message=f"{c.get('tool')} waits for a person's approval",
            tool_call_id=str(c.get("call_id")),
        )
        for c in calls
    ]
    return RunFinishedEvent(
        thread_id=run.thread_id,
        run_id=run.run_id,
        outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
    )


async def _stream(
    gateway: Gateway, scope: KeyScope | None, agent: str, run: RunAgentInput
) -> AsyncIterator[str]:
    encoder = EventEncoder()
    yield encoder.encode(RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id))
    session_id = _session(scope, run.thread_id)
    results, decisions = _tool_results(run), _decisions(run)
    events: AsyncIterator[ReactqEvent]
    known_calls: set[str] = set()
    known_results: set[str] = set()
    try:
        if results or decisions:
            frontend = {t.name for t in run.tools or ()}
            resumed = await _resume(gateway, session_id, results, decisions, frontend)
            events, known_calls, known_results = resumed.events, resumed.calls, resumed.results
        else:
            handle = await gateway.producer.submit(
                session_id,
                _turn_text(run),
                agent=agent,
                strategy=MultitaskStrategy.ENQUEUE,
                metadata={"via": "ag-ui", "ag_ui_run_id": run.run_id},
                # What the front end shares with the agent's tools and prompt.
                context={
                    "ag_ui": {
                        "context": [c.model_dump() for c in run.context or ()],
                        "state": run.state,
                    }
                },
                tenant=scope,
                client_tools=_client_tools(run),
            )
            events = handle.events()
    except HTTPException as exc:  # a schema-valid run with no user message: in-stream
        yield encoder.encode(RunErrorEvent(message=str(exc.detail), code="invalid_run"))
        return
    except (InvalidTurnError, TurnRejectedError, ConfigError, ApprovalError) as exc:
        yield encoder.encode(RunErrorEvent(message=exc.message, code=exc.code))
        return
    except GatewayError as exc:
        yield encoder.encode(RunErrorEvent(message=exc.message, code=exc.error_code))
        return
    state = run.state if isinstance(run.state, dict) else None
    mapper = EventMapper(known_calls, state=state, known_results=known_results)
    async for event in events:
        if isinstance(event, ApprovalRequestedEvent):
            # The run ends with the calls the turn waits for: the client runs its own
            # (frontend tools) and its next run carries their results; a person decides
            # the others (interrupts), answered by the next run's ``resume``.
            names = {t.name for t in run.tools or ()}
            people = [c for c in event.calls if c.get("tool") not in names]
            tail = [*mapper.close_text(), *mapper.calls(event.calls), *mapper.close_step()]
            for out in tail:
                yield encoder.encode(out)
            if people:
                yield encoder.encode(_interrupted(people, run))
            else:
                yield encoder.encode(RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id))
            return
        if isinstance(event, FinalEvent):
            done = event.status is TurnStatus.COMPLETED
            tail = mapper.answer(event.text) if done and event.text and not mapper.answered else []
            for out in [*tail, *mapper.close_text(), *mapper.close_step()]:
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
