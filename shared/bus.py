"""EventBus: publish a turn's events and subscribe to a session with replay.

Two implementations: ``RedisEventBus`` (the pool) and ``MemoryEventBus`` (the
embedded mode, one process). ``TurnEmitter`` stamps the common fields of a
turn's events and numbers them.

Both buses give every event a stream id shaped ``"<ms>-<n>"``; ids of one
session only grow, so ``subscribe(after=id)`` resumes exactly after an event.
Compare ids with ``stream_id_gt``, never as text.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import re
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from reactq.shared.errors import (
    InvalidStreamIdError,
    LeaseLostError,
    SchemaVersionError,
    StaleLeaseError,
)
from reactq.shared.events import BaseEvent, Event, parse_event
from reactq.shared.keys import DEFAULT_CLUSTER_SHARDS, Keys
from reactq.shared.redis_client import connect, lua_join, lua_source, once_key_id
from reactq.shared.redis_urls import is_cluster_url

if TYPE_CHECKING:
    from reactq.shared.state.base import StepStore, TurnCheckpoint

logger = logging.getLogger(__name__)

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


def _check_after(after: str | None) -> str | None:
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


# --- Redis --------------------------------------------------------------------

# One round trip: append (capped), publish the same payload with its id spliced
# in, refresh the TTL; every publishing script shares bus_append.lua's function.
# A resent call publishes nothing twice (once.lua).
_ONCE = lua_source("reactq.shared.redis_client", "once")
_PUBLISH_LUA = lua_join(_ONCE, lua_source(__name__, "bus_append", "bus_publish"))
# The guard reads the lease and writes its record as the session protocol's scripts
# do (their preludes).
_PUBLISH_MANY_LUA = lua_join(
    _ONCE,
    lua_source("reactq.shared.protocol.lease", "lease_token", "fenced_hset"),
    lua_source(__name__, "bus_append", "bus_publish_many"),
)


def _text(value: bytes | str | None) -> str:
    if value is None:
        raise ValueError("Redis returned no stream id")
    return value.decode() if isinstance(value, bytes) else value


def _stream_entries(response: Any) -> list[tuple[Any, Any]]:
    """The entries of a one-stream XREAD reply, in RESP2 (list) or RESP3 (dict) shape."""
    if not response:
        return []
    if isinstance(response, dict):
        return [entry for entries in response.values() for entry in _unwrap(entries)]
    return [entry for _key, entries in response for entry in entries]


def _unwrap(entries: Any) -> list[tuple[Any, Any]]:
    # RESP3 replies may nest the entry list one level deeper.
    if entries and isinstance(entries[0], list) and entries[0] and isinstance(entries[0][0], list):
        return list(entries[0])
    return list(entries)


def _payload(event: BaseEvent) -> str:
    """The event as JSON without its id; text with lone surrogates (a model can emit
    them) is escaped the way ``json`` does, since UTF-8 cannot carry it."""
    try:
        return event.model_dump_json(exclude={"id"})
    except PydanticSerializationError:
        return json.dumps(event.model_dump(mode="json", exclude={"id"}), separators=(",", ":"))


def _decode_entry(session_id: str, entry_id: str, fields: Any) -> Event | None:
    """Parse one stream entry; log and drop one that cannot be read (never raise)."""
    raw = None
    if isinstance(fields, dict):
        raw = fields.get(b"e", fields.get("e"))
    try:
        if raw is None:
            raise ValueError("entry has no 'e' field")
        return parse_event(raw, event_id=entry_id)
    except (SchemaVersionError, ValidationError, ValueError, TypeError) as exc:
        logger.warning(
            "skipping unreadable event %s of session %s: %s: %s",
            entry_id,
            session_id,
            type(exc).__name__,
            exc,
        )
        return None


def _connection_kwargs(redis: Redis) -> dict[str, Any]:
    """The options the client's connections are made with (a cluster client keeps
    them itself, a plain one in its pool)."""
    pool = getattr(redis, "connection_pool", None)
    kwargs = pool.connection_kwargs if pool is not None else redis.connection_kwargs  # type: ignore[attr-defined]
    return dict(kwargs)


class RedisEventBus:
    """Events on a capped Redis stream per session, mirrored on a pub/sub channel.

    Subscribers read the stream (XREAD BLOCK from the last id seen), so replay and
    live are one loop with no seam. Each blocking read holds one connection of the
    client's pool for up to ``block_ms``: size the pool for the subscribers.
    """

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        maxlen: int = 10_000,
        ttl_seconds: int = 3600,
        *,
        block_ms: int = 1000,
        batch: int = 500,
        owns_client: bool = False,
    ) -> None:
        if maxlen < 1 or ttl_seconds < 1 or block_ms < 1 or batch < 1:
            raise ValueError("maxlen, ttl_seconds, block_ms and batch must each be at least 1")
        # A blocking read must return before the socket times out; redis-py's
        # connections default to 5 s when the pool was not given a timeout.
        timeout = _connection_kwargs(redis).get("socket_timeout", 5.0)
        if timeout is not None and timeout * 1000 <= block_ms:
            raise ValueError(
                f"block_ms={block_ms} is not below the client's socket_timeout={timeout}s: "
                "lower block_ms or raise socket_timeout"
            )
        self.redis = redis
        self.keys = keys
        self.maxlen = maxlen
        self.ttl_seconds = ttl_seconds
        self.block_ms = block_ms
        self.batch = batch
        self._owns_client = owns_client
        self._closed = False
        self._publish = redis.register_script(_PUBLISH_LUA)
        self._publish_many = redis.register_script(_PUBLISH_MANY_LUA)

    @classmethod
    def from_url(cls, url: str, namespace: str = "reactq", **kwargs: Any) -> RedisEventBus:
        """A bus with its own client (closed by ``close``); kwargs go to the constructor.
        For a cluster URL, the keys are sharded as ``REACTQ_REDIS_CLUSTER_SHARDS``'s
        default; pass your own client and ``Keys`` for another count."""
        if is_cluster_url(url):
            client, keys = connect(url, 64), Keys(namespace, DEFAULT_CLUSTER_SHARDS)
        else:
            client, keys = Redis.from_url(url), Keys(namespace)
        return cls(client, keys, owns_client=True, **kwargs)

    async def publish(self, event: E) -> E:
        """Append the event to its session's stream; return it with its stream ``id``."""
        payload = _payload(event)
        sid = event.session_id
        raw_id = await self._publish(
            keys=[
                self.keys.events(sid),
                self.keys.channel(sid),
                self.keys.once(sid, once_key_id()),
            ],
            args=[self.maxlen, self.ttl_seconds, payload],
        )
        return event.model_copy(update={"id": _text(raw_id)})

    async def publish_many(self, events: Sequence[E], guard: Guard | None = None) -> list[E] | None:
        """``publish`` several events of one session, in order, in one call. With a
        ``guard``, only while its lease holds its token (None, nothing published,
        otherwise), writing its record first: the turn's status (``PublishGuard``;
        a ``ScriptGuard``'s script does more in the same call) or its step
        checkpoint (``CheckpointGuard``)."""
        session_id = events[0].session_id
        if any(e.session_id != session_id for e in events):
            raise ValueError("publish_many takes the events of one session")
        keys = [
            self.keys.events(session_id),
            self.keys.channel(session_id),
            self.keys.once(session_id, once_key_id()),
        ]
        args: list[Any] = [self.maxlen, self.ttl_seconds, "", "", "", 0]
        record = guard.record if isinstance(guard, ScriptGuard) else guard
        if isinstance(record, PublishGuard):
            keys += [self.keys.lease(session_id), self.keys.turns(session_id)]
            args[2:] = [str(record.token), record.turn_id, record.status, record.status_ttl]
        elif record is not None:
            token = "" if record.token is None else str(record.token)
            keys += [self.keys.lease(session_id), self.keys.steps(session_id)]
            args[2:] = [token, record.turn_id, record.checkpoint, record.ttl]
        payloads = [_payload(e) for e in events]
        if isinstance(guard, ScriptGuard):
            ids = await guard.publish(keys, args, payloads)
        else:
            ids = await self._publish_many(keys=keys, args=[*args, *payloads])
        if ids is None:
            return None
        return [e.model_copy(update={"id": _text(i)}) for e, i in zip(events, ids, strict=True)]

    def subscribe(self, session_id: str, after: str | None = None) -> Subscription:
        """Events of a session: after ``after`` (an event id; "0" for all) then live."""
        return _RedisSubscription(self, session_id, _check_after(after))

    async def read(
        self, session_id: str, after: str = "0", count: int | None = None
    ) -> list[Event]:
        """The events stored after ``after`` (no waiting), oldest first."""
        parse_stream_id(after)
        response = await self.redis.xread({self.keys.events(session_id): after}, count=count)
        events = []
        for raw_id, fields in _stream_entries(response):
            event = _decode_entry(session_id, _text(raw_id), fields)
            if event is not None:
                events.append(event)
        return events

    async def last_id(self, session_id: str) -> str:
        """The id of the session's newest stored event, or "0-0" if it has none."""
        newest = await self.redis.xrevrange(self.keys.events(session_id), "+", "-", count=1)
        return _text(newest[0][0]) if newest else "0-0"

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed

    async def close(self) -> None:
        """Stop subscriptions (within ``block_ms``) and close the client if the bus owns it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            await self.redis.aclose()


class _RedisSubscription(Subscription):
    """XREAD BLOCK in a loop from the last id seen; retries a dropped connection."""

    max_failures = 5

    def __init__(self, bus: RedisEventBus, session_id: str, after: str | None) -> None:
        self._bus = bus
        self._session_id = session_id
        self._key = bus.keys.events(session_id)
        self._cursor = after
        self._ready: deque[Event] = deque()
        self._closed = False

    async def start(self) -> str:
        if self._cursor is None:
            # Live only: pin the newest id now, so that nothing published from here
            # on is missed between two blocking reads (what a bare "$" would do).
            self._cursor = await self._bus.last_id(self._session_id)
        return self._cursor

    async def aclose(self) -> None:
        self._closed = True
        self._ready.clear()

    async def __anext__(self) -> Event:
        failures = 0
        task = asyncio.current_task()
        while not self._ready:
            if self._closed or self._bus.closed:
                raise StopAsyncIteration
            cancels = task.cancelling() if task is not None else 0
            cursor = await self.start()
            try:
                response = await self._bus.redis.xread(
                    {self._key: cursor}, count=self._bus.batch, block=self._bus.block_ms
                )
                # Python 3.11's asyncio.wait_for, which redis-py writes each command
                # through, returns instead of raising when a cancel lands just as the
                # command went out (CPython gh-86296, fixed in 3.12): the read then
                # blocks on, and this loop would read again forever. Once the read is
                # back (within block_ms), end as the cancel asked.
                if task is not None and task.cancelling() > cancels:
                    raise asyncio.CancelledError
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if self._closed or self._bus.closed:
                    raise StopAsyncIteration from None
                failures += 1
                if failures > self.max_failures:
                    raise
                logger.warning("event subscription to %s: %s; retrying", self._session_id, exc)
                await asyncio.sleep(min(0.05 * 2**failures, 1.0))
                continue
            failures = 0
            for raw_id, fields in _stream_entries(response):
                self._cursor = _text(raw_id)
                event = _decode_entry(self._session_id, self._cursor, fields)
                if event is not None:
                    self._ready.append(event)
        return self._ready.popleft()


# --- memory -------------------------------------------------------------------


@dataclass(eq=False)
class _MemoryStream:
    entries: list[tuple[tuple[int, int], Event]] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    subscribers: int = 0
    touched: float = 0.0


class MemoryEventBus:
    """The in-process bus: a capped list per session and a condition to wake readers.

    For one process and one event loop (the embedded mode and tests). A session's
    events are dropped ``ttl_seconds`` after its last event unless someone is
    subscribed, like the Redis stream's TTL.
    """

    def __init__(self, maxlen: int = 10_000, ttl_seconds: float | None = 3600) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self.maxlen = maxlen
        self.ttl_seconds = ttl_seconds
        self._streams: OrderedDict[str, _MemoryStream] = OrderedDict()
        self._last = (0, 0)
        self._closed = False

    def _next_id(self) -> tuple[int, int]:
        # Like Redis: milliseconds, then a counter within one millisecond; never
        # going back even if the clock does.
        ms = max(int(time.time() * 1000), self._last[0])
        self._last = (ms, self._last[1] + 1) if ms == self._last[0] else (ms, 0)
        return self._last

    def _stream(self, session_id: str) -> _MemoryStream:
        stream = self._streams.get(session_id)
        if stream is None:
            stream = self._streams[session_id] = _MemoryStream(touched=time.monotonic())
        return stream

    def _evict_idle(self, now: float) -> None:
        # Streams are kept in order of their last event, so idle ones are at the front.
        if self.ttl_seconds is None:
            return
        for _ in range(len(self._streams)):
            session_id, stream = next(iter(self._streams.items()))
            if now - stream.touched < self.ttl_seconds:
                return
            if stream.subscribers:
                # Someone is reading it: keep it, and look past it.
                stream.touched = now
                self._streams.move_to_end(session_id)
            else:
                del self._streams[session_id]

    async def publish(self, event: E) -> E:
        """Append the event to its session's list; return it with its ``id``."""
        if self._closed:
            raise RuntimeError("the event bus is closed")
        key = self._next_id()
        published = event.model_copy(update={"id": f"{key[0]}-{key[1]}"})
        now = time.monotonic()
        stream = self._stream(event.session_id)
        stream.entries.append((key, published))  # type: ignore[arg-type]
        if len(stream.entries) > self.maxlen:
            del stream.entries[: len(stream.entries) - self.maxlen]
        stream.touched = now
        self._streams.move_to_end(event.session_id)
        self._evict_idle(now)
        async with stream.changed:
            stream.changed.notify_all()
        return published

    def subscribe(self, session_id: str, after: str | None = None) -> Subscription:
        """Events of a session: after ``after`` (an event id; "0" for all) then live."""
        start = _check_after(after)
        stream = self._stream(session_id)
        if start is None:
            cursor = stream.entries[-1][0] if stream.entries else self._last
        else:
            cursor = parse_stream_id(start)
        return _MemorySubscription(self, session_id, cursor)

    async def read(
        self, session_id: str, after: str = "0", count: int | None = None
    ) -> list[Event]:
        """The events stored after ``after`` (no waiting), oldest first."""
        # Checked first, so that a bad id is refused as the Redis bus refuses it.
        cursor = parse_stream_id(after)
        stream = self._streams.get(session_id)
        if stream is None:
            return []
        found = _after(stream, cursor)
        return [event for _key, event in (found if count is None else found[:count])]

    async def close(self) -> None:
        """Wake every subscriber so that it ends; publishing afterwards fails."""
        self._closed = True
        for stream in list(self._streams.values()):
            async with stream.changed:
                stream.changed.notify_all()


def _after(stream: _MemoryStream, cursor: tuple[int, int]) -> list[tuple[tuple[int, int], Event]]:
    start = bisect.bisect_right(stream.entries, cursor, key=lambda entry: entry[0])
    return stream.entries[start:]


class _MemorySubscription(Subscription):
    def __init__(self, bus: MemoryEventBus, session_id: str, cursor: tuple[int, int]) -> None:
        self._bus = bus
        self._session_id = session_id
        self._cursor = cursor
        self._ready: deque[Event] = deque()
        self._closed = False
        self._stream = bus._stream(session_id)
        self._stream.subscribers += 1

    async def start(self) -> str:
        return f"{self._cursor[0]}-{self._cursor[1]}"

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._stream.subscribers -= 1
            async with self._stream.changed:
                self._stream.changed.notify_all()

    async def __anext__(self) -> Event:
        while not self._ready:
            if self._closed or self._bus._closed:
                await self.aclose()
                raise StopAsyncIteration
            async with self._stream.changed:
                found = _after(self._stream, self._cursor)
                if not found:
                    await self._stream.changed.wait()
                    continue
            self._ready.extend(event for _key, event in found)
            self._cursor = found[-1][0]
        return self._ready.popleft()
