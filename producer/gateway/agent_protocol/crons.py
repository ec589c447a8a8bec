"""The Agent Protocol's crons over reactq's schedules (see the package's docstring)::

    POST   /threads/{thread_id}/runs/crons   a run on the thread at each tick   404 409 422
    POST   /runs/crons                       "stateless": each tick on a new thread
    POST   /runs/crons/search                by assistant_id, thread_id, enabled; limit, offset
    POST   /runs/crons/count                 how many the same filters match
    PATCH  /runs/crons/{cron_id}             enabled: pause or resume it (else 422)  404
    DELETE /runs/crons/{cron_id}             remove it                          404

A cron is a reactq schedule (``cron_id`` = its ``schedule_id``), fired by ``reactq
beat``: each tick submits the cron's input (its last human message) as a turn. What
differs from LangGraph's server: a stateless cron's threads are
``{prefix}-{tick}`` (the prefix a new UUID, the tenant's for a key with one) and are
kept after their runs (``on_run_completed`` is ignored);
``schedule`` is evaluated in UTC (another ``timezone`` is refused); ``end_time``,
``config``, ``context``, ``webhook`` and interrupts are not supported (``end_time`` is
refused, the others ignored). A tenant's key reaches its sessions' crons only, as on
``/v1/schedules``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from reactq.producer.gateway.agent_protocol.assistants import assistant_id_of, choose
from reactq.producer.gateway.deps import GatewayDep, ScheduleId, ScopeDep, SessionId
from reactq.producer.gateway.errors import GatewayError, state_store_errors
from reactq.producer.gateway.models import ErrorBody
from reactq.producer.gateway.scopes import listing, touches
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
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
from reactq.shared.schedules import Schedule, next_tick
from reactq.shared.turns import SESSION_ID_RE

__all__ = ["Cron", "router"]

router = APIRouter(tags=["agent-protocol: crons"])


class CronCreate(BaseModel):
    """``POST /threads/{thread_id}/runs/crons`` and ``POST /runs/crons``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    schedule: str = Field(max_length=200)
    """Five cron fields, evaluated in UTC: ``"0 9 * * 1-5"``."""
    assistant_id: str = Field(max_length=200)
    """The assistant (its UUID or graph id) each run goes to."""
    input: dict[str, Any] | None = None
    """``{"messages": [...]}``: the last human message is each run's message."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Kept on the cron and on each run."""
    timezone: str | None = None
    """``UTC`` (or none): reactq evaluates schedules in UTC."""
    end_time: str | None = None
    """Not supported: refused when given."""
    enabled: bool = True
    """False adds it paused."""


class CronCount(BaseModel):
    """``POST /runs/crons/count``'s filters (and the search's)."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    assistant_id: str | None = None
    """Only the crons of this assistant (UUID or graph id)."""
    thread_id: str | None = Field(None, pattern=SESSION_ID_RE.pattern)
    """Only the crons of this thread."""
    enabled: bool | None = None
    """Only the enabled (or the paused) ones."""
    metadata: dict[str, Any] | None = None
    """Only the crons whose metadata holds each of these pairs."""


class CronUpdate(BaseModel):
    """``PATCH /runs/crons/{cron_id}``: only ``enabled`` can change."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    enabled: bool | None = None
    """False pauses it, True resumes it (from its next tick)."""


class CronSearch(CronCount):
    """``POST /runs/crons/search``: the count's filters, a page at a time."""

    limit: int = Field(10, ge=1, le=1000)
    """Crons a page."""
    offset: int = Field(0, ge=0)
    """Crons to skip."""


class Cron(BaseModel):
    """A cron as LangGraph's SDK reads it (``langgraph_sdk.schema.Cron``)."""

    cron_id: str
    """The schedule's id."""
    assistant_id: str
    """The assistant's UUID."""
    thread_id: str | None
    """The thread (session) its runs go to."""
    schedule: str
    """Its cron expression (UTC)."""
    timezone: str = "UTC"
    """Always UTC."""
    end_time: datetime | None = None
    """None: a cron runs until deleted."""
    on_run_completed: str | None = None
    """None: its thread is kept."""
    payload: dict[str, Any]
    """What each run is made of: ``assistant_id``, ``input``, ``metadata``."""
    metadata: dict[str, Any]
    """Its metadata."""
    enabled: bool
    """False while paused."""
    user_id: str | None = None
    """The API key that added it."""
    next_run_date: datetime | None = None
    """Its next tick."""
    created_at: datetime
    """When it was added."""
    updated_at: datetime
    """The same, or its last tick."""


