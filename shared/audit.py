"""The audit log: every event of every turn, kept after the Redis stream has expired.

Redis holds the live tail of a session's events (capped, with a TTL); the audit
sink is the long-term record (docs/architecture.md, "Events"). ``AuditedBus``
wraps an EventBus so that every published event is also recorded; ``SqlAuditSink`` writes the
``audit_events`` table in the state database (so a SQL state store brings its
audit log with it), ``MemoryAuditSink`` keeps them in a list for tests and the
embedded mode. Read a run back with ``turn_events(turn_id)``: in stream order,
whichever process recorded which event (the producer records what it publishes,
the workers the rest), each event once. Rows the database cannot take while it is
away wait in Redis (``shared/audit_spill.py``) instead of being dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from pydantic_core import PydanticSerializationError
from sqlalchemy import select
from sqlalchemy.engine import Connection

from reactq.shared.bus import EventBus, Guard, parse_stream_id, publish_all
from reactq.shared.errors import ConfigError, InvalidStreamIdError
from reactq.shared.events import BaseEvent, Event, parse_event
from reactq.shared.state import open_store
from reactq.shared.state.base import StateStore
from reactq.shared.state.outage import is_outage
from reactq.shared.state.sql import SqlStateStore
from reactq.shared.state.sql_bulk import insert_many
from reactq.shared.state.sql_schema import audit_events

if TYPE_CHECKING:
    from reactq.shared.audit_spill import AuditSpill

__all__ = [  # noqa: RUF022 - grouped, not sorted (STYLE.md)
    # the seam
    "AuditSink",
    "AuditedBus",
    # sinks
    "DeferredAuditSink",
    "MemoryAuditSink",
    "SqlAuditSink",
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


class SqlAuditSink:
    """The audit log in the state database's ``audit_events`` table.

    ``SqlAuditSink(store)`` shares a SqlStateStore's engine (the store stays the
    owner); ``owns_store=True`` closes the store with the sink.

    Rows are written in batches: ``record`` queues the row and one background
    flush writes everything queued in one transaction, so a busy worker does not
    pay a database transaction per event. ``batch=False`` writes each row before
    ``record`` returns (what ``AuditedBus(strict=True)`` callers want).

    ``linger`` (seconds): a flush waits that long for more rows, unless a turn's
    ``final`` comes first, which is written at once with everything queued before
    it. A worker lingers: a turn's events then cost one write with its final
    instead of one each step, and a turn's audit is whole once its final is.

    ``spill``: where rows wait while the database is away (``shared/audit_spill.py``)
    instead of being dropped; once some wait, later rows go behind them until the
    list is written back (by a worker's duty), so each writer's rows keep their order.
    """

    def __init__(
        self,
        store: SqlStateStore,
        *,
        owns_store: bool = False,
        batch: bool = True,
        linger: float = 0.0,
        spill: AuditSpill | None = None,
    ) -> None:
        self.store = store
        self.owns_store = owns_store
        self.batch = batch
        self.linger = linger
        self.spill = spill
        self._spilled = False  # rows of ours may wait in the spill: go behind them
        self._queued: list[dict[str, Any]] = []
        self._flusher: asyncio.Future[None] | None = None
        self._urgent = False  # a final (or a flush) is queued: write without lingering
        self._lingering: asyncio.Future[None] | None = None

    async def record(self, event: BaseEvent) -> None:
        """Queue the event as one row (or write it at once, without batching)."""
        row = audit_row(event)
        if not self.batch:
            await self._write_rows([row])
            return
        self._queued.append(row)
        if row["type"] == "final":
            self._hurry()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_queued())

    def _hurry(self) -> None:
        self._urgent = True
        if self._lingering is not None and not self._lingering.done():
            self._lingering.set_result(None)

    async def flush(self) -> None:
        """Write every queued row now."""
        self._hurry()
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        if self._queued:
            await self._flush_queued()

    async def _flush_queued(self) -> None:
        while self._queued:
            if self.linger and not self._urgent:
                await self._linger()
            self._urgent = False
            rows, self._queued = self._queued, []
            try:
                await self._write_rows(rows)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("audit: could not record %d events", len(rows))

    async def _linger(self) -> None:
        """Wait ``linger`` seconds, or until ``_hurry``."""
        loop = asyncio.get_running_loop()
        waiting = self._lingering = loop.create_future()
        timer = loop.call_later(self.linger, _settle, waiting)
        try:
            await waiting
        finally:
            timer.cancel()
            self._lingering = None

    async def _write_rows(self, rows: list[dict[str, Any]]) -> None:
        """Insert ``rows``, or, while the database is away (or rows of ours still wait),
        put them in the spill."""
        if self.spill is None:
            await self._insert(rows)
            return
        if self._spilled:
            self._spilled = await self.spill.waiting() > 0
        if not self._spilled:
            try:
                await self._insert(rows)
                return
            except Exception as exc:
                if not is_outage(exc):
                    raise
                log.warning(
                    "audit: the database does not answer (%s); %d rows wait in Redis",
                    type(exc).__name__,
                    len(rows),
                )
        await self.spill.hold(rows)
        self._spilled = True

    async def _insert(self, rows: list[dict[str, Any]]) -> None:
        def op(conn: Connection) -> None:
            insert_many(conn, audit_events, rows)

        # The store's transaction helpers: the whole transaction in one hop to the
        # writer thread on SQLite (busy retries included); on PostgreSQL the one
        # executemany without BEGIN / COMMIT (one round trip instead of three):
        # asyncpg pipelines the rows and ends them with one Sync, so the server runs
        # them as one implicit transaction, all or none. Should it run twice (the
        # retry on a dead connection), readers keep each event id once. Not ridden
        # out (``ride=False``): the rows have the spill to wait in, the flush goes on.
        await self.store._write_each(op, ride=False)

    async def turn_events(self, turn_id: str) -> list[Event]:
        """Every recorded event of a turn, all attempts, in stream order, each once."""
        await self.flush()
        query = (
            select(audit_events.c.payload)
            .where(audit_events.c.turn_id == turn_id)
            .order_by(audit_events.c.id)
        )

        def op(conn: Connection) -> list[str]:
            return list(conn.execute(query).scalars().all())

        return in_stream_order(parse_event(payload) for payload in await self.store._read(op))

    async def session_events(
        self, session_id: str, types: Collection[str] | None = None
    ) -> list[Event]:
        """The recorded events of a session (of ``types``), in stream order, each once."""
        await self.flush()
        query = select(audit_events.c.payload).where(audit_events.c.session_id == session_id)
        if types is not None:
            query = query.where(audit_events.c.type.in_(list(types)))

        def op(conn: Connection) -> list[str]:
            return list(conn.execute(query.order_by(audit_events.c.id)).scalars().all())

        return in_stream_order(parse_event(payload) for payload in await self.store._read(op))

    async def close(self) -> None:
        """Write what is queued; close the store if the sink owns it."""
        await self.flush()
        if self.owns_store:
            await self.store.close()


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
    store is not SQL (the audit log needs a database that can hold it). ``batch``,
    ``linger`` and ``spill`` as for SqlAuditSink."""
    if isinstance(store, SqlStateStore):
        return SqlAuditSink(store, batch=batch, linger=linger, spill=spill)
    return None


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


def _settle(waiting: asyncio.Future[None]) -> None:
    if not waiting.done():
        waiting.set_result(None)


async def open_audit_sink(url: str, **kwargs: Any) -> AuditSink:
    """A sink for a database URL (``sqlite+aiosqlite://``, ``postgresql+asyncpg://``;
    its schema migrated as the state store's is) or ``memory://``."""
    if url.startswith("memory:"):
        return MemoryAuditSink()
    scheme = url.partition("://")[0]
    if scheme.startswith(("sqlite", "postgres")):
        store = await open_store(url, **kwargs)
        if isinstance(store, SqlStateStore):
            return SqlAuditSink(store, owns_store=True)
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
