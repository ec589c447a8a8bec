"""How reactq talks to Redis: retries that ride out a restart or a failover, the
Lua scripts it runs (each a ``.lua`` file beside the module that runs it), and a
Redis Cluster behind a ``redis+cluster://`` (or ``rediss+cluster://``) URL.

A cluster URL names any node of the cluster; the client learns the others from
it. ``connect`` then returns redis-py's ``RedisCluster``, which routes each
command (and each script, by its keys) to the node that owns the slot, and
follows the cluster when slots move or a replica takes over.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from typing import Any, cast

import redis as redis_sync
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ClusterDownError, ReadOnlyError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from reactq.shared.redis_urls import is_cluster_url, node_url


def text(value: Any) -> str:
    """A Redis reply (bytes or str) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def lua_source(module: str, *names: str) -> str:
    """The files ``<name>.lua`` beside the module named ``module`` (pass
    ``__name__``), joined in the order given.

    Preludes (files of ``local function``s and locals) come first, then the
    script that uses them: one chunk, so one atomic call. Modules read their
    scripts once, at import; ``Redis.register_script`` then sends only the SHA on
    each call (and the source again only after a ``SCRIPT FLUSH``).
    """
    root = resources.files(module.rpartition(".")[0])
    source = "\n".join(root.joinpath(f"{name}.lua").read_text(encoding="utf-8") for name in names)
    _SOURCES.add(source)
    return source


def lua_join(*sources: str) -> str:
    """``lua_source``'s of several modules' files as one chunk (a script whose
    preludes live beside other modules), preloaded like them."""
    source = "\n".join(sources)
    _SOURCES.add(source)
    return source


_SOURCES: set[str] = set()


async def preload_scripts(redis: Redis) -> int:
    """Load every script ``lua_source`` has read (on a cluster, on every primary);
    returns how many. A worker calls this before its first turn: otherwise its first
    burst of calls meets NOSCRIPT together and loads each script many times over,
    which redis-py's cluster client does not always survive."""
    for source in sorted(_SOURCES):
        await redis.script_load(source)
    return len(_SOURCES)


ONCE_TTL_SECONDS = 120
"""How long a call of a script that acts once (``once.lua``) keeps its reply for a
repeat. redis-py resends a call at most ``RETRIES`` times, each after at most its
socket timeout (5 s by default) and a backoff of at most a second: about 36 s from the
first send to the last. A server paused meanwhile runs every copy when it resumes, the
first of them keeping the reply, so the window counts from the first run."""

RETRIES = 5

REDIS_OUTAGE: tuple[type[Exception], ...] = (
    RedisConnectionError,  # also BusyLoadingError: a restarted server loading its data
    RedisTimeoutError,
    ReadOnlyError,  # a replica during a failover
    ClusterDownError,
    TryAgainError,
)
"""The Redis errors that say the server is away for now (restarting, loading, paused,
failing over), not that the call was wrong: a turn that meets one is not ended but
left in its running slot, and runs again (docs/architecture.md, "Redis outages")."""
"""How many times ``resilient_options`` resends a command whose connection broke."""


def once_key_id() -> str:
    """A fresh name for one call of a script that acts once (``Keys.once``): each
    call has its own, and redis-py's resends of it carry the same one."""
    return os.urandom(8).hex()


def resilient_options() -> dict[str, Any]:
    """Client options: a command whose connection broke (Redis restarted, a pooled
    socket went stale) is retried on a fresh connection, with jittered backoff up
    to about two seconds in all, before the error reaches the caller.

    A resent command may have run already (its reply was lost with the connection),
    so every script that publishes or pushes is safe to run twice: it acts once per
    call (``once.lua``), or its second run changes nothing (docs/architecture.md,
    "Redis outages")."""
    return {
        "retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=RETRIES),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "health_check_interval": 30,
    }


def connect(url: str, max_connections: int, *, blocking: bool = False) -> Redis:
    """A client on ``url`` with ``resilient_options``; ``blocking`` pools wait for a
    free connection instead of failing when all are in use.

    For a cluster URL, a ``RedisCluster`` (typed as ``Redis``: it answers every
    command reactq sends, with ``max_connections`` per node, and raises rather
    than waits when they are all in use).
    """
    if is_cluster_url(url):
        cluster = RedisCluster.from_url(
            node_url(url), max_connections=max_connections, **resilient_options()
        )
        return cast(Redis, cluster)
    if blocking:
        pool = BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=30, **resilient_options()
        )
        return Redis.from_pool(pool)
    return Redis.from_url(url, max_connections=max_connections, **resilient_options())


def forget_namespace(url: str, namespace: str) -> int:
    """Delete every Redis key of a namespace, Celery's queue bindings for it, and
    its messages left unacknowledged in kombu's shared ``unacked`` hash (kombu
    would otherwise put them back on their queues hours later). For throwaway
    namespaces: a demo's, a benchmark's, a test run's. Returns the keys removed."""
    if is_cluster_url(url):
        return _forget_cluster_namespace(url, namespace)
    client = redis_sync.Redis.from_url(url)
    removed = 0
    try:
        patterns = (
            f"{namespace}*",
            f"_kombu.binding.{namespace}*",
            f"_kombu.binding_permanent.{namespace}*",
            # The namespace's remote-control replies (Keys.celery_control).
            f"_kombu.binding.reply.{namespace}*",
        )
        for pattern in patterns:
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                removed += int(client.delete(*keys))
        for tag, raw in client.hscan_iter("unacked", count=1000):
            try:
                routing_key = json.loads(raw)[2]
            except (ValueError, IndexError, TypeError):
                continue
            if isinstance(routing_key, str) and routing_key.startswith(namespace):
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)
    finally:
        client.close()
    return removed


def _forget_cluster_namespace(url: str, namespace: str) -> int:
    """``forget_namespace`` on a cluster: every primary is scanned, and keys are
    deleted one at a time (a multi-key DEL may not span slots). A cluster is never
    the broker, so it holds no kombu bindings."""
    cluster = redis_sync.RedisCluster.from_url(node_url(url))
    try:
        keys = list(cluster.scan_iter(match=f"{namespace}*", count=1000))
        return sum(int(cluster.delete(key)) for key in keys)
    finally:
        cluster.close()
