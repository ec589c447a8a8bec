"""The Agent Protocol's runs on a thread: a run is a reactq turn (see the package's
docstring)::

    POST /threads/{thread_id}/runs                       a background run: the Run   200 404 409 422
    POST /threads/{thread_id}/runs/wait                  run, answer the final values
    POST /threads/{thread_id}/runs/stream                run, stream it (SSE)
    GET  /threads/{thread_id}/runs                       the thread's runs, newest first
    GET  /threads/{thread_id}/runs/{run_id}              a run                       200 404
    POST /threads/{thread_id}/runs/{run_id}/cancel       cancel it                   200 404
    GET  /threads/{thread_id}/runs/{run_id}/join         wait for it: the values     200 404
    GET  /threads/{thread_id}/runs/{run_id}/stream       its stream again (Last-Event-ID)
    POST /runs, /runs/wait, /runs/stream                 stateless: on a thread made for the run,
                                                         deleted once it ends (on_completion)

``input={"messages": [...]}``'s last human message is the turn's message;
``multitask_strategy`` (``reject`` by default, as LangGraph's server) is reactq's strategy
of the same name: a run a ``reject`` refuses gets 409. The stream's modes are
``streams.py``'s; its SSE ids are the turn's event ids, so ``Last-Event-ID`` resumes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, StrictFloat

from reactq.producer.gateway.agent_protocol import assistants, deleted
from reactq.producer.gateway.agent_protocol.messages import input_message, thread_messages
from reactq.producer.gateway.agent_protocol.streams import (
    LAST_EVENT_ID,
    MODES,
    RunStream,
    ends_stream,
    frames,
    modes_of,
    sse,
)
from reactq.producer.gateway.agent_protocol.threads import (
    iso,
    thread_detail,
    thread_exists,
    thread_not_found,
    thread_values,
)
from reactq.producer.gateway.deps import GatewayDep, ScopeDep, SessionId, TurnId
from reactq.producer.gateway.errors import GatewayError, state_store_errors
from reactq.producer.gateway.scopes import listing, touches
from reactq.producer.gateway.service import Gateway
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.bus import stream_id_gt
from reactq.shared.errors import (
    ApprovalClosedError,
    ApprovalNotFoundError,
    ConfigError,
    DecisionConflictError,
    InvalidEditError,
    SessionBusyError,
    UnknownAgentError,
)
from reactq.shared.events import ApprovalRequestedEvent, Event, FinalEvent
from reactq.shared.turns import MultitaskStrategy, TurnStatus

__all__ = ["RunCreate", "router", "run_object"]

router = APIRouter(tags=["agent-protocol: runs"])

RunStatus = Literal["pending", "running", "error", "success", "timeout", "interrupted"]

_KEY = "agent_protocol"
"""The turn's metadata key that keeps what the run was created with."""

_STATUS: dict[TurnStatus, RunStatus] = {
    TurnStatus.QUEUED: "pending",
    TurnStatus.RUNNING: "running",
    TurnStatus.AWAITING_APPROVAL: "interrupted",
    TurnStatus.AWAITING_CHILDREN: "running",
    TurnStatus.COMPLETED: "success",
    TurnStatus.MAX_ITERATIONS: "success",
    TurnStatus.ERROR: "error",
    TurnStatus.CANCELLED: "interrupted",
    TurnStatus.REJECTED: "error",
}

_THREAD = "path.thread_id"

_NOT_SERVED = (
    "after_seconds",
    "interrupt_before",
    "interrupt_after",
    "checkpoint",
    "checkpoint_id",
)

_APPROVE = frozenset({"approve", "accept", "yes"})
_DENY = frozenset({"deny", "reject", "no"})


