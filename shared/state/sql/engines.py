"""How the SQL store's transactions reach the database: its engines and runners.

A transaction of the store is a plain function of a SQLAlchemy ``Connection`` (its
statements are in ``ops``); a runner's ``write(op)`` or ``read(op)`` runs one.

SQLite (``SqliteTransactions``): the whole transaction (BEGIN, the statements,
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

import asyncio
import functools
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any, Generic, Protocol, TypeVar

import aiosqlite
from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from reactq.shared.errors import ConfigError

T = TypeVar("T")
Op = Callable[[Connection], T]
"""One transaction's work, given its connection (the transaction is the runner's)."""
Abandoned = Callable[[], bool]
"""Whether the caller of a job has stopped waiting for it (it was cancelled)."""

_BUSY_RETRIES = 8


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


# --- SQLite -----------------------------------------------------------------------


class SqliteTransactions:
    """Transactions on a synchronous SQLite engine, each in one hop to a thread.

    Writes go to one thread (this process's writers take turns there); reads to
    ``readers`` others. ``shared``: the engine is one connection (in-memory
    SQLite), so reads go to the writer's thread too and every transaction takes
    its turn.
    """

    def __init__(self, engine: Engine, *, readers: int, shared: bool) -> None:
        self.engine = engine
        self._writer = engine.execution_options(reactq_write=True)
        self._writes = _Lane("reactq-sqlite-writer", 1)
        self._reads = self._writes if shared else _Lane("reactq-sqlite-reader", readers)

    async def read(self, op: Op[T]) -> T:
        """Run ``op`` in a read transaction on a reader thread."""
        return await self._reads.run(functools.partial(_read_in_thread, self.engine, op))

    async def write(self, op: Op[T]) -> T:
        """Run ``op`` in a BEGIN IMMEDIATE transaction on the writer thread, retrying
        while SQLite reports the database busy (another process holds it). Writes
        queued together share one transaction, each in a savepoint (``_write_group``)."""
        return await self._writes.run(_Write(self._writer, op))

    async def close(self) -> None:
        """Let the queued transactions finish, stop the threads, close the connections."""
        await self._writes.close()
        await self._reads.close()
        self.engine.dispose()


class _Cancelled(Exception):
    """Rolls back a transaction whose caller was cancelled before it committed."""


_GROUP = 32
"""At most this many queued write transactions share one BEGIN ... COMMIT."""


@dataclass(frozen=True, slots=True)
class _Write(Generic[T]):
    """A write transaction queued for the writer thread: ``op`` on ``engine`` (whose
    transactions are BEGIN IMMEDIATE); see ``_write_group``."""

    engine: Engine
    op: Op[T]


def _read_in_thread(engine: Engine, op: Op[T], _abandoned: Abandoned) -> T:
    with engine.connect() as conn:
        return op(conn)


def _write_group(group: list[_WriteItem], more: Callable[[], _WriteItem | None]) -> list[_Outcome]:
    """Run the write jobs of ``group`` (one to start with) in one BEGIN IMMEDIATE
    transaction and COMMIT once: group commit, since BEGIN and COMMIT are most of
    what a small write costs. Return each job's outcome, all of them known only once
    the COMMIT succeeded (if it fails, every job gets its error).

    Right after BEGIN the group takes the writes queued meanwhile (``more``), up to
    ``_GROUP``. Several run each in a savepoint of its own (see ``_run_group``).
    SQLITE_BUSY (another process holds the lock): the transaction waits and runs
    again, as a lone one did. A job whose caller left before it ran is skipped.
    """
    engine = group[0][1].engine
    settled: list[_Outcome] = []
    attempt = 0
    while group := [item for item in group if not item[0].cancelled()]:
        last = attempt == _BUSY_RETRIES - 1
        try:
            with engine.begin() as conn:
                # Not after a regroup: each one settles a job for good, so it ends.
                while not settled and len(group) < _GROUP and (item := more()) is not None:
                    group.append(item)
                outcomes, regroup = _run_group(conn, group, last)
                if regroup:
                    conn.rollback()
            if not regroup:
                return settled + outcomes
            # Run again at once without the jobs settled early (one fewer each time).
            settled += regroup
            early = {id(outcome[0]) for outcome in regroup}
            group = [item for item in group if id(item[0]) not in early]
            continue
        except BaseException as exc:  # handed to the callers, whatever it is
            if last or not isinstance(exc, OperationalError) or not is_busy(exc):
                return settled + [(future, False, exc) for future, _ in group]
        # Blocking the writer thread is right: this process's other writers
        # would find the database as busy.
        time.sleep(min(0.01 * 2**attempt, 0.5))
        attempt += 1
    return settled


def _run_group(
    conn: Connection, group: list[_WriteItem], last: bool
) -> tuple[list[_Outcome], list[_Outcome]]:
    """Run the ops of ``group`` in ``conn``'s transaction, in order: their outcomes,
    and those settled early (when there are any the transaction must not commit,
    but run again without their jobs).

    One op runs as it always did: what it raises rolls back the transaction. Several
    run each in a savepoint: an op that raises, or whose caller was cancelled
    meanwhile, is rolled back to its savepoint, alone; SQLITE_BUSY (unless on the
    ``last`` attempt) rolls back the whole group, to wait and run it again.
    """
    if len(group) == 1:
        future, write = group[0]
        result = write.op(conn)
        # As through an async driver, a cancelled call does not commit
        # (unless its COMMIT was already under way).
        if future.cancelled():
            raise _Cancelled
        return [(future, True, result)], []
    # The driver's own statements: SQLAlchemy's begin_nested() costs as much CPU as
    # the BEGIN and COMMIT saved. The driver's implicit BEGIN is off, so they are
    # SQLite's plain savepoints (see install_sqlite_hooks).
    dbapi = conn.connection.driver_connection
    assert dbapi is not None
    outcomes: list[_Outcome] = []
    for future, write in group:
        if future.cancelled():
            continue  # its caller left before it ran
        dbapi.execute("SAVEPOINT reactq_write")
        try:
            result = write.op(conn)
            if future.cancelled():
                raise _Cancelled
        except BaseException as exc:  # handed to its caller, whatever it is
            if not last and isinstance(exc, OperationalError) and is_busy(exc):
                raise
            if not dbapi.in_transaction:
                # SQLite rolled the whole transaction back (on some errors it does):
                # this op's outcome stands, the others run again without it.
                return outcomes, [(future, False, exc)]
            dbapi.execute("ROLLBACK TO reactq_write")
            outcomes.append((future, False, exc))
        else:
            outcomes.append((future, True, result))
        dbapi.execute("RELEASE reactq_write")
    # A caller cancelled after its savepoint was released would see its op
    # committed: the group runs again without it instead.
    return outcomes, [outcome for outcome in outcomes if outcome[1] and outcome[0].cancelled()]


def is_busy(exc: OperationalError) -> bool:
    """Whether SQLite refused for a lock another connection holds."""
    message = str(exc.orig).lower()
    return "locked" in message or "busy" in message


Job = Callable[[Abandoned], T]
_Item = tuple[asyncio.Future[Any], "Job[Any] | _Write[Any]"]
_WriteItem = tuple[asyncio.Future[Any], _Write[Any]]
_Outcome = tuple[asyncio.Future[Any], bool, Any]
"""A job's future, whether the job returned, and its result or exception."""


class _Lane:
    """Threads running jobs from one queue, each result handed back to its caller's
    event loop in one ``call_soon_threadsafe`` (the least a hop can cost: a
    ThreadPoolExecutor's futures cost twice as much CPU; a group of writes takes
    one per loop).

    The threads start on first use (so a store made before a fork starts them in
    the process that uses it) and are daemons: a store never closed does not keep
    the interpreter from exiting (SQLite survives an interrupted transaction).
    """

    def __init__(self, name: str, size: int) -> None:
        self._name, self._size = name, size
        self._jobs: SimpleQueue[_Item | None] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._starting = threading.Lock()

    def run(self, job: Job[T] | _Write[T]) -> asyncio.Future[T]:
        """Queue ``job``; the future is settled on the caller's loop when it ends.

        Cancelling the future before a thread takes the job skips it; the job can
        ask whether it was cancelled since (its argument). A ``_Write`` runs with
        the writes queued beside it (``_write_group``).
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if not self._threads:
            self._start()
        self._jobs.put((future, job))
        return future

    def _start(self) -> None:
        with self._starting:
            for n in range(len(self._threads), self._size):
                thread = threading.Thread(
                    target=_serve, args=(self._jobs,), name=f"{self._name}-{n}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    async def close(self) -> None:
        """Stop the threads once the jobs queued before have run."""
        threads, self._threads = self._threads, []
        for _ in threads:
            self._jobs.put(None)
        if threads:
            # Joined off the loop: a queued write may wait out SQLite's busy timeout.
            await asyncio.to_thread(_join, threads)


def _serve(jobs: SimpleQueue[_Item | None]) -> None:
    # An item taken while a group of writes gathered, but not for it: served next.
    carried: list[_Item | None] = []
    while (item := carried.pop() if carried else jobs.get()) is not None:
        if not item[0].cancelled():
            job = item[1]
            if isinstance(job, _Write):
                more = functools.partial(_more, jobs, job.engine, carried)
                _hand_back(_write_group([(item[0], job)], more))
            else:
                _hand_back([_run(item[0], job)])
            del job
        del item  # not kept alive while the thread waits


def _more(
    jobs: SimpleQueue[_Item | None], engine: Engine, carried: list[_Item | None]
) -> _WriteItem | None:
    """The next write on ``engine`` if one is queued. Anything else (a read on the
    writer's lane, the end) stops the group and is carried over, in its turn."""
    if carried:
        return None
    try:
        item = jobs.get_nowait()
    except Empty:
        return None
    if item is not None and isinstance(job := item[1], _Write) and job.engine is engine:
        return item[0], job
    carried.append(item)
    return None


def _run(future: asyncio.Future[Any], job: Job[Any]) -> _Outcome:
    try:
        return (future, True, job(future.cancelled))
    except BaseException as exc:  # handed to the caller, whatever it is
        return (future, False, exc)


def _hand_back(outcomes: list[_Outcome]) -> None:
    """Settle the futures on their loops: one ``call_soon_threadsafe`` per loop."""
    loops: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        loops.setdefault(outcome[0].get_loop(), []).append(outcome)
    for loop, settled in loops.items():
        try:
            loop.call_soon_threadsafe(_settle, settled)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting
            pass


def _settle(outcomes: list[_Outcome]) -> None:
    for future, ok, value in outcomes:
        if future.cancelled():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join()


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
