"""Schedules in a Redis state store's Redis: a JSON string a schedule, and a set of ids."""

from __future__ import annotations

from typing import Any

from reactq.shared.schedules import Schedule
from reactq.shared.state.redis.store import RedisStateStore
from reactq.shared.state.schedule_store import check_fields, oldest_first

__all__ = ["RedisScheduleStore"]


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
        return oldest_first(found)

    async def update(self, schedule_id: str, **fields: Any) -> Schedule | None:
        """Change its editable fields; the schedule as it is now, or None."""
        check_fields(fields)
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
