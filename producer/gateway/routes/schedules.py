"""The gateway's schedule routes: scheduled turns, fired by ``reactq beat``.
``factory.py`` mounts them under ``/v1``, behind the API key::

    POST   /v1/schedules                      add one                201 404 409 413 422
    GET    /v1/schedules?session_id=          list them, oldest first
    GET    /v1/schedules/{id}                 one                    404
    POST   /v1/schedules/{id}/pause           stop it firing         404
    POST   /v1/schedules/{id}/resume          fire again from its next tick  404
    DELETE /v1/schedules/{id}                 remove it              204 404

An interval under REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS (or a cron expression whose ticks
come closer) answers 422 ``schedule_too_frequent``. A tenant (a scoped key's session
prefix; for a key without one, the whole namespace) may have
REACTQ_MAX_SCHEDULES_PER_TENANT schedules: one more answers 409 ``too_many_schedules``
(409, not 429: waiting does not help, removing a schedule does).

A key scoped to a tenant sees and touches only the schedules of its sessions (and,
with ``agents=``, of its agents): the others answer 404 ``schedule_not_found`` as if
they did not exist, and adding one to a session outside its reach answers 404
``session_not_found`` (``scopes.py``); a read-only key gets 403 on every write.
A schedule keeps the identity of the key that added it, and every turn it fires
carries that identity (``Schedule.tenant``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from reactq.producer.gateway.deps import GatewayDep, ScheduleId, ScopeDep, only_query
from reactq.producer.gateway.errors import GatewayError, state_store_errors
from reactq.producer.gateway.models import AGENT_PATTERN, ErrorBody
from reactq.producer.gateway.scopes import listing, touches
from reactq.producer.gateway.security import KeyScope
from reactq.shared.errors import (
    AgentMismatchError,
    EmptyMessageError,
    InvalidMessageError,
    InvalidMetadataError,
    InvalidScheduleError,
    InvalidSessionIdError,
    MessageTooLargeError,
    ScheduleNotFoundError,
    TooManySchedulesError,
    UnknownAgentError,
)
from reactq.shared.schedules import Schedule
from reactq.shared.turns import SESSION_ID_RE

__all__ = ["router"]


class ScheduleCreate(BaseModel):
    """A scheduled turn to add: exactly one of ``cron`` and ``every``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    # The producer checks the id's rules (422 ``invalid_session_id``, ``body.session_id``).
    session_id: str = Field(max_length=200)
    """The session its turns run in."""
    agent: str = Field(pattern=AGENT_PATTERN)
    """The agent that runs them: one a worker of the pool hosts (else 422)."""
    message: str
    """The user message of each turn (not blank, at most REACTQ_MAX_MESSAGE_BYTES)."""
    cron: str | None = Field(None, max_length=200)
    """Five cron fields, evaluated in UTC: ``"0 9 * * 1-5"`` (else 422 ``invalid_schedule``)."""
    every: int | None = None
    """Or: seconds between ticks, counted from now (a whole number from
    REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS, 60 by default, to 2147483647)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Kept on each turn it submits, beside ``schedule_id`` and ``scheduled_for``."""
    fresh_sessions: bool = False
    """Each tick's turn in a new session, ``{session_id}-{tick}`` (``session_id`` then
    their common prefix)."""


class ScheduleList(BaseModel):
    """Schedules, oldest first."""

    schedules: list[Schedule]
    """The schedules the key may see."""


_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such schedule (``schedule_not_found``)"}
}

# The producer's refusals -> (HTTP status, the field at fault).
_REFUSALS: list[tuple[type[Exception], int, str | None]] = [
    (InvalidSessionIdError, 422, "body.session_id"),
    (InvalidScheduleError, 422, None),
    (EmptyMessageError, 422, "body.message"),
    (MessageTooLargeError, 413, "body.message"),
    (InvalidMessageError, 422, "body.message"),
    (InvalidMetadataError, 422, "body.metadata"),
    (UnknownAgentError, 422, "body.agent"),
    (AgentMismatchError, 409, "body.agent"),
    (TooManySchedulesError, 409, None),
    (ScheduleNotFoundError, 404, None),
]


@contextlib.contextmanager
def _answers(body: ScheduleCreate | None = None) -> Iterator[None]:
    """The producer's refusals as the gateway's error bodies."""
    try:
        with state_store_errors():
            yield
    except tuple(cls for cls, _, _ in _REFUSALS) as exc:
        status, field = next((s, f) for cls, s, f in _REFUSALS if isinstance(exc, cls))
        if isinstance(exc, InvalidScheduleError) and body is not None:
            field = "body.cron" if body.cron is not None else "body.every"
        code, message = getattr(exc, "code", "invalid_request"), getattr(exc, "message", "")
        raise GatewayError(message, status=status, error_code=code, field=field) from None


router = APIRouter(tags=["schedules"])
# Every route but the listing takes no query parameter.
_NO_QUERY = only_query()
_ONE = [touches(schedule="path.schedule_id"), _NO_QUERY]


