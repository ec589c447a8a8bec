"""The audit log: every event of every turn, kept after the Redis stream has expired.

Redis holds the live tail of a session's events (capped, with a TTL); the audit
sink is the long-term record (docs/architecture.md, "Events"). ``AuditedBus``
wraps an EventBus so that every published event is also recorded; ``SqlAuditSink``
(``shared/state/sql/audit.py``) writes the ``audit_events`` table in the state
database (so a SQL state store brings its audit log with it), ``MemoryAuditSink``
keeps them in a list for tests and the embedded mode. Read a run back with
``turn_events(turn_id)``: in stream order, whichever process recorded which event
(the producer records what it publishes, the workers the rest), each event once.
Rows the database cannot take while it is away wait in Redis
(``shared/audit_spill.py``) instead of being dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from pydantic_core import PydanticSerializationError

from reactq.shared.bus import EventBus, Guard, parse_stream_id, publish_all
from reactq.shared.errors import ConfigError, InvalidStreamIdError
from reactq.shared.events import BaseEvent, Event, parse_event
from reactq.shared.state.backends import AuditOptions, find_backend, find_backend_of
from reactq.shared.state.base import StateStore
from reactq.shared.state.outage import is_outage

if TYPE_CHECKING:
    from reactq.shared.audit_spill import AuditSpill

__all__ = [  # noqa: RUF022 - grouped, not sorted (STYLE.md)
    # the seam
    "AuditSink",
    "AuditedBus",
    # sinks
    "DeferredAuditSink",
    "MemoryAuditSink",
    "audit_sink_for",
    "open_audit_sink",
    "audit_row",
    # reading and repairing
    "backfill",
    "in_stream_order",
]

log = logging.getLogger("reactq.audit")
E = TypeVar("E", bound=BaseEvent)


@runtime_checkable
class AuditSink(Protocol):
    """Where the audit log is written and read back."""

    async def record(self, event: BaseEvent) -> None:
        """Keep one published event (with its stream ``id``)."""
        ...

    async def turn_events(self, turn_id: str) -> list[Event]:
        """Every recorded event of a turn, all attempts, in stream order, each once."""
        ...

    async def session_events(
        self, session_id: str, types: Collection[str] | None = None
    ) -> list[Event]:
        """The recorded events of a session (those of ``types`` only, when given), in
        stream order, each once."""
        ...

    async def close(self) -> None:
        """Release what the sink holds."""
        ...


class AuditedBus:
    """An EventBus that records every event it publishes into an AuditSink.

    Publishing comes first (subscribers must not wait on the audit database); a
    sink failure is logged and the event stays published, unless ``strict``, in
    which case it is raised to the publisher.
    """

    def __init__(
        self, bus: EventBus, sink: AuditSink, *, strict: bool = False, close_sink: bool = True
    ) -> None:
        self.bus = bus
        self.sink = sink
        self.strict = strict
        self.close_sink = close_sink

    async def publish(self, event: E) -> E:
        """Publish to the bus, then record; returns the published event."""
        published = await self.bus.publish(event)
        await self._record(published)
        return published

    async def _record(self, published: BaseEvent) -> None:
        try:
            await self.sink.record(published)
        except asyncio.CancelledError:
            raise
        except Exception:
            if self.strict:
                raise
            log.exception(
                "audit: could not record %s event %s of turn %s",
                published.type,  # type: ignore[attr-defined]
                published.id,
                published.turn_id,
            )

    async def publish_many(self, events: Sequence[E], guard: Guard | None = None) -> list[E] | None:
        """Publish several events in order (in one call when the bus can; under
        ``guard``, a final's or a step checkpoint's, the bus must), then record them;
        None when the guard failed (nothing published, nothing recorded)."""
        published = await publish_all(self.bus, events, guard)
        for event in published or ():
            await self._record(event)
        return published

    def subscribe(self, session_id: str, after: str | None = None) -> AsyncIterator[Event]:
        """The wrapped bus's subscription."""
        return self.bus.subscribe(session_id, after=after)

    async def read(
        self, session_id: str, after: str = "0", count: int | None = None
    ) -> list[Event]:
        """The wrapped bus's stored events."""
        return await self.bus.read(session_id, after=after, count=count)

    async def close(self) -> None:
        """Close the bus, and the sink if this wrapper owns it."""
        try:
            await self.bus.close()
        finally:
            if self.close_sink:
                await self.sink.close()


