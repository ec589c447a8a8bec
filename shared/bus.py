"""EventBus: publish a turn's events and subscribe to a session with replay.

Two implementations: ``RedisEventBus`` (the pool) and ``MemoryEventBus`` (the
embedded mode, one process). ``TurnEmitter`` stamps the common fields of a
turn's events and numbers them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar, runtime_checkable

from shared.events import BaseEvent, Event

E = TypeVar("E", bound=BaseEvent)


@runtime_checkable
class EventBus(Protocol):
    """Where events go and where subscribers read them."""

    async def publish(self, event: E) -> E:
        """Append the event to its session's stream; return it with its stream ``id``."""
        ...

    def subscribe(self, session_id: str, after: str | None = None) -> AsyncIterator[Event]:
        """Events of a session: after ``after`` (an event id; "0" for all) then live.

        ``after=None`` follows live events only. No event is lost or repeated at
        the seam between replay and live.
        """
        ...

    async def read(self, session_id: str, after: str = "0", count: int | None = None) -> list[Event]:
        """The events stored after ``after`` (no waiting)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class TurnEmitter:
    """Publishes one attempt of one turn's events, numbering them with ``seq``."""

    def __init__(
        self, bus: EventBus, session_id: str, turn_id: str, attempt: int = 1, seq: int = 0
    ) -> None:
        self.bus = bus
        self.session_id = session_id
        self.turn_id = turn_id
        self.attempt = attempt
        self.seq = seq

    async def emit(self, event_cls: type[E], **fields: Any) -> E:
        """Build an event of ``event_cls`` with the turn's fields and publish it."""
        self.seq += 1
        event = event_cls(
            session_id=self.session_id,
            turn_id=self.turn_id,
            attempt=self.attempt,
            seq=self.seq,
            ts=time.time(),
            **fields,
        )
        return await self.bus.publish(event)
