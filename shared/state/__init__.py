"""Conversation state every worker shares: the StateStore protocol and its backends.

``open_store(url)`` picks a backend by URL scheme. The SQL and Redis backends (and
with them SQLAlchemy) are imported only when they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reactq.shared.errors import ConfigError
from reactq.shared.state.base import TRUNK, BranchInfo, SessionInfo, StateStore, TurnRecord
from reactq.shared.state.memory import MemoryStateStore

if TYPE_CHECKING:
    from reactq.shared.state.redis import RedisStateStore
    from reactq.shared.state.sql import SqlStateStore

__all__ = [  # noqa: RUF022 - grouped, not sorted (STYLE.md)
    # the protocol and its data
    "TRUNK",
    "BranchInfo",
    "SessionInfo",
    "StateStore",
    "TurnRecord",
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


def __getattr__(name: str) -> Any:
    if name == "SqlStateStore":
        from reactq.shared.state.sql import SqlStateStore

        return SqlStateStore
    if name == "RedisStateStore":
        from reactq.shared.state.redis import RedisStateStore

        return RedisStateStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def open_store(url: str, *, namespace: str | None = None, **kwargs: Any) -> StateStore:
    """A ready state store for ``url``: ``memory://``, ``sqlite+aiosqlite://…`` or
    ``postgresql+asyncpg://…`` (plain ``sqlite://`` and ``postgresql://`` mean those
    drivers) or ``redis://…``. ``namespace`` (``REACTQ_NAMESPACE``) prefixes the Redis
    backend's keys (a ``?namespace=`` in the URL wins); the other backends ignore it.
    Other keyword arguments go to the backend's constructor."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError(
            f"state store URL {url!r} has no scheme (memory://, sqlite+aiosqlite://…)"
        )
    scheme = _ALIASES.get(scheme, scheme)
    if scheme == "memory":
        return MemoryStateStore(**kwargs)
    if scheme in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        from reactq.shared.state.sql import SqlStateStore

        return await SqlStateStore.open(f"{scheme}://{rest}", **kwargs)
    if scheme in ("redis", "rediss", "unix"):
        from reactq.shared.state.redis import RedisStateStore

        if namespace is not None:
            kwargs.setdefault("namespace", namespace)
        return await RedisStateStore.open(f"{scheme}://{rest}", **kwargs)
    raise ConfigError(
        f"unsupported state store URL scheme {scheme!r}: "
        "use memory://, sqlite+aiosqlite://, postgresql+asyncpg:// or redis://"
    )
