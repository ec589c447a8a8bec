"""A session's events as Server-Sent Events: replay from the stream, then live.

The client attaches to the process's fan-out *before* reading the stream, so an
event published meanwhile is buffered; live frames at or before the last
replayed id are skipped. Nothing is lost or repeated at the seam, and a client
that reconnects with ``Last-Event-ID`` resumes exactly after its last event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis

from reactq.producer.gateway_fanout import Fanout, Frame, Listener
from reactq.shared.bus import stream_id_gt
from reactq.shared.keys import Keys
from reactq.shared.redis_client import text

RETRY_MS = 1000
REPLAY_BATCH = 500
KEEPALIVE = b": keep-alive\n\n"


async def replay(
    redis: Redis, keys: Keys, session_id: str, after: str, count: int = REPLAY_BATCH
) -> tuple[list[Frame], str, bool]:
    """Stored events after ``after``, as frames shaped like live ones.

    Returns the frames, the id of the last entry read and whether more may follow.
    """
    entries: list[Any] = (
        await redis.xrange(keys.events(session_id), min=f"({after}", count=count) or []
    )
    frames = []
    for raw_id, fields in entries:
        after = text(raw_id)
        payload = fields.get(b"e", fields.get("e"))
        if payload is None:
            continue
        body = text(payload)
        # The same splice the publish script makes, so replayed and live bytes match.
        frame = Frame.parse('{"id":"' + text(raw_id) + '",' + body[1:])
        if frame is not None:
            frames.append(frame)
    return frames, after, len(entries) == count


async def last_id(redis: Redis, keys: Keys, session_id: str) -> str:
    """The newest stored event's id, or ``0-0``."""
    newest: list[Any] = await redis.xrevrange(keys.events(session_id), "+", "-", count=1) or []
    return text(newest[0][0]) if newest else "0-0"


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
        while True:
            frames, cursor, more = await replay(redis, keys, session_id, cursor)
            for frame in frames:
                if turn_id is None or frame.turn_id == turn_id:
                    yield frame.encode()
                    if turn_id is not None and frame.type == "final":
                        return
            if not more:
                break
        while True:
            try:
                live = await listener.get(heartbeat_seconds)
            except TimeoutError:
                yield KEEPALIVE
                continue
            if live is None:
                return
            if not stream_id_gt(live.id, cursor):
                continue
            cursor = live.id
            if turn_id is None or live.turn_id == turn_id:
                yield live.encode()
                if turn_id is not None and live.type == "final":
                    return
    finally:
        await fanout.detach(listener)
