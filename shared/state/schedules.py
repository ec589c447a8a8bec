"""Where scheduled turns are kept: beside the conversation state, in the same database.

``schedules_for(store)`` gives the ``ScheduleStore`` of a state store, sharing its
connection: the ``schedules`` table of a SQL store, one hash per schedule and an index
set in a Redis store, dicts beside a memory store. The producer writes schedules and
``reactq beat`` reads them; workers never do, which is why they are a store of their
own beside the ``StateStore`` protocol (as the audit log is) rather than six more
methods every state backend and the kernel's stores must carry.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from reactq.shared.schedules import Schedule
from reactq.shared.state.base import StateStore
from reactq.shared.state.memory import MemoryStateStore
from reactq.shared.state.redis import RedisStateStore
from reactq.shared.state.sql import SqlStateStore
from reactq.shared.state.sql_schema import schedules as table
from reactq.shared.tenancy import TenantIdentity

__all__ = ["ScheduleStore", "schedules_for"]


@runtime_checkable
class ScheduleStore(Protocol):
    """Scheduled turns: add, read, change and remove them."""

    async def add(self, schedule: Schedule) -> None:
        """Store a new schedule."""
        ...

    async def get(self, schedule_id: str) -> Schedule | None:
        """The schedule, or None."""
        ...

    async def find(self, session_id: str | None = None) -> list[Schedule]:
        """Every schedule (of ``session_id`` only, when given), oldest first."""
        ...

    async def update(self, schedule_id: str, **fields: Any) -> Schedule | None:
        """Change ``paused``, ``last_run_at``, ``last_turn_id`` or ``last_error``;
        the schedule as it is now, or None when there is none."""
        ...

    async def delete(self, schedule_id: str) -> bool:
        """Remove the schedule; False when there was none."""
        ...


_EDITABLE = frozenset({"paused", "last_run_at", "last_turn_id", "last_error"})


def _check_fields(fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - _EDITABLE
    if unknown:
        raise ValueError(f"a schedule's {sorted(unknown)} cannot be changed")


def _sorted(found: list[Schedule]) -> list[Schedule]:
    return sorted(found, key=lambda s: (s.created_at, s.schedule_id))


class MemoryScheduleStore:
    """Schedules in a dict (beside a ``MemoryStateStore``: one process sees them)."""

    def __init__(self) -> None:
        self._schedules: dict[str, Schedule] = {}

    async def add(self, schedule: Schedule) -> None:
        """Store a new schedule."""
        self._schedules[schedule.schedule_id] = schedule

    async def get(self, schedule_id: str) -> Schedule | None:
        """The schedule, or None."""
        return self._schedules.get(schedule_id)

    async def find(self, session_id: str | None = None) -> list[Schedule]:
        """Every schedule (of ``session_id``), oldest first."""
        found = [s for s in self._schedules.values() if session_id in (None, s.session_id)]
        return _sorted(found)

    async def update(self, schedule_id: str, **fields: Any) -> Schedule | None:
        """Change its editable fields; the schedule as it is now, or None."""
        _check_fields(fields)
        found = self._schedules.get(schedule_id)
        if found is None:
            return None
        changed = found.model_copy(update=fields)
        self._schedules[schedule_id] = changed
        return changed

    async def delete(self, schedule_id: str) -> bool:
        """Remove the schedule; False when there was none."""
        return self._schedules.pop(schedule_id, None) is not None


def _row(schedule: Schedule) -> dict[str, Any]:
    tenant = schedule.tenant
    return {
        **schedule.model_dump(exclude={"metadata", "paused", "tenant"}),
        "paused": int(schedule.paused),
        "metadata": json.dumps(schedule.metadata) if schedule.metadata else None,
        "tenant": None if tenant is None else tenant.model_dump_json(),
    }


def _schedule(row: Any) -> Schedule:
    tenant = row.get("tenant")
    return Schedule(
        **{
            **row,
            "paused": bool(row["paused"]),
            "metadata": json.loads(row["metadata"]) if row["metadata"] else {},
            "tenant": None if tenant is None else TenantIdentity.model_validate_json(tenant),
        }
    )


class SqlScheduleStore:
    """Schedules in the ``schedules`` table, on a SqlStateStore's engine."""

    def __init__(self, store: SqlStateStore) -> None:
        self.store = store

    async def add(self, schedule: Schedule) -> None:
        """Store a new schedule."""

        def op(conn: Connection) -> None:
            conn.execute(table.insert().values(**_row(schedule)))

        # The store's transaction helpers, as the audit log uses them: one hop to the
        # writer thread on SQLite, run_sync on PostgreSQL.
        await self.store._write(op)

    async def get(self, schedule_id: str) -> Schedule | None:
        """The schedule, or None."""

        def op(conn: Connection) -> Schedule | None:
            row = conn.execute(select(table).where(table.c.schedule_id == schedule_id)).first()
            return None if row is None else _schedule(row._mapping)

        return await self.store._read(op)

    async def find(self, session_id: str | None = None) -> list[Schedule]:
        """Every schedule (of ``session_id``), oldest first."""

        def op(conn: Connection) -> list[Schedule]:
            query = select(table).order_by(table.c.created_at, table.c.schedule_id)
            if session_id is not None:
                query = query.where(table.c.session_id == session_id)
            return [_schedule(row._mapping) for row in conn.execute(query)]

        return await self.store._read(op)

    async def update(self, schedule_id: str, **fields: Any) -> Schedule | None:
        """Change its editable fields; the schedule as it is now, or None."""
        _check_fields(fields)
        values = {k: int(v) if k == "paused" else v for k, v in fields.items()}

        def op(conn: Connection) -> Schedule | None:
            if values:
                conn.execute(
                    update(table).where(table.c.schedule_id == schedule_id).values(**values)
                )
            row = conn.execute(select(table).where(table.c.schedule_id == schedule_id)).first()
            return None if row is None else _schedule(row._mapping)

        return await self.store._write(op)

    async def delete(self, schedule_id: str) -> bool:
        """Remove the schedule; False when there was none."""

        def op(conn: Connection) -> bool:
            result = conn.execute(delete(table).where(table.c.schedule_id == schedule_id))
            return bool(result.rowcount)

        return await self.store._write(op)