class RunCreate(BaseModel):
    """A run's body (what the SDK's ``runs.create``, ``wait`` and ``stream`` send)."""

    assistant_id: str = Field(min_length=1, max_length=128)
    """The assistant (a graph id: the agent's name)."""
    input: dict[str, Any] | None = None
    """``{"messages": [...]}``: the last human message is the turn's."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The run's metadata (kept on the turn)."""
    context: dict[str, Any] | None = None
    """Reaches the tools as the turn's context."""
    config: dict[str, Any] | None = None
    """Accepted; not used."""
    stream_mode: str | list[str] | None = None
    """The stream's modes (``values`` by default)."""
    multitask_strategy: MultitaskStrategy = MultitaskStrategy.REJECT
    """What the run does when the thread has a run already."""
    if_not_exists: Literal["create", "reject"] = "reject"
    """A thread that does not exist: created by the run, or 404."""
    stream_resumable: bool | None = None
    """Accepted: every stream is resumable."""
    webhook: str | None = Field(default=None, max_length=2048)
    """POSTed (signed) once the run ends, as a turn's webhook (needs
    REACTQ_WEBHOOK_SECRET; a URL that is not public is refused: 422)."""
    after_seconds: StrictFloat | None = None
    """Not served yet: 422."""
    on_completion: Literal["delete", "keep"] | None = None
    """A stateless run's thread once the run ends: deleted (the default) or kept (a
    run that waits for a person keeps it, to be resumed). Ignored on a thread's run."""
    interrupt_before: Any = None
    """Not served (reactq interrupts on a tool's approval): 422."""
    interrupt_after: Any = None
    """Not served: 422."""
    checkpoint: Any = None
    """Not served (a run starts from the thread's latest state): 422."""
    checkpoint_id: str | None = None
    """Not served: 422."""
    command: dict[str, Any] | None = None
    """``{"resume": ...}``: decide the calls the thread's interrupted run waits on
    (``True``/``"approve"``, ``False``/``"deny"``, or ``{call_id: True | False | reason}``);
    the run is that run, resumed."""


def run_object(
    thread_id: str, run_id: str, info: TurnInfo | None, *, created: float | None = None
) -> dict[str, Any]:
    """The Run object of a turn (``info``: what reactq knows of it; None: just queued)."""
    kept = dict(info.metadata) if info is not None else {}
    ours = kept.pop(_KEY, {}) if isinstance(kept.get(_KEY), dict) else {}
    status: RunStatus = "pending" if info is None else _STATUS.get(info.status, "pending")
    at = created if info is None else (info.submitted_at or info.started_at or time.time())
    ended = info.ended_at if info is not None else None
    return {
        "run_id": run_id,
        "thread_id": thread_id,
        "assistant_id": ours.get("assistant_id", ""),
        "status": status,
        "created_at": iso(at),
        "updated_at": iso(ended or at),
        "metadata": kept,
        "multitask_strategy": ours.get("multitask_strategy", "reject"),
        "kwargs": {},
    }


@dataclass(frozen=True)
class Started:
    """A run begun: its turn, and the event its stream starts after (a resumed run's:
    its last wait for a person)."""

    run_id: str
    created: float
    after: str | None = None


_RESUME_FORMS = (
    'command.resume must be true, false, "approve", "deny", {call_id: true | false | reason | '
    '{"args": {...}}}, or {"decisions": [{"type": "approve" | "edit" | "reject", ...}]} '
    "(one per action request, in order)"
)

Resumed = tuple[dict[str, bool | str], dict[str, dict[str, Any]]]
"""A resume as reactq's decisions, and the edited arguments of the approvals among them."""


def _invalid_resume(why: str = "") -> GatewayError:
    return GatewayError(
        f"{_RESUME_FORMS}{': ' + why if why else ''}",
        status=422,
        error_code="invalid_command",
        field="command.resume",
    )


