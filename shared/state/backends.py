"""The one map from a state store URL to its backend, and from a store to its parts.

A backend is a package under ``shared/state/`` (``memory/``, ``sql/``, ``redis/``)
holding its conversation store and the parts kept beside it: documents, todos,
steps, schedules and, for SQL, the audit log. ``BACKENDS`` names each one: the URL
schemes it serves, how to open its store, its schedules and its audit sink, where its
documents and todos live, and the service its failures are reported as. Everything
that picks a backend goes through here: ``open_store`` (by URL scheme),
``schedules_for`` and ``audit_sink_for`` (by the store's ``backend`` name),
``open_audit_sink`` (by URL), a worker's audit write-back duty
(``worker/bridge.py``), and ``shared/services.py`` (which service a bare ``OSError``
from a backend's code is). Adding a backend is one entry here and one package.

Each backend's modules are imported only when its store is opened or its parts are
asked for: naming a backend costs no driver import.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from reactq.shared.errors import ConfigError

if TYPE_CHECKING:
    from reactq.shared.audit import AuditSink, MemoryAuditSink
    from reactq.shared.audit_spill import AuditSpill
    from reactq.shared.state.base import StateStore
    from reactq.shared.state.memory.store import MemoryStateStore
    from reactq.shared.state.redis.schedules import RedisScheduleStore
    from reactq.shared.state.redis.store import RedisStateStore
    from reactq.shared.state.schedule_store import ScheduleStore
    from reactq.shared.state.sql.audit import SqlAuditSink
    from reactq.shared.state.sql.schedules import SqlScheduleStore
    from reactq.shared.state.sql.store import SqlStateStore

__all__ = [  # noqa: RUF022 - grouped, not sorted (STYLE.md)
    "ALIASES",
    "AuditOptions",
    "Backend",
    "OpenOptions",
    "BACKENDS",
    "backend_for",
    "backend_of",
    "find_backend",
    "find_backend_of",
    "error_frames",
]


@dataclass(frozen=True)
class OpenOptions:
    """What ``open_store`` passes a backend's opener beside the URL."""

    namespace: str | None = None
    """``REACTQ_NAMESPACE``: prefixes the Redis backend's keys; the others ignore it."""
    outage_seconds: float = 0.0
    """How long a SQL store's calls wait out a database that does not answer."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments for the backend's constructor."""


@dataclass(frozen=True)
class AuditOptions:
    """How an audit sink beside a store writes (as for ``SqlAuditSink``)."""

    batch: bool = True
    linger: float = 0.0
    spill: AuditSpill | None = None


@dataclass(frozen=True)
class Backend:
    """One state backend: its URL schemes, its store and the parts kept beside it."""

    name: str
    """``memory``, ``sql`` or ``redis``: the package under ``shared/state/`` and the
    ``backend`` class attribute of its store."""
    schemes: tuple[str, ...]
    """The URL schemes it serves (after ``ALIASES``)."""
    open: Callable[[str, OpenOptions], Awaitable[StateStore]]
    """A ready store for a URL of one of ``schemes``."""
    schedules: Callable[[StateStore], ScheduleStore]
    """The ``ScheduleStore`` beside a store of this backend, sharing its connection."""
    documents: str
    """Where its ``DocumentStore`` part is (the store is its own DocumentStore)."""
    todos: str
    """Where its ``TodoStore`` part is (the store is its own TodoStore)."""
    steps: str
    """Where its ``StepStore`` part is (the store is its own StepStore)."""
    kind: str | None
    """The service its store's failures are reported as (``shared/services.py``):
    ``database`` or ``redis``; None for a store in the process."""
    error_frames: tuple[str, ...] = ()
    """Where a bare ``OSError`` must come from to be a failure of ``kind`` (path
    fragments of the code that reaches the service)."""
    audit_sink: Callable[[StateStore, AuditOptions], AuditSink] | None = None
    """The audit sink writing to a store's own database, or None: no audit log beside
    this backend's stores."""
    open_audit_sink: Callable[[str, Mapping[str, Any]], Awaitable[AuditSink]] | None = None
    """An audit sink of its own for a URL of this backend (``open_audit_sink``), or
    None: the backend cannot hold an audit log."""
    audit_write_back: Callable[[AuditSpill, StateStore, float], Awaitable[None]] | None = None
    """A worker's duty beside a store of this backend: write back, every ``interval``
    seconds, the audit rows that waited in Redis (``shared/audit_spill.py``); None
    without an audit log."""


# Plain schemes a user is likely to write, mapped to the async drivers reactq uses.
ALIASES = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}


