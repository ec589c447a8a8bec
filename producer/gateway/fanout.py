"""One pub/sub connection per gateway process, fanned out to its SSE clients.

``Fanout`` subscribes to a session's channel when its first client arrives and
unsubscribes when its last one leaves (reference-counted), so a gateway holds
one Redis connection for live events however many browsers watch.

Each client gets a buffer bounded in events and in bytes. A client takes
everything buffered at once, so one that keeps up never holds more than what
arrived since its last turn; one that falls ``buffer`` events or
``buffer_bytes`` bytes behind is cut off (``Listener.overflowed``) rather than
letting memory grow: it resumes from its last event id like any other dropped
connection. The reader hands out at most a fraction of a buffer before letting
the clients run, so a burst read off the socket in one go cannot overflow
clients that were never given a turn to take it.

Every message is parsed once, in the reader, into a ready-to-send ``Frame``
whose bytes every client shares; big frames are also remembered (weakly) so
clients replaying the same stored event share one copy (``FrameCache``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections import deque
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from reactq.shared.keys import Keys

logger = logging.getLogger(__name__)

SHARED_FRAME_BYTES = 64 * 1024
"""Frames at least this big are shared between clients replaying the same event."""


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Frame:
    """One event as it goes out on an SSE stream."""

    id: str
    """The event's stream id."""
    type: str
    """The event's type (the SSE ``event:`` field)."""
    turn_id: str
    """The turn it belongs to (for ``?turn_id=`` filtering)."""
    message: bytes
    """The whole SSE message: ``id:``, ``event:`` and ``data:`` (the event's JSON, with
    its id) lines. Compact JSON has no newline, so one ``data:`` line."""

    @property
    def size(self) -> int:
        """Bytes on the wire (what a client's byte cap counts)."""
        return len(self.message)

    @classmethod
    def _build(
        cls, event_id: str, head: dict[str, object], body: list[bytes | memoryview]
    ) -> Frame:
        kind, turn_id = str(head["type"]), str(head["turn_id"])
        # One allocation of the final size: a 10 MB event costs 10 MB, not a few copies.
        message = b"".join([f"id: {event_id}\nevent: {kind}\ndata: ".encode(), *body, b"\n\n"])
        return cls(event_id, kind, turn_id, message)

    @classmethod
    def parse(cls, raw: bytes | str) -> Frame | None:
        """A frame from an event's JSON with its ``id`` (a live message); None if it is
        not one."""
        data = raw.encode() if isinstance(raw, str) else raw
        try:
            head = json.loads(data)
            return cls._build(str(head["id"]), head, [data])
        except (ValueError, KeyError, TypeError):
            return None

    @classmethod
    def stored(cls, event_id: str, payload: bytes | str) -> Frame | None:
        """A frame from a stream entry: its id and its JSON without the id, spliced the
        way the publish script splices it, so replayed and live bytes match."""
        data = payload.encode() if isinstance(payload, str) else payload
        if not data.startswith(b"{"):
            return None
        try:
            head = json.loads(data)
            body: list[bytes | memoryview] = [
                b'{"id":"',
                event_id.encode(),
                b'",',
                memoryview(data)[1:],
            ]
            return cls._build(event_id, head, body)
        except (ValueError, KeyError, TypeError):
            return None


class FrameCache:
    """Big frames still held by some client, by session and id (weakly: a frame is
    forgotten when the last client lets go of it)."""

    def __init__(self) -> None:
        self._frames: weakref.WeakValueDictionary[tuple[str, str], Frame] = (
            weakref.WeakValueDictionary()
        )

    def get(self, session_id: str, event_id: str) -> Frame | None:
        """The frame if a client still holds it."""
        return self._frames.get((session_id, event_id))

    def share(self, session_id: str, frame: Frame) -> Frame:
        """``frame``, or the equal one already held; small frames are not kept."""
        if frame.size < SHARED_FRAME_BYTES:
            return frame
        return self._frames.setdefault((session_id, frame.id), frame)