def _one(call_id: str, value: Any) -> tuple[bool | str, dict[str, Any] | None]:
    """One call's decision: a bool, a reason (a denial), ``{"args": {...}}`` (approved
    with these arguments), or a LangChain decision (``{"type": "approve" | "edit" |
    "reject"}``, ``edited_action.args`` / ``message``)."""
    if isinstance(value, bool | str):
        return value, None
    if not isinstance(value, dict):
        raise _invalid_resume(f"the decision on {call_id!r} is {type(value).__name__}")
    kind = value.get("type")
    if kind is None and "args" in value:
        kind = "edit"
    if kind in ("approve", "accept"):
        return True, None
    if kind in ("reject", "ignore", "response"):
        message = value.get("message", value.get("args"))
        return (message if isinstance(message, str) and message else False), None
    if kind == "edit":
        given = value.get("args")
        if "edited_action" in value:  # LangChain's {"edited_action": {"name", "args"}}
            action = value["edited_action"]
            args = action.get("args") if isinstance(action, dict) else None
        elif isinstance(given, dict) and {"action", "args"} <= set(given):
            args = given["args"]  # LangGraph's HumanResponse {"args": {"action", "args"}}
        else:
            args = given  # reactq's own {"args": {...}}
        if not isinstance(args, dict):
            raise _invalid_resume(f"the edit of {call_id!r} carries no arguments object")
        return True, args
    raise _invalid_resume(f"the decision on {call_id!r} has type {kind!r}")


def _decisions(resume: Any, call_ids: list[str]) -> Resumed:
    """A ``command.resume`` as reactq's decisions (and edited arguments) over the
    waiting calls, in the interrupt's order; 422 for a value that is none."""
    if isinstance(resume, str) and resume.lower() in _APPROVE | _DENY:
        resume = resume.lower() in _APPROVE
    if isinstance(resume, bool):
        return dict.fromkeys(call_ids, resume), {}
    pairs: list[tuple[str, Any]]
    if isinstance(resume, dict) and isinstance(resume.get("decisions"), list):
        listed = resume["decisions"]  # LangChain's HumanInTheLoopMiddleware
    elif isinstance(resume, list):
        listed = resume  # LangGraph's HumanResponse list
    else:
        listed = None
    if listed is not None:
        if len(listed) != len(call_ids):
            raise _invalid_resume(f"{len(listed)} decisions for the {len(call_ids)} waiting calls")
        pairs = list(zip(call_ids, listed, strict=True))
    elif isinstance(resume, dict) and resume:
        pairs = [(str(k), v) for k, v in resume.items()]
    else:
        raise _invalid_resume()
    decisions: dict[str, bool | str] = {}
    edits: dict[str, dict[str, Any]] = {}
    for call_id, value in pairs:
        decisions[call_id], edited = _one(call_id, value)
        if edited is not None:
            edits[call_id] = edited
    return decisions, edits


async def _resume(gateway: Gateway, thread_id: str, resume: Any) -> Started:
    """Decide the calls the thread's interrupted run waits on; that run, resumed."""
    waiting = await gateway.producer.pending_approvals(thread_id)
    if not waiting:
        raise GatewayError(
            "the thread has no interrupted run to resume", status=409, error_code="not_interrupted"
        )
    run_id = waiting[0].turn_id
    calls = [w.call_id for w in waiting if w.turn_id == run_id]
    kept = await gateway.streamed_events(thread_id, run_id)
    asked = [e.id for e in kept if isinstance(e, ApprovalRequestedEvent) and e.id]
    decisions, edits = _decisions(resume, calls)
    try:
        await gateway.producer.decide(
            run_id, decisions, by="agent-protocol", arguments=edits or None
        )
    except InvalidEditError as exc:
        raise GatewayError(
            exc.message, status=422, error_code=exc.code, field="command.resume"
        ) from None
    except (ApprovalNotFoundError, ApprovalClosedError, DecisionConflictError) as exc:
        raise GatewayError(str(exc), status=409, error_code="not_interrupted") from None
    return Started(run_id, time.time(), asked[-1] if asked else None)


async def _start(gateway: Gateway, scope: Any, thread_id: str, body: RunCreate) -> Started:
    """Begin the run: resume the thread's interrupted run, or submit a new turn."""
    for name in _NOT_SERVED:
        if getattr(body, name) is not None:
            raise GatewayError(
                f"{name} is not supported by this server",
                status=422,
                error_code="not_supported",
                field=f"body.{name}",
            )
    if body.command is not None and "resume" in body.command:
        return await _resume(gateway, thread_id, body.command["resume"])
    handle = await _submit(gateway, scope, thread_id, body)
    return Started(handle.turn_id, handle.queued.ts)