class RedisScheduleStore:
    """Schedules in a RedisStateStore's Redis: a JSON string a schedule, and a set of ids.

    Plain keys (no hash tag): no script touches two of them, so they work on a
    cluster too. An update is a read then a write: the producer changes ``paused``
    and beat the ``last_*`` fields, and a lost race between the two costs one field
    of a status line, never a firing (beat's claims are the once-per-tick guard).
    """

    def __init__(self, store: RedisStateStore) -> None:
        self.redis = store.redis
        self.prefix = f"{store.namespace}:schedule:"
        self.index = f"{store.namespace}:schedules"

    async def add(self, schedule: Schedule) -> None:
        """Store a new schedule."""
        await self.redis.set(self.prefix + schedule.schedule_id, schedule.model_dump_json())
        await self.redis.sadd(self.index, schedule.schedule_id)

    async def get(self, schedule_id: str) -> Schedule | None:
        """The schedule, or None."""
        raw = await self.redis.get(self.prefix + schedule_id)
        return None if raw is None else Schedule.model_validate_json(raw)

    async def find(self, session_id: str | None = None) -> list[Schedule]:
        """Every schedule (of ``session_id``), oldest first."""
        found = []
        for member in await self.redis.smembers(self.index):
            name = member.decode() if isinstance(member, bytes) else str(member)
            schedule = await self.get(name)
            if schedule is None:
                await self.redis.srem(self.index, member)  # removed meanwhile
            elif session_id in (None, schedule.session_id):
                found.append(schedule)
        return _sorted(found)

    async def update(self, schedule_id: str, **fields: Any) -> Schedule | None:
        """Change its editable fields; the schedule as it is now, or None."""
        _check_fields(fields)
        found = await self.get(schedule_id)
        if found is None:
            return None
        changed = found.model_copy(update=fields)
        # XX: a schedule removed meanwhile stays removed.
        stored = await self.redis.set(self.prefix + schedule_id, changed.model_dump_json(), xx=True)
        return changed if stored else None

    async def delete(self, schedule_id: str) -> bool:
        """Remove the schedule; False when there was none."""
        removed = await self.redis.delete(self.prefix + schedule_id)
        await self.redis.srem(self.index, schedule_id)
        return bool(removed)


# A memory store's schedules live as long as the store.
_MEMORY: weakref.WeakKeyDictionary[MemoryStateStore, MemoryScheduleStore] = (
    weakref.WeakKeyDictionary()
)


def schedules_for(store: StateStore) -> ScheduleStore:
    """The schedules kept beside ``store``, sharing its connection."""
    if isinstance(store, SqlStateStore):
        return SqlScheduleStore(store)
    if isinstance(store, RedisStateStore):
        return RedisScheduleStore(store)
    if isinstance(store, MemoryStateStore):
        return _MEMORY.setdefault(store, MemoryScheduleStore())
    raise TypeError(f"no schedule store beside a {type(store).__name__}")
