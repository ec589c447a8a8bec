"""The gateway's turn routes, every one of them (``factory.py`` mounts them under ``/v1``,
behind the API key)::

    POST /v1/sessions/{session_id}/turns  submit a turn                      202 409 413 422
    GET  /v1/turns/{turn_id}              status, attempt, final, pending approvals   404
    GET  /v1/turns/{turn_id}/events       its events: the stream's, else the audit log's  404
    POST /v1/turns/{turn_id}/cancel       ask the pool to cancel it          202 404 409
    POST /v1/turns/{turn_id}/undo         revert its file changes            200 404 409
    POST /v1/turns/{turn_id}/decisions    approve or deny waiting tool calls 200 404 409

A turn's events as one JSON document come from its session's Redis stream while that
holds the turn, else from the audit log (the long-term record), so a finished turn's
events outlive the stream's TTL; the watch page (``static/app.js``) shows a past turn
with it. A session's live events are ``routes/events.py``'s.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel

from reactq.producer.gateway.deps import (
    CallerDep,
    CallId,
    GatewayDep,
    ScopeDep,
    SessionId,
    TurnId,
)
from reactq.producer.gateway.errors import (
    ERROR_RESPONSES,
    SUBMIT_REFUSALS,
    GatewayError,
    state_store_errors,
)
from reactq.producer.gateway.models import (
    CallResult,
    CancelAccepted,
    DecisionMade,
    DecisionsAccepted,
    DecisionsRequest,
    ErrorBody,
    TurnAccepted,
    TurnCreate,
)
from reactq.producer.gateway.scopes import touches
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.errors import (
    ApprovalClosedError,
    ApprovalNotFoundError,
    ConfigError,
    DecisionConflictError,
    InvalidEditError,
)
from reactq.shared.events import Event, QueuedEvent
from reactq.shared.file_undo import NothingToUndoError, UndoError, UndoReport
from reactq.shared.protocol.approvals import DecideOutcome
from reactq.shared.protocol.outcomes import CancelOutcome
from reactq.shared.turns import TurnStatus

__all__ = ["TurnEvents", "router"]

Source = Literal["auto", "stream", "audit"]


class TurnEvents(BaseModel):
    """A turn's events, oldest first."""

    turn_id: str
    """The turn."""
    session_id: str
    """Its session."""
    source: Literal["stream", "audit"]
    """Where they were read: the session's Redis stream, or the audit log."""
    events: list[Event]
    """Every event of the turn (all attempts), in stream order."""


router = APIRouter(tags=["turns"])


@router.post(
    "/sessions/{session_id}/turns",
    dependencies=[touches(session="path.session_id", agent="body.agent", body=TurnCreate)],
    status_code=202,
    response_model=TurnAccepted,
    summary="Submit a turn",
    responses={409: ERROR_RESPONSES[409], **SUBMIT_REFUSALS, 501: ERROR_RESPONSES[501]},
)
async def submit_turn(
    session_id: SessionId, body: TurnCreate, gateway: GatewayDep, scope: ScopeDep
) -> TurnAccepted:
    """Validate and enqueue a turn; 409 when the strategy rejects it. The turn carries
    the identity of the request's key (``TurnRequest.tenant``): no field of the body
    sets it."""
    handle = await gateway.producer.submit(
        session_id,
        body.message,
        agent=body.agent,
        strategy=body.strategy,
        metadata=body.metadata,
        context=body.context,
        overrides=body.overrides,
        webhook=body.webhook,
        tenant=scope,
    )
    queued_id = handle.queued.id or "0"
    ms = int(queued_id.split("-")[0])
    # Start the stream just before the turn's ``queued`` event, so it is replayed too.
    events_url = f"/v1/sessions/{session_id}/events?turn_id={handle.turn_id}&after={max(ms - 1, 0)}"
    return TurnAccepted(
        turn_id=handle.turn_id,
        session_id=session_id,
        status=TurnStatus.QUEUED,
        events_url=events_url,
        hint=await gateway.producer.worker_hint(body.agent),
    )


