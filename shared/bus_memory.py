"""MemoryEventBus: a turn's events in this process (the embedded mode's bus, and tests').

The contract it keeps (``EventBus``, stream ids, ``Subscription``) is ``shared/bus.py``.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from reactq.shared.bus import E, Subscription, check_after, parse_stream_id
from reactq.shared.events import Event

__all__ = ["MemoryEventBus"]


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
        start = check_after(after)
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
