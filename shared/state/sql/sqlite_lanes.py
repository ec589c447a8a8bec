"""SQLite's transactions for the SQL store: each whole transaction in one hop to a
thread, one writer thread queueing this process's writes (group commit: the writes
queued together share one BEGIN IMMEDIATE ... COMMIT, each in a savepoint of its
own) and reader threads beside it; see ``engines`` for why."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any, Generic, TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from reactq.shared.state.sql.engines import Abandoned, Op

T = TypeVar("T")

_BUSY_RETRIES = 8


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
