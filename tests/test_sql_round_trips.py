"""The SQL store's round trips to PostgreSQL per pool turn (issue 14: CPU per turn).

Every round trip costs the worker a socket write, a wake-up and SQLAlchemy's work
per statement: a turn's steps must not grow new ones unnoticed. Counted on a real
server: each statement SQLAlchemy sends (``before_cursor_execute``; an executemany
is one pipelined round trip) and each BEGIN / COMMIT / ROLLBACK asyncpg sends
(plain queries without parameters, which its query logger sees). Statements are
prepared once per connection: the counts are taken after a first turn.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import (
    BranchNotFoundError,
    SessionNotFoundError,
    StaleLeaseError,
    TurnCommittedError,
)
from reactq.shared.events import DeltaEvent
from reactq.shared.messages import ChatMessage
from reactq.shared.state import TRUNK
from reactq.shared.state.base import TurnCheckpoint
from reactq.shared.state.memory.store import MemoryStateStore
from reactq.shared.state.sql import ops
from reactq.shared.state.sql.audit import SqlAuditSink
from reactq.shared.state.sql.store import SqlStateStore
from reactq.worker import Agent, AgentRunner, ScriptedLLM
from tests.state_fixtures import contents, record, sid, user


class RoundTrips:
    """What a store sent PostgreSQL while counting: statements and asyncpg's own
    transaction commands."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.commands: list[str] = []

    @property
    def count(self) -> int:
        """Round trips: statements plus transaction commands."""
        return len(self.statements) + len(self.commands)

    def clear(self) -> None:
        """Start counting afresh."""
        self.statements.clear()
        self.commands.clear()


@contextmanager
def counting(store: SqlStateStore) -> Iterator[RoundTrips]:
    """Count the store's round trips inside the block (read them after ``settled``)."""
    trips = RoundTrips()

    def on_statement(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        trips.statements.append(sql)

    def on_query(logged: Any) -> None:
        if not logged.args:  # BEGIN, COMMIT, ROLLBACK: plain queries of asyncpg's
            trips.commands.append(logged.query)

    def on_checkout(_dbapi: Any, entry: Any, _proxy: Any) -> None:
        entry.driver_connection.add_query_logger(on_query)  # a set: added once

    engine = store.sync_engine
    event.listen(engine, "before_cursor_execute", on_statement)
    event.listen(engine.pool, "checkout", on_checkout)
    try:
        yield trips
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)
        event.remove(engine.pool, "checkout", on_checkout)


async def settled() -> None:
    """Let asyncpg's query loggers (called soon after each query) run."""
    for _ in range(3):
        await asyncio.sleep(0)


@pytest.fixture(name="pg")
async def pg_fixture(postgres_url: str) -> AsyncIterator[SqlStateStore]:
    store = await SqlStateStore.open(postgres_url)
    try:
        yield store
    finally:
        await store.close()


async def test_a_pool_turn_on_postgres_costs_few_round_trips(pg: SqlStateStore) -> None:
    """begin_turn: one statement, the call of ``reactq_begin_turn`` (were 4: BEGIN,
    the session's upsert, the history's read, COMMIT); commit_turn: one, the call of
    ``reactq_commit_turn`` (were 7: BEGIN, the fence's lock, the record, the
    branch's tip, the messages, the checkpoint's removal, COMMIT)."""
    s = sid()

    async def turn(fence: int) -> tuple[int, int]:
        t = f"t-{uuid.uuid4().hex}"
        trips.clear()
        start = await pg.begin_turn(s, "a", fence=fence)
        await settled()
        began = trips.count
        trips.clear()
        await pg.commit_turn(
            s,
            [user(f"q{fence}"), user(f"a{fence}")],
            record(s, t),
            fence=fence,
            branch_id=start.branch_id,
            drop_checkpoint=False,
        )
        await settled()
        return began, trips.count

    with counting(pg) as trips:
        first = await turn(1)  # a new session (and every statement prepared)
        s = sid()
        new = await turn(1)
        existing = await turn(2)
    assert (new, existing) == ((1, 1), (1, 1)), (first, trips.statements, trips.commands)
    assert await contents(pg, s) == [(1, "q1"), (2, "a1"), (3, "q2"), (4, "a2")]
    assert [b.branch_id for b in await pg.list_branches(s)] == [TRUNK]


async def test_a_commit_keeping_its_checkpoint_leaves_it(pg: SqlStateStore) -> None:
    """``drop_checkpoint=False`` keeps the turn's checkpoint; the default drops it."""
    s, t, u = sid(), f"t-{uuid.uuid4().hex}", f"t-{uuid.uuid4().hex}"
    await pg.begin_turn(s, "a", fence=1)
    for turn_id in (t, u):
        await pg.checkpoint_step(TurnCheckpoint(session_id=s, turn_id=turn_id, step=1, messages=[]))
    await pg.commit_turn(s, [user("q")], record(s, t), fence=1, drop_checkpoint=False)
    assert await pg.get_checkpoint(s, t) is not None
    await pg.commit_turn(s, [user("r")], record(s, u), fence=1)
    assert await pg.get_checkpoint(s, u) is None
    assert await contents(pg, s) == [(1, "q"), (2, "r")]


