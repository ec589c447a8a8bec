"""Group commit on SQLite: the writes queued together share one BEGIN ... COMMIT, and
each caller still sees its own write as if it ran alone (shared/state/sql/sqlite_lanes.py).

The writes of a test queue up behind one the writer thread is running (held until the
test lets it go), so they form the next group, deterministically.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from reactq.shared.state.sql.store import SqlStateStore
from reactq.shared.turns import TurnStatus
from tests.state_fixtures import contents, record, sid, user

Op = Callable[[Connection], Any]

TABLES = (
    "CREATE TABLE gc_rows (name TEXT PRIMARY KEY)",
    "CREATE TABLE gc_parents (id INTEGER PRIMARY KEY)",
    # Checked at COMMIT: an orphan makes the COMMIT fail, not the statement.
    "CREATE TABLE gc_children (id INTEGER PRIMARY KEY, parent INTEGER "
    "REFERENCES gc_parents (id) DEFERRABLE INITIALLY DEFERRED)",
)


@pytest.fixture(name="sqlite", params=["file", "memory"])
async def sqlite_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    url = (
        "sqlite+aiosqlite://"
        if request.param == "memory"
        else f"sqlite+aiosqlite:///{tmp_path}/g.db"
    )
    store = await SqlStateStore.open(url)

    def create(conn: Connection) -> None:
        for statement in TABLES:
            conn.exec_driver_sql(statement)

    try:
        await store._write(create)
        yield store
    finally:
        await store.close()


class Counts:
    """The write transactions' BEGINs and COMMITs on a store's engine (a BEGIN that
    failed not counted), and the statements refused for SQLite's lock."""

    def __init__(self, store: SqlStateStore) -> None:
        self.begins = self.commits = self.busy = 0

        def on_begin(conn: Connection) -> None:
            if conn.get_execution_options().get("reactq_write"):
                self.begins += 1

        def on_commit(conn: Connection) -> None:
            self.commits += 1

        def on_error(context: Any) -> None:
            self.busy += "locked" in str(context.original_exception)

        event.listen(store.sync_engine, "begin", on_begin)
        event.listen(store.sync_engine, "handle_error", on_error)
        event.listen(store.sync_engine, "commit", on_commit)


@contextlib.asynccontextmanager
async def writer_held(store: SqlStateStore) -> AsyncIterator[Counts]:
    """The writer thread busy with a write until the block ends: the writes queued
    meanwhile run next, together. Yields the counts of what follows."""
    started, release = threading.Event(), threading.Event()

    def hold(_conn: Connection) -> None:
        started.set()
        release.wait(10)

    holding = asyncio.ensure_future(store._write(hold))
    assert await asyncio.to_thread(started.wait, 10)
    counts = Counts(store)
    counts.commits = -1  # the held write's own COMMIT is still to come
    try:
        yield counts
    finally:
        release.set()
        await holding


def put(name: str) -> Op:
    def op(conn: Connection) -> str:
        conn.execute(text("INSERT INTO gc_rows (name) VALUES (:n)"), {"n": name})
        return name

    return op


async def queue(store: SqlStateStore, *ops: Op) -> list[asyncio.Future[Any]]:
    """Each op's write, queued in order."""
    tasks: list[asyncio.Future[Any]] = [asyncio.ensure_future(store._write(op)) for op in ops]
    await asyncio.sleep(0)  # each task queues its job on its first step
    return tasks


async def stored(store: SqlStateStore) -> list[str]:
    def read(conn: Connection) -> list[str]:
        return list(conn.execute(text("SELECT name FROM gc_rows ORDER BY name")).scalars())

    return await store._read(read)


async def test_a_failing_op_among_good_ones_rolls_back_alone(sqlite: SqlStateStore) -> None:
    s = sid()
    await sqlite.ensure_session(s, "a")

    def fails(conn: Connection) -> None:
        put("wrote-then-failed")(conn)
        raise ValueError("no")

    async with writer_held(sqlite) as counts:
        tasks = await queue(sqlite, put("a"), fails, put("a"), put("c"))
        tasks.append(asyncio.ensure_future(sqlite.append(s, [user("m")])))
        await asyncio.sleep(0)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] == "a" and results[3] == "c" and results[4] is None
    assert isinstance(results[1], ValueError)
    assert isinstance(results[2], IntegrityError)  # the statement's own failure: a duplicate
    assert await stored(sqlite) == ["a", "c"]
    assert await contents(sqlite, s) == [(1, "m")]
    assert (counts.begins, counts.commits) == (1, 1)  # one transaction for the five


async def test_an_op_that_ends_the_transaction_fails_alone(sqlite: SqlStateStore) -> None:
    """SQLite rolls a whole transaction back on some errors (a full disk): the op's
    error stands, and the others run again, in a transaction of their own."""

    def ends_it(conn: Connection) -> None:
        put("lost")(conn)
        dbapi: Any = conn.connection.driver_connection
        dbapi.execute("ROLLBACK")
        raise OSError("disk full")

    async with writer_held(sqlite) as counts:
        tasks = await queue(sqlite, put("a"), ends_it, put("c"))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] == "a" and results[2] == "c"
    assert isinstance(results[1], OSError)
    assert await stored(sqlite) == ["a", "c"]
    assert (counts.begins, counts.commits) == (2, 1)


