"""Where a turn is: from Redis while its stream lives, from the state store after.

Redis holds a turn's status for ``REACTQ_SESSION_META_TTL_SECONDS`` and its events
for ``REACTQ_EVENT_TTL_SECONDS`` after the session's last one; the state database
keeps the turn's committed record and, in the audit log, its events. ``find_turn``
reads Redis first and falls back to the store when Redis forgot the turn, or
remembers that it ended but no longer holds its final. What ``Producer.turn_info``
and ``GET /v1/turns/{id}`` answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from reactq.shared.events import Event, FinalEvent, QueuedEvent, StartedEvent, parse_event
from reactq.shared.redis_client import text
from reactq.shared.state import TurnRecord
from reactq.shared.turns import TurnStatus
from reactq.shared.webhooks import WebhookStatus

if TYPE_CHECKING:
    from reactq.producer.client import Producer

__all__ = ["PendingCall", "TurnInfo", "find_turn", "summarize", "turn_session", "with_record"]

SCAN_BATCH = 500


class PendingCall(BaseModel):
    """A tool call waiting for a person's decision."""

    call_id: str
    """The call (decide it by this id)."""
    tool: str
    """The tool the model called."""
    arguments: Any
    """The call's arguments."""
    requested_at: float
    """Unix time the turn started to wait."""
    expires_at: float
    """Unix time the call counts as denied if nobody decides ("no decision in time")."""


class TurnInfo(BaseModel):
    """Where a turn is."""

    turn_id: str
    """The turn."""
    session_id: str
    """Its session."""
    status: TurnStatus
    """Its status."""
    attempt: int
    """The latest attempt seen (0 before a worker has started it)."""
    final: FinalEvent | None = None
    """Its final event, once it has ended (from the audit log once the stream expired;
    None when neither holds it)."""
    final_text: str | None = None
    """The final answer's text, once it has ended."""
    usage: dict[str, int] = Field(default_factory=dict)
    """Cumulative token usage of the turn, as its final reported it."""
    submitted_at: float | None = None
    """Unix time it was queued."""
    started_at: float | None = None
    """Unix time its first attempt started (None: it never ran)."""
    ended_at: float | None = None
    """Unix time it ended."""
    source: Literal["stream", "store"] = "stream"
    """Where this was read: the session's Redis stream, or the state store once Redis
    forgot the turn or its events."""
    pending_approvals: list[PendingCall] = Field(default_factory=list)
    """The tool calls it waits for a decision on (status ``awaiting_approval``)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """What the producer attached to it (``submit(..., metadata=...)``)."""
    config_version: str | None = None
    """A hash of the definition of the agent that ran it (None before a worker did)."""
    webhook: WebhookStatus | None = None
    """Its webhook and the delivery's attempts (None: it has none, or Redis forgot it)."""


def summarize(
    turn_id: str,
    session_id: str,
    status: TurnStatus | None,
    events: Sequence[Event],
    source: Literal["stream", "store"],
) -> TurnInfo:
    """A turn's info from its events, oldest first. Its final's status wins, then
    ``status`` (what Redis or the store recorded), then what its last event says."""
    attempt = 0
    final: FinalEvent | None = None
    submitted = started = None
    metadata: dict[str, Any] = {}
    version: str | None = None
    for event in events:
        if isinstance(event, QueuedEvent) and submitted is None:
            submitted, metadata = event.ts, dict(event.metadata)
        elif isinstance(event, StartedEvent):
            attempt = max(attempt, event.attempt)
            started = event.ts if started is None else started
            version = event.config_version or version
        elif isinstance(event, FinalEvent) and final is None:
            final, attempt = event, max(attempt, event.attempt)
            version = event.config_version or version
    if final is not None:
        status = final.status
    elif status is None:
        status = _status_of(events[-1].type if events else "queued")
    return TurnInfo(
        turn_id=turn_id,
        session_id=session_id,
        status=status,
        attempt=attempt,
        final=final,
        final_text=None if final is None else final.text,
        usage={} if final is None else dict(final.usage),
        submitted_at=submitted,
        started_at=started,
        ended_at=None if final is None else final.ts,
        source=source,
        metadata=metadata,
        config_version=version,
    )


def _status_of(last_event_type: str) -> TurnStatus:
    """What a turn's last event says of a turn not ended (no status recorded)."""
    if last_event_type == "queued":
        return TurnStatus.QUEUED
    if last_event_type == "approval_requested":
        return TurnStatus.AWAITING_APPROVAL
    return TurnStatus.RUNNING