# The producer's refusals -> (HTTP status, the field at fault).
_REFUSALS: dict[type[Exception], tuple[int, str | None]] = {
    InvalidSessionIdError: (422, "path.thread_id"),
    InvalidScheduleError: (422, "body.schedule"),
    EmptyMessageError: (422, "body.input"),
    MessageTooLargeError: (413, "body.input"),
    InvalidMessageError: (422, "body.input"),
    InvalidMetadataError: (422, "body.metadata"),
    UnknownAgentError: (404, "body.assistant_id"),
    AgentMismatchError: (409, "body.assistant_id"),
    TooManySchedulesError: (409, None),
    ScheduleNotFoundError: (404, None),
}


@contextlib.contextmanager
def _answers() -> Iterator[None]:
    """The producer's refusals as the gateway's error bodies."""
    try:
        with state_store_errors():
            yield
    except tuple(_REFUSALS) as exc:
        # The most specific class first: ScheduleTooFrequentError is an InvalidScheduleError.
        status, at = next(_REFUSALS[c] for c in type(exc).__mro__ if c in _REFUSALS)
        code = getattr(exc, "code", "invalid_request")
        raise GatewayError(
            getattr(exc, "message", ""), status=status, error_code=code, field=at
        ) from None


def _refused(message: str, at: str) -> GatewayError:
    return GatewayError(message, status=422, error_code="invalid_request", field=at)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        ]
        return "".join(str(p) for p in parts)
    return ""


def message_of(input: dict[str, Any] | None) -> str:
    """The last human message of a run's ``input`` (``{"messages": [...]}``, each a
    LangChain message: ``type`` ``human`` or ``role`` ``user``); 422 when it has none."""
    messages = (input or {}).get("messages")
    if isinstance(messages, dict | str):
        messages = [messages]
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, str):
            return message
        if isinstance(message, dict) and (
            message.get("type") == "human" or message.get("role") in ("user", "human")
        ):
            return _text(message.get("content"))
    raise _refused(
        'input has no human message: give {"messages": [{"role": "user", ...}]}', "body.input"
    )


def _stamp(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


def _cron(namespace: str, schedule: Schedule) -> Cron:
    created = _stamp(schedule.created_at) or datetime.fromtimestamp(0, tz=UTC)
    assistant = assistant_id_of(namespace, schedule.agent)
    return Cron(
        cron_id=schedule.schedule_id,
        assistant_id=assistant,
        thread_id=None if schedule.fresh_sessions else schedule.session_id,
        schedule=schedule.spec,
        payload={
            "assistant_id": assistant,
            "input": {"messages": [{"type": "human", "content": schedule.message}]},
            "metadata": schedule.metadata,
        },
        metadata=schedule.metadata,
        enabled=not schedule.paused,
        user_id=schedule.tenant.name if schedule.tenant is not None else None,
        next_run_date=_stamp(next_tick(schedule, datetime.now(UTC).timestamp())),
        created_at=created,
        updated_at=_stamp(schedule.last_run_at) or created,
    )


async def _add(
    gateway: Gateway,
    scope: KeyScope | None,
    thread_id: str,
    body: CronCreate,
    *,
    fresh_sessions: bool = False,
) -> Cron:
    # An assistant nobody hosts (or outside the key's agents) first, as a missing one.
    agent = (await choose(gateway, body.assistant_id)).agent
    hosted = await gateway.producer.registry.agent_profile(agent) is not None
    if not hosted or (scope is not None and not scope.may_run(agent)):
        raise GatewayError(
            f"no assistant {body.assistant_id!r}",
            status=404,
            error_code="assistant_not_found",
            field="body.assistant_id",
        )
    if body.timezone not in (None, "UTC", "Etc/UTC"):
        raise _refused(f"timezone {body.timezone!r:.60}: schedules run in UTC", "body.timezone")
    if body.end_time is not None:
        raise _refused("end_time is not supported: delete the cron instead", "body.end_time")
    message = message_of(body.input)
    with _answers():
        added = await gateway.producer.add_schedule(
            thread_id,
            message,
            agent=agent,
            cron=body.schedule,
            metadata=body.metadata,
            tenant=scope,
            fresh_sessions=fresh_sessions,
        )
        if not body.enabled:
            added = await gateway.producer.pause_schedule(added.schedule_id)
    return _cron(gateway.settings.namespace, added)


_CREATED: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "Another agent's thread, or too many schedules"},
    422: {"model": ErrorBody, "description": "A bad schedule, input or assistant"},
}


