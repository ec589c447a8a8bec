"""The audit log in a SQL state store's database: the ``audit_events`` table."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from reactq.shared.audit import audit_row, in_stream_order
from reactq.shared.events import BaseEvent, Event, parse_event
from reactq.shared.state.outage import is_outage
from reactq.shared.state.sql.bulk import insert_many
from reactq.shared.state.sql.schema import audit_events
from reactq.shared.state.sql.store import SqlStateStore

if TYPE_CHECKING:
    from reactq.shared.audit_spill import AuditSpill

__all__ = ["SqlAuditSink"]

log = logging.getLogger("reactq.audit")


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


def _settle(waiting: asyncio.Future[None]) -> None:
    if not waiting.done():
        waiting.set_result(None)
