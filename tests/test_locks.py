"""SessionLease and the deadline set on a real Redis: exclusivity, fencing tokens,
renewal, expiry."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from reactq.shared.keys import Keys
from reactq.shared.protocol.deadlines import Deadlines
from reactq.shared.protocol.lease import SessionLease


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


def lock(redis: Redis, keys: Keys, owner: str, ttl: float = 10.0) -> SessionLease:
    return SessionLease(redis, keys, ttl_seconds=ttl, owner=owner)


async def wait_until_free(a: SessionLease, session_id: str) -> None:
    """Wait (at most 5 s) for the lease to lapse: on its state, not a fixed sleep."""
    async with asyncio.timeout(5):
        while await a.holder(session_id) is not None:  # noqa: ASYNC110 - polls Redis
            await asyncio.sleep(0.02)


async def test_acquire_is_exclusive_and_release_frees(redis: Redis, keys: Keys) -> None:
    s = sid()
    a, b = lock(redis, keys, "a"), lock(redis, keys, "b:host:1")
    token = await a.acquire(s)
    assert token is not None
    assert await b.acquire(s) is None
    assert await a.holder(s) == (token, "a")
    assert await b.release(s, token + 1) is False
    assert await a.release(s, token) is True
    assert await a.holder(s) is None
    assert await a.release(s, token) is False
    token_b = await b.acquire(s)
    assert token_b is not None and token_b > token
    assert await a.holder(s) == (token_b, "b:host:1")  # owners may contain ':'
    await b.release(s, token_b)


async def test_only_one_of_many_concurrent_acquirers_wins(redis: Redis, keys: Keys) -> None:
    s = sid()
    locks = [lock(redis, keys, f"w{i}") for i in range(20)]
    tokens = await asyncio.gather(*(lk.acquire(s) for lk in locks))
    winners = [t for t in tokens if t is not None]
    assert len(winners) == 1
    await locks[0].release(s, winners[0])


async def test_tokens_strictly_increase(redis: Redis, keys: Keys) -> None:
    s = sid()
    a = lock(redis, keys, "a")
    seen = []
    for _ in range(5):
        token = await a.acquire(s)
        assert token is not None
        seen.append(token)
        assert await a.release(s, token)
    assert seen == sorted(set(seen)) and seen[0] >= 1


async def test_renew_extends_and_fails_once_lost(redis: Redis, keys: Keys) -> None:
    s = sid()
    a, b = lock(redis, keys, "a", ttl=0.3), lock(redis, keys, "b", ttl=10)
    token = await a.acquire(s)
    assert token is not None
    assert await a.renew(s, token)
    assert 0 < await redis.pttl(keys.lease(s)) <= 300
    assert not await a.renew(s, token + 1)
    await wait_until_free(a, s)
    # Nobody took it meanwhile, so the holder may take its own lease back.
    assert await a.renew(s, token)
    assert await a.holder(s) == (token, "a")
    await wait_until_free(a, s)
    newer = await b.acquire(s)
    assert newer is not None and newer > token
    assert not await a.renew(s, token)
    assert not await a.release(s, token)  # the old token never deletes the new lease
    assert await b.holder(s) == (newer, "b")
    assert await b.release(s, newer)


async def test_expired_lists_lapsed_deadlines(redis: Redis, keys: Keys) -> None:
    s_short, s_long = sid(), sid()
    short, long_ = lock(redis, keys, "a", ttl=0.2), lock(redis, keys, "b", ttl=30)
    deadlines = Deadlines(redis, keys)
    t_short = await short.acquire(s_short)
    t_long = await long_.acquire(s_long)
    assert t_short is not None and t_long is not None
    assert s_short not in await deadlines.expired()
    await wait_until_free(short, s_short)
    lapsed = await deadlines.expired(limit=1000)
    assert s_short in lapsed and s_long not in lapsed
    far_future = int(time.time() * 1000) + 3_600_000
    assert {s_short, s_long} <= set(await deadlines.expired(now_ms=far_future, limit=10_000))
    # Once the reaper has dealt with it, forget drops the deadline of a free lease only.
    assert await deadlines.forget(s_short)
    assert not await deadlines.forget(s_long)
    assert s_short not in await deadlines.expired(limit=1000)
    # Release removes the deadline too.
    assert await long_.release(s_long, t_long)
    assert s_long not in await deadlines.expired(now_ms=far_future, limit=10_000)


async def test_config_is_validated(redis: Redis, keys: Keys) -> None:
    with pytest.raises(ValueError, match="ttl_seconds"):
        SessionLease(redis, keys, ttl_seconds=0, owner="a")
    with pytest.raises(ValueError, match="owner"):
        SessionLease(redis, keys, ttl_seconds=1, owner="")