async def _submit(gateway: Gateway, scope: Any, thread_id: str, body: RunCreate) -> Any:
    """Put the run's turn on the thread's queue; its handle."""
    if body.if_not_exists == "reject" and not await thread_exists(gateway, thread_id):
        raise thread_not_found()
    message = input_message(body.input)
    choice = await assistants.choose(gateway, body.assistant_id, scope)
    if scope is not None and not scope.may_run(choice.agent):
        # As the guard answers an agent outside a key's ``agents=``: as one nobody hosts.
        raise GatewayError(
            f"no worker hosts agent {body.assistant_id!r}",
            status=422,
            error_code=UnknownAgentError.code,
            field="body.assistant_id",
        )
    strategy = body.multitask_strategy
    ours = {"assistant_id": body.assistant_id, "multitask_strategy": strategy.value}
    superseded: list[str] = []
    if strategy is MultitaskStrategy.ROLLBACK and await gateway.session_agent(thread_id):
        # The runs a rollback stops are deleted, as LangGraph's server deletes them.
        with state_store_errors():
            turns = await gateway.producer.session_turns(thread_id)
        superseded = [t.turn_id for t in turns if not t.status.is_final]
    try:
        handle = await gateway.producer.submit(
            thread_id,
            message,
            agent=choice.agent,
            strategy=strategy,
            metadata={**body.metadata, _KEY: ours},
            context=body.context,
            overrides=choice.overrides or None,
            webhook=body.webhook,
            tenant=scope,
        )
    except ConfigError as exc:
        # A webhook without REACTQ_WEBHOOK_SECRET: the pool is not set up for it.
        raise GatewayError(exc.message, status=501, error_code="not_implemented") from None
    for run_id in superseded:
        await deleted.forget(gateway, thread_id, run_id)
    return handle


async def _turn(gateway: Gateway, thread_id: str, run_id: str) -> TurnInfo:
    """The run's turn; 404 for one not of this thread."""
    with state_store_errors():
        info = await gateway.producer.turn_info(run_id)
    if info is None or info.session_id != thread_id:
        raise GatewayError("no such run", status=404, error_code="run_not_found")
    if await deleted.is_forgotten(gateway, thread_id, run_id):
        raise GatewayError("the run was deleted", status=404, error_code="run_not_found")
    return info


async def _events(
    gateway: Gateway, thread_id: str, run_id: str, after: str | None = None
) -> AsyncIterator[Event]:
    """The turn's events from its first to its last (its final, or a wait for a person
    after ``after``): replayed from the session's stream, then live."""

    def last(event: Event) -> bool:
        return ends_stream(event) and (
            after is None or event.id is None or stream_id_gt(event.id, after.partition("/")[0])
        )

    kept = await gateway.streamed_events(thread_id, run_id)
    if any(last(e) for e in kept):
        for event in kept:
            yield event
            if last(event):
                return
        return
    async for event in gateway.producer.subscribe(thread_id, after="0"):
        if event.turn_id == run_id:
            yield event
            if last(event):
                return


async def _until_end(
    gateway: Gateway, thread_id: str, run_id: str, after: str | None = None
) -> FinalEvent | None:
    """Wait for the run to end (or wait for a person: None)."""
    info = await _turn(gateway, thread_id, run_id)
    if info.final is not None:
        return info.final
    async for event in _events(gateway, thread_id, run_id, after):
        if isinstance(event, FinalEvent):
            return event
    return None


async def _final_values(gateway: Gateway, thread_id: str, final: FinalEvent | None) -> Any:
    values = await thread_values(gateway, thread_id)
    if final is not None and final.status in (TurnStatus.ERROR, TurnStatus.REJECTED):
        return {"__error__": {"error": final.code or final.status.value, "message": final.text}}
    return values


def _check_modes(modes: list[str]) -> None:
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise GatewayError(
            f"stream modes not served: {', '.join(unknown)} (served: {', '.join(sorted(MODES))})",
            status=422,
            error_code="invalid_stream_mode",
            field="stream_mode",
        )


