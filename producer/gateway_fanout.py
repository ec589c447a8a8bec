"""One pub/sub connection per gateway process, fanned out to its SSE clients.

``Fanout`` subscribes to a session's channel when its first client arrives and
unsubscribes when its last one leaves (reference-counted), so a gateway holds
one Redis connection for live events however many browsers watch. Each client
gets a bounded buffer; a client that falls ``buffer`` events behind is cut off
(``Listener.overflowed``) rather than letting memory grow: it resumes from its
last event id like any other dropped connection.

Every message is parsed once, in the reader, into a ready-to-send ``Frame``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from reactq.shared.keys import Keys

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Frame:
    """One event as it goes out on an SSE stream."""

    id: str
    """The event's stream id."""
    type: str
    """The event's type (the SSE ``event:`` field)."""
    turn_id: str
    """The turn it belongs to (for ``?turn_id=`` filtering)."""
    data: str
    """The event's JSON, with its id."""

    def encode(self) -> bytes:
        """The SSE message (compact JSON has no newline, so one ``data:`` line)."""
        return f"id: {self.id}\nevent: {self.type}\ndata: {self.data}\n\n".encode()

    @classmethod
    def parse(cls, raw: str) -> Frame | None:
        """A frame from an event's JSON (with ``id``); None if it is not one."""
        try:
            data = json.loads(raw)
            return cls(str(data["id"]), str(data["type"]), str(data["turn_id"]), raw)
        except (ValueError, KeyError, TypeError):
            return None


class Listener:
    """One SSE client's view of a session's live events: a bounded buffer."""

    def __init__(self, session_id: str, buffer: int) -> None:
        self.session_id = session_id
        self.overflowed = False
        """True once the client fell too far behind (it was cut off)."""
        self.closed = False
        """True once the fan-out stopped feeding it (overflow, reset or shutdown)."""
        self._queue: asyncio.Queue[Frame | None] = asyncio.Queue(maxsize=buffer)

    def offer(self, frame: Frame) -> None:
        """Buffer a frame; a full buffer cuts the client off."""
        if self.closed:
            return
        try:
            self._queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.overflowed = True
            self.end()

    def end(self) -> None:
        """Stop: ``get`` returns None once the buffered frames are read."""
        if self.closed:
            return
        self.closed = True
        # Make room for the end marker: a cut-off client resumes from its last id anyway.
        if self._queue.full():
            self._drop_all()
        self._queue.put_nowait(None)

    def _drop_all(self) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()

    async def get(self, timeout: float) -> Frame | None:
        """The next frame; raises TimeoutError after ``timeout`` s; None at the end."""
        if self.overflowed:
            return None
        return await asyncio.wait_for(self._queue.get(), timeout)


@dataclass(eq=False)
class _Channel:
    listeners: set[Listener] = field(default_factory=set)
    subscribed: bool = False
    """What we last asked the server (SUBSCRIBE sent and no UNSUBSCRIBE since)."""
    acks_due: int = 0
    """Confirmations not yet read; the server agrees with ``subscribed`` at zero."""
    settled: asyncio.Event = field(default_factory=asyncio.Event)


