"""SqlStateStore: the shared state in SQL through SQLAlchemy 2 async.

SQLite (``sqlite+aiosqlite://``) is the default: every connection runs in WAL
mode with a busy timeout and writes open with ``BEGIN IMMEDIATE``, so several
worker processes can share one file and read-then-write steps (the next message
sequence, the fence check) are serialised by SQLite's write lock. PostgreSQL
(``postgresql+asyncpg://``) gets the same guarantee from ``SELECT ... FOR UPDATE``
on the session row. Tables are defined in ``sql_schema``.

Only ``ensure_session`` creates sessions (it needs the agent): ``append`` and
``commit_turn`` on a session the store lacks raise SessionNotFoundError, and
``claim`` on one does nothing (there is nothing to fence yet; call
``ensure_session`` first to have the token recorded).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from shared.errors import ConfigError, SessionNotFoundError, StaleLeaseError
from shared.messages import ChatMessage
from shared.state.base import TRUNK, SessionInfo, TurnRecord
from shared.state.sql_schema import (
    branches,
    dec,
    enc,
    messages,
    metadata,
    sessions,
    to_message,
    turns,
)
from shared.turns import TurnStatus

T = TypeVar("T")

_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}
_SCHEMA_LOCK_KEY = 0x72656163_7471  # pg advisory lock id: concurrent create_all must queue
_BUSY_RETRIES = 8


class SqlStateStore:
    """The StateStore contract on SQLite or PostgreSQL; see the module docstring.

    Build it with ``await SqlStateStore.open(url)`` (or construct, then ``init()``).
    ``engine`` lets a caller share one it made; the store then does not dispose it.
    """

    def __init__(
        self,
        url: str,
        *,
        engine: AsyncEngine | None = None,
        pool_size: int = 5,
        max_overflow: int = 10,
        busy_timeout_seconds: float = 30.0,
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
        database = self.url.database or ""
        in_memory = backend == "sqlite" and database in ("", ":memory:")
        self._owns_engine = engine is None
        if engine is None:
            engine = self._make_engine(in_memory, pool_size, max_overflow, busy_timeout_seconds)
        self.engine = engine
        if backend == "sqlite":
            _install_sqlite_hooks(engine, busy_timeout_seconds)
        # In-memory SQLite is one shared connection: transactions must take turns.
        self._serial = asyncio.Lock() if in_memory else None
        self._writer = engine.execution_options(reactq_write=True)

    def _make_engine(
        self, in_memory: bool, pool_size: int, max_overflow: int, busy_timeout: float
    ) -> AsyncEngine:
        if in_memory:
            return create_async_engine(
                self.url, poolclass=StaticPool, connect_args={"check_same_thread": False}
            )
        if self.dialect == "sqlite":
            database = self.url.database or ""
            if not database.startswith("file:"):
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            return create_async_engine(
                self.url,
                pool_size=pool_size,
                max_overflow=max_overflow,
                connect_args={"timeout": busy_timeout},
            )
        return create_async_engine(
            self.url, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=True
        )

    @classmethod
    async def open(cls, url: str, **kwargs: Any) -> SqlStateStore:
        """A ready store: constructed, with its tables created if missing."""
        store = cls(url, **kwargs)
        try:
            await store.init()
        except BaseException:
            await store.close()
            raise
        return store

    async def init(self) -> None:
        """Create the tables that are missing (safe to run from many processes at once)."""

        async def create(conn: AsyncConnection) -> None:
            if self.dialect == "postgresql":
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK_KEY}
                )
            await conn.run_sync(metadata.create_all)

        await self._write(create)

    # --- transactions -------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        if self._serial is None:
            yield
        else:
            async with self._serial:
                yield

    async def _read(self, op: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        async with self._turn(), self.engine.connect() as conn:
            return await op(conn)

    async def _write(self, op: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``op`` in one write transaction, retrying while SQLite reports it busy."""
        for attempt in range(_BUSY_RETRIES):
            try:
                async with self._turn(), self._writer.begin() as conn:
                    return await op(conn)
            except OperationalError as exc:
                if not _is_busy(exc) or attempt == _BUSY_RETRIES - 1:
                    raise
                await asyncio.sleep(min(0.01 * 2**attempt, 0.5))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _insert(self, table: Any) -> Any:
        return (postgresql if self.dialect == "postgresql" else sqlite).insert(table)

    # --- the protocol -------------------------------------------------------------

    async def ensure_session(self, session_id: str, agent: str) -> SessionInfo:
        """Create the session for ``agent`` if new; return it (its agent may differ)."""
        now = time.time()

        async def op(conn: AsyncConnection) -> SessionInfo:
            await conn.execute(
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
            await conn.execute(
                self._insert(branches)
                .values(session_id=session_id, branch_id=TRUNK, created_at=now)
                .on_conflict_do_nothing(index_elements=["session_id", "branch_id"])
            )
            info = await _session_info(conn, session_id)
            if info is None:  # pragma: no cover - the row was just ensured
                raise SessionNotFoundError(f"session {session_id!r} vanished")
            return info

        return await self._write(op)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        """The session, or None if the store has never seen it."""
        return await self._read(lambda conn: _session_info(conn, session_id))

    async def get_messages(
        self, session_id: str, branch_id: str | None = None
    ) -> list[ChatMessage]:
        """Messages of a branch (the active one by default), oldest first."""
        branch = (
            select(sessions.c.active_branch)
            .where(sessions.c.session_id == session_id)
            .scalar_subquery()
            if branch_id is None
            else branch_id
        )
        query = (
            select(messages)
            .where(messages.c.session_id == session_id, messages.c.branch_id == branch)
            .order_by(messages.c.sequence)
        )

        async def op(conn: AsyncConnection) -> list[ChatMessage]:
            return [to_message(row) for row in (await conn.execute(query)).mappings()]

        return await self._read(op)

    async def append(
        self, session_id: str, messages: Sequence[ChatMessage], branch_id: str | None = None
    ) -> None:
        """Append messages to a branch (the active one by default), unfenced."""

        async def op(conn: AsyncConnection) -> None:
            active, _fence = await _lock_session(conn, session_id)
            await _append_rows(conn, session_id, branch_id or active, messages, None)

        await self._write(op)

    async def claim(self, session_id: str, fence: int) -> None:
        """Record ``fence`` as the session's newest token (StaleLeaseError if older).

        A session the store does not have yet is left alone (nothing to fence).
        """

        async def op(conn: AsyncConnection) -> None:
            result = await conn.execute(
                update(sessions)
                .where(sessions.c.session_id == session_id, sessions.c.fence <= fence)
                .values(fence=fence, updated_at=time.time())
            )
            if result.rowcount == 0:
                stored = await conn.scalar(
                    select(sessions.c.fence).where(sessions.c.session_id == session_id)
                )
                if stored is not None:
                    raise _stale(session_id, stored, fence)

        await self._write(op)

    async def commit_turn(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        record: TurnRecord,
        fence: int | None = None,
    ) -> None:
        """Append a turn's messages (active branch) and record its outcome, atomically.

        Messages without a ``turn_id`` get the record's.
        """
        if record.session_id != session_id:
            raise ValueError(
                f"turn {record.turn_id} belongs to session {record.session_id!r}, "
                f"not {session_id!r}"
            )
        values = {
            "session_id": session_id,
            "status": record.status.value,
            "attempt": record.attempt,
            "final_text": enc(record.final_text),
            "error": enc(record.error),
            "created_at": record.created_at or time.time(),
        }

        async def op(conn: AsyncConnection) -> None:
            active, stored = await _lock_session(conn, session_id)
            if fence is not None:
                if stored > fence:
                    raise _stale(session_id, stored, fence)
                if fence > stored:
                    await conn.execute(
                        update(sessions)
                        .where(sessions.c.session_id == session_id)
                        .values(fence=fence, updated_at=time.time())
                    )
            await _append_rows(conn, session_id, active, messages, record.turn_id)
            await conn.execute(
                self._insert(turns)
                .values(turn_id=record.turn_id, **values)
                .on_conflict_do_update(index_elements=["turn_id"], set_=values)
            )

        await self._write(op)

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        """A committed turn's outcome, or None."""

        async def op(conn: AsyncConnection) -> TurnRecord | None:
            row = (
                (await conn.execute(select(turns).where(turns.c.turn_id == turn_id)))
                .mappings()
                .first()
            )
            if row is None:
                return None
            return TurnRecord(
                turn_id=row["turn_id"],
                session_id=row["session_id"],
                status=TurnStatus(row["status"]),
                attempt=row["attempt"],
                final_text=dec(row["final_text"]),
                error=dec(row["error"]),
                created_at=row["created_at"],
            )

        return await self._read(op)

    async def close(self) -> None:
        """Dispose of the engine (if the store made it)."""
        if self._owns_engine:
            await self.engine.dispose()


# --- helpers --------------------------------------------------------------------


def _install_sqlite_hooks(engine: AsyncEngine, busy_timeout: float) -> None:
    """WAL + busy timeout on every connection; BEGIN IMMEDIATE for write transactions."""
    sync_engine = engine.sync_engine
    if getattr(sync_engine, "_reactq_sqlite_hooks", False):
        return
    sync_engine._reactq_sqlite_hooks = True  # type: ignore[attr-defined]

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver's own implicit BEGIN is turned off so that ours (below) decides
        # the kind of transaction.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A deferred transaction that reads and then writes can fail at once with
        # SQLITE_BUSY when another process wrote in between; IMMEDIATE takes the
        # write lock up front (waiting up to busy_timeout) so max(sequence)+1 and
        # the fence check cannot race.
        immediate = conn.get_execution_options().get("reactq_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _is_busy(exc: OperationalError) -> bool:
    message = str(exc.orig).lower()
    return "locked" in message or "busy" in message


def _stale(session_id: str, stored: int, fence: int) -> StaleLeaseError:
    return StaleLeaseError(
        f"session {session_id!r} has fencing token {stored}; a write with {fence} is stale",
        session_id=session_id,
        fence=fence,
        newest=stored,
    )


async def _session_info(conn: AsyncConnection, session_id: str) -> SessionInfo | None:
    row = (
        (await conn.execute(select(sessions).where(sessions.c.session_id == session_id)))
        .mappings()
        .first()
    )
    if row is None:
        return None
    return SessionInfo(
        session_id=row["session_id"],
        agent=row["agent"],
        active_branch=row["active_branch"],
        fence=row["fence"],
        created_at=row["created_at"],
    )


async def _lock_session(conn: AsyncConnection, session_id: str) -> tuple[str, int]:
    """The session's (active branch, fence), its row locked until the transaction ends."""
    row = (
        await conn.execute(
            select(sessions.c.active_branch, sessions.c.fence)
            .where(sessions.c.session_id == session_id)
            .with_for_update()
        )
    ).first()
    if row is None:
        raise SessionNotFoundError(f"no session {session_id!r} in the store")
    return str(row[0]), int(row[1])


async def _append_rows(
    conn: AsyncConnection,
    session_id: str,
    branch_id: str,
    new: Sequence[ChatMessage],
    turn_id: str | None,
) -> None:
    """Insert messages after the branch's last one (the session row must be locked)."""
    fork = (
        await conn.execute(
            select(branches.c.fork_sequence).where(
                branches.c.session_id == session_id, branches.c.branch_id == branch_id
            )
        )
    ).first()
    if fork is None:
        raise ValueError(f"session {session_id!r} has no branch {branch_id!r}")
    if not new:
        return
    last = await conn.scalar(
        select(func.max(messages.c.sequence)).where(
            messages.c.session_id == session_id, messages.c.branch_id == branch_id
        )
    )
    # A forked branch numbers its own messages from the fork point on.
    start = last + 1 if last is not None else (fork[0] or 0)
    now = time.time()
    await conn.execute(
        messages.insert(),
        [
            {
                "session_id": session_id,
                "branch_id": branch_id,
                "sequence": start + offset,
                "role": message.role,
                "content": enc(message.content),
                "name": enc(message.name),
                "tool_calls": None
                if message.tool_calls is None
                else enc(
                    json.dumps(
                        [call.model_dump() for call in message.tool_calls], ensure_ascii=False
                    )
                ),
                "tool_call_id": enc(message.tool_call_id),
                "turn_id": message.turn_id or turn_id,
                "created_at": now,
            }
            for offset, message in enumerate(new)
        ],
    )