class MemoryAuditSink:
    """The audit log in a list (tests, the embedded mode)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def record(self, event: BaseEvent) -> None:
        """Keep a copy of the event."""
        self.events.append(parse_event(_payload(event)))

    async def turn_events(self, turn_id: str) -> list[Event]:
        """Every recorded event of a turn, in stream order, each once."""
        return in_stream_order(e for e in self.events if e.turn_id == turn_id)

    async def session_events(
        self, session_id: str, types: Collection[str] | None = None
    ) -> list[Event]:
        """The recorded events of a session (of ``types``), in stream order, each once."""
        return in_stream_order(
            e
            for e in self.events
            if e.session_id == session_id and (types is None or e.type in types)
        )

    async def close(self) -> None:
        """Nothing to release."""


class DeferredAuditSink:
    """An AuditSink opened on first use by ``opener`` (which returns None when there is
    no audit log to write: nothing is recorded then).

    What a producer records through: its state store opens lazily, and a producer
    that never publishes never opens it.
    """

    def __init__(
        self,
        opener: Callable[[], Awaitable[AuditSink | None]],
        spill: AuditSpill | None = None,
    ) -> None:
        """``spill``: where an event waits when the sink cannot be opened because the
        database is away (a producer started during an outage)."""
        self.opener = opener
        self.spill = spill

    async def record(self, event: BaseEvent) -> None:
        """Record through the opened sink, if there is one."""
        try:
            sink = await self.opener()
        except Exception as exc:
            if self.spill is None or not is_outage(exc):
                raise
            await self.spill.hold([audit_row(event)])
            return
        if sink is not None:
            await sink.record(event)

    async def turn_events(self, turn_id: str) -> list[Event]:
        """The opened sink's events of the turn ([] without a sink)."""
        sink = await self.opener()
        return [] if sink is None else await sink.turn_events(turn_id)

    async def session_events(
        self, session_id: str, types: Collection[str] | None = None
    ) -> list[Event]:
        """The opened sink's events of the session ([] without a sink)."""
        sink = await self.opener()
        return [] if sink is None else await sink.session_events(session_id, types)

    async def close(self) -> None:
        """Nothing: whoever owns the opener closes what it opened."""


def audit_sink_for(
    store: StateStore,
    *,
    batch: bool = True,
    linger: float = 0.0,
    spill: AuditSpill | None = None,
) -> AuditSink | None:
    """A sink writing to ``store``'s database (sharing its engine), or None when the
    store's backend keeps no audit log (only SQL does: the audit log needs a database
    that can hold it; ``shared/state/backends.py``). ``batch``, ``linger`` and
    ``spill`` as for SqlAuditSink (``shared/state/sql/audit.py``)."""
    backend = find_backend_of(store)
    if backend is None or backend.audit_sink is None:
        return None
    return backend.audit_sink(store, AuditOptions(batch=batch, linger=linger, spill=spill))


def audit_row(event: BaseEvent) -> dict[str, Any]:
    """The ``audit_events`` row of a published event."""
    return {
        "session_id": event.session_id,
        "turn_id": event.turn_id,
        "attempt": event.attempt,
        "seq": event.seq,
        "type": str(getattr(event, "type", "")),
        "event_id": event.id,
        "payload": _payload(event),
        "ts": event.ts,
        "recorded_at": time.time(),
    }


async def open_audit_sink(url: str, **kwargs: Any) -> AuditSink:
    """A sink for a database URL (``sqlite+aiosqlite://``, ``postgresql+asyncpg://``;
    its schema migrated as the state store's is) or ``memory://``."""
    backend = find_backend(url)
    if backend is not None and backend.open_audit_sink is not None:
        return await backend.open_audit_sink(url, kwargs)
    scheme = url.partition("://")[0]
    raise ConfigError(
        f"no audit log for a {scheme!r} URL: the audit log lives in a SQL database "
        "(sqlite+aiosqlite:// or postgresql+asyncpg://)"
    )


def _payload(event: BaseEvent) -> str:
    # pydantic's own encoder, several times faster than json.dumps of a dump. It
    # refuses a lone surrogate in model text (UTF-8 cannot carry one): then
    # ensure_ascii makes it a JSON escape, which every database stores and
    # parse_event reads back.
    try:
        return event.model_dump_json()
    except PydanticSerializationError:
        return json.dumps(event.model_dump(mode="json"), ensure_ascii=True, separators=(",", ":"))


# After every stream id: where an event recorded without a valid one (never published) sorts.
_LAST = (2**64, 0)


def _stream_position(event: BaseEvent) -> tuple[int, int]:
    try:
        return parse_stream_id(event.id) if event.id is not None else _LAST
    except InvalidStreamIdError:
        return _LAST


def in_stream_order(events: Iterable[Event]) -> list[Event]:
    """``events`` (one session's) in the order of their stream ids, each id once.

    The producer and the workers record into the audit log from separate processes,
    in batches: the order rows were written in is not the order of the stream.
    """
    seen: set[str] = set()
    unique: list[Event] = []
    for event in events:
        if event.id is not None:
            if event.id in seen:
                continue
            seen.add(event.id)
        unique.append(event)
    return sorted(unique, key=_stream_position)


async def backfill(bus: EventBus, session_id: str, turn_id: str) -> int:
    """Record the turn's events that its session's stream holds and the audit log lacks;
    returns how many. A no-op unless ``bus`` is an AuditedBus.

    A worker killed mid-turn takes with it the rows it had not written yet: the worker
    that re-runs the turn calls this before its attempt begins.
    """
    if not isinstance(bus, AuditedBus):
        return 0
    stream = [e for e in await bus.read(session_id, after="0") if e.turn_id == turn_id]
    recorded = {e.id for e in await bus.sink.turn_events(turn_id)}
    missing = [e for e in stream if e.id not in recorded]
    for event in missing:
        await bus.sink.record(event)
    return len(missing)
