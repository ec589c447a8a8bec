"""SqlStateStore: the shared state in SQL through SQLAlchemy 2 async.

SQLite (``sqlite+aiosqlite://``) is the default: every connection runs in WAL
mode with a busy timeout and writes open with ``BEGIN IMMEDIATE``, so several
worker processes can share one file and read-then-write steps (the next message
sequence, the fence check) are serialised by SQLite's write lock. PostgreSQL
(``postgresql+asyncpg://``) gets the same guarantee from a lock on the session
row (``SELECT ... FOR UPDATE``, or the statement that checks the fence). Tables
are defined in ``sql_schema``.

Only ``ensure_session`` and ``begin_turn`` create sessions (they need the agent):
``append`` and ``commit_turn`` on a session the store lacks raise
SessionNotFoundError, and ``claim`` on one does nothing (there is nothing to fence
yet; call ``ensure_session`` first to have the token recorded).

The steps of a worker's turn are short: ``begin_turn`` is one transaction of two
statements, ``checkpoint_step`` one statement, ``commit_turn`` (to a named branch)
four on SQLite, five on PostgreSQL. Their statements are built once and run with
parameters: building one costs more CPU than running it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import delete, event, insert, select, text, update
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from reactq.shared.errors import BranchError, ConfigError, SessionNotFoundError
from reactq.shared.messages import ChatMessage
from reactq.shared.state import migrate as schema
from reactq.shared.state import sql_ops as ops
from reactq.shared.state.base import (
    TRUNK,
    BranchInfo,
    SessionInfo,
    TurnCheckpoint,
    TurnRecord,
    TurnStart,
    check_branch_id,
    check_fork_point,
    check_record,
    committed_twice,
    dump_steps,
    load_steps,
    new_branch_id,
    stale,
)
from reactq.shared.state.sql_schema import (
    branches,
    dec,
    enc,
    sessions,
    turn_checkpoints,
    turns,
)
from reactq.shared.turns import TurnStatus

T = TypeVar("T")

_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}
_SCHEMA_LOCK_KEY = 0x72656163_7471  # pg advisory lock id: concurrent migrations queue
_BUSY_RETRIES = 8


class SqlStateStore:
    """The StateStore contract on SQLite or PostgreSQL; see the module docstring.

    Build it with ``await SqlStateStore.open(url)`` (or construct, then ``init()``).
    ``engine`` lets a caller share one it made; the store then does not dispose it.
    ``upgrade`` decides whether ``init`` may migrate the schema (see
    ``migrate.prepare_schema``; None: SQLite yes, PostgreSQL only when empty).
    """

    def __init__(
        self,
        url: str,
        *,
        engine: AsyncEngine | None = None,
        pool_size: int = 5,
        max_overflow: int = 10,
        busy_timeout_seconds: float = 30.0,
        upgrade: bool | None = None,
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
        # SQLite has one writer at a time. Queueing this process's writers here
        # is far cheaper than letting them spin in SQLite's busy handler (which
        # sleeps in growing steps): other processes still wait on the file lock.
        self._write_gate = asyncio.Lock() if self.dialect == "sqlite" else None
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

        async def prepare(conn: AsyncConnection) -> None:
            if self.dialect == "postgresql":
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK_KEY}
                )
            await conn.run_sync(schema.prepare_schema, self.upgrade)

        await self._write(prepare)

    async def migrate(self, revision: str = "head") -> str:
        """Apply the schema migrations up to ``revision``; return the revision reached."""

        async def op(conn: AsyncConnection) -> str:
            if self.dialect == "postgresql":
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK_KEY}
                )
            return await conn.run_sync(schema.migrate, revision)

        return await self._write(op)

    async def schema_revision(self) -> str | None:
        """The database's schema revision (None for an empty database)."""

        async def op(conn: AsyncConnection) -> str | None:
            return await conn.run_sync(schema.current_revision)

        return await self._read(op)

    # --- transactions -------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        if self._serial is None:
            yield
        else:
            async with self._serial:
                yield

    @contextlib.asynccontextmanager
    async def _gate(self) -> AsyncIterator[None]:
        if self._write_gate is None:
            yield
        else:
            async with self._write_gate:
                yield

    async def _read(self, op: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        async with self._turn(), self.engine.connect() as conn:
            return await op(conn)

    async def _write(self, op: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``op`` in one write transaction, retrying while SQLite reports it busy."""
        for attempt in range(_BUSY_RETRIES):
            try:
                async with self._turn(), self._gate(), self._writer.begin() as conn:
                    return await op(conn)
            except OperationalError as exc:
                if not _is_busy(exc) or attempt == _BUSY_RETRIES - 1:
                    raise
                await asyncio.sleep(min(0.01 * 2**attempt, 0.5))
        raise AssertionError("unreachable")  # the loop returns or raises

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
            info = await ops.session_info(conn, session_id)
            if info is None:  # pragma: no cover - the row was just ensured
                raise SessionNotFoundError(f"session {session_id!r} vanished")
            return info

        return await self._write(op)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        """The session, or None if the store has never seen it."""
        return await self._read(lambda conn: ops.session_info(conn, session_id))

    async def get_messages(
        self, session_id: str, branch_id: str | None = None
    ) -> list[ChatMessage]:
        """Messages of a branch (the active one by default), oldest first."""
        return await self._read(lambda conn: ops.read_branch(conn, session_id, branch_id))

    async def append(
        self, session_id: str, messages: Sequence[ChatMessage], branch_id: str | None = None
    ) -> None:
        """Append messages to a branch (the active one by default), unfenced."""

        async def op(conn: AsyncConnection) -> None:
            active, _fence = await ops.lock_session(conn, session_id)
            await ops.append_rows(conn, session_id, branch_id or active, messages, None)

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

        async def op(conn: AsyncConnection) -> str:
            active, _fence = await ops.lock_session(conn, session_id)
            source = branch_id or active
            length = await ops.branch_tip(conn, session_id, source)
            check_fork_point(session_id, source, from_sequence, length)
            if await ops.has_branch(conn, session_id, new_id):
                raise BranchError(
                    f"session {session_id!r} already has a branch {new_id!r}",
                    session_id=session_id,
                    branch_id=new_id,
                )
            await conn.execute(
                insert(branches).values(
                    session_id=session_id,
                    branch_id=new_id,
                    parent_branch_id=source,
                    fork_sequence=from_sequence,
                    created_at=time.time(),
                )
            )
            if activate:
                await _set_active(conn, session_id, new_id)
            return new_id

        return await self._write(op)

    async def list_branches(self, session_id: str) -> list[BranchInfo]:
        """The session's branches, oldest first ([] for an unknown session)."""
        return await self._read(lambda conn: ops.list_branches(conn, session_id))

    async def switch_branch(self, session_id: str, branch_id: str) -> None:
        """Make ``branch_id`` the active branch (BranchNotFoundError if it has none)."""

        async def op(conn: AsyncConnection) -> None:
            await ops.lock_session(conn, session_id)
            await ops.fork_point(conn, session_id, branch_id)
            await _set_active(conn, session_id, branch_id)

        await self._write(op)

    async def truncate_after(
        self, session_id: str, sequence: int, branch_id: str | None = None
    ) -> None:
        """Hard-delete a branch's own messages after ``sequence``; see StateStore."""

        async def op(conn: AsyncConnection) -> None:
            locked = await ops.lock_session_if_any(conn, session_id)
            if locked is not None:
                await ops.truncate(conn, session_id, sequence, branch_id or locked[0])

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
                locked = await ops.lock_session_if_any(conn, session_id)
                if locked is not None:
                    raise stale(session_id, locked[1], fence)

        await self._write(op)

    async def begin_turn(
        self, session_id: str, agent: str, *, fence: int | None = None, branch_id: str | None = None
    ) -> TurnStart:
        """Ensure the session, record ``fence`` and read a branch in one write
        transaction; see StateStore.begin_turn.

        Two statements on the common path: the session's upsert (which checks and
        moves the fence) and the branch's read; a new session's second one inserts
        its trunk instead, and another agent's session needs only the first.
        """
        now = time.time()
        row_values = {
            "session_id": session_id,
            "agent": agent,
            "active_branch": TRUNK,
            "fence": fence or 0,
            "created_at": now,
            "updated_at": now,
        }
        upsert = ops.upsert_session(self.dialect, fenced=fence is not None)

        async def op(conn: AsyncConnection) -> TurnStart:
            row = (await conn.execute(upsert, row_values)).first()
            if row is None:  # the fence refused the update
                await ops.refuse(conn, session_id, fence)
            info = SessionInfo(
                session_id=session_id,
                agent=row.agent,
                active_branch=row.active_branch,
                fence=row.fence,
                created_at=row.created_at,
            )
            branch = branch_id or info.active_branch
            if info.created_at == now:
                # This upsert inserted the row (an existing one keeps its creation
                # time). Should another session have been created at the very same
                # clock reading, the insert below does nothing: it has its trunk.
                trunk = {"session_id": session_id, "branch_id": TRUNK, "created_at": now}
                await conn.execute(ops.insert_trunk(self.dialect), trunk)
                return TurnStart(info=info, branch_id=branch, messages=[])
            if info.agent != agent:
                return TurnStart(info=info, branch_id=branch, messages=[])
            history = await ops.read_branch(conn, session_id, branch)
            return TurnStart(info=info, branch_id=branch, messages=history)

        return await self._write(op)

    async def commit_turn(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        record: TurnRecord,
        fence: int | None = None,
        branch_id: str | None = None,
    ) -> None:
        """Append a turn's messages and record its outcome, atomically, once per turn
        (TurnCommittedError otherwise); see StateStore.

        Messages without a ``turn_id`` get the record's.
        """
        check_record(session_id, record)
        values = {
            "turn_id": record.turn_id,
            "session_id": session_id,
            "status": record.status.value,
            "attempt": record.attempt,
            "final_text": enc(record.final_text),
            "error": enc(record.error),
            "created_at": record.created_at or time.time(),
        }

        async def op(conn: AsyncConnection) -> None:
            tip: int | None = None
            if branch_id is not None and self.dialect == "sqlite":
                # One statement fewer: the fence's UPDATE reads the branch's tip too.
                branch = branch_id
                tip = await ops.lock_fenced_at_tip(conn, session_id, fence, branch)
            else:
                active = await ops.lock_fenced(conn, session_id, fence)
                branch = branch_id or active
            # The turn's record first: its primary key makes it the turn's one commit.
            # A record already there (or one a concurrent transaction is writing, which
            # this insert waits for) refuses the commit, and the raise rolls it back.
            inserted = await conn.execute(ops.insert_turn(self.dialect), values)
            if inserted.rowcount != 1:
                raise committed_twice(session_id, record.turn_id)
            await ops.append_rows(conn, session_id, branch, messages, record.turn_id, tip)
            await conn.execute(ops.delete_checkpoint(), {"tid": record.turn_id})

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

    async def checkpoint_step(self, checkpoint: TurnCheckpoint, fence: int | None = None) -> None:
        """Store a running turn's completed steps; see StateStore.checkpoint_step.

        One statement when the fence is the stored one: the upsert checks it, and
        that the turn is not committed, as it writes.
        """
        session_id, turn_id = checkpoint.session_id, checkpoint.turn_id
        params: dict[str, Any] = {
            "v_turn_id": turn_id,
            "v_session_id": session_id,
            "v_branch_id": checkpoint.branch_id,
            "v_step": checkpoint.step,
            "v_attempt": checkpoint.attempt,
            "v_messages": dump_steps(checkpoint.messages),
            "v_updated_at": checkpoint.updated_at or time.time(),
        }
        if fence is not None:
            params["fence"] = fence

        async def op(conn: AsyncConnection) -> None:
            guarded = ops.guarded_checkpoint(self.dialect, fenced=fence is not None)
            if (await conn.execute(guarded, params)).rowcount:
                return
            # Nothing written: no session, a token other than the stored one, or a
            # committed turn. Check the fence (raising, or moving a newer token on),
            # then write unless the turn is committed.
            await ops.lock_fenced(conn, session_id, fence)
            unfenced = ops.guarded_checkpoint(self.dialect, fenced=False)
            if not (await conn.execute(unfenced, params)).rowcount:
                raise committed_twice(session_id, turn_id)

        await self._write(op)

    async def get_checkpoint(self, session_id: str, turn_id: str) -> TurnCheckpoint | None:
        """The turn's last checkpoint, or None."""

        async def op(conn: AsyncConnection) -> TurnCheckpoint | None:
            table = turn_checkpoints
            query = select(table).where(
                table.c.turn_id == turn_id, table.c.session_id == session_id
            )
            row = (await conn.execute(query)).mappings().first()
            if row is None:
                return None
            return TurnCheckpoint(
                session_id=row["session_id"],
                turn_id=row["turn_id"],
                step=row["step"],
                messages=load_steps(row["messages"]),
                branch_id=row["branch_id"],
                attempt=row["attempt"],
                updated_at=row["updated_at"],
            )

        return await self._read(op)

    async def discard_checkpoint(self, session_id: str, turn_id: str) -> None:
        """Forget the turn's checkpoint. Idempotent."""

        async def op(conn: AsyncConnection) -> None:
            table = turn_checkpoints
            await conn.execute(
                delete(table).where(table.c.turn_id == turn_id, table.c.session_id == session_id)
            )

        await self._write(op)

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
            # WAL + NORMAL: a commit no longer waits for an fsync of the log (a power
            # cut may lose the last commits, never corrupt the file); several times
            # the write rate of FULL.
            cursor.execute("PRAGMA synchronous = NORMAL")
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


async def _set_active(conn: AsyncConnection, session_id: str, branch_id: str) -> None:
    await conn.execute(
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
