"""How reactq connects to Redis: retries that ride out a restart or a failover."""

from __future__ import annotations

from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


def resilient_options() -> dict[str, Any]:
    """Client options: a command whose connection broke (Redis restarted, a pooled
    socket went stale) is retried on a fresh connection, with jittered backoff up
    to about two seconds in all, before the error reaches the caller."""
    return {
        "retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=5),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "health_check_interval": 30,
    }


def connect(url: str, max_connections: int, *, blocking: bool = False) -> Redis:
    """A client on ``url`` with ``resilient_options``; ``blocking`` pools wait for a
    free connection instead of failing when all are in use."""
    if blocking:
        pool = BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=30, **resilient_options()
        )
        return Redis.from_pool(pool)
    return Redis.from_url(url, max_connections=max_connections, **resilient_options())