def _streaming(
    thread_id: str, run_id: str, modes: list[str], body: AsyncIterator[bytes]
) -> StreamingResponse:
    run = f"/threads/{quote(thread_id, safe='')}/runs/{quote(run_id, safe='')}"
    query = urlencode([("stream_mode", m) for m in modes])
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            # The SDK names the run from it (``on_run_created``), and reconnects to the
            # join stream at ``Location`` (with ``Last-Event-ID``) when the stream drops.
            "Content-Location": run,
            "Location": f"{run}/stream?{query}",
        },
    )


async def _run_frames(
    gateway: Gateway, thread_id: str, run_id: str, modes: list[str], after: str | None
) -> AsyncIterator[bytes]:
    with state_store_errors():
        history = await gateway.producer.history(thread_id)
    stream = RunStream(run_id, thread_id, modes, thread_messages(history, without_turn=run_id))
    events = _events(gateway, thread_id, run_id, after)
    beat = gateway.settings.sse_heartbeat_seconds
    async for piece in frames(stream, events, after=after, heartbeat=beat):
        yield piece


@router.post(
    "/threads/{thread_id}/runs",
    dependencies=[touches(session=_THREAD)],
    summary="Create a background run",
)
async def create_run(
    thread_id: SessionId, body: RunCreate, gateway: GatewayDep, scope: ScopeDep
) -> dict[str, Any]:
    """Queue the run's turn (or resume the interrupted one); the Run."""
    started = await _start(gateway, scope, thread_id, body)
    if body.command is not None and "resume" in body.command:
        return run_object(
            thread_id, started.run_id, await _turn(gateway, thread_id, started.run_id)
        )
    run = run_object(thread_id, started.run_id, None, created=started.created)
    ours = {"assistant_id": body.assistant_id, "multitask_strategy": body.multitask_strategy.value}
    return {**run, **ours, "metadata": body.metadata}


@router.post(
    "/threads/{thread_id}/runs/wait",
    dependencies=[touches(session=_THREAD)],
    summary="Run and wait for the final values",
)
async def wait_run(
    thread_id: SessionId, body: RunCreate, gateway: GatewayDep, scope: ScopeDep
) -> Any:
    """Run the turn and answer the thread's values once it ends (``__error__`` for a
    failed one)."""
    started = await _start(gateway, scope, thread_id, body)
    final = await _until_end(gateway, thread_id, started.run_id, started.after)
    return await _final_values(gateway, thread_id, final)


@router.post(
    "/threads/{thread_id}/runs/stream",
    dependencies=[touches(session=_THREAD)],
    response_class=StreamingResponse,
    summary="Run and stream it (Server-Sent Events)",
)
async def stream_run(
    thread_id: SessionId, body: RunCreate, gateway: GatewayDep, scope: ScopeDep
) -> StreamingResponse:
    """Run the turn and stream it in the modes asked for (see ``streams.py``)."""
    modes = modes_of(body.stream_mode)
    _check_modes(modes)
    started = await _start(gateway, scope, thread_id, body)
    body_bytes = _run_frames(gateway, thread_id, started.run_id, modes, started.after)
    return _streaming(thread_id, started.run_id, modes, body_bytes)


@router.get(
    "/threads/{thread_id}/runs",
    dependencies=[touches(session=_THREAD)],
    summary="A thread's runs",
)
async def list_runs(
    thread_id: SessionId,
    gateway: GatewayDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0)] = 0,
    status: Annotated[RunStatus | None, Query()] = None,
) -> list[dict[str, Any]]:
    """The thread's runs, newest first."""
    if await thread_detail(gateway, thread_id, values=False) is None:
        raise thread_not_found()
    with state_store_errors():
        turns = await gateway.producer.session_turns(thread_id)
    gone = await deleted.forgotten(gateway, thread_id)
    runs = [run_object(thread_id, t.turn_id, t) for t in reversed(turns) if t.turn_id not in gone]
    if status is not None:
        runs = [r for r in runs if r["status"] == status]
    return runs[offset : offset + limit]


