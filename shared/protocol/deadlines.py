"""The session deadline set: when the reaper must look at a session.

``keys.lease_deadlines(session)`` is a sorted set, session id -> a deadline in
Redis server milliseconds (one set, or on a Redis Cluster one per shard: the
reads below go through every set, the writes to the session's). Every session
with work has one: set at submit (unless it has one), pushed on by each lease
grant and renewal, dropped on release. A
deadline that passes means nobody is taking care of the session: its holder
died, or its drain task was lost with a worker. Every worker's reaper asks for
the passed ones (one cheap ZRANGEBYSCORE, never a key scan) and re-dispatches
them (docs/architecture.md, "Session protocol").

The set has one writer: the functions of ``deadlines.lua``. The queue's submit
and the lease's scripts include them, so a session's deadline changes in the same
atomic call as its queue or lease; this module runs the rest (reap, watch) and
the reads.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from reactq.shared.keys import Keys
from reactq.shared.redis_client import lua_source, text

_REAP = lua_source(__name__, "now_ms", "deadlines", "deadline_reap")
_WATCH = lua_source(__name__, "now_ms", "deadlines", "deadline_watch")
_EXPIRED = lua_source(__name__, "now_ms", "deadline_expired")
_FORGET = lua_source(__name__, "deadlines", "deadline_forget")


class Deadlines:
    """The reaper's side of the deadline set."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._reap = redis.register_script(_REAP)
        self._watch = redis.register_script(_WATCH)
        self._expired = redis.register_script(_EXPIRED)
        self._forget = redis.register_script(_FORGET)

    async def reap(self, limit: int = 100, retry_seconds: float = 30.0) -> list[str]:
        """Sessions whose deadline passed, each pushed ``retry_seconds`` on, so that
        one reaper re-dispatches it and another tries again if that one fails."""
        return await self._every_set(self._reap, limit, int(retry_seconds * 1000))

    async def watch(self, session_id: str, delay_seconds: float = 0.0) -> None:
        """Put the session under the reaper's eye: due after ``delay_seconds`` unless a
        lease holder pushes its deadline on first."""
        await self._watch(
            keys=[self.keys.lease_deadlines(session_id)],
            args=[int(delay_seconds * 1000), session_id],
        )

    async def expired(self, now_ms: int | None = None, limit: int = 100) -> list[str]:
        """Sessions whose deadline has passed (server time unless ``now_ms``), unchanged."""
        return await self._every_set(self._expired, limit, "" if now_ms is None else int(now_ms))

    async def _every_set(self, script: Any, limit: int, arg: int | str) -> list[str]:
        """``script`` (ARGV: limit, ``arg``) over each deadline set (one, or one per
        cluster shard) until ``limit`` sessions are found."""
        found: list[str] = []
        for deadlines in self.keys.deadline_sets():
            if len(found) >= limit:
                break
            reply = await script(keys=[deadlines], args=[limit - len(found), arg])
            found += [text(session_id) for session_id in reply]
        return found

    async def forget(self, session_id: str) -> bool:
        """Drop the session's deadline if its lease is free; True if one was dropped."""
        return bool(
            await self._forget(
                keys=[self.keys.lease(session_id), self.keys.lease_deadlines(session_id)],
                args=[session_id],
            )
        )