async def test_a_runner_with_steps_elsewhere_commits_without_the_checkpoint_delete(
    pg: SqlStateStore,
) -> None:
    """A turn through AgentRunner whose steps are kept outside the store (the pool's
    TurnSteps; a memory store stands in here): 1 + 1 round trips on an existing session."""
    agent = Agent(name="helper", model="m")
    s = sid()

    async def run(runner: AgentRunner, text: str) -> int:
        emitter = TurnEmitter(_Sink(), s, f"t-{uuid.uuid4().hex}", attempt=1)  # type: ignore[arg-type]
        trips.clear()
        final = await runner.run_turn(
            session_id=s, message=text, turn_id=emitter.turn_id, emitter=emitter, fence=1
        )
        await settled()
        assert final.status == "completed"
        return trips.count

    loop = agent.build_loop(ScriptedLLM(["one", "two"]))
    runner = AgentRunner(loop, pg, "helper", MemoryStateStore())
    with counting(pg) as trips:
        await run(runner, "hi")  # the session's first turn
        second = await run(runner, "again")
    assert second == 2, (trips.statements, trips.commands)
    assert [c for _s, c in await contents(pg, s)] == ["hi", "one", "again", "two"]


async def test_an_audit_batch_on_postgres_is_one_round_trip(pg: SqlStateStore) -> None:
    """A batch of audit rows: one pipelined insert, atomic on its own (no BEGIN/COMMIT:
    were 3 round trips)."""
    sink = SqlAuditSink(pg)
    s, t = sid(), f"t-{uuid.uuid4().hex}"

    def delta(n: int) -> DeltaEvent:
        return DeltaEvent(session_id=s, turn_id=t, attempt=1, seq=n, text=f"d{n}", id=f"1-{n}")

    await sink.record(delta(0))
    await sink.flush()  # prepared
    with counting(pg) as trips:
        for n in range(1, 6):
            await sink.record(delta(n))
        await sink.flush()
        await settled()
    assert trips.count == 1, (trips.statements, trips.commands)
    assert [e.seq for e in await sink.turn_events(t)] == list(range(6))


# --- the fence and the failure paths of begin_turn without a transaction -----------


async def test_begin_turn_waits_for_a_staler_commit_in_flight_and_reads_it(
    pg: SqlStateStore,
) -> None:
    """A staler holder's commit already past the fence check holds the session row: the
    newer holder's upsert waits for it, its read sees it, and the staler holder's next
    commit is refused."""
    s, t = sid(), f"t-{uuid.uuid4().hex}"
    await pg.begin_turn(s, "a", fence=1)
    async with pg.engine.connect() as conn:
        await conn.begin()

        def stale_commit(sync: Connection) -> None:
            ops.lock_fenced(sync, s, 1)
            ops.append_rows(sync, s, TRUNK, [user("stale")], None)

        await conn.run_sync(stale_commit)
        waiting = asyncio.ensure_future(pg.begin_turn(s, "a", fence=2))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await conn.commit()
    start = await asyncio.wait_for(waiting, 10)
    assert [m.content for m in start.messages] == ["stale"]
    with pytest.raises(StaleLeaseError):
        await pg.commit_turn(s, [user("late")], record(s, t), fence=1)
    info = await pg.get_session(s)
    assert info is not None and info.fence == 2
    assert await contents(pg, s) == [(1, "stale")]


