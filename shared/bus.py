"""EventBus: publish a turn's events and subscribe to a session with replay.

Two implementations: ``RedisEventBus`` (the pool, ``shared/bus_redis.py``) and
``MemoryEventBus`` (the embedded mode, one process, ``shared/bus_memory.py``).
``TurnEmitter`` stamps the common fields of a turn's events and numbers them.

Both buses give every event a stream id shaped ``"<ms>-<n>"``; ids of one
session only grow, so ``subscribe(after=id)`` resumes exactly after an event.
Compare ids with ``stream_id_gt``, never as text.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from reactq.shared.errors import InvalidStreamIdError, LeaseLostError, StaleLeaseError
from reactq.shared.events import BaseEvent, Event

if TYPE_CHECKING:
    from reactq.shared.state.base import StepStore, TurnCheckpoint


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

    async def read(
        self, session_id: str, after: str = "0", count: int | None = None
    ) -> list[Event]:
        """The events stored after ``after`` (no waiting)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True)
class PublishGuard:
    """What a turn's final is published under (``RedisEventBus.publish_many``): the
    session's lease must still hold ``token``, and the turn's status is recorded in
    the same call, before the events."""

    token: int
    turn_id: str
    status: str
    status_ttl: int


@dataclass(frozen=True)
class CheckpointGuard:
    """A turn's step checkpoint stored in the same call as events
    (``RedisEventBus.publish_many``; ``TurnSteps.guard`` makes one): stored only while
    the session's lease holds ``token`` (None: unfenced), and the events published only
    if it was, so a holder that lost the lease stores and publishes nothing."""

    token: int | None
    turn_id: str
    checkpoint: str
    """The ``TurnCheckpoint`` as JSON."""
    ttl: int
    """Seconds the session's steps are kept (``TurnSteps.ttl_seconds``)."""


class ScriptGuard:
    """A status guard (``record``) whose own script publishes the events, doing more
    in the same call: ``RedisEventBus.publish_many`` hands ``publish`` the keys and
    arguments it would give bus_publish_many.lua under ``record``, and the events'
    payloads (``SessionQueue.advance`` makes one: a turn's final with the drain's
    next step)."""

    record: PublishGuard

    async def publish(
        self, keys: list[str], args: list[Any], payloads: list[str]
    ) -> list[Any] | None:
        """Run the script: the events' stream ids, in order, or None when the guard
        failed (nothing published)."""
        raise NotImplementedError


Guard = PublishGuard | CheckpointGuard | ScriptGuard
"""What ``publish_many`` can publish under: a final's (alone, or with more done in
the same call) or a step checkpoint's guard."""


async def publish_all(
    bus: EventBus, events: Sequence[E], guard: Guard | None = None
) -> list[E] | None:
    """Publish ``events`` in order: in one call when the bus has ``publish_many`` (a
    ``guard`` needs it; None when the guard failed and nothing was published), one
    by one otherwise."""
    many = getattr(bus, "publish_many", None)
    if many is None:
        if guard is not None:
            raise TypeError(f"{type(bus).__name__} cannot publish under a guard")
        return [await bus.publish(event) for event in events]
    published: list[E] | None = await (many(events) if guard is None else many(events, guard))
    return published


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
        self._later: list[BaseEvent] = []
        self.final_follows = False
        """True when the caller will emit the turn's final after the loop (the
        runner does): the loop then leaves ``emit_later`` events for it to take."""

    def _build(self, event_cls: type[E], fields: dict[str, Any]) -> E:
        self.seq += 1
        fields["session_id"] = self.session_id
        fields["turn_id"] = self.turn_id
        fields["attempt"] = self.attempt
        fields["seq"] = self.seq
        fields["ts"] = time.time()
        # The model's validator directly (the same checks): ``event_cls(**fields)``
        # adds BaseModel.__init__'s frame, about a third of the cost of an event,
        # and the loop emits one every few microseconds.
        event: E = event_cls.__pydantic_validator__.validate_python(fields)
        return event

    async def emit(self, event_cls: type[E], **fields: Any) -> E:
        """Build an event of ``event_cls`` with the turn's fields and publish it (with
        the events ``emit_later`` queued before it, in order, in one call when the bus
        can publish several at once)."""
        return await self._send(self._build(event_cls, fields))

    async def _send(self, event: E, guard: Guard | None = None) -> E:
        """Publish the queued events and ``event``; under ``guard`` (the bus must have
        ``publish_many``), or raise LeaseLostError with nothing published."""
        if guard is None and not self._later:
            return await self.bus.publish(event)
        earlier, self._later = self._later, []
        batch: list[BaseEvent] = [*earlier, event]
        published = await publish_all(self.bus, batch, guard)
        if published is None:
            raise LeaseLostError(
                f"not publishing the {getattr(event, 'type', 'event')} of {self.turn_id}: "
                "lease lost",
                session_id=self.session_id,
                turn_id=self.turn_id,
            )
        return published[-1]  # type: ignore[return-value]  # the last one is ``event``

    async def emit_alone(self, event_cls: type[E], **fields: Any) -> E:
        """Build and publish an event now, leaving the queued ones queued: a tool's
        progress while the step's earlier results wait for its checkpoint (which must
        not publish them before it is stored). Its ``seq`` comes after theirs."""
        return await self.bus.publish(self._build(event_cls, fields))

    async def flush(self) -> None:
        """Publish the events ``emit_later`` queued, now."""
        events, self._later = self._later, []
        if events:
            await publish_all(self.bus, events)

    async def checkpoint(
        self, steps: StepStore, checkpoint: TurnCheckpoint, fence: int | None = None
    ) -> None:
        """Store the turn's step checkpoint (``steps.checkpoint_step``) and publish the
        events ``emit_later`` queued for it (the step's actions, or its results): in
        one call when ``steps`` makes its write a guard of the bus's ``publish_many``
        (``TurnSteps.guard``, on a RedisEventBus), else the checkpoint, then the events.
        Either way the events go out only once the checkpoint is stored: StaleLeaseError
        when ``fence`` no longer holds the session's lease (nothing stored or published).
        """
        events, self._later = self._later, []
        guard = getattr(steps, "guard", None)
        if events and guard is not None and hasattr(self.bus, "publish_many"):
            if await publish_all(self.bus, events, guard(checkpoint, fence)) is None:
                raise StaleLeaseError(
                    f"not checkpointing turn {self.turn_id}: the lease of "
                    f"{self.session_id} moved on",
                    session_id=self.session_id,
                    turn_id=self.turn_id,
                )
            return
        await steps.checkpoint_step(checkpoint, fence=fence)
        if events:
            await publish_all(self.bus, events)

    def emit_later(self, event_cls: type[E], **fields: Any) -> None:
        """Queue an event (numbered now) to be published with the next one ``emit``
        publishes: a note that is always followed by another event soon (the usage of
        a model call, before the action or final it led to) then costs no round trip
        of its own. Every turn ends with an emitted final, which takes it along."""
        self._later.append(self._build(event_cls, fields))


