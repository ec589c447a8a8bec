"""Audit rows the state database could not take, kept in Redis until it can.

A sink (``shared/audit.py``) whose write fails because the database is away
(``state.outage.is_outage``) hands its rows to ``AuditSpill.hold``: they go on one
Redis list per namespace (``Keys.audit_spill``), oldest first, at most
``REACTQ_AUDIT_SPILL_MAX_ROWS`` (past it the oldest are dropped, with an ERROR line
and ``dropped`` counted). Every worker runs ``write_back_forever``: one at a time
(a Redis lock, ``<audit_spill>:writer``), it writes the list's rows to the
database in order, in batches, and only then takes them off the list. A writer
that dies between the two leaves its batch on the list: the next one skips the rows
the table already has, by their natural key, (turn id, stream id). So each row is
written once, whichever process spilled it (the producer's ``queued`` rows too).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy import select, tuple_
from sqlalchemy.engine import Connection

from reactq.shared.keys import Keys
from reactq.shared.redis_client import lua_source
from reactq.shared.state.outage import is_outage
from reactq.shared.state.sql.bulk import insert_many
from reactq.shared.state.sql.schema import audit_events
from reactq.shared.state.sql.store import SqlStateStore

__all__ = ["AuditSpill", "write_back_forever"]

log = logging.getLogger("reactq.audit")

_HOLD = lua_source(__name__, "audit_spill_hold")
"""KEYS: the list; ARGV: the cap, then the rows. Returns the length before the trim."""

_BATCH = 500
_LOCK_SECONDS = 60


class AuditSpill:
    """The namespace's list of audit rows waiting for the database (module docstring)."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        max_rows: int,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        """``on_dropped`` is told how many rows the cap dropped (a worker's metric)."""
        self.redis = redis
        self.key = keys.audit_spill
        self.max_rows = max_rows
        self.on_dropped = on_dropped
        self.dropped = 0
        """Rows this process saw dropped by the cap."""
        self._hold = redis.register_script(_HOLD)

    async def hold(self, rows: Sequence[dict[str, Any]]) -> None:
        """Keep ``rows`` (``audit_events`` rows) after those already waiting."""
        if not rows:
            return
        payloads = [json.dumps(row, separators=(",", ":")) for row in rows]
        length = int(await self._hold(keys=[self.key], args=[self.max_rows, *payloads]))
        if length > self.max_rows:
            dropped = min(length - self.max_rows, len(rows))
            self.dropped += dropped
            log.error(
                "audit: %d rows wait for the database, more than "
                "REACTQ_AUDIT_SPILL_MAX_ROWS (%d): dropped the %d oldest",
                length,
                self.max_rows,
                dropped,
            )
            if self.on_dropped is not None:
                self.on_dropped(dropped)

    async def waiting(self) -> int:
        """How many rows wait."""
        return int(await self.redis.llen(self.key))

    async def write_back(self, store: SqlStateStore) -> int:
        """Write the waiting rows to ``store``'s audit table, oldest first; return how
        many were written (0 when another process is writing them, or none wait).
        Raises the database's error when it is still away (the rows stay)."""
        lock = self.redis.lock(f"{self.key}:writer", timeout=_LOCK_SECONDS, blocking=False)
        if not await lock.acquire():
            return 0
        written = 0
        try:
            while raw := await self.redis.lrange(self.key, 0, _BATCH - 1):
                rows = [json.loads(item) for item in raw]
                written += await store._write(functools.partial(_insert_new, rows), ride=False)
                await self.redis.ltrim(self.key, len(raw), -1)
                await lock.extend(_LOCK_SECONDS, replace_ttl=True)
        finally:
            try:
                await lock.release()
            except Exception:  # expired meanwhile, or Redis away: its TTL frees it
                log.debug("audit: the write-back lock was gone at release", exc_info=True)
        if written:
            log.info("audit: wrote %d rows that waited for the database", written)
        return written


def _insert_new(rows: list[dict[str, Any]], conn: Connection) -> int:
    """Insert the rows the table lacks (by turn id and stream id), in order."""
    keyed = {(r["turn_id"], r["event_id"]) for r in rows if r.get("event_id") is not None}
    have: set[tuple[str, str]] = set()
    if keyed:
        key = tuple_(audit_events.c.turn_id, audit_events.c.event_id)
        query = select(audit_events.c.turn_id, audit_events.c.event_id).where(
            audit_events.c.turn_id.in_({turn for turn, _ in keyed}), key.in_(list(keyed))
        )
        have = {(turn, event) for turn, event in conn.execute(query)}
    new: list[dict[str, Any]] = []
    for row in rows:
        if (event_id := row.get("event_id")) is not None:
            natural = (row["turn_id"], event_id)
            if natural in have:
                continue
            have.add(natural)  # a row spilled twice is written once
        new.append(row)
    if new:
        insert_many(conn, audit_events, new)
    return len(new)


async def write_back_forever(spill: AuditSpill, store: SqlStateStore, interval: float) -> None:
    """A worker's duty: every ``interval`` seconds, write back what waits (if anything)."""
    while True:
        await asyncio.sleep(interval)
        try:
            if await spill.waiting():
                await spill.write_back(store)
        except RedisError as exc:
            log.warning("audit: could not read the waiting rows (%s)", exc)
        except Exception as exc:
            if not is_outage(exc):
                log.exception("audit: could not write the waiting rows")
