"""SessionLock: a Redis lease per session, with a fencing token.

Whoever holds a session's lease runs its turns. Each grant gets a token from the
session's INCR counter, so tokens only grow; the state store refuses a write
that carries a token older than the newest it has seen (``claim`` /
``commit_turn``), so a holder that lost its lease (paused, partitioned) cannot
write over the next one.

A sorted set (``keys.lease_deadlines``) holds each lease's deadline in Redis
server milliseconds; the reaper asks it for ``expired`` sessions. It is one key
for the whole namespace, so the scripts below touch keys of two cluster slots:
fine on one Redis server (what reactq runs on), not on Redis Cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reactq.shared.keys import Keys
from reactq.shared.redis_client import NOW_MS_LUA, text

if TYPE_CHECKING:
    from redis.asyncio import Redis

# KEYS: lease, fence, deadlines; ARGV: ttl_ms, owner, session_id
_ACQUIRE = (
    NOW_MS_LUA
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[2], 'PX', ARGV[1])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[1]), ARGV[3])
return token
"""
)

# KEYS: lease, fence, deadlines; ARGV: token, ttl_ms, session_id, owner.
# A lease that expired while nobody else took it (the fence counter still equals
# our token) is taken back: no newer holder exists, so nothing is unsafe.
_RENEW = (
    NOW_MS_LUA
    + """
local value = redis.call('GET', KEYS[1])
if value then
  if string.match(value, '^(%d+):') ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[4], 'PX', ARGV[2])
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[3])
return 1
"""
)

# KEYS: lease, deadlines; ARGV: token, session_id
_RELEASE = """
local value = redis.call('GET', KEYS[1])
if not value or string.match(value, '^(%d+):') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
"""

# KEYS: deadlines; ARGV: limit, now_ms ('' for the server's clock)
_EXPIRED = (
    NOW_MS_LUA
    + """
if ARGV[2] ~= '' then now = tonumber(ARGV[2]) end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
"""
)

# KEYS: lease, deadlines; ARGV: session_id
_FORGET = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return redis.call('ZREM', KEYS[2], ARGV[1])
"""


class SessionLock:
    """Leases on sessions for one owner (a worker process), each with a fencing token.

    ``acquire`` returns the token (or None when the session is busy); pass it to
    ``renew``, ``release`` and the state store's fenced writes.
    """

    def __init__(self, redis: Redis, keys: Keys, ttl_seconds: float, owner: str) -> None:
        if ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be positive, got {ttl_seconds}")
        if not owner:
            raise ValueError("owner must be a non-empty name (host and pid, say)")
        self.redis = redis
        self.keys = keys
        self.ttl_seconds = ttl_seconds
        self.owner = owner
        self._ttl_ms = max(1, int(ttl_seconds * 1000))
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._expired = redis.register_script(_EXPIRED)
        self._forget = redis.register_script(_FORGET)

    async def acquire(self, session_id: str) -> int | None:
        """Take the session's lease: its new fencing token, or None if someone holds it."""
        token = await self._acquire(
            keys=[
                self.keys.lease(session_id),
                self.keys.fence(session_id),
                self.keys.lease_deadlines,
            ],
            args=[self._ttl_ms, self.owner, session_id],
        )
        return None if token is None else int(token)

    async def renew(self, session_id: str, token: int) -> bool:
        """Extend the lease by the TTL; False if it was lost to a newer token."""
        renewed = await self._renew(
            keys=[
                self.keys.lease(session_id),
                self.keys.fence(session_id),
                self.keys.lease_deadlines,
            ],
            args=[str(token), self._ttl_ms, session_id, self.owner],
        )
        return bool(renewed)

    async def release(self, session_id: str, token: int) -> bool:
        """Give the lease up if ``token`` still holds it; False if it had been lost."""
        released = await self._release(
            keys=[self.keys.lease(session_id), self.keys.lease_deadlines],
            args=[str(token), session_id],
        )
        return bool(released)

    async def holder(self, session_id: str) -> tuple[int, str] | None:
        """The current holder's (token, owner), or None if the lease is free."""
        value = await self.redis.get(self.keys.lease(session_id))
        if value is None:
            return None
        token, _, owner = text(value).partition(":")
        return int(token), owner

    async def expired(self, now_ms: int | None = None, limit: int = 100) -> list[str]:
        """Sessions whose lease deadline has passed (server time unless ``now_ms``)."""
        found = await self._expired(
            keys=[self.keys.lease_deadlines],
            args=[limit, "" if now_ms is None else int(now_ms)],
        )
        return [text(session_id) for session_id in found]

    async def forget(self, session_id: str) -> bool:
        """Drop the session's deadline if its lease is free (the reaper, once handled)."""
        return bool(
            await self._forget(
                keys=[self.keys.lease(session_id), self.keys.lease_deadlines],
                args=[session_id],
            )
        )