# --- stream ids ---------------------------------------------------------------

MAX_STREAM_ID_PART = 2**64 - 1
"""The largest milliseconds or sequence number of a stream id (Redis keeps each as a
64-bit unsigned integer)."""

# ``[0-9]``, not ``\d``, which also takes other scripts' digits (Arabic-Indic ones),
# and at most 20 of them (2**64-1 has 20): Redis refuses anything else, and would
# only say so on the first read, in the middle of a subscription.
_STREAM_ID_RE = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")


def parse_stream_id(stream_id: str) -> tuple[int, int]:
    """A stream id (``"<ms>-<n>"``, ``"<ms>"`` or ``"0"``) as a comparable tuple.

    Raises InvalidStreamIdError (a ValueError) for anything Redis would refuse: other
    than ASCII digits, or a part over ``MAX_STREAM_ID_PART``.
    """
    match = _STREAM_ID_RE.fullmatch(stream_id) if isinstance(stream_id, str) else None
    if match is not None:
        ms, seq = int(match.group(1)), int(match.group(2) or 0)
        if ms <= MAX_STREAM_ID_PART and seq <= MAX_STREAM_ID_PART:
            return ms, seq
    raise InvalidStreamIdError(
        f"not a stream id: {stream_id!r:.60} (expected '<ms>-<n>', '<ms>' or '0', in "
        f"ASCII digits, each part at most {MAX_STREAM_ID_PART})",
        stream_id=str(stream_id)[:64],
    )


def validate_stream_id(after: str) -> str:
    """Return a subscriber's ``after`` if it is a stream id or ``"$"`` (live only), else
    raise InvalidStreamIdError; what the gateway checks ``?after=`` and
    ``Last-Event-ID`` with."""
    if after != "$":
        parse_stream_id(after)
    return after


def stream_id_gt(a: str, b: str) -> bool:
    """True if stream id ``a`` comes strictly after ``b`` (compared as numbers, not text)."""
    return parse_stream_id(a) > parse_stream_id(b)


def check_after(after: str | None) -> str | None:
    """Validate a subscriber's ``after``; ``"$"`` means live only, like ``None``."""
    if after is None or validate_stream_id(after) == "$":
        return None
    return after


class Subscription(AsyncIterator[Event]):
    """The events of one session, as an async iterator; what ``subscribe`` returns.

    Iterating starts it. ``await sub.start()`` fixes the starting point early: a
    live-only subscriber that must not miss an event it is about to cause (submit a
    turn, then watch) calls it first. ``aclose()`` ends the iteration; so does
    leaving ``async with``.
    """

    async def start(self) -> str:
        """Fix where the subscription starts; return the id it reads after."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Stop; the iterator then ends."""
        raise NotImplementedError

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