@router.post(
    "/threads/{thread_id}/runs/crons",
    response_model=Cron,
    responses=_CREATED,
    dependencies=[touches(session="path.thread_id")],
)
async def create_thread_cron(
    thread_id: SessionId, body: CronCreate, gateway: GatewayDep, scope: ScopeDep
) -> Cron:
    """A run of the input on the thread at each tick of the schedule (``reactq beat``
    fires it)."""
    return await _add(gateway, scope, thread_id, body)


@router.post("/runs/crons", response_model=Cron, responses=_CREATED, dependencies=[listing()])
async def create_cron(body: CronCreate, gateway: GatewayDep, scope: ScopeDep) -> Cron:
    """A "stateless" cron: each tick's run on a new thread (``{prefix}-{tick}``, the
    prefix a new UUID, the tenant's for a key with one)."""
    prefix = scope.prefix if scope is not None and scope.prefix is not None else ""
    return await _add(gateway, scope, f"{prefix}{uuid.uuid4()}", body, fresh_sessions=True)


async def _matching(gateway: Gateway, scope: KeyScope | None, body: CronCount) -> list[Schedule]:
    """The schedules the key may see that the filters keep, oldest first."""
    agent = None
    if body.assistant_id is not None:
        agent = (await choose(gateway, body.assistant_id)).agent
    with _answers():
        found = await gateway.producer.list_schedules(body.thread_id)
    return [
        s
        for s in found
        if (scope is None or (scope.sees_session(s.session_id) and scope.may_run(s.agent)))
        and (agent is None or s.agent == agent)
        and (body.enabled is None or body.enabled != s.paused)
        and all(s.metadata.get(k) == v for k, v in (body.metadata or {}).items())
    ]


@router.post("/runs/crons/search", response_model=list[Cron], dependencies=[listing()])
async def search_crons(body: CronSearch, gateway: GatewayDep, scope: ScopeDep) -> list[Cron]:
    """The crons the key may see, oldest first, filtered, a page at a time."""
    kept = await _matching(gateway, scope, body)
    namespace = gateway.settings.namespace
    return [_cron(namespace, s) for s in kept[body.offset : body.offset + body.limit]]


@router.post("/runs/crons/count", response_model=int, dependencies=[listing()])
async def count_crons(body: CronCount, gateway: GatewayDep, scope: ScopeDep) -> int:
    """How many crons the key may see match the filters."""
    return len(await _matching(gateway, scope, body))


@router.patch(
    "/runs/crons/{cron_id}",
    response_model=Cron,
    responses={
        404: {"model": ErrorBody, "description": "No such cron (``schedule_not_found``)"},
        422: {"model": ErrorBody, "description": "A change other than ``enabled``"},
    },
    dependencies=[touches(schedule="path.cron_id")],
)
async def update_cron(cron_id: ScheduleId, body: CronUpdate, gateway: GatewayDep) -> Cron:
    """Pause (``enabled: false``) or resume (``true``) the cron; any other change is
    refused (422): delete it and create another."""
    with _answers():
        found = await gateway.producer.get_schedule(cron_id)
    if found is None:
        raise GatewayError(
            f"no schedule {cron_id!r}", status=404, error_code=ScheduleNotFoundError.code
        )
    other = sorted(k for k, v in (body.model_extra or {}).items() if v is not None)
    if other:
        raise _refused(
            f"only 'enabled' can change ({', '.join(other)[:80]} cannot): delete the cron "
            "and create another",
            f"body.{other[0]}",
        )
    if body.enabled is not None:
        with _answers():
            found = await (
                gateway.producer.resume_schedule(cron_id)
                if body.enabled
                else gateway.producer.pause_schedule(cron_id)
            )
    return _cron(gateway.settings.namespace, found)


@router.delete(
    "/runs/crons/{cron_id}",
    status_code=204,
    response_class=Response,
    responses={404: {"model": ErrorBody, "description": "No such cron (``schedule_not_found``)"}},
    dependencies=[touches(schedule="path.cron_id")],
)
async def delete_cron(cron_id: ScheduleId, gateway: GatewayDep) -> Response:
    """Remove the cron; the runs it made stay."""
    with _answers():
        await gateway.producer.delete_schedule(cron_id)
    return Response(status_code=204)
