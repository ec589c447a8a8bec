"""Conversation state every worker shares: the StateStore protocol and its backends.

``open_store(url)`` opens the backend ``shared/state/backends.py`` maps the URL's
scheme to: a package each (``memory/``, ``sql/``, ``redis/``) holding its
conversation store and the parts beside it (documents, todos, steps, schedules and,
for SQL, the audit log). What every backend shares stays here: the protocols
(``base``, ``document_store``, ``todo_store``, ``schedule_store``), ``common``,
``listing``, ``text``, ``outage``, ``migrate`` and ``migrations/``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from reactq.shared.extras import missing_extra
from reactq.shared.state.backends import OpenOptions, backend_for
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

if TYPE_CHECKING:
    from reactq.shared.state.memory.store import MemoryStateStore
    from reactq.shared.state.redis.store import RedisStateStore
    from reactq.shared.state.sql.store import SqlStateStore

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
    to the backend's constructor. Which backend serves which scheme:
    ``shared/state/backends.py``."""
    backend, url = backend_for(url)
    options = OpenOptions(namespace=namespace, outage_seconds=outage_seconds, extra=kwargs)
    try:
        return await backend.open(url, options)
    except ModuleNotFoundError as exc:
        # A PostgreSQL URL without the postgres extra: say which extra, not "asyncpg".
        raise missing_extra(exc) or exc from exc


# The backends' stores load on first use: importing the protocol (or the backend map)
# loads no driver.
_LAZY = {
    "MemoryStateStore": "reactq.shared.state.memory.store",
    "RedisStateStore": "reactq.shared.state.redis.store",
    "SqlStateStore": "reactq.shared.state.sql.store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
