"""Conversation state every worker shares: the StateStore protocol and its backends.

``open_store(url)`` picks a backend by URL scheme.
"""

from __future__ import annotations

from typing import Any

from reactq.shared.errors import ConfigError
from reactq.shared.state.base import (
    TRUNK,
    BranchInfo,
    FileAction,
    SessionInfo,
    SessionPage,
    SessionRecord,
    SessionUsage,
    StateStore,
    StepStore,
    TurnCheckpoint,
    TurnRecord,
    TurnStart,
)
from reactq.shared.state.memory import MemoryStateStore
from reactq.shared.state.redis import RedisStateStore
from reactq.shared.state.sql import SqlStateStore

__all__ = [  # noqa: RUF022 - grouped, not sorted (STYLE.md)
    # the protocol and its data
    "TRUNK",
    "BranchInfo",
    "FileAction",
    "SessionInfo",
    "SessionPage",
    "SessionRecord",
    "StateStore",
    "StepStore",
    "TurnCheckpoint",
    "SessionUsage",
    "TurnRecord",
    "TurnStart",
    # backends
    "MemoryStateStore",
    "SqlStateStore",
    "RedisStateStore",
    "open_store",
]

# Plain schemes a user is likely to write, mapped to the async drivers reactq uses.
_ALIASES = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}


async def open_store(
    url: str, *, namespace: str | None = None, outage_seconds: float = 0.0, **kwargs: Any
) -> StateStore:
    """A ready state store for ``url``: ``memory://``, ``sqlite+aiosqlite://…`` or
    ``postgresql+asyncpg://…`` (plain ``sqlite://`` and ``postgresql://`` mean those
    drivers) or ``redis://…`` (``redis+cluster://…`` for a Redis Cluster). ``namespace``
    (``REACTQ_NAMESPACE``) prefixes the Redis backend's keys (a ``?namespace=`` in the
    URL wins); the other backends ignore it. ``outage_seconds``: how long a SQL store's
    calls wait out a database that does not answer (a worker's
    ``REACTQ_STORE_OUTAGE_SECONDS``; 0: they fail at once). Other keyword arguments go
    to the backend's constructor."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError(
            f"state store URL {url!r} has no scheme (memory://, sqlite+aiosqlite://…)"
        )
    scheme = _ALIASES.get(scheme, scheme)
    if scheme == "memory":
        return MemoryStateStore(**kwargs)
    if scheme in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        return await SqlStateStore.open(
            f"{scheme}://{rest}", outage_seconds=outage_seconds, **kwargs
        )
    if scheme in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        if namespace is not None:
            kwargs.setdefault("namespace", namespace)
        return await RedisStateStore.open(f"{scheme}://{rest}", **kwargs)
    raise ConfigError(
        f"unsupported state store URL scheme {scheme!r}: "
        "use memory://, sqlite+aiosqlite://, postgresql+asyncpg://, redis:// "
        "or redis+cluster://"
    )
