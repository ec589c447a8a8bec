"""A parked turn's events once it goes on: what a front door streams after it gave the
decisions (or client tools' results) the turn waited for.

The turn keeps its id across the park, so its events before and after share one
stream: the resumed part starts after the ``approval_decided`` event of one of the
calls just answered (each call is decided once, so that event is unique).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection

from reactq.producer.client import Producer
from reactq.shared.events import ApprovalDecidedEvent, Event, FinalEvent

__all__ = ["events_after_decisions"]


async def events_after_decisions(
    producer: Producer, session_id: str, turn_id: str, call_ids: Collection[str]
) -> AsyncIterator[Event]:
    """The turn's events after the decisions on ``call_ids``, up to its final."""
    decided = False
    async for event in producer.subscribe(session_id, after="0"):
        if event.turn_id != turn_id:
            continue
        if decided:
            yield event
        elif isinstance(event, ApprovalDecidedEvent) and event.call_id in call_ids:
            decided = True
        if isinstance(event, FinalEvent):
            return