def _hidden(schedule_id: str) -> GatewayError:
    return GatewayError(
        f"no schedule {schedule_id!r}", status=404, error_code=ScheduleNotFoundError.code
    )


def _sees(scope: KeyScope | None, schedule: Schedule) -> bool:
    """The guard's rule (``Touches.SCHEDULE``), for a listing."""
    return scope is None or (
        scope.sees_session(schedule.session_id) and scope.may_run(schedule.agent)
    )


@router.post(
    "/schedules",
    status_code=201,
    response_model=Schedule,
    summary="Add a scheduled turn",
    dependencies=[
        touches(session="body.session_id", agent="body.agent", body=ScheduleCreate),
        _NO_QUERY,
    ],
    responses={
        404: {
            "model": ErrorBody,
            "description": "A session outside the key's tenant (``session_not_found``)",
        },
        409: {
            "model": ErrorBody,
            "description": "The session is another agent's (``agent_mismatch``), or the "
            "tenant has REACTQ_MAX_SCHEDULES_PER_TENANT schedules (``too_many_schedules``)",
        },
        413: {
            "model": ErrorBody,
            "description": "The message is over REACTQ_MAX_MESSAGE_BYTES (``body.message``)",
        },
        422: {
            "model": ErrorBody,
            "description": "Invalid input, including input the schema allows but the pool "
            "refuses: a cron expression that is not five valid fields or never fires, or "
            "an interval outside 1..2147483647 s, or both or neither (``invalid_schedule``, "
            "``body.cron`` / ``body.every``), ticks closer than "
            "REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS (``schedule_too_frequent``), a session id "
            "outside [A-Za-z0-9._:-]{1,128} "
            "(``invalid_session_id``), an agent no worker hosts (``unknown_agent``), an "
            "empty message (``empty_message``); ``field`` says which",
        },
    },
)
async def add_schedule(body: ScheduleCreate, gateway: GatewayDep, scope: ScopeDep) -> Schedule:
    """Store a schedule; ``reactq beat`` submits its turn at each tick, with the identity
    of the key that added it."""
    with _answers(body):
        return await gateway.producer.add_schedule(
            body.session_id,
            body.message,
            agent=body.agent,
            cron=body.cron,
            every=body.every,
            metadata=body.metadata,
            tenant=scope,
            fresh_sessions=body.fresh_sessions,
        )


@router.get(
    "/schedules",
    response_model=ScheduleList,
    summary="List scheduled turns",
    dependencies=[listing(), only_query("session_id")],
)
async def list_schedules(
    gateway: GatewayDep,
    scope: ScopeDep,
    session_id: Annotated[
        str | None, Query(pattern=SESSION_ID_RE.pattern, description="Only this session's")
    ] = None,
) -> ScheduleList:
    """Every schedule the key may see (of one session, when given), oldest first."""
    with _answers():
        found = await gateway.producer.list_schedules(session_id)
    return ScheduleList(schedules=[s for s in found if _sees(scope, s)])


@router.get(
    "/schedules/{schedule_id}",
    response_model=Schedule,
    summary="A scheduled turn",
    dependencies=_ONE,
    responses=_NOT_FOUND,
)
async def get_schedule(schedule_id: ScheduleId, gateway: GatewayDep) -> Schedule:
    """Its timing, whether it is paused, the tick it last fired for and its last turn
    (or why that firing submitted nothing)."""
    with _answers():
        found = await gateway.producer.get_schedule(schedule_id)
    if found is None:
        raise _hidden(schedule_id)
    return found


@router.post(
    "/schedules/{schedule_id}/pause",
    response_model=Schedule,
    summary="Pause a scheduled turn",
    dependencies=_ONE,
    responses=_NOT_FOUND,
)
async def pause_schedule(schedule_id: ScheduleId, gateway: GatewayDep) -> Schedule:
    """It fires nothing until resumed."""
    with _answers():
        return await gateway.producer.pause_schedule(schedule_id)


@router.post(
    "/schedules/{schedule_id}/resume",
    response_model=Schedule,
    summary="Resume a scheduled turn",
    dependencies=_ONE,
    responses=_NOT_FOUND,
)
async def resume_schedule(schedule_id: ScheduleId, gateway: GatewayDep) -> Schedule:
    """It fires again from its next tick (the ticks missed while paused are not made up)."""
    with _answers():
        return await gateway.producer.resume_schedule(schedule_id)


@router.delete(
    "/schedules/{schedule_id}",
    status_code=204,
    response_class=Response,
    summary="Remove a scheduled turn",
    dependencies=_ONE,
    responses=_NOT_FOUND,
)
async def delete_schedule(schedule_id: ScheduleId, gateway: GatewayDep) -> Response:
    """Remove it; the turns it submitted stay."""
    with _answers():
        await gateway.producer.delete_schedule(schedule_id)
    return Response(status_code=204)