@router.get(
    "/threads/{thread_id}/runs/{run_id}",
    dependencies=[touches(session=_THREAD, turn="path.run_id")],
    summary="A run",
)
async def get_run(thread_id: SessionId, run_id: TurnId, gateway: GatewayDep) -> dict[str, Any]:
    """The run: its status, metadata and strategy."""
    return run_object(thread_id, run_id, await _turn(gateway, thread_id, run_id))


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    dependencies=[touches(session=_THREAD, turn="path.run_id")],
    summary="Cancel a run",
)
async def cancel_run(
    thread_id: SessionId,
    run_id: TurnId,
    gateway: GatewayDep,
    wait: Annotated[bool, Query()] = False,
    action: Annotated[Literal["interrupt", "rollback"], Query()] = "interrupt",
) -> dict[str, Any]:
    """Cancel the run (at its next step if it runs); with ``wait``, once it ended.
    Either way the turn's work is not committed; ``rollback`` deletes the run too
    (get, list and join answer as for a run that never was)."""
    await _turn(gateway, thread_id, run_id)
    await gateway.producer.cancel(run_id)
    if wait or action == "rollback":
        await _until_end(gateway, thread_id, run_id)
    run = run_object(thread_id, run_id, await _turn(gateway, thread_id, run_id))
    if action == "rollback":
        await deleted.forget(gateway, thread_id, run_id)
    return run


@router.delete(
    "/threads/{thread_id}/runs/{run_id}",
    dependencies=[touches(session=_THREAD, turn="path.run_id")],
    status_code=204,
    summary="Delete a run",
)
async def delete_run(thread_id: SessionId, run_id: TurnId, gateway: GatewayDep) -> Response:
    """Delete an ended run (409 while it runs, waits in the queue or for a person:
    cancel it first). Its messages stay in the thread's state."""
    info = await _turn(gateway, thread_id, run_id)
    if info.final is None:
        raise GatewayError(
            "the run has not ended: cancel it first", status=409, error_code="run_busy"
        )
    await deleted.forget(gateway, thread_id, run_id)
    return Response(status_code=204)


@router.get(
    "/threads/{thread_id}/runs/{run_id}/join",
    dependencies=[touches(session=_THREAD, turn="path.run_id")],
    summary="Wait for a run: the final values",
)
async def join_run(thread_id: SessionId, run_id: TurnId, gateway: GatewayDep) -> Any:
    """The thread's values once the run ended (``__error__`` for a failed one)."""
    final = await _until_end(gateway, thread_id, run_id)
    return await _final_values(gateway, thread_id, final)


@router.get(
    "/threads/{thread_id}/runs/{run_id}/stream",
    dependencies=[touches(session=_THREAD, turn="path.run_id")],
    response_class=StreamingResponse,
    summary="Join a run's stream (Server-Sent Events, resumable)",
)
async def join_stream(
    thread_id: SessionId,
    run_id: TurnId,
    gateway: GatewayDep,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", pattern=LAST_EVENT_ID)
    ] = None,
) -> StreamingResponse:
    """The run's stream from its start, or after ``Last-Event-ID``; it closes at the
    run's end."""
    modes = modes_of(stream_mode)
    _check_modes(modes)
    info = await _turn(gateway, thread_id, run_id)
    kept = await gateway.streamed_events(thread_id, run_id)
    if info.final is not None and not kept:
        # The stream forgot the turn: its values, then the end.
        values = await thread_values(gateway, thread_id)
        gone = (
            [sse("values", values), sse("end", None)] if "values" in modes else [sse("end", None)]
        )
        return _streaming(thread_id, run_id, modes, _chunks(gone))
    return _streaming(
        thread_id, run_id, modes, _run_frames(gateway, thread_id, run_id, modes, last_event_id)
    )