class Listener:
    """One SSE client's view of a session's live events: a buffer bounded in events
    and in bytes."""

    def __init__(self, session_id: str, buffer: int, buffer_bytes: int) -> None:
        self.session_id = session_id
        self.max_frames = buffer
        """Frames it may hold."""
        self.max_bytes = buffer_bytes
        """Bytes it may hold (a single bigger frame excepted)."""
        self.overflowed = False
        """True once the client fell too far behind (it was cut off)."""
        self.closed = False
        """True once the fan-out stopped feeding it (overflow, reset or shutdown)."""
        self._frames: deque[Frame] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()

    @property
    def pending(self) -> int:
        """Frames buffered and not taken yet."""
        return len(self._frames)

    def offer(self, frame: Frame) -> None:
        """Buffer a frame; a full buffer cuts the client off.

        A frame is always accepted into an empty buffer, however big: a client that
        keeps up must get past an event larger than the cap, or it would be cut at
        the same event on every resume.
        """
        if self.closed:
            return
        if self._frames and (
            len(self._frames) >= self.max_frames or self._bytes + frame.size > self.max_bytes
        ):
            self.overflowed = True
            self.end()
            return
        self._frames.append(frame)
        self._bytes += frame.size
        self._ready.set()

    def end(self) -> None:
        """Stop: ``take`` returns None once the buffered frames are read (at once when
        the client was cut off: it resumes from its last id anyway)."""
        if self.closed:
            return
        self.closed = True
        if self.overflowed:
            self._frames.clear()
            self._bytes = 0
        self._ready.set()

    async def _wait(self, timeout: float) -> bool:
        """True once a frame is buffered; False at the end; TimeoutError after ``timeout``."""
        if not self._frames and not self.closed:
            self._ready.clear()
            # asyncio.timeout, not wait_for: no task per wait, so a woken client runs
            # in the loop's next turn.
            async with asyncio.timeout(timeout):
                await self._ready.wait()
        return bool(self._frames) and not self.overflowed

    async def take(self, timeout: float) -> list[Frame] | None:
        """Every buffered frame, oldest first (waiting up to ``timeout`` s for one, then
        TimeoutError); None at the end."""
        if not await self._wait(timeout):
            return None
        frames = list(self._frames)
        self._frames.clear()
        self._bytes = 0
        return frames

    async def get(self, timeout: float) -> Frame | None:
        """The next frame only; raises TimeoutError after ``timeout`` s; None at the end."""
        if not await self._wait(timeout):
            return None
        frame = self._frames.popleft()
        self._bytes -= frame.size
        return frame


@dataclass(eq=False)
class _Channel:
    session_id: str
    listeners: set[Listener] = field(default_factory=set)
    subscribed: bool = False
    """What we last asked the server (SUBSCRIBE sent and no UNSUBSCRIBE since)."""
    acks_due: int = 0
    """Confirmations not yet read; the server agrees with ``subscribed`` at zero."""
    settled: asyncio.Event = field(default_factory=asyncio.Event)


class Fanout:
    """Reference-counted channel subscriptions on one pub/sub connection."""

    def __init__(
        self, redis: Redis, keys: Keys, buffer: int = 1000, buffer_bytes: int = 8 << 20
    ) -> None:
        if buffer < 1 or buffer_bytes < 1:
            raise ValueError("buffer and buffer_bytes must each be at least 1")
        self.redis = redis
        self.keys = keys
        self.buffer = buffer
        self.buffer_bytes = buffer_bytes
        self.frames = FrameCache()
        """Big frames clients hold, for replays to share."""
        # Hand out at most an eighth of a buffer per loop turn: clients that keep up
        # take it all in their next turn, long before theirs fills.
        self._turn_frames = max(1, buffer // 8)
        self._turn_bytes = max(1, buffer_bytes // 8)
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
        listener = Listener(session_id, self.buffer, self.buffer_bytes)
        async with self._lock:
            channel = self._channels.setdefault(name, _Channel(session_id))
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
        handed_frames = handed_bytes = 0
        try:
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is None:
                    handed_frames = handed_bytes = 0
                    continue
                handed_bytes += self._dispatch(message)
                handed_frames += 1
                # Messages already read off the socket come back without the loop
                # turning: without this, a burst fills every client's buffer before
                # any client gets a turn to take from it.
                if handed_frames >= self._turn_frames or handed_bytes >= self._turn_bytes:
                    handed_frames = handed_bytes = 0
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._closed:
                return
            # Live events may have been lost while the connection was down: cut every
            # client off (each resumes from its last id) and start over on a new one.
            logger.warning("gateway pub/sub connection failed (%s); resetting", exc)
            await self._reset()

    def _dispatch(self, message: dict[str, object]) -> int:
        """Hand a message to its channel's listeners; returns the bytes each one got."""
        kind = message.get("type")
        raw_channel = message.get("channel")
        name = raw_channel.decode() if isinstance(raw_channel, bytes) else str(raw_channel)
        channel = self._channels.get(name)
        if channel is None:
            return 0
        if kind == "message":
            data = message.get("data")
            frame = Frame.parse(data if isinstance(data, bytes) else str(data))
            if frame is None:
                logger.warning("skipping an unreadable event on %s", name)
                return 0
            frame = self.frames.share(channel.session_id, frame)
            for listener in list(channel.listeners):
                listener.offer(frame)
            return frame.size
        elif kind in ("subscribe", "unsubscribe"):
            channel.acks_due = max(0, channel.acks_due - 1)
            if channel.acks_due == 0:
                channel.settled.set()
                if not channel.subscribed and not channel.listeners:
                    del self._channels[name]
        return 0

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
