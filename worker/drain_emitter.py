"""The drain's emitter: a turn's final published only while the lease is held.

``FencedEmitter`` is what every turn the drain runs emits through (docs/architecture.md,
"Session protocol"); ``Finished`` is a turn that ran to its end, its final held for the
drain's next step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from reactq.shared.bus import E, PublishGuard, TurnEmitter
from reactq.shared.events import BaseEvent, FinalEvent
from reactq.shared.protocol.children import ChildLink
from reactq.shared.turns import TurnStatus

__all__ = ["FencedEmitter", "Finished"]


class FencedEmitter(TurnEmitter):
    """Publishes a turn's final only while this worker still holds the session's
    lease (``token``), recording the turn's status in the same call, so a process
    that wakes up after a pause cannot end a turn that its new holder owns, and a
    reader who saw the final never reads an older status.

    With ``hold_final`` (set around the kernel's run) the final is kept, with the
    events queued before it, instead (``held``): the drain publishes it in the call
    that finishes the turn and takes its next step (``Drainer._advance``), the same
    way fenced, and only then calls ``ended``."""

    token: int = 0
    status_ttl: int = 0
    ended: Callable[[FinalEvent], Awaitable[None]] | None = None
    """Called with the final once it is published (the turn's webhook)."""
    fold: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
    """Adds the turn's children's usage to its final (an agent with subagents)."""
    link: ChildLink | None = None
    """The turn's parent, when it is a child turn."""
    hold_final: bool = False
    """Keep the final (``held``) rather than publish it."""
    held: list[BaseEvent] | None = None
    """The kept final, last, after the events queued for it; it has no stream ``id``
    until the drain publishes it (nothing reads it before)."""

    async def emit(self, event_cls: type[E], **fields: Any) -> E:
        if event_cls is not FinalEvent:
            return await super().emit(event_cls, **fields)
        if self.fold is not None:  # before the final is built, held or not
            fields = await self.fold(fields)
        event = self._build(event_cls, fields)
        if self.hold_final:
            self.held, self._later = [*self._later, event], []
            return event
        guard = PublishGuard(self.token, self.turn_id, str(fields["status"]), self.status_ttl)
        return await self.published(await self._send(event, guard))

    async def published(self, event: E) -> E:
        """The final is out: call ``ended`` with it (its webhook, its delegations)."""
        if self.ended is not None and isinstance(event, FinalEvent):
            await self.ended(event)
        return event

    async def publish_held(self) -> None:
        """Publish the held final now, alone (a shutdown finishes the turn apart):
        LeaseLostError, with nothing published, when the lease moved on."""
        held, self.held, self.hold_final = self.held or [], None, False
        if held:
            final = held[-1]
            self._later = [*held[:-1], *self._later]
            status = str(getattr(final, "status", ""))
            guard = PublishGuard(self.token, self.turn_id, status, self.status_ttl)
            await self.published(await self._send(final, guard))


@dataclass(frozen=True)
class Finished:
    """A turn that ran to its end: the status to finish it with, and the emitter
    holding its final for the drain's next step (None: the final is out already)."""

    turn_id: str
    status: TurnStatus
    emitter: FencedEmitter | None = None