def _load(path: str) -> Any:
    """The object at ``module:name``, its module imported on first use: a backend's
    modules load only when its store or one of its parts is asked for (naming the
    backends costs no driver import, and the modules that pick a backend through this
    one, ``shared/audit.py`` and ``shared/services.py`` among them, stay below the
    backends that build on them)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


# --- memory ---------------------------------------------------------------------------

_MEMORY = "reactq.shared.state.memory"


async def _open_memory(url: str, options: OpenOptions) -> StateStore:
    store: type[MemoryStateStore] = _load(f"{_MEMORY}.store:MemoryStateStore")
    return store(**options.extra)


def _memory_schedules(store: StateStore) -> ScheduleStore:
    beside: Callable[[MemoryStateStore], ScheduleStore] = _load(
        f"{_MEMORY}.schedules:memory_schedules"
    )
    return beside(cast("MemoryStateStore", store))  # backend_of read it off its class


async def _open_memory_audit(url: str, options: Mapping[str, Any]) -> AuditSink:
    sink: type[MemoryAuditSink] = _load("reactq.shared.audit:MemoryAuditSink")
    return sink()


# --- sql ------------------------------------------------------------------------------

_SQL = "reactq.shared.state.sql"


async def _open_sql(url: str, options: OpenOptions) -> StateStore:
    store: type[SqlStateStore] = _load(f"{_SQL}.store:SqlStateStore")
    return await store.open(url, outage_seconds=options.outage_seconds, **options.extra)


def _sql_schedules(store: StateStore) -> ScheduleStore:
    schedules: type[SqlScheduleStore] = _load(f"{_SQL}.schedules:SqlScheduleStore")
    return schedules(cast("SqlStateStore", store))  # backend_of read it off its class


def _sql_audit(store: StateStore, options: AuditOptions) -> AuditSink:
    sink: type[SqlAuditSink] = _load(f"{_SQL}.audit:SqlAuditSink")
    return sink(
        cast("SqlStateStore", store),
        batch=options.batch,
        linger=options.linger,
        spill=options.spill,
    )


async def _sql_write_back(spill: AuditSpill, store: StateStore, interval: float) -> None:
    duty: Callable[[AuditSpill, SqlStateStore, float], Awaitable[None]] = _load(
        "reactq.shared.audit_spill:write_back_forever"
    )
    await duty(spill, cast("SqlStateStore", store), interval)


async def _open_sql_audit(url: str, options: Mapping[str, Any]) -> AuditSink:
    backend, url = backend_for(url)
    store = await backend.open(url, OpenOptions(extra=options))
    sink: type[SqlAuditSink] = _load(f"{_SQL}.audit:SqlAuditSink")
    return sink(cast("SqlStateStore", store), owns_store=True)


# --- redis ----------------------------------------------------------------------------

_REDIS = "reactq.shared.state.redis"


async def _open_redis(url: str, options: OpenOptions) -> StateStore:
    store: type[RedisStateStore] = _load(f"{_REDIS}.store:RedisStateStore")
    extra = dict(options.extra)
    if options.namespace is not None:
        extra.setdefault("namespace", options.namespace)
    return await store.open(url, **extra)


def _redis_schedules(store: StateStore) -> ScheduleStore:
    schedules: type[RedisScheduleStore] = _load(f"{_REDIS}.schedules:RedisScheduleStore")
    return schedules(cast("RedisStateStore", store))  # backend_of read it off its class


BACKENDS: tuple[Backend, ...] = (
    Backend(
        name="memory",
        schemes=("memory",),
        open=_open_memory,
        schedules=_memory_schedules,
        documents="reactq.shared.state.memory.documents",
        todos="reactq.shared.state.memory.todos",
        steps="reactq.shared.state.memory.steps",
        kind=None,
        open_audit_sink=_open_memory_audit,
    ),
    Backend(
        name="sql",
        schemes=("sqlite+aiosqlite", "postgresql+asyncpg"),
        open=_open_sql,
        schedules=_sql_schedules,
        documents="reactq.shared.state.sql.documents",
        todos="reactq.shared.state.sql.todos",
        steps="reactq.shared.state.sql.steps",
        kind="database",
        # asyncpg raises the socket's own errors; SQLite's folder is made with
        # Path.mkdir (in the state package's code).
        error_frames=("/sqlalchemy/", "/asyncpg/", "/aiosqlite/", "/shared/state/"),
        audit_sink=_sql_audit,
        open_audit_sink=_open_sql_audit,
        audit_write_back=_sql_write_back,
    ),
    Backend(
        name="redis",
        schemes=("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"),
        open=_open_redis,
        schedules=_redis_schedules,
        documents="reactq.shared.state.redis.documents",
        todos="reactq.shared.state.redis.todos",
        steps="reactq.shared.state.redis.steps",
        # redis-py wraps its socket errors: shared/services.py knows them by class.
        kind="redis",
    ),
)

_BY_SCHEME = {scheme: backend for backend in BACKENDS for scheme in backend.schemes}
_BY_NAME = {backend.name: backend for backend in BACKENDS}


def find_backend(url: str) -> Backend | None:
    """The backend serving ``url``'s scheme, or None (no scheme, or an unknown one)."""
    scheme, sep, _ = url.partition("://")
    return _BY_SCHEME.get(ALIASES.get(scheme, scheme)) if sep else None


def backend_for(url: str) -> tuple[Backend, str]:
    """The backend serving ``url``, and ``url`` with its scheme's alias resolved
    (``sqlite://`` is ``sqlite+aiosqlite://``); ConfigError for a URL without a
    scheme or of a scheme no backend serves."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError(
            f"state store URL {url!r} has no scheme (memory://, sqlite+aiosqlite://…)"
        )
    scheme = ALIASES.get(scheme, scheme)
    backend = _BY_SCHEME.get(scheme)
    if backend is None:
        raise ConfigError(
            f"unsupported state store URL scheme {scheme!r}: "
            "use memory://, sqlite+aiosqlite://, postgresql+asyncpg://, redis:// "
            "or redis+cluster://"
        )
    return backend, f"{scheme}://{rest}"


def find_backend_of(store: object) -> Backend | None:
    """The backend ``store`` is a store of (its class's ``backend`` name), or None
    (a store of no backend: a wrapper, a test's own)."""
    name = getattr(type(store), "backend", None)
    return _BY_NAME.get(name) if isinstance(name, str) else None


def backend_of(store: object) -> Backend:
    """The backend ``store`` is a store of; TypeError for a store of none."""
    backend = find_backend_of(store)
    if backend is None:
        raise TypeError(f"a {type(store).__name__} is not a store of any state backend")
    return backend


def error_frames(kind: str) -> tuple[str, ...]:
    """Every path fragment a bare ``OSError`` of service ``kind`` may come from."""
    return tuple(f for b in BACKENDS if b.kind == kind for f in b.error_frames)
