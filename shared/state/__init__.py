"""Conversation state every worker shares: the StateStore protocol and its backends.

``open_store(url)`` picks a backend by URL scheme. The SQL backend (and with it
SQLAlchemy) is imported only when it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shared.errors import ConfigError
from shared.state.base import TRUNK, SessionInfo, StateStore, TurnRecord
from shared.state.memory import MemoryStateStore

if TYPE_CHECKING:
    from shared.state.sql import SqlStateStore

__all__ = [  # noqa: RUF022 - grouped, not sorted (STYLE.md)
    # the protocol and its data
    "TRUNK",
    "SessionInfo",
    "StateStore",
    "TurnRecord",
    # backends
    "MemoryStateStore",
    "SqlStateStore",
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
        from shared.state.sql import SqlStateStore

        return SqlStateStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def open_store(url: str, **kwargs: Any) -> StateStore:
    """A ready state store for ``url``: ``memory://``, ``sqlite+aiosqlite://…`` or
    ``postgresql+asyncpg://…`` (plain ``sqlite://`` and ``postgresql://`` mean those
    drivers). Keyword arguments go to the backend's constructor."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError(
            f"state store URL {url!r} has no scheme (memory://, sqlite+aiosqlite://…)"
        )
    scheme = _ALIASES.get(scheme, scheme)
    if scheme == "memory":
        return MemoryStateStore(**kwargs)
    if scheme in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        from shared.state.sql import SqlStateStore

        return await SqlStateStore.open(f"{scheme}://{rest}", **kwargs)
    if scheme in ("redis", "rediss"):
        raise ConfigError(
            "Redis state store not implemented yet; use sqlite+aiosqlite:// or postgresql+asyncpg://"
        )
    raise ConfigError(
        f"unsupported state store URL scheme {scheme!r}: "
        "use memory://, sqlite+aiosqlite:// or postgresql+asyncpg://"
    )