@contextmanager
def connection_lost_after_the_upsert(store: SqlStateStore, times: int) -> Iterator[list[int]]:
    """The server ends the connection right after begin_turn's call, ``times`` times."""
    lost: list[int] = []

    def on_statement(conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if "reactq_begin_turn" in sql and len(lost) < times:
            lost.append(1)
            conn.exec_driver_sql("SELECT pg_terminate_backend(pg_backend_pid())")

    event.listen(store.sync_engine, "after_cursor_execute", on_statement)
    try:
        yield lost
    finally:
        event.remove(store.sync_engine, "after_cursor_execute", on_statement)


async def test_a_connection_lost_after_the_upsert_leaves_a_whole_session(
    pg: SqlStateStore,
) -> None:
    """The call commits as it ends: lost right after it, the new session has its
    trunk and its token, and begin_turn runs again on a fresh connection."""
    s = sid()
    with connection_lost_after_the_upsert(pg, times=2) as lost, pytest.raises(DBAPIError):
        await pg.begin_turn(s, "a", fence=3)
    assert len(lost) == 2  # the retry met the same end
    info = await pg.get_session(s)
    assert info is not None and info.fence == 3
    assert [b.branch_id for b in await pg.list_branches(s)] == [TRUNK]

    r = sid()
    with connection_lost_after_the_upsert(pg, times=1) as lost:
        start = await pg.begin_turn(r, "a", fence=1)
    assert lost == [1] and start.messages == [] and start.info.fence == 1
    await pg.append(r, [user("before")])
    with connection_lost_after_the_upsert(pg, times=1) as lost:
        start = await pg.begin_turn(r, "a", fence=2)
    assert lost == [1] and [m.content for m in start.messages] == ["before"]
    assert start.info.fence == 2
    assert [b.branch_id for b in await pg.list_branches(r)] == [TRUNK]


async def test_begin_turn_reads_what_read_for_turn_reads(pg: SqlStateStore) -> None:
    """``reactq_begin_turn`` holds its own copy of ``read_for_turn``'s query: both read
    the same history of every branch of a tree with summaries above and below its
    forks."""
    s = sid()
    await pg.begin_turn(s, "a")

    def summary(text: str, upto: int) -> ChatMessage:
        return ChatMessage(role="user", content=text, summary_of=upto)

    await pg.append(s, [user(f"m{n}") for n in range(1, 5)])
    await pg.append(s, [summary("sum trunk", 2), user("m6")])
    child = await pg.fork(s, 5)
    await pg.append(s, [user("c1"), summary("sum child", 6), user("c3")], child)
    grandchild = await pg.fork(s, 7, branch_id=child)
    await pg.append(s, [user("g1")], grandchild)
    low = await pg.fork(s, 3, branch_id=TRUNK)  # below the trunk's summary
    await pg.append(s, [user("l1"), summary("past itself", 99)], low)
    for branch in (TRUNK, child, grandchild, low):

        def read(conn: Connection, branch: str = branch) -> list[ChatMessage]:
            return ops.read_for_turn(conn, s, branch)

        expected = await pg._read(read)
        start = await pg.begin_turn(s, "a", branch_id=branch)
        assert start.messages == expected, branch
        assert expected


# --- reactq_commit_turn: one call, its own transaction ----------------------------


async def test_a_commit_waits_for_a_write_in_flight_and_appends_after_it(
    pg: SqlStateStore,
) -> None:
    """The function reads the branch's tip after it locked the session row: messages
    another transaction wrote while holding the row come before the turn's (one SQL
    statement would read the tip as it was before it waited)."""
    s, t = sid(), f"t-{uuid.uuid4().hex}"
    await pg.begin_turn(s, "a", fence=1)
    await pg.append(s, [user("first")])
    async with pg.engine.connect() as conn:
        await conn.begin()

        def in_flight(sync: Connection) -> None:
            ops.lock_fenced(sync, s, None)
            ops.append_rows(sync, s, TRUNK, [user("in flight")], None)

        await conn.run_sync(in_flight)
        waiting = asyncio.ensure_future(pg.commit_turn(s, [user("turn")], record(s, t), fence=1))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await conn.commit()
    await asyncio.wait_for(waiting, 10)
    assert await contents(pg, s) == [(1, "first"), (2, "in flight"), (3, "turn")]


async def test_a_refused_commit_writes_nothing(pg: SqlStateStore) -> None:
    """Each refusal of the function's is raised as before, and the call, its own
    transaction, wrote nothing: no record, no message, the session row and the
    checkpoint as they were."""
    s, t, done = sid(), f"t-{uuid.uuid4().hex}", f"t-{uuid.uuid4().hex}"
    await pg.begin_turn(s, "a", fence=2)
    await pg.commit_turn(s, [user("kept")], record(s, done), fence=2)
    await pg.checkpoint_step(TurnCheckpoint(session_id=s, turn_id=t, step=1, messages=[]))
    before = await pg.get_session(s)

    with pytest.raises(StaleLeaseError) as refused:
        await pg.commit_turn(s, [user("x")], record(s, t), fence=1)
    assert (refused.value.details["fence"], refused.value.details["newest"]) == (1, 2)
    with pytest.raises(BranchNotFoundError) as missing:
        await pg.commit_turn(s, [user("x")], record(s, t), fence=3, branch_id="nope")
    assert missing.value.details["branch_id"] == "nope"
    with pytest.raises(TurnCommittedError):
        await pg.commit_turn(s, [user("x")], record(s, done), fence=3)
    with pytest.raises(TurnCommittedError):  # the record answers first, as with a branch
        await pg.commit_turn(s, [user("x")], record(s, done), fence=3, branch_id="nope")
    other = sid()
    with pytest.raises(SessionNotFoundError):
        await pg.commit_turn(other, [user("x")], record(other, t))

    assert await pg.get_session(s) == before  # fence 2, updated_at untouched
    assert await pg.get_turn(t) is None and await pg.get_turn(done) is not None
    assert await contents(pg, s) == [(1, "kept")]
    assert await pg.get_checkpoint(s, t) is not None
    await pg.commit_turn(s, [user("y")], record(s, t), fence=3)
    assert await contents(pg, s) == [(1, "kept"), (2, "y")]
    info = await pg.get_session(s)
    assert info is not None and info.fence == 3 and await pg.get_checkpoint(s, t) is None


class _Sink:
    async def publish(self, event: Any) -> Any:
        return event
