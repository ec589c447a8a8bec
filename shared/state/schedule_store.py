"""Where scheduled turns are kept: beside the conversation state, in the same database.

``schedules_for(store)`` gives the ``ScheduleStore`` of a state store, sharing its
connection: the ``schedules`` table of a SQL store, one hash per schedule and an index
set in a Redis store, dicts beside a memory store (each backend's ``schedules.py``).
The producer writes schedules and ``reactq beat`` reads them; workers never do, which
is why they are a store of their own beside the ``StateStore`` protocol (as the audit
log is) rather than six more methods every state backend and the kernel's stores
must carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from reactq.shared.schedules import Schedule
from reactq.shared.state.backends import find_backend_of
from reactq.shared.state.base import StateStore

__all__ = ["ScheduleStore", "check_fields", "oldest_first", "schedules_for"]


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


def check_fields(fields: Mapping[str, Any]) -> None:
    """Refuse (ValueError) a change to a field ``ScheduleStore.update`` may not change."""
    unknown = set(fields) - _EDITABLE
    if unknown:
        raise ValueError(f"a schedule's {sorted(unknown)} cannot be changed")


def oldest_first(found: list[Schedule]) -> list[Schedule]:
    """``found`` in the order ``ScheduleStore.find`` returns: by creation, then id."""
    return sorted(found, key=lambda s: (s.created_at, s.schedule_id))


def schedules_for(store: StateStore) -> ScheduleStore:
    """The schedules kept beside ``store``, sharing its connection (its backend's, as
    ``shared/state/backends.py`` names them)."""
    backend = find_backend_of(store)
    if backend is None:
        raise TypeError(f"no schedule store beside a {type(store).__name__}")
    return backend.schedules(store)