async def _stream_events(producer: Producer, session_id: str, turn_id: str) -> list[Event]:
    """The turn's events the session's stream holds, oldest first.

    Reads the stream newest first until the turn's ``queued`` event; the stream is
    capped, so this is bounded.
    """
    key = producer.keys.events(session_id)
    newest_first: list[Event] = []
    upper = "+"
    while True:
        entries: list[Any] = await producer.redis.xrevrange(key, upper, "-", count=SCAN_BATCH) or []
        for raw_id, fields in entries:
            upper = "(" + text(raw_id)
            payload = fields.get(b"e", fields.get("e"))
            # A cheap test before parsing: most events of a busy session are other turns'.
            if payload is None or turn_id.encode() not in (
                payload if isinstance(payload, bytes) else payload.encode()
            ):
                continue
            event = parse_event(payload, event_id=text(raw_id))
            if event.turn_id != turn_id:
                continue
            newest_first.append(event)
            if event.type == "queued":
                return newest_first[::-1]
        if len(entries) < SCAN_BATCH:
            return newest_first[::-1]


async def _from_redis(producer: Producer, turn_id: str) -> TurnInfo | None:
    found = await producer.queue.turn_status(turn_id)
    if found is None:
        return None
    session_id, status = found
    events = await _stream_events(producer, session_id, turn_id)
    info = summarize(turn_id, session_id, status, events, "stream")
    if info.status.is_final:
        return info
    waiting = [
        PendingCall(
            call_id=a.call_id,
            tool=a.tool,
            arguments=a.arguments,
            requested_at=a.requested_at,
            expires_at=a.expires_at,
        )
        for a in await producer.approvals.waiting(session_id)
        if a.turn_id == turn_id
    ]
    return info.model_copy(update={"pending_approvals": waiting})


async def _from_store(producer: Producer, turn_id: str) -> TurnInfo | None:
    """The turn from its committed record and the audit log's events (a turn that
    never ran, cancelled or rejected, has no record: its events tell)."""
    record = await (await producer.state_store()).get_turn(turn_id)
    audit = await producer.audit_log()
    events = [] if audit is None else await audit.turn_events(turn_id)
    if record is None:
        if not events:
            return None
        return summarize(turn_id, events[0].session_id, None, events, "store")
    return with_record(
        summarize(turn_id, record.session_id, record.status, events, "store"), record
    )


def with_record(info: TurnInfo, record: TurnRecord) -> TurnInfo:
    """``info`` corrected by the turn's committed record: that is the turn's outcome,
    whatever its events still show."""
    return info.model_copy(
        update={
            "status": record.status,
            "attempt": max(info.attempt, record.attempt),
            "final_text": record.final_text if record.final_text is not None else info.final_text,
            "ended_at": info.ended_at if info.ended_at is not None else record.created_at,
            "metadata": record.metadata or info.metadata,
            "config_version": record.config_version or info.config_version,
        }
    )


async def find_turn(producer: Producer, turn_id: str) -> TurnInfo | None:
    """A turn's status, latest attempt, final, usage and times, or None if neither
    Redis nor the state store knows it."""
    info = await _from_redis(producer, turn_id)
    if info is None or (info.final is None and info.status.is_final):
        # Redis forgot the turn, or its stream expired (or was trimmed) past its final.
        stored = await _from_store(producer, turn_id)
        info = stored if stored is not None else info
    if info is None:
        return None
    webhook = await producer.webhooks.status(info.session_id, turn_id)
    return info if webhook is None else info.model_copy(update={"webhook": webhook})


async def turn_session(
    producer: Producer, turn_id: str, visible: Callable[[str], Awaitable[bool]]
) -> str | None:
    """The turn's session if ``visible`` lets the caller see it, else None.

    A turn the caller may not see takes the path of a turn that does not exist: one
    Redis knows is looked for in the state store, one the store knows in the audit
    log, as if neither knew it; so the three look-ups are made for a foreign turn as
    for a missing one, and neither the answer nor the work behind it tells them apart
    (the gateway's scope check, ``gateway/scopes.py``)."""
    found = await producer.queue.turn_status(turn_id)
    if found is not None and await visible(found[0]):
        return found[0]
    record = await (await producer.state_store()).get_turn(turn_id)
    if record is not None and await visible(record.session_id):
        return record.session_id
    audit = await producer.audit_log()
    events = [] if audit is None else await audit.turn_events(turn_id)
    if events and await visible(events[0].session_id):
        return events[0].session_id
    return None
