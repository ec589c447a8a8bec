"""SqlStateStore: the shared state in SQL through SQLAlchemy 2.

SQLite (``sqlite+aiosqlite://``) is the default: every connection runs in WAL
mode with a busy timeout and writes open with ``BEGIN IMMEDIATE``, so several
worker processes can share one file and read-then-write steps (the next message
sequence, the fence check) are serialised by SQLite's write lock. PostgreSQL
(``postgresql+asyncpg://``) gets the same guarantee from a lock on the session
row (``SELECT ... FOR UPDATE``, or the statement that checks the fence). Tables
are defined in ``schema``; the statements in ``ops``.

Every transaction is a plain function of a SQLAlchemy ``Connection``, run whole by
``engines``: on SQLite in one hop to a thread, over the stdlib ``sqlite3``
driver (the URL names aiosqlite, the async driver of the same file); on
PostgreSQL through ``run_sync`` on the asyncpg engine.

Only ``ensure_session`` and ``begin_turn`` create sessions (they need the agent):
``append`` and ``commit_turn`` on a session the store lacks raise
SessionNotFoundError, and ``claim`` on one does nothing (there is nothing to fence
yet; call ``ensure_session`` first to have the token recorded).

The steps of a worker's turn are short. On SQLite ``begin_turn`` is one
transaction of two statements, ``checkpoint_step`` one statement, ``commit_turn``
one transaction of four (to a named branch; one fewer when the caller keeps the
turn's steps elsewhere, ``drop_checkpoint=False``: the worker pool). On
PostgreSQL ``begin_turn`` and ``commit_turn`` are each one statement, the call
of a function that runs theirs (migration 0014: ``reactq_begin_turn``,
``reactq_commit_turn``), its own transaction: one round trip each. Their
statements are built once and run with parameters: building one costs more CPU
than running it.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from sqlalchemy import delete, insert, select, text, update
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from reactq.shared.errors import BranchError, ConfigError, SessionNotFoundError
from reactq.shared.messages import ChatMessage
from reactq.shared.state import listing, outage
from reactq.shared.state import migrate as schema
from reactq.shared.state.base import (
    TRUNK,
    BranchInfo,
    SessionInfo,
    SessionPage,
    SessionRecord,
    TurnRecord,
)
from reactq.shared.state.common import check_branch_id, check_fork_point, new_branch_id, stale
from reactq.shared.state.sql import ops
from reactq.shared.state.sql.documents import SqlDocuments
from reactq.shared.state.sql.engines import (
    AsyncTransactions,
    Transactions,
    in_memory,
    sqlite_engines,
)
from reactq.shared.state.sql.files import SqlFiles
from reactq.shared.state.sql.schema import (
    branches,
    file_actions,
    sessions,
    turns,
)
from reactq.shared.state.sql.sqlite_lanes import SqliteTransactions
from reactq.shared.state.sql.steps import SqlSteps
from reactq.shared.state.sql.todos import SqlTodos
from reactq.shared.state.sql.turns import SqlTurns, turn_record

T = TypeVar("T")

_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}
_SCHEMA_LOCK_KEY = 0x72656163_7471  # pg advisory lock id: concurrent migrations queue


class SqlStateStore(SqlTurns, SqlSteps, SqlDocuments, SqlTodos, SqlFiles):
    """The StateStore contract on SQLite or PostgreSQL; see the module docstring.

    Build it with ``await SqlStateStore.open(url)`` (or construct, then ``init()``).
    ``engine`` lets a caller share an AsyncEngine it made; the store then does not
    dispose it (on SQLite the store's transactions run on an engine of its own over
    the same file, and an in-memory database cannot be shared). ``pool_size``: on
    SQLite, the threads reading beside the one writing, a connection each; on
    PostgreSQL, ``pool_size + max_overflow`` connections at most, each kept open.
    ``upgrade`` decides whether ``init`` may migrate the schema (see
    ``migrate.prepare_schema``; None: SQLite yes, PostgreSQL only when empty).
    ``outage_seconds``: how long a call waits out a database that does not answer
    (``outage.ride``; a worker's ``REACTQ_STORE_OUTAGE_SECONDS``), 0 (the default):
    it fails at once, with the driver's error.

    ``engine`` (async) reaches the store's database on either backend;
    ``sync_engine`` is the one its transactions run on, whose events see every
    statement: on SQLite a ``sqlite+pysqlite`` engine, on PostgreSQL
    ``engine.sync_engine``.
    """

    backend: ClassVar[str] = "sql"
    """Its entry in ``shared/state/backends.py``."""

    def __init__(
        self,
        url: str,
        *,
        engine: AsyncEngine | None = None,
        pool_size: int = 5,
        max_overflow: int = 10,
        busy_timeout_seconds: float = 30.0,
        upgrade: bool | None = None,
        outage_seconds: float = 0.0,
    ) -> None:
        if pool_size < 1 or max_overflow < 0 or busy_timeout_seconds <= 0:
            raise ValueError(
                "pool_size must be at least 1, max_overflow at least 0 and "
                "busy_timeout_seconds positive"
            )
        try:
            self.url: URL = make_url(url)
        except ArgumentError:
            # The parser's message quotes the URL, password and all: leave it out.
            raise ConfigError(
                "not a database URL (expected sqlite+aiosqlite:///path or "
                "postgresql+asyncpg://user@host/db)"
            ) from None
        backend, driver = self.url.get_backend_name(), self.url.get_driver_name()
        if _DRIVERS.get(backend) != driver:
            raise ConfigError(
                f"unsupported database URL scheme {self.url.drivername!r}: "
                "use sqlite+aiosqlite:// or postgresql+asyncpg://"
            )
        self.dialect = backend
        # None: SQLite (the embedded default) upgrades itself; PostgreSQL only
        # creates the schema in an empty database and leaves upgrades to the operator.
        self.upgrade = upgrade
        self.outage_seconds = outage_seconds
        self._owns_engine = engine is None
        self.engine: AsyncEngine
        self.sync_engine: Engine
        self._tx: Transactions
        if backend == "sqlite":
            self.engine, self.sync_engine = sqlite_engines(
                self.url,
                engine,
                pool_size=pool_size,
                max_overflow=max_overflow,
                busy_timeout=busy_timeout_seconds,
            )
            self._tx = SqliteTransactions(
                self.sync_engine, readers=pool_size, shared=in_memory(self.url)
            )
        else:
            # Every connection is kept once opened (no overflow connections opened and
            # closed again under a burst: a connect costs more than many
            # transactions); a transaction beyond them waits for one to come back.
            self.engine = engine or create_async_engine(
                self.url, pool_size=pool_size + max_overflow, max_overflow=0, pool_timeout=60
            )
            self.sync_engine = self.engine.sync_engine
            self._tx = AsyncTransactions(self.engine)

    @classmethod
    async def open(cls, url: str, **kwargs: Any) -> SqlStateStore:
        """A ready store: constructed, its schema checked (and upgraded; see ``init``)."""
        store = cls(url, **kwargs)
        try:
            await store.init()
        except BaseException:
            await store.close()
            raise
        return store

    async def init(self) -> None:
        """Bring the schema to the version this code knows (see ``migrate``).

        Safe to run from many processes at once: the check and the upgrade run in
        one write transaction (SQLite's write lock, a PostgreSQL advisory lock).
        Raises SchemaVersionError for a schema newer than this code, or an older
        one this store may not upgrade (``reactq db upgrade`` does).
        """

        def prepare(conn: Connection) -> None:
            self._lock_schema(conn)
            schema.prepare_schema(conn, self.upgrade)

        await self._write(prepare, ride=False)

    async def migrate(self, revision: str = "head") -> str:
        """Apply the schema migrations up to ``revision``; return the revision reached."""

        def op(conn: Connection) -> str:
            self._lock_schema(conn)
            return schema.migrate(conn, revision)

        return await self._write(op, ride=False)

    async def schema_revision(self) -> str | None:
        """The database's schema revision (None for an empty database)."""
        return await self._read(schema.current_revision)

    def _lock_schema(self, conn: Connection) -> None:
        # SQLite's write transaction already excludes every other writer.
        if self.dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK_KEY})

    # --- transactions -------------------------------------------------------------

    # Each rides out a database that is away for ``outage_seconds`` (``outage.ride``);
    # ``ride=False``: one try, for callers with somewhere else to go (the audit log
    # keeps its rows in Redis meanwhile) or that must answer at once (start-up).

    async def _read(self, op: Callable[[Connection], T], *, ride: bool = True) -> T:
        """Run ``op`` in one read transaction."""
        return await self._ride(functools.partial(self._tx.read, op), ride)

    async def _write(self, op: Callable[[Connection], T], *, ride: bool = True) -> T:
        """Run ``op`` in one write transaction (on SQLite: retried while busy)."""
        return await self._ride(functools.partial(self._tx.write, op), ride)

    async def _write_each(self, op: Callable[[Connection], T], *, ride: bool = True) -> T:
        """Run ``op`` with each statement a transaction of its own on PostgreSQL (no
        BEGIN / COMMIT round trips: ``AsyncTransactions.autocommit``, whose terms
        ``op`` must meet); SQLite runs it as one write transaction, whose BEGIN and
        COMMIT cost no round trip (the writer thread runs them in the same hop)."""
        if isinstance(self._tx, AsyncTransactions):
            return await self._ride(functools.partial(self._tx.autocommit, op), ride)
        return await self._ride(functools.partial(self._tx.write, op), ride)

    async def _ride(self, call: Callable[[], Awaitable[T]], ride: bool) -> T:
        if not ride or self.outage_seconds <= 0:
            return await call()
        return await outage.ride(call, self.outage_seconds, "a state store call")

    def _insert(self, table: Any) -> Any:
        return ops.dialect_insert(self.dialect, table)

    # --- the protocol -------------------------------------------------------------

    async def ensure_session(self, session_id: str, agent: str) -> SessionInfo:
        """Create the session for ``agent`` if new; return it (its agent may differ)."""
        # Almost always the session exists: a read takes no write lock, which on
        # SQLite would serialise every worker process sharing the file.
        existing = await self.get_session(session_id)
        if existing is not None:
            return existing
        now = time.time()

        def op(conn: Connection) -> SessionInfo:
            conn.execute(
                self._insert(sessions)
                .values(
                    session_id=session_id,
                    agent=agent,
                    active_branch=TRUNK,
                    fence=0,
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict_do_nothing(index_elements=["session_id"])
            )
            conn.execute(
                self._insert(branches)
                .values(session_id=session_id, branch_id=TRUNK, created_at=now)
                .on_conflict_do_nothing(index_elements=["session_id", "branch_id"])
            )
            info = ops.session_info(conn, session_id)
            if info is None:  # pragma: no cover - the row was just ensured
                raise SessionNotFoundError(f"session {session_id!r} vanished")
            return info

        return await self._write(op)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None if the store has never seen it."""
        return await self._read(lambda conn: ops.session_info(conn, session_id))

    async def list_sessions(
        self,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        updated_since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """Sessions newest first, filtered, a page at a time; see StateStore.

        The agent and the time filter run in SQL; metadata, JSON text whose query
        functions differ between SQLite and PostgreSQL, is matched here on the
        rows read in batches."""
        limit = listing.check_limit(limit)
        after = listing.decode_cursor(cursor)
        batch = limit + 1 if not metadata else max(limit + 1, 200)

        async def newest_first() -> AsyncIterator[SessionRecord]:
            key = after
            while True:
                rows = await self._read(
                    functools.partial(
                        ops.sessions_after,
                        after=key,
                        agent=agent,
                        updated_since=updated_since,
                        count=batch,
                    )
                )
                for row in rows:
                    yield row
                if len(rows) < batch:
                    return
                key = listing.key_of(rows[-1])

        return await listing.collect(
            newest_first(),
            agent=agent,
            metadata=metadata,
            updated_since=updated_since,
            limit=limit,
        )

    async def update_metadata(self, session_id: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``patch`` into the session's metadata; see StateStore."""
        patch = listing.check_metadata(patch)

        def op(conn: Connection) -> dict[str, Any]:
            ops.lock_session(conn, session_id)
            raw = conn.scalar(
                select(sessions.c["metadata"]).where(sessions.c.session_id == session_id)
            )
            result = listing.merged({} if raw is None else json.loads(raw), patch)
            conn.execute(
                update(sessions)
                .where(sessions.c.session_id == session_id)
                .values({"metadata": listing.dump_value(result), "updated_at": time.time()})
            )
            return result

        return await self._write(op)

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session's rows (the audit log's stay); see StateStore."""

        def op(conn: Connection) -> bool:
            # The files' old contents go with the workspace they were in.
            files = conn.execute(
                delete(file_actions).where(file_actions.c.session_id == session_id)
            )
            return ops.delete_session(conn, session_id) or bool(files.rowcount)

        return await self._write(op)

    async def list_turns(self, session_id: str) -> list[TurnRecord]:
        """The session's committed turns, oldest first."""

        def op(conn: Connection) -> list[TurnRecord]:
            query = (
                select(turns)
                .where(turns.c.session_id == session_id)
                .order_by(turns.c.created_at, turns.c.turn_id)
            )
            return [turn_record(row) for row in conn.execute(query).mappings()]

        return await self._read(op)

    async def get_messages(
        self, session_id: str, branch_id: str | None = None
    ) -> list[ChatMessage]:
        """Messages of a branch (the active one by default), oldest first."""
        return await self._read(lambda conn: ops.read_branch(conn, session_id, branch_id))

    async def append(
        self, session_id: str, messages: Sequence[ChatMessage], branch_id: str | None = None
    ) -> None:
        """Append messages to a branch (the active one by default), unfenced."""

        def op(conn: Connection) -> None:
            active, _fence = ops.lock_session(conn, session_id)
            ops.append_rows(conn, session_id, branch_id or active, messages, None)

        await self._write(op)

    async def fork(
        self,
        session_id: str,
        from_sequence: int,
        *,
        branch_id: str | None = None,
        new_branch_id: str | None = None,
        activate: bool = True,
    ) -> str:
        """Start a branch keeping messages 1..``from_sequence``; see StateStore.fork."""
        new_id = check_branch_id(new_branch_id) if new_branch_id else _new_branch()

        def op(conn: Connection) -> str:
            active, _fence = ops.lock_session(conn, session_id)
            source = branch_id or active
            length = ops.branch_tip(conn, session_id, source)
            check_fork_point(session_id, source, from_sequence, length)
            if ops.has_branch(conn, session_id, new_id):
                raise BranchError(
                    f"session {session_id!r} already has a branch {new_id!r}",
                    session_id=session_id,
                    branch_id=new_id,
                )
            conn.execute(
                insert(branches).values(
                    session_id=session_id,
                    branch_id=new_id,
                    parent_branch_id=source,
                    fork_sequence=from_sequence,
                    created_at=time.time(),
                )
            )
            if activate:
                _set_active(conn, session_id, new_id)
            return new_id

        return await self._write(op)

    async def list_branches(self, session_id: str) -> list[BranchInfo]:
        """The session's branches, oldest first ([] for an unknown session)."""
        return await self._read(lambda conn: ops.list_branches(conn, session_id))

    async def switch_branch(self, session_id: str, branch_id: str) -> None:
        """Make ``branch_id`` the active branch (BranchNotFoundError if it has none)."""

        def op(conn: Connection) -> None:
            ops.lock_session(conn, session_id)
            ops.fork_point(conn, session_id, branch_id)
            _set_active(conn, session_id, branch_id)

        await self._write(op)

    async def truncate_after(
        self, session_id: str, sequence: int, branch_id: str | None = None
    ) -> None:
        """Hard-delete a branch's own messages after ``sequence``; see StateStore."""

        def op(conn: Connection) -> None:
            locked = ops.lock_session_if_any(conn, session_id)
            if locked is not None:
                ops.truncate(conn, session_id, sequence, branch_id or locked[0])

        await self._write(op)

    async def claim(self, session_id: str, fence: int) -> None:
        """Record ``fence`` as the session's newest token (StaleLeaseError if older).

        A session the store does not have yet is left alone (nothing to fence).
        """

        def op(conn: Connection) -> None:
            result = conn.execute(
                update(sessions)
                .where(sessions.c.session_id == session_id, sessions.c.fence <= fence)
                .values(fence=fence, updated_at=time.time())
            )
            if result.rowcount == 0:
                locked = ops.lock_session_if_any(conn, session_id)
                if locked is not None:
                    raise stale(session_id, locked[1], fence)

        await self._write(op)

    async def close(self) -> None:
        """Let running transactions finish; dispose of the engines the store made."""
        try:
            await self._tx.close()
        finally:
            if self._owns_engine:
                await self.engine.dispose()


# --- helpers --------------------------------------------------------------------


def _set_active(conn: Connection, session_id: str, branch_id: str) -> None:
    conn.execute(
        update(sessions)
        .where(sessions.c.session_id == session_id)
        .values(active_branch=branch_id, updated_at=time.time())
    )


def _new_branch() -> str:
    return new_branch_id()


async def upgrade(url: str, revision: str = "head") -> str:
    """Upgrade the database at ``url`` to ``revision``; return the revision reached."""
    store = SqlStateStore(url, upgrade=False)
    try:
        return await store.migrate(revision)
    finally:
        await store.close()
