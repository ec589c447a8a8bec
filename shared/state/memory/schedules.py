"""Schedules beside a memory store: a dict per store, as long-lived as the store."""

from __future__ import annotations

import weakref
from typing import Any

from reactq.shared.schedules import Schedule
from reactq.shared.state.memory.store import MemoryStateStore
from reactq.shared.state.schedule_store import check_fields, oldest_first

__all__ = ["MemoryScheduleStore", "memory_schedules"]


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
        return oldest_first(found)

    async def update(self, schedule_id: str, **fields: Any) -> Schedule | None:
        """Change its editable fields; the schedule as it is now, or None."""
        check_fields(fields)
        found = self._schedules.get(schedule_id)
        if found is None:
            return None
        changed = found.model_copy(update=fields)
        self._schedules[schedule_id] = changed
        return changed

    async def delete(self, schedule_id: str) -> bool:
        """Remove the schedule; False when there was none."""
        return self._schedules.pop(schedule_id, None) is not None


# A memory store's schedules live as long as the store.
_MEMORY: weakref.WeakKeyDictionary[MemoryStateStore, MemoryScheduleStore] = (
    weakref.WeakKeyDictionary()
)


def memory_schedules(store: MemoryStateStore) -> MemoryScheduleStore:
    """The schedules kept beside ``store`` (the same ones on every call)."""
    return _MEMORY.setdefault(store, MemoryScheduleStore())