async def test_a_commit_failure_reaches_every_op_of_the_group(sqlite: SqlStateStore) -> None:
    def orphan(conn: Connection) -> None:
        conn.exec_driver_sql("INSERT INTO gc_children (id, parent) VALUES (1, 404)")

    async with writer_held(sqlite) as counts:
        tasks = await queue(sqlite, put("a"), orphan, put("c"))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, IntegrityError) for r in results), results
    assert counts.begins == 1
    assert await stored(sqlite) == []
    assert await sqlite._write(put("after")) == "after"  # the writer goes on
    assert await stored(sqlite) == ["after"]


async def test_a_write_cancelled_before_it_ran_is_skipped(sqlite: SqlStateStore) -> None:
    ran: list[str] = []

    def skipped(conn: Connection) -> None:
        ran.append("b")
        put("b")(conn)

    async with writer_held(sqlite) as counts:
        tasks = await queue(sqlite, put("a"), skipped, put("c"))
        tasks[1].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] == "a" and results[2] == "c"
    assert isinstance(results[1], asyncio.CancelledError)
    assert ran == [] and await stored(sqlite) == ["a", "c"]
    assert (counts.begins, counts.commits) == (1, 1)


async def test_a_write_cancelled_while_it_runs_rolls_back_alone(sqlite: SqlStateStore) -> None:
    running, go = threading.Event(), threading.Event()

    def slow(conn: Connection) -> None:
        put("b")(conn)
        running.set()
        go.wait(10)

    async with writer_held(sqlite) as counts:
        tasks = await queue(sqlite, put("a"), slow, put("c"))
    assert await asyncio.to_thread(running.wait, 10)
    tasks[1].cancel()
    go.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] == "a" and results[2] == "c"
    assert isinstance(results[1], asyncio.CancelledError)
    assert await stored(sqlite) == ["a", "c"]
    assert (counts.begins, counts.commits) == (1, 1)


async def test_a_write_cancelled_after_it_ran_is_not_committed(sqlite: SqlStateStore) -> None:
    """Its savepoint is released by then: the group runs again without it."""
    next_runs, go = threading.Event(), threading.Event()

    def slow(conn: Connection) -> str:
        next_runs.set()  # the op before it is done
        go.wait(10)
        return put("c")(conn)

    async with writer_held(sqlite) as counts:
        tasks = await queue(sqlite, put("a"), put("b"), slow)
    assert await asyncio.to_thread(next_runs.wait, 10)
    tasks[1].cancel()
    go.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] == "a" and results[2] == "c"
    assert isinstance(results[1], asyncio.CancelledError)
    assert await stored(sqlite) == ["a", "c"]
    assert (counts.begins, counts.commits) == (2, 1)


async def test_results_are_right_under_concurrency(sqlite: SqlStateStore) -> None:
    sessions = [sid() for _ in range(64)]
    shared = sid()
    await sqlite.ensure_session(shared, "a")
    async with writer_held(sqlite) as counts:
        starts = [asyncio.ensure_future(sqlite.begin_turn(s, "a", fence=1)) for s in sessions]
        appends = [asyncio.ensure_future(sqlite.append(shared, [user(f"m{i}")])) for i in range(20)]
        await asyncio.sleep(0)
    await asyncio.gather(*starts, *appends)
    assert counts.begins == 3  # 84 writes, at most 32 a transaction
    await asyncio.gather(
        *(sqlite.commit_turn(s, [user(s)], record(s, f"t-{s}"), fence=1) for s in sessions)
    )
    assert counts.begins < 3 + len(sessions)  # grouped, not counted on
    for s in sessions:
        assert await contents(sqlite, s) == [(1, s)]
        turn = await sqlite.get_turn(f"t-{s}")
        assert turn is not None and turn.status == TurnStatus.COMPLETED
    assert await contents(sqlite, shared) == [(i + 1, f"m{i}") for i in range(20)]


async def test_a_lone_write_takes_no_savepoint() -> None:
    store = await SqlStateStore.open("sqlite+aiosqlite://")  # one connection: traceable
    statements: list[str] = []
    try:
        await store._write(lambda conn: conn.exec_driver_sql(TABLES[0]))

        def trace(conn: Connection) -> None:
            dbapi: Any = conn.connection.driver_connection
            dbapi.set_trace_callback(statements.append)

        await store._write(trace)
        await store._write(put("alone"))
        assert [s.split()[0] for s in statements] == ["COMMIT", "BEGIN", "INSERT", "COMMIT"]
        statements.clear()
        async with writer_held(store):
            tasks = await queue(store, put("a"), put("b"))
        await asyncio.gather(*tasks)
        assert statements.count("SAVEPOINT reactq_write") == 2
    finally:
        await store.close()


async def test_a_group_waits_out_another_process_holding_the_lock(tmp_path: Path) -> None:
    """SQLITE_BUSY past the busy timeout: the group waits and runs again, whole."""
    store = await SqlStateStore.open(
        f"sqlite+aiosqlite:///{tmp_path}/b.db", busy_timeout_seconds=0.05
    )
    try:
        await store._write(lambda conn: conn.exec_driver_sql(TABLES[0]))
        counts = Counts(store)
        async with store.engine.connect() as other:
            await other.begin()
            await other.execute(text("INSERT INTO gc_rows (name) VALUES ('other')"))
            tasks = await queue(store, *(put(f"w{i}") for i in range(5)))
            await asyncio.sleep(0.3)
            assert not any(task.done() for task in tasks)
        assert await asyncio.gather(*tasks) == [f"w{i}" for i in range(5)]
        assert counts.busy > 1  # past the busy timeout, more than once
        assert (counts.begins, counts.commits) == (1, 1)  # then the five at once
        assert await stored(store) == [f"w{i}" for i in range(5)]
    finally:
        await store.close()