class Fanout:
    """Reference-counted channel subscriptions on one pub/sub connection."""

    def __init__(self, redis: Redis, keys: Keys, buffer: int = 1000) -> None:
        if buffer < 1:
            raise ValueError("buffer must be at least 1")
        self.redis = redis
        self.keys = keys
        self.buffer = buffer
        self._channels: dict[str, _Channel] = {}
        self._lock = asyncio.Lock()
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def channel_count(self) -> int:
        """Channels with at least one listener."""
        return sum(1 for ch in self._channels.values() if ch.listeners)

    @property
    def listener_count(self) -> int:
        """Listeners attached, over all sessions."""
        return sum(len(ch.listeners) for ch in self._channels.values())

    async def start(self) -> None:
        """Open the pub/sub connection and start reading it."""
        pubsub = self.redis.pubsub()
        try:
            await pubsub.connect()
        except BaseException:
            await pubsub.aclose()
            raise
        self._pubsub = pubsub
        self._reader = asyncio.create_task(self._read(pubsub), name="reactq-fanout")

    async def attach(self, session_id: str, timeout: float = 10.0) -> Listener:
        """A listener of the session's channel; returns once the server has subscribed.

        Events published after this returns reach the listener, so a caller that
        then replays the stream misses nothing between replay and live.
        """
        if self._closed or self._pubsub is None:
            raise RuntimeError("the fan-out is not running")
        name = self.keys.channel(session_id)
        listener = Listener(session_id, self.buffer)
        async with self._lock:
            channel = self._channels.setdefault(name, _Channel())
            channel.listeners.add(listener)
            if not channel.subscribed:
                channel.subscribed = True
                channel.acks_due += 1
                channel.settled.clear()
                await self._pubsub.subscribe(name)
        try:
            await asyncio.wait_for(channel.settled.wait(), timeout)
        except BaseException:
            await self.detach(listener)
            raise
        return listener

    async def detach(self, listener: Listener) -> None:
        """Forget the listener; the last one of a channel unsubscribes it."""
        listener.end()
        name = self.keys.channel(listener.session_id)
        async with self._lock:
            channel = self._channels.get(name)
            if channel is None:
                return
            channel.listeners.discard(listener)
            if channel.listeners or not channel.subscribed:
                return
            channel.subscribed = False
            pubsub = self._pubsub
            if pubsub is None:
                self._channels.pop(name, None)
                return
            channel.acks_due += 1
            channel.settled.clear()
            with contextlib.suppress(RedisError, OSError):
                await pubsub.unsubscribe(name)

    async def _read(self, pubsub: PubSub) -> None:
        try:
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is not None:
                    self._dispatch(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._closed:
                return
            # Live events may have been lost while the connection was down: cut every
            # client off (each resumes from its last id) and start over on a new one.
            logger.warning("gateway pub/sub connection failed (%s); resetting", exc)
            await self._reset()

    def _dispatch(self, message: dict[str, object]) -> None:
        kind = message.get("type")
        raw_channel = message.get("channel")
        name = raw_channel.decode() if isinstance(raw_channel, bytes) else str(raw_channel)
        channel = self._channels.get(name)
        if channel is None:
            return
        if kind == "message":
            data = message.get("data")
            frame = Frame.parse(data.decode() if isinstance(data, bytes) else str(data))
            if frame is None:
                logger.warning("skipping an unreadable event on %s", name)
                return
            for listener in list(channel.listeners):
                listener.offer(frame)
        elif kind in ("subscribe", "unsubscribe"):
            channel.acks_due = max(0, channel.acks_due - 1)
            if channel.acks_due == 0:
                channel.settled.set()
                if not channel.subscribed and not channel.listeners:
                    del self._channels[name]

    async def _reset(self) -> None:
        async with self._lock:
            old = self._pubsub
            self._pubsub = None
            for channel in self._channels.values():
                for listener in channel.listeners:
                    listener.end()
                # Wake anyone waiting in attach; its listener has already ended.
                channel.settled.set()
            self._channels.clear()
            if old is not None:
                with contextlib.suppress(Exception):
                    await old.aclose()
        await self.restart()

    async def restart(self) -> None:
        """Start again, retrying every second until Redis answers (or ``close``)."""
        while not self._closed:
            try:
                await self.start()
                return
            except (RedisError, OSError) as exc:
                logger.warning("gateway pub/sub reconnect failed (%s); retrying", exc)
                await asyncio.sleep(1.0)

    async def close(self) -> None:
        """End every listener and close the connection."""
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        for channel in self._channels.values():
            for listener in channel.listeners:
                listener.end()
            channel.settled.set()
        self._channels.clear()
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            self._pubsub = None