async def _chunks(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def _new_thread(scope: Any) -> str:
    """A stateless run's thread: a new one (the tenant's, for a key with a prefix)."""
    thread_id = str(uuid.uuid4())
    prefix = getattr(scope, "prefix", None)
    return f"{prefix}{thread_id}" if prefix else thread_id


def _stateless(body: RunCreate) -> RunCreate:
    return body.model_copy(update={"if_not_exists": "create"})


log = logging.getLogger(__name__)

_DISCARDING: set[asyncio.Task[None]] = set()
"""The stateless threads being deleted once their runs end (a reference each, so a
task is not collected while it waits)."""


async def _discard(gateway: Gateway, thread_id: str, run_id: str, after: str | None) -> None:
    """Delete a stateless run's thread once the run has ended (not one that waits for
    a person: its thread is where it is resumed)."""
    try:
        if await _until_end(gateway, thread_id, run_id, after) is None:
            return
        for _ in range(100):
            try:
                with state_store_errors():
                    await gateway.producer.delete_session(thread_id)
                return
            except SessionBusyError:
                # The worker releases the session a moment after the final.
                await asyncio.sleep(0.1)
        log.warning("stateless thread %s: still busy, kept", thread_id)
    except Exception:
        # The run's answer stands; a thread left behind is only clutter, and says why.
        log.exception("stateless thread %s: could not be deleted", thread_id)


def _discard_later(gateway: Gateway, thread_id: str, body: RunCreate, started: Started) -> None:
    if body.on_completion == "keep":
        return
    task = asyncio.create_task(_discard(gateway, thread_id, started.run_id, started.after))
    _DISCARDING.add(task)
    task.add_done_callback(_DISCARDING.discard)


@router.post("/runs", dependencies=[listing()], summary="Create a stateless background run")
async def create_stateless_run(
    body: RunCreate, gateway: GatewayDep, scope: ScopeDep
) -> dict[str, Any]:
    """A background run on a thread made for it (deleted once the run ends, unless
    ``on_completion`` is ``keep``)."""
    thread_id, body = _new_thread(scope), _stateless(body)
    run = await create_run(thread_id, body, gateway, scope)
    _discard_later(gateway, thread_id, body, Started(run["run_id"], time.time()))
    return run


@router.post("/runs/wait", dependencies=[listing()], summary="Run statelessly and wait")
async def wait_stateless_run(body: RunCreate, gateway: GatewayDep, scope: ScopeDep) -> Any:
    """Run on a thread made for the run; its final values (the thread deleted before
    the answer, unless ``on_completion`` is ``keep``)."""
    thread_id, body = _new_thread(scope), _stateless(body)
    started = await _start(gateway, scope, thread_id, body)
    final = await _until_end(gateway, thread_id, started.run_id, started.after)
    values = await _final_values(gateway, thread_id, final)
    if body.on_completion != "keep":
        await _discard(gateway, thread_id, started.run_id, started.after)
    return values


@router.post(
    "/runs/stream",
    dependencies=[listing()],
    response_class=StreamingResponse,
    summary="Run statelessly and stream it (Server-Sent Events)",
)
async def stream_stateless_run(
    body: RunCreate, gateway: GatewayDep, scope: ScopeDep
) -> StreamingResponse:
    """Run on a thread made for the run and stream it, as ``POST
    /threads/{thread_id}/runs/stream`` (the thread deleted once the run ends, unless
    ``on_completion`` is ``keep``)."""
    thread_id, body = _new_thread(scope), _stateless(body)
    modes = modes_of(body.stream_mode)
    _check_modes(modes)
    started = await _start(gateway, scope, thread_id, body)
    body_bytes = _run_frames(gateway, thread_id, started.run_id, modes, started.after)
    return _streaming(
        thread_id,
        started.run_id,
        modes,
        _then_discard(body_bytes, gateway, thread_id, body, started),
    )


async def _then_discard(
    pieces: AsyncIterator[bytes],
    gateway: Gateway,
    thread_id: str,
    body: RunCreate,
    started: Started,
) -> AsyncIterator[bytes]:
    # Deleted after the stream, not beside it: the thread's events are what it reads.
    try:
        async for piece in pieces:
            yield piece
    finally:
        _discard_later(gateway, thread_id, body, started)
