"""The session lease: who runs a session's turns, with a fencing token.

Whoever holds a session's lease runs its turns. Each grant gets a token from the
session's INCR counter, so tokens only grow; the state store refuses a write
that carries a token older than the newest it has seen (``claim`` /
``commit_turn``), so a holder that lost its lease (paused, partitioned) cannot
write over the next one (docs/architecture.md, "Session protocol").

Taking and renewing a lease push the session's deadline on, releasing it drops
the deadline, each in the same Lua call as the lease change (the writes
themselves are ``deadlines.lua``'s). The deadline set is one key for the whole
namespace, so these scripts touch keys of two cluster slots: fine on one Redis
server (what reactq runs on), not on Redis Cluster.
"""

from __future__ import annotations

from redis.asyncio import Redis

from reactq.shared.keys import Keys
from reactq.shared.redis_client import lua_source, text

_ACQUIRE = lua_source(__name__, "now_ms", "deadlines", "lease_take", "lease_acquire")
_RENEW = lua_source(__name__, "now_ms", "deadlines", "lease_renew")
_RELEASE = lua_source(__name__, "deadlines", "lease_token", "lease_free", "lease_release")
_RESEED = lua_source(__name__, "lease_token", "running_slot", "lease_reseed")


class SessionLease:
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
        self.ttl_ms = max(1, int(ttl_seconds * 1000))
        """The lease's TTL in milliseconds, as the scripts set it."""
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._reseed = redis.register_script(_RESEED)

    async def acquire(self, session_id: str) -> int | None:
        """Take the session's lease: its new fencing token, or None if someone holds it.
        (A drain takes it with its first turn: ``SessionQueue.take``.)"""
        token = await self._acquire(
            keys=[
                self.keys.lease(session_id),
                self.keys.fence(session_id),
                self.keys.lease_deadlines(session_id),
            ],
            args=[self.ttl_ms, self.owner, session_id],
        )
        return None if token is None else int(token)

    async def renew(self, session_id: str, token: int) -> bool:
        """Extend the lease by the TTL; False if it was lost to a newer token."""
        renewed = await self._renew(
            keys=[
                self.keys.lease(session_id),
                self.keys.fence(session_id),
                self.keys.lease_deadlines(session_id),
            ],
            args=[str(token), self.ttl_ms, session_id, self.owner],
        )
        return bool(renewed)

    async def release(self, session_id: str, token: int) -> bool:
        """Give the lease up if ``token`` still holds it; False if it had been lost."""
        released = await self._release(
            keys=[
                self.keys.lease(session_id),
                self.keys.lease_deadlines(session_id),
                self.keys.approvals(session_id),
            ],
            args=[str(token), session_id],
        )
        return bool(released)

    async def reseed(self, session_id: str, token: int, store_fence: int) -> bool:
        """The state store refused ``token`` for its newer ``store_fence``, and no
        newer holder exists: Redis lost its data and the counter started again. Set
        the counter to ``store_fence``, give the lease up and the running turn back
        (uncharged), so the next take's token is accepted; False (nothing done) when
        ``token`` no longer holds the lease or the counter gave a newer one."""
        reseeded = await self._reseed(
            keys=[
                self.keys.lease(session_id),
                self.keys.fence(session_id),
                self.keys.running(session_id),
            ],
            args=[str(token), str(store_fence)],
        )
        return bool(reseeded)

    async def holder(self, session_id: str) -> tuple[int, str] | None:
        """The current holder's (token, owner), or None if the lease is free."""
        value = await self.redis.get(self.keys.lease(session_id))
        if value is None:
            return None
        token, _, owner = text(value).partition(":")
        return int(token), owner

    async def holds(self, session_id: str, token: int) -> bool:
        """True if ``token`` holds the session's lease now."""
        holder = await self.holder(session_id)
        return holder is not None and holder[0] == token