@router.get(
    "/turns/{turn_id}",
    dependencies=[touches(turn="path.turn_id")],
    response_model=TurnInfo,
    summary="A turn's status",
    responses={404: ERROR_RESPONSES[404], 503: ERROR_RESPONSES[503]},
)
async def turn_info(turn_id: TurnId, gateway: GatewayDep) -> TurnInfo:
    """Status, latest attempt, final event, usage and times of a turn: from its
    session's stream while that lives, then from the state store."""
    with state_store_errors():
        info = await gateway.producer.turn_info(turn_id)
    if info is None:
        raise GatewayError("no such turn", status=404, error_code="turn_not_found")
    return info


@router.post(
    "/turns/{turn_id}/cancel",
    dependencies=[touches(turn="path.turn_id")],
    status_code=202,
    response_model=CancelAccepted,
    summary="Cancel a turn",
    responses={
        404: ERROR_RESPONSES[404],
        409: {
            "model": ErrorBody,
            "description": "The turn has finished already (``turn_finished``; ``turn_id`` "
            "names it): nothing to cancel",
        },
        501: ERROR_RESPONSES[501],
    },
)
async def cancel_turn(turn_id: TurnId, gateway: GatewayDep) -> CancelAccepted:
    """Ask the pool to cancel a queued or running turn (its final says ``cancelled``)."""
    cancel = getattr(gateway.producer, "cancel", None)
    if cancel is None:
        raise GatewayError(
            "cancellation is not available in this version of reactq",
            status=501,
            error_code="not_implemented",
        )
    result = await cancel(turn_id)
    if result.outcome is CancelOutcome.UNKNOWN or result.session_id is None:
        raise GatewayError("no such turn", status=404, error_code="turn_not_found")
    if result.outcome is CancelOutcome.ALREADY_FINISHED:
        raise GatewayError(
            f"turn {turn_id} has finished already"
            + (f" ({result.status})" if result.status else "")
            + ": nothing to cancel",
            status=409,
            error_code="turn_finished",
            turn_id=turn_id,
        )
    return CancelAccepted(
        turn_id=turn_id, session_id=result.session_id, outcome=result.outcome, status=result.status
    )


@router.post(
    "/turns/{turn_id}/undo",
    dependencies=[touches(turn="path.turn_id")],
    response_model=UndoReport,
    summary="Undo a turn's file changes",
    responses={
        404: {
            "model": ErrorBody,
            "description": "The turn changed no file, or there is no such turn "
            "(``nothing_to_undo``)",
        },
        409: {
            "model": ErrorBody,
            "description": "Nothing was reverted: a file changed since the turn changed it "
            "(``undo_conflict``, the message names it), the turn was undone already "
            "(``already_undone``) or has not finished (``undo_error``)",
        },
        503: ERROR_RESPONSES[503],
    },
)
async def undo_turn(turn_id: TurnId, gateway: GatewayDep) -> UndoReport:
    """Revert the file changes a finished turn made in its session's workspace, newest
    first, all or nothing. The gateway must mount the workspace root
    (``REACTQ_WORKSPACE_ROOT``), as the workers do."""
    try:
        with state_store_errors():
            return await gateway.producer.undo(turn_id)
    except UndoError as exc:
        status = 404 if isinstance(exc, NothingToUndoError) else 409
        raise GatewayError(exc.message, status=status, error_code=exc.code) from None


@router.post(
    "/turns/{turn_id}/decisions",
    dependencies=[touches(turn="path.turn_id")],
    response_model=DecisionsAccepted,
    summary="Approve or deny a turn's waiting tool calls",
    responses={
        404: ERROR_RESPONSES[404],
        409: ERROR_RESPONSES[409],
        422: {
            "model": ErrorBody,
            "description": "Edited arguments the tool's schema refuses (``invalid_edit``), "
            "or a body that is not a decisions request",
        },
    },
)
async def decide_turn(
    turn_id: TurnId, body: DecisionsRequest, gateway: GatewayDep, caller: CallerDep
) -> DecisionsAccepted:
    """Record decisions on the tool calls a turn waits for (all or none). 404: no such
    turn or call; 409: a call was decided already (of two racing deciders exactly one
    wins) or the turn waits for nothing.

    The decider recorded is the API key's name: a ``by`` in the body is what the
    caller says about itself, so it is kept after the key's name (``ops for alice``),
    never instead of it."""
    producer = gateway.producer
    by = _decider(caller, body.by)
    try:
        outcome = await producer.decide(
            turn_id, body.decisions, notes=body.notes, by=by, arguments=body.arguments or None
        )
    except InvalidEditError as exc:
        field = f"body.arguments.{exc.details.get('call_id', '')}"
        raise GatewayError(exc.message, status=422, error_code=exc.code, field=field) from None
    except ApprovalNotFoundError as exc:
        raise GatewayError(exc.message, status=404, error_code=exc.code) from None
    except (ApprovalClosedError, DecisionConflictError) as exc:
        raise GatewayError(exc.message, status=409, error_code=exc.code) from None
    return _accepted(turn_id, outcome)


