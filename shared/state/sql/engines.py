"""How the SQL store's transactions reach the database: its engines and runners.

A transaction of the store is a plain function of a SQLAlchemy ``Connection`` (its
statements are in ``ops``); a runner's ``write(op)`` or ``read(op)`` runs one.

SQLite (``SqliteTransactions``, in ``sqlite_lanes``): the whole transaction (BEGIN, the statements,
COMMIT, the busy retries) runs in one hop to a thread, on a synchronous engine
over the stdlib ``sqlite3`` driver opened on the store's database. Through
aiosqlite every driver call is such a hop (a queue put, a future, a wake-up of
the event loop), and SQLAlchemy's async adapter makes several per statement:
they were most of the store's CPU. One writer thread queues this process's
writers (SQLite has one writer at a time: queueing them here is far cheaper
than letting them spin in SQLite's busy handler; other processes still wait on
the file lock); reads run on other threads beside it (WAL lets them). The
writer commits the writes queued together in one transaction, each in a
savepoint of its own (group commit: BEGIN and COMMIT were most of its CPU).

PostgreSQL (``AsyncTransactions``): ``AsyncConnection.run_sync(op)`` inside
``engine.begin()``, one greenlet spawn per transaction instead of one per
statement; asyncpg's I/O stays on the event loop. ``autocommit(op)`` runs an op
whose statements each stand alone, without the BEGIN and COMMIT round trips.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiosqlite
from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from reactq.shared.errors import ConfigError

T = TypeVar("T")
Op = Callable[[Connection], T]
"""One transaction's work, given its connection (the transaction is the runner's)."""
Abandoned = Callable[[], bool]
"""Whether the caller of a job has stopped waiting for it (it was cancelled)."""


class Transactions(Protocol):
    """Runs the store's transactions (see the module docstring)."""

    async def read(self, op: Op[T]) -> T:
        """Run ``op`` in a read transaction; return what it returns."""
        ...

    async def write(self, op: Op[T]) -> T:
        """Run ``op`` in a write transaction, committed if it returns."""
        ...

    async def close(self) -> None:
        """Release the runner's threads and connections."""
        ...


# --- PostgreSQL -------------------------------------------------------------------


class AsyncTransactions:
    """Transactions on an AsyncEngine (PostgreSQL): ``run_sync`` of each ``op``.

    Pooled connections are not pinged before use (a round trip per transaction):
    a transaction that finds its connection dead (the server restarted, an idle
    connection was cut) fails inside ``op``, before any commit, so nothing of it
    was stored; the pool then drops that connection and its peers, and the
    transaction runs once more on a fresh one. A failure during the commit itself
    is raised, not retried: the commit may have landed.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # The same pool; a connection is switched to autocommit while checked out
        # (a setting of the driver's, no round trip).
        self._autocommitted = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def read(self, op: Op[T]) -> T:
        """Run ``op`` on a connection whose transaction is rolled back at the end."""
        return await self._run(op, write=False)

    async def write(self, op: Op[T]) -> T:
        """Run ``op`` in ``engine.begin()``: committed if it returns."""
        return await self._run(op, write=True)

    async def autocommit(self, op: Op[T]) -> T:
        """Run ``op`` with each statement a transaction of its own: no BEGIN or
        COMMIT round trips (each costs as much as a statement).

        For ops whose statements are each atomic and leave the store consistent in
        between. ``op`` may run twice (once more on a fresh connection when its
        connection was found dead): a statement that failed with its connection
        may have committed, so it must be safe to repeat.
        """
        return await self._run(op, write=None)

    async def _run(self, op: Op[T], *, write: bool | None) -> T:
        for attempt in (1, 2):
            ran = False

            def tracked(conn: Connection) -> T:
                nonlocal ran
                result = op(conn)
                ran = True
                return result

            try:
                if write is None:  # autocommit
                    async with self._autocommitted.connect() as conn:
                        return await conn.run_sync(tracked)
                async with self.engine.begin() if write else self.engine.connect() as conn:
                    return await conn.run_sync(tracked)
            except DBAPIError as exc:
                if attempt == 2 or ran or not exc.connection_invalidated:
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises

    async def close(self) -> None:
        """Nothing of its own: the engine is the store's to dispose of."""


# --- engines ----------------------------------------------------------------------


def sqlite_engines(
    url: URL,
    given: AsyncEngine | None,
    *,
    pool_size: int,
    max_overflow: int,
    busy_timeout: float,
) -> tuple[AsyncEngine, Engine]:
    """The store's SQLite engines: the async one on ``url`` (``given``, or made here)
    and the synchronous one its transactions run on, over the same database.

    The async engine is for callers that want an async connection (the store does
    not use it): with aiosqlite, it opens no connection, nor thread, until used.
    In-memory SQLite is one ``sqlite3`` connection both engines share.
    """
    sync_url = url.set(drivername="sqlite+pysqlite")
    if in_memory(url):
        if given is not None:
            raise ConfigError("an in-memory SQLite store makes its own engine: pass none")
        async_engine, sync_engine = _memory_engines(url, sync_url)
    else:
        database = url.database or ""
        if not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        connect_args = {"timeout": busy_timeout}
        async_engine = given or create_async_engine(
            url, pool_size=pool_size, max_overflow=max_overflow, connect_args=connect_args
        )
        # One connection per thread: the writer's and each reader's.
        sync_engine = create_engine(
            sync_url,
            pool_size=pool_size + 1,
            max_overflow=max_overflow,
            connect_args={**connect_args, "check_same_thread": False},
        )
    for engine in (async_engine.sync_engine, sync_engine):
        install_sqlite_hooks(engine, busy_timeout)
    return async_engine, sync_engine


def in_memory(url: URL) -> bool:
    """Whether a SQLite URL names an in-memory database."""
    return url.database in (None, "", ":memory:")


def _memory_engines(url: URL, sync_url: URL) -> tuple[AsyncEngine, Engine]:
    # The store's threads take turns on the connection (one thread runs them all).
    shared = sqlite3.connect(":memory:", check_same_thread=False)

    async def connect_async() -> aiosqlite.Connection:
        return await aiosqlite.Connection(lambda: shared, iter_chunk_size=64)

    async_engine = create_async_engine(url, poolclass=StaticPool, async_creator=connect_async)
    sync_engine = create_engine(sync_url, poolclass=StaticPool, creator=lambda: shared)
    return async_engine, sync_engine


def install_sqlite_hooks(engine: Engine, busy_timeout: float) -> None:
    """WAL + busy timeout on every connection; BEGIN IMMEDIATE for write transactions
    (those run with the execution option ``reactq_write``)."""
    if getattr(engine, "_reactq_sqlite_hooks", False):
        return
    engine._reactq_sqlite_hooks = True  # type: ignore[attr-defined]

    @event.listens_for(engine, "connect")
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

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A deferred transaction that reads and then writes can fail at once with
        # SQLITE_BUSY when another process wrote in between; IMMEDIATE takes the
        # write lock up front (waiting up to busy_timeout) so max(sequence)+1 and
        # the fence check cannot race.
        immediate = conn.get_execution_options().get("reactq_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
