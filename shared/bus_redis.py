"""RedisEventBus: a turn's events on a capped Redis stream per session (the pool's bus).

The contract it keeps (``EventBus``, stream ids, ``Subscription``) is ``shared/bus.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from reactq.shared.bus import (
    E,
    Guard,
    PublishGuard,
    ScriptGuard,
    Subscription,
    check_after,
    parse_stream_id,
)
from reactq.shared.errors import SchemaVersionError
from reactq.shared.events import BaseEvent, Event, parse_event
from reactq.shared.keys import DEFAULT_CLUSTER_SHARDS, Keys
from reactq.shared.redis_client import connect, lua_join, lua_source, once_key_id
from reactq.shared.redis_urls import is_cluster_url

__all__ = ["RedisEventBus"]

logger = logging.getLogger("reactq.shared.bus")

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
        return _RedisSubscription(self, session_id, check_after(after))

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