@router.post(
    "/turns/{turn_id}/calls/{call_id}/result",
    # The call is looked up under the turn, which the key must reach.
    dependencies=[touches(turn="path.turn_id", inner=("call_id",))],
    response_model=DecisionsAccepted,
    summary="Give a waiting call's result, in place of running it",
    responses={404: ERROR_RESPONSES[404], 409: ERROR_RESPONSES[409]},
)
async def complete_call(
    turn_id: TurnId,
    call_id: CallId,
    body: CallResult,
    gateway: GatewayDep,
    caller: CallerDep,
) -> DecisionsAccepted:
    """Answer a call the turn waits for (a client tool's, or one waiting for approval)
    with ``result`` (or ``error``) as its observation; the tool does not run. 404: no
    such turn or waiting call; 409: the call was decided already or the turn waits for
    nothing. The decider recorded is the key's name, as for decisions."""
    try:
        outcome = await gateway.producer.complete_tool(
            turn_id, call_id, body.result, error=body.error, by=_decider(caller, body.by)
        )
    except ApprovalNotFoundError as exc:
        raise GatewayError(exc.message, status=404, error_code=exc.code) from None
    except (ApprovalClosedError, DecisionConflictError) as exc:
        raise GatewayError(exc.message, status=409, error_code=exc.code) from None
    return _accepted(turn_id, outcome)


def _decider(caller: str | None, claimed: str | None) -> str:
    """Who a decision is recorded as: the API key's name, the body's ``by`` after it."""
    if caller is None:
        return claimed or "gateway"
    return f"{caller} for {claimed}" if claimed else caller


def _accepted(turn_id: str, outcome: DecideOutcome) -> DecisionsAccepted:
    return DecisionsAccepted(
        turn_id=turn_id,
        session_id=outcome.session_id,
        decided=[
            DecisionMade(
                call_id=d.call_id,
                approved=d.approved,
                reason=d.reason,
                by=d.by,
                arguments=d.arguments,
            )
            for d in outcome.decided
        ],
        ready=outcome.ready,
    )


@router.get(
    "/turns/{turn_id}/events",
    dependencies=[touches(turn="path.turn_id")],
    response_model=TurnEvents,
    summary="A turn's events (from the stream, or the audit log once it expired)",
    responses={
        404: {"model": ErrorBody, "description": "No such turn (``turn_not_found``)"},
        501: {
            "model": ErrorBody,
            "description": "The audit log needs a SQL state store (``not_implemented``)",
        },
    },
)
async def turn_events(
    turn_id: TurnId,
    gateway: GatewayDep,
    source: Annotated[
        Source,
        Query(
            description="``stream``: the session's Redis stream; ``audit``: the audit log; "
            "``auto`` (default): the stream while it holds the turn from its ``queued``, "
            "else the audit log"
        ),
    ] = "auto",
) -> TurnEvents:
    """Every event of the turn, oldest first, and where they were read."""
    producer = gateway.producer
    with state_store_errors():
        info = await producer.turn_info(turn_id)
        if info is None:
            raise GatewayError("no such turn", status=404, error_code="turn_not_found")
        if source != "audit":
            live = await gateway.streamed_events(info.session_id, turn_id)
            whole = any(isinstance(e, QueuedEvent) for e in live)
            if source == "stream" or whole:
                return TurnEvents(
                    turn_id=turn_id, session_id=info.session_id, source="stream", events=live
                )
        try:
            kept = await producer.turn_events(turn_id)
        except ConfigError as exc:
            raise GatewayError(exc.message, status=501, error_code="not_implemented") from None
    return TurnEvents(turn_id=turn_id, session_id=info.session_id, source="audit", events=kept)
