"""A session's events as Server-Sent Events: replay from the stream, then live.

The client attaches to the process's fan-out *before* reading the stream, so an
event published meanwhile is buffered; live frames at or before the last
replayed id are skipped. Nothing is lost or repeated at the seam, and a client
that reconnects with ``Last-Event-ID`` resumes exactly after its last event.

Frames go out joined into pieces of up to ``PIECE`` bytes, and a bigger frame
in pieces of that size: the server's write buffer for a client that stops
reading holds one piece, not a whole event, while the event itself stays one
shared copy (``FrameCache``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from redis.asyncio import Redis

from reactq.producer.gateway.fanout import Fanout, Frame, FrameCache, Listener
from reactq.shared.bus import MAX_STREAM_ID_PART, parse_stream_id, stream_id_gt
from reactq.shared.keys import Keys
from reactq.shared.redis_client import text

RETRY_MS = 1000
REPLAY_BATCH = 500
KEEPALIVE = b": keep-alive\n\n"
PIECE = 64 * 1024
"""Largest body chunk handed to the server at once."""


async def replay(
    redis: Redis,
    keys: Keys,
    session_id: str,
    after: str,
    count: int = REPLAY_BATCH,
    cache: FrameCache | None = None,
) -> tuple[list[Frame], str, bool]:
    """Stored events after ``after``, as frames shaped like live ones.

    Returns the frames, the id of the last entry read and whether more may follow.
    With ``cache``, a big frame another client holds is shared instead of copied.
    """
    if parse_stream_id(after) == (MAX_STREAM_ID_PART, MAX_STREAM_ID_PART):
        # Nothing can follow the largest id, and XRANGE refuses an exclusive start there.
        return [], after, False
    entries: list[Any] = (
        await redis.xrange(keys.events(session_id), min=f"({after}", count=count) or []
    )
    frames = []
    for raw_id, fields in entries:
        after = text(raw_id)
        payload = fields.get(b"e", fields.get("e"))
        if payload is None:
            continue
        frame = cache.get(session_id, after) if cache is not None else None
        if frame is None:
            frame = Frame.stored(after, payload)
            if frame is None:
                continue
            if cache is not None:
                frame = cache.share(session_id, frame)
        frames.append(frame)
    return frames, after, len(entries) == count


async def last_id(redis: Redis, keys: Keys, session_id: str) -> str:
    """The newest stored event's id, or ``0-0``."""
    newest: list[Any] = await redis.xrevrange(keys.events(session_id), "+", "-", count=1) or []
    return text(newest[0][0]) if newest else "0-0"


def _wanted(frames: Iterable[Frame], turn_id: str | None) -> tuple[list[Frame], bool]:
    """The frames to send (all, or the turn's up to its final) and whether that final is
    among them (the stream then ends)."""
    if turn_id is None:
        return list(frames), False
    out = []
    for frame in frames:
        if frame.turn_id == turn_id:
            out.append(frame)
            if frame.type == "final":
                return out, True
    return out, False


def pieces(frames: Iterable[Frame], size: int = PIECE) -> Iterator[bytes]:
    """The frames' bytes: small ones joined, big ones cut, no piece over ``size``."""
    batch: list[bytes] = []
    batch_bytes = 0
    for frame in frames:
        message = frame.message
        if batch and batch_bytes + len(message) > size:
            yield b"".join(batch)
            batch, batch_bytes = [], 0
        if len(message) <= size:
            batch.append(message)
            batch_bytes += len(message)
            continue
        view = memoryview(message)
        for start in range(0, len(message), size):
            yield bytes(view[start : start + size])
    if batch:
        yield b"".join(batch)


async def event_stream(
    redis: Redis,
    keys: Keys,
    fanout: Fanout,
    listener: Listener,
    *,
    after: str | None,
    turn_id: str | None,
    heartbeat_seconds: float,
) -> AsyncIterator[bytes]:
    """SSE bytes: events after ``after`` (None: live only), then live, with keep-alives.

    ``listener`` must be attached (``fanout.attach``) before this is iterated.

    With ``turn_id`` only that turn's events are sent, and the stream ends after
    its ``final``. It also ends when the client falls too far behind or the
    gateway shuts down; the client resumes with ``Last-Event-ID``.
    """
    session_id = listener.session_id
    try:
        yield f"retry: {RETRY_MS}\n\n".encode()
        cursor = after if after is not None else await last_id(redis, keys, session_id)
        count = REPLAY_BATCH
        while True:
            frames, cursor, more = await replay(
                redis, keys, session_id, cursor, count, cache=fanout.frames
            )
            wanted, done = _wanted(frames, turn_id)
            for piece in pieces(wanted):
                yield piece
            if done:
                return
            if not more:
                break
            if frames:
                # Read about a client buffer's worth at a time: a session of big
                # events must not come back 500 at once.
                size = sum(f.size for f in frames)
                count = max(1, min(REPLAY_BATCH, listener.max_bytes * len(frames) // size))
        while True:
            try:
                live = await listener.take(heartbeat_seconds)
            except TimeoutError:
                yield KEEPALIVE
                continue
            if live is None:
                return
            fresh = [frame for frame in live if stream_id_gt(frame.id, cursor)]
            if not fresh:
                continue
            cursor = fresh[-1].id
            wanted, done = _wanted(fresh, turn_id)
            for piece in pieces(wanted):
                yield piece
            if done:
                return
    finally:
        await fanout.detach(listener)
