"""The StateStore contract (sessions, appends, turns, fencing, odd text), run against
every backend on real servers; branching is in test_state_branches.py."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.engine import Connection

from reactq.shared.errors import (
    BranchNotFoundError,
    ConfigError,
    SchemaVersionError,
    SessionNotFoundError,
    StaleLeaseError,
    TurnCommittedError,
)
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.state import (
    TRUNK,
    MemoryStateStore,
    SessionInfo,
    StateStore,
    TurnCheckpoint,
    TurnStart,
    open_store,
)
from reactq.shared.state.redis.store import RedisStateStore
from reactq.shared.state.sql.schema import messages as messages_table
from reactq.shared.state.sql.schema import sessions as sessions_table
from reactq.shared.state.sql.store import SqlStateStore
from reactq.shared.turns import TurnStatus
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    contents,
    record,
    shared_url_fixture,
    sid,
    store_fixture,
    url_fixture,
    user,
)

ROOT = Path(__file__).resolve().parent.parent


async def sequences(store: StateStore, session_id: str) -> list[int]:
    """The stored sequence numbers of a session's trunk (SQL backends only)."""
    assert isinstance(store, SqlStateStore)
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            select(messages_table.c.sequence)
            .where(messages_table.c.session_id == session_id)
            .order_by(messages_table.c.sequence)
        )
        return [row[0] for row in rows]


async def test_is_a_state_store(store: StateStore) -> None:
    assert isinstance(store, StateStore)


async def test_ensure_session_is_idempotent_and_keeps_first_agent(store: StateStore) -> None:
    s = sid()
    assert await store.get_session(s) is None
    first = await store.ensure_session(s, "alpha")
    again = await store.ensure_session(s, "beta")
    assert first == again
    assert isinstance(first, SessionInfo)
    assert (first.agent, first.active_branch, first.fence) == ("alpha", TRUNK, 0)
    assert first.created_at > 0
    assert await store.get_session(s) == first


async def test_concurrent_ensure_session_creates_one(store: StateStore) -> None:
    s = sid()
    infos = await asyncio.gather(*(store.ensure_session(s, f"a{i}") for i in range(10)))
    assert len({info.agent for info in infos}) == 1


async def test_append_and_get_in_order(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    assert await store.get_messages(s) == []
    await store.append(s, [user("one"), user("two")])
    call = ToolCall(id="c1", name="add", arguments='{"a": 1}')
    await store.append(
        s,
        [
            ChatMessage(role="assistant", content=None, tool_calls=[call]),
            ChatMessage(role="tool", content="2", name="add", tool_call_id="c1"),
        ],
    )
    await store.append(s, [])
    got = await store.get_messages(s)
    assert [m.content for m in got] == ["one", "two", None, "2"]
    assert got[2].tool_calls == [call]
    assert got[3].name == "add" and got[3].tool_call_id == "c1"
    assert await store.get_messages(s, branch_id=TRUNK) == got
    assert await store.get_messages(s, branch_id="nope") == []
    assert await store.get_messages(sid()) == []


async def test_writes_to_a_missing_session_or_branch_fail(store: StateStore) -> None:
    s = sid()
    with pytest.raises(SessionNotFoundError):
        await store.append(s, [user("x")])
    await store.claim(s, 1)  # nothing to fence yet: a no-op that creates nothing
    assert await store.get_session(s) is None
    with pytest.raises(SessionNotFoundError):
        await store.commit_turn(s, [user("x")], record(s, "t-x"))
    await store.ensure_session(s, "a")
    with pytest.raises(ValueError, match="no branch"):
        await store.append(s, [user("x")], branch_id="nope")
    assert await store.get_messages(s) == []


async def test_commit_turn_writes_messages_and_record(store: StateStore) -> None:
    s, t = sid(), f"t-{uuid.uuid4().hex}"
    await store.ensure_session(s, "a")
    assert await store.get_turn(t) is None
    rec = record(s, t, attempt=2, final_text="hi there", status=TurnStatus.COMPLETED)
    await store.commit_turn(s, [user("hi"), ChatMessage(role="assistant", content="hi there")], rec)
    got = await store.get_messages(s)
    assert [m.content for m in got] == ["hi", "hi there"]
    assert all(m.turn_id == t for m in got)
    stored = await store.get_turn(t)
    assert stored is not None
    assert (stored.status, stored.attempt, stored.final_text) == (
        TurnStatus.COMPLETED,
        2,
        "hi there",
    )
    assert stored.created_at > 0


async def test_a_turn_is_committed_at_most_once(store: StateStore) -> None:
    """A second commit of a turn, by any holder (the same token, a newer one, none),
    is refused and writes nothing: its messages stay stored once, its record and
    the fence as the first commit left them."""
    s, t = sid(), f"t_{uuid.uuid4().hex}"
    await store.ensure_session(s, "a")
    await store.claim(s, 3)
    first = [user("q"), ChatMessage(role="assistant", content="kept")]
    await store.commit_turn(s, first, record(s, t, final_text="kept"), fence=3)
    for fence in (3, 4, None):
        with pytest.raises(TurnCommittedError) as info:
            await store.commit_turn(
                s,
                [user("q"), ChatMessage(role="assistant", content="again")],
                record(s, t, attempt=2, status=TurnStatus.ERROR, final_text="again"),
                fence=fence,
            )
        assert info.value.details == {"session_id": s, "turn_id": t}
    with pytest.raises(TurnCommittedError):
        await store.commit_turn(s, [], record(s, t, status=TurnStatus.ERROR), fence=3)
    assert await contents(store, s) == [(1, "q"), (2, "kept")]
    stored = await store.get_turn(t)
    assert stored is not None
    assert (stored.status, stored.attempt, stored.final_text) == (TurnStatus.COMPLETED, 1, "kept")
    info_after = await store.get_session(s)
    assert info_after is not None and info_after.fence == 3
    # Another session cannot take the turn id over either.
    other = sid()
    await store.ensure_session(other, "a")
    with pytest.raises(TurnCommittedError):
        await store.commit_turn(other, [user("elsewhere")], record(other, t))
    assert await store.get_messages(other) == []
    found = await store.get_turn(t)
    assert found is not None and found.session_id == s


async def test_commit_turn_to_a_missing_branch_writes_nothing(store: StateStore) -> None:
    s, t = sid(), f"t-{uuid.uuid4().hex}"
    await store.ensure_session(s, "a")
    await store.claim(s, 1)
    for fence in (1, None):
        with pytest.raises(BranchNotFoundError):
            await store.commit_turn(s, [user("x")], record(s, t), fence=fence, branch_id="nope")
    assert await store.get_turn(t) is None
    assert await store.get_messages(s) == []
    await store.commit_turn(s, [user("x")], record(s, t), fence=1, branch_id=TRUNK)
    assert await contents(store, s) == [(1, "x")]


async def test_commit_turn_refuses_a_record_of_another_session(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    with pytest.raises(ValueError, match="belongs to session"):
        await store.commit_turn(s, [user("x")], record(sid(), "t-other"))
    assert await store.get_messages(s) == []


async def test_fencing(store: StateStore) -> None:
    s, t = sid(), f"t-{uuid.uuid4().hex}"
    await store.ensure_session(s, "a")
    await store.claim(s, 1)
    await store.claim(s, 1)  # the same holder again is fine
    await store.commit_turn(s, [user("by 1")], record(s, "t-1"), fence=1)
    await store.claim(s, 3)
    with pytest.raises(StaleLeaseError) as info:
        await store.claim(s, 2)
    assert info.value.details["newest"] == 3
    with pytest.raises(StaleLeaseError):
        await store.commit_turn(s, [user("stale")], record(s, t), fence=2)
    assert [m.content for m in await store.get_messages(s)] == ["by 1"]
    assert await store.get_turn(t) is None
    # A newer token in commit_turn moves the fence on; unfenced commits are not checked.
    await store.commit_turn(s, [user("by 5")], record(s, t), fence=5)
    info_after = await store.get_session(s)
    assert info_after is not None and info_after.fence == 5
    await store.commit_turn(s, [user("unfenced")], record(s, "t-u"))
    with pytest.raises(StaleLeaseError):
        await store.commit_turn(s, [], record(s, "t-old"), fence=4)
    contents = [m.content for m in await store.get_messages(s)]
    assert contents == ["by 1", "by 5", "unfenced"]


async def test_concurrent_appends_get_unique_contiguous_positions(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")

    async def writer(w: int) -> None:
        for i in range(5):
            await store.append(s, [user(f"{w}.{i}.a"), user(f"{w}.{i}.b")])

    await asyncio.gather(*(writer(w) for w in range(8)))
    got = [m.content for m in await store.get_messages(s)]
    assert len(got) == len(set(got)) == 80
    # Each append's two messages stay adjacent, and one writer's appends keep their order.
    for k in range(0, 80, 2):
        first = got[k] or ""
        assert first.endswith("a") and got[k + 1] == first[:-1] + "b"
    for w in range(8):
        mine = [c for c in got if c is not None and c.startswith(f"{w}.") and c.endswith("a")]
        assert mine == [f"{w}.{i}.a" for i in range(5)]
    assert [m.sequence for m in await store.get_messages(s)] == list(range(1, 81))
    if isinstance(store, SqlStateStore):
        assert await sequences(store, s) == list(range(1, 81))


async def test_odd_text_round_trips(store: StateStore) -> None:
    s, t = sid(), f"t-{uuid.uuid4().hex}"
    odd = "lone \ud800 split \ud83d\ude00 nul \x00 marker \ue000 ok é 😀 \\u1234"
    await store.ensure_session(s, "a")
    call = ToolCall(id="c\ud801", name="f", arguments='{"x": "\udfff"}')
    msgs = [
        user(odd),
        user("\ue000starts with the marker"),
        ChatMessage(role="assistant", tool_calls=[call], content=""),
        ChatMessage(role="tool", content=odd, name="n\x00", tool_call_id="c\ud801"),
    ]
    await store.commit_turn(s, msgs, record(s, t, final_text=odd, error="\udc00"))
    got = await store.get_messages(s)
    assert [m.model_dump() for m in got] == [m.model_dump() for m in msgs]
    assert got[0].content == odd
    stored = await store.get_turn(t)
    assert stored is not None and (stored.final_text, stored.error) == (odd, "\udc00")


# --- backend specifics ------------------------------------------------------------

WORKER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from reactq.shared.messages import ChatMessage
    from reactq.shared.state import open_store

    async def main(url, session_id, worker, rounds):
        store = await open_store(url)
        try:
            await store.ensure_session(session_id, f"agent-{worker}")
            async def one(task):
                for i in range(rounds):
                    msgs = [ChatMessage(role="user", content=f"{worker}.{task}.{i}.{k}")
                            for k in range(2)]
                    await store.append(session_id, msgs)
            await asyncio.gather(*(one(task) for task in range(3)))
        finally:
            await store.close()

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    """
)


async def test_appends_from_three_processes(shared_url: str, tmp_path: Path) -> None:
    url = shared_url
    s, rounds = sid(), 10
    script = tmp_path / "writer.py"
    script.write_text(WORKER_SCRIPT)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            url,
            s,
            str(w),
            str(rounds),
            cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
        )
        for w in range(3)
    ]
    results = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 120)
    for proc, (_out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err.decode()
    store = await open_store(url)
    try:
        total = 3 * 3 * rounds * 2
        history = await store.get_messages(s)
        assert [m.sequence for m in history] == list(range(1, total + 1))
        if isinstance(store, SqlStateStore):
            assert await sequences(store, s) == list(range(1, total + 1))
        got = [m.content for m in history]
        assert len(set(got)) == total
        for k in range(0, total, 2):  # one append's messages are never interleaved
            first = got[k] or ""
            assert first.endswith(".0") and got[k + 1] == first[:-1] + "1"
    finally:
        await store.close()


async def test_sqlite_in_memory_shares_one_database(tmp_path: Path) -> None:
    for url in ("sqlite+aiosqlite://", "sqlite+aiosqlite:///:memory:"):
        store = await SqlStateStore.open(url)
        try:
            s = sid()
            await store.ensure_session(s, "a")
            await asyncio.gather(*(store.append(s, [user(str(i))]) for i in range(20)))
            assert len(await store.get_messages(s)) == 20
            assert await sequences(store, s) == list(range(1, 21))
        finally:
            await store.close()


async def test_sqlite_file_runs_in_wal_mode(tmp_path: Path) -> None:
    store = await SqlStateStore.open(f"sqlite+aiosqlite:///{tmp_path}/a/b/state.db")
    try:
        assert (tmp_path / "a" / "b" / "state.db").exists()
        async with store.engine.connect() as conn:
            assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
            assert (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar() == 30_000

        def pragmas(conn: Connection) -> tuple[str, int]:
            journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            return journal, conn.exec_driver_sql("PRAGMA busy_timeout").scalar()

        # The store's own connections (its transactions run on another engine).
        assert await store._read(pragmas) == ("wal", 30_000)
        assert await store._write(pragmas) == ("wal", 30_000)
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def hold_write_lock(store: SqlStateStore) -> AsyncIterator[None]:
    """A transaction on another connection holding SQLite's write lock until the
    block ends (rolled back)."""
    async with store.engine.connect() as conn:
        await conn.begin()
        await conn.execute(update(sessions_table).values(updated_at=0.0))
        yield


async def test_sqlite_reads_run_beside_a_waiting_writer(tmp_path: Path) -> None:
    """A write waiting for SQLite's lock holds up this process's writers, not its
    readers (they run on other threads, and WAL lets them)."""
    store = await SqlStateStore.open(f"sqlite+aiosqlite:///{tmp_path}/r.db")
    try:
        s = sid()
        await store.ensure_session(s, "a")
        async with hold_write_lock(store):
            waiting = asyncio.ensure_future(store.append(s, [user("m")]))
            await asyncio.sleep(0.1)
            assert await asyncio.wait_for(store.get_messages(s), 5) == []
            assert not waiting.done()
        await asyncio.wait_for(waiting, 10)
        assert await contents(store, s) == [(1, "m")]
    finally:
        await store.close()


async def test_a_cancelled_sqlite_write_does_not_land(tmp_path: Path) -> None:
    """Cancelled while it waits for SQLite's lock, a write rolls back (as it did
    through an async driver) instead of committing behind its caller's back."""
    store = await SqlStateStore.open(f"sqlite+aiosqlite:///{tmp_path}/c.db")
    try:
        s = sid()
        await store.ensure_session(s, "a")
        async with hold_write_lock(store):
            cancelled = asyncio.ensure_future(store.append(s, [user("cancelled")]))
            await asyncio.sleep(0.1)  # the writer thread waits in SQLite's busy handler
            cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await store.append(s, [user("next")])  # queued behind the cancelled one
        assert await contents(store, s) == [(1, "next")]
    finally:
        await store.close()


async def test_a_postgres_store_outlives_its_connections_being_cut(postgres_url: str) -> None:
    """Pooled connections are not pinged before use: when the server drops them
    (a restart, an idle cut), the next transactions find them dead, before they
    stored anything, and run again on fresh ones; nothing is lost or doubled."""
    import asyncpg

    store = await SqlStateStore.open(postgres_url)
    try:
        s = sid()
        await store.ensure_session(s, "a")
        await asyncio.gather(*(store.append(s, [user(f"m{i}")]) for i in range(4)))
        admin = await asyncpg.connect(postgres_url.replace("+asyncpg", ""), timeout=5)
        try:
            cut = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        assert cut >= 1  # the store's pooled connections
        await store.append(s, [user("after")])
        assert (await store.get_messages(s))[-1].content == "after"
        assert len(await store.get_messages(s)) == 5
    finally:
        await store.close()


async def test_open_store_schemes(tmp_path: Path) -> None:
    memory = await open_store("memory://")
    assert isinstance(memory, MemoryStateStore)
    await memory.close()
    sql = await open_store(f"sqlite:///{tmp_path}/plain.db")
    assert isinstance(sql, SqlStateStore)
    await sql.close()
    with pytest.raises(ConfigError, match="unsupported"):
        await open_store("mongodb://localhost:27017/x")
    with pytest.raises(ConfigError, match="unsupported"):
        await open_store("mysql+aiomysql://x/y")
    with pytest.raises(ConfigError, match="no scheme"):
        await open_store("state.db")
    with pytest.raises(ConfigError, match="unsupported database URL"):
        SqlStateStore("sqlite+pysqlite:///x.db")
    with pytest.raises(ConfigError, match="not a database URL"):
        SqlStateStore("::nonsense")


async def test_memory_store_bounds() -> None:
    store = MemoryStateStore(max_sessions=2)
    a, b, c = sid(), sid(), sid()
    for s in (a, b):
        await store.ensure_session(s, "x")
        await store.commit_turn(s, [user("m")], record(s, f"t-{s}"))
    await store.get_session(a)  # a is now the most recently used
    await store.ensure_session(c, "x")
    assert await store.get_session(b) is None
    assert await store.get_turn(f"t-{b}") is None
    assert await store.get_session(a) is not None
    assert await store.get_turn(f"t-{a}") is not None
    with pytest.raises(ValueError):
        MemoryStateStore(ttl_seconds=0)


async def test_open_store_redis_namespace(redis_url: str, namespace: str) -> None:
    store = await open_store(f"{redis_url}?namespace={namespace}-ns")
    try:
        assert isinstance(store, RedisStateStore) and store.namespace == f"{namespace}-ns"
        s = sid()
        await store.ensure_session(s, "a")
        assert await store.redis.exists(f"{namespace}-ns:s:{{{s}}}:state") == 1
    finally:
        await store.close()


async def test_memory_store_ttl_expires_idle_sessions_and_reads_refresh() -> None:
    store = MemoryStateStore(ttl_seconds=0.2, max_sessions=None)
    idle, busy = sid(), sid()
    for s in (idle, busy):
        await store.ensure_session(s, "x")
        await store.commit_turn(s, [user("m")], record(s, f"t-{s}"))
    deadline = time.monotonic() + 5
    while await store.get_turn(f"t-{idle}") is not None:
        assert time.monotonic() < deadline, "the idle session never expired"
        await store.get_messages(busy)  # a read keeps the busy session alive
        await asyncio.sleep(0.02)
    assert await store.get_session(idle) is None
    assert [m.content for m in await store.get_messages(busy)] == ["m"]
    defaults = MemoryStateStore()
    assert (defaults.ttl_seconds, defaults.max_sessions) == (3600.0, 1000)
    unbounded = MemoryStateStore(ttl_seconds=None, max_sessions=None)
    assert (unbounded.ttl_seconds, unbounded.max_sessions) == (None, None)


async def test_a_stale_commit_after_a_newer_token_writes_nothing(store: StateStore) -> None:
    """The old holder (token 1) commits after the new one (token 2) claimed the session."""
    s = sid()
    await store.ensure_session(s, "a")
    await store.claim(s, 1)
    await store.append(s, [user("before")])
    await store.claim(s, 2)  # the lease moved on
    with pytest.raises(StaleLeaseError) as info:
        await store.commit_turn(
            s, [user("old"), user("holder")], record(s, "t-old", final_text="x"), fence=1
        )
    assert info.value.details == {"session_id": s, "fence": 1, "newest": 2}
    assert await contents(store, s) == [(1, "before")]
    assert await store.get_turn("t-old") is None
    await store.commit_turn(s, [user("new")], record(s, "t-new"), fence=2)
    assert await contents(store, s) == [(1, "before"), (2, "new")]


async def test_racing_holders_only_the_newest_commits(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.claim(s, 7)

    async def holder(token: int) -> bool:
        try:
            await store.commit_turn(s, [user(f"by {token}")], record(s, f"t-{token}"), token)
        except StaleLeaseError:
            return False
        return True

    results = await asyncio.gather(*(holder(t) for t in range(1, 8)))
    assert results == [False] * 6 + [True]
    assert await contents(store, s) == [(1, "by 7")]


async def test_sequences_are_exposed_but_never_sent(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.append(s, [user("a"), user("b")])
    got = await store.get_messages(s)
    assert [m.sequence for m in got] == [1, 2]
    assert "sequence" not in got[0].model_dump() and "sequence" not in got[0].to_openai()
    # A message read back and written again gets a new position, not its old one.
    await store.append(s, got[:1])
    assert await contents(store, s) == [(1, "a"), (2, "b"), (3, "a")]


async def test_lone_surrogates_are_stored_on_every_field(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    odd = ChatMessage(role="tool", content="x\udc80\ud800y", name="\udfff", tool_call_id="\ud834")
    await store.commit_turn(s, [odd], record(s, f"t-{s}"))
    (got,) = await store.get_messages(s)
    assert (got.content, got.name, got.tool_call_id) == (odd.content, odd.name, odd.tool_call_id)


async def test_redis_refuses_a_newer_record_version(redis_url: str, namespace: str) -> None:
    store = await open_store(f"{redis_url}?namespace={namespace}-v")
    try:
        assert isinstance(store, RedisStateStore)
        s = sid()
        await store.ensure_session(s, "a")
        await store.append(s, [user("x")])
        await store.redis.hset(f"{namespace}-v:s:{{{s}}}:state", "v", 99)
        with pytest.raises(SchemaVersionError, match="upgrade reactq"):
            await store.get_session(s)
        await store.redis.hset(f"{namespace}-v:s:{{{s}}}:state", "v", 1)
        await store.redis.hset(
            f"{namespace}-v:s:{{{s}}}:state:messages", "trunk|1", '{"v": 2, "role": "user"}'
        )
        with pytest.raises(SchemaVersionError):
            await store.get_messages(s)
    finally:
        await store.close()


# --- begin_turn: ensure_session + claim + get_messages in one atomic step -------------


async def test_begin_turn_creates_a_new_session_with_the_fence(store: StateStore) -> None:
    s = sid()
    start = await store.begin_turn(s, "a", fence=3)
    assert isinstance(start, TurnStart)
    assert (start.branch_id, start.messages) == (TRUNK, [])
    assert (start.info.session_id, start.info.agent, start.info.fence) == (s, "a", 3)
    assert start.info.active_branch == TRUNK and start.info.created_at > 0
    stored = await store.get_session(s)
    assert stored is not None and stored.info() == start.info
    assert [b.branch_id for b in await store.list_branches(s)] == [TRUNK]
    # The new session takes commits like one ensure_session made.
    await store.commit_turn(s, [user("q")], record(s, f"t-{s}"), fence=3)
    assert await contents(store, s) == [(1, "q")]


async def test_begin_turn_reads_the_history_and_moves_the_fence(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.claim(s, 2)
    await store.append(s, [user("one"), user("two"), user("three")])
    branch = await store.fork(s, 1, new_branch_id="side")
    await store.append(s, [user("two'")])
    await store.switch_branch(s, TRUNK)

    start = await store.begin_turn(s, "a", fence=4)
    assert (start.branch_id, start.info.active_branch, start.info.fence) == (TRUNK, TRUNK, 4)
    assert start.messages == await store.get_messages(s)
    assert [(m.sequence, m.content) for m in start.messages] == [
        (1, "one"),
        (2, "two"),
        (3, "three"),
    ]
    named = await store.begin_turn(s, "a", fence=4, branch_id=branch)  # the same token again
    assert (named.branch_id, named.info.active_branch) == ("side", TRUNK)
    assert [(m.sequence, m.content) for m in named.messages] == [(1, "one"), (2, "two'")]
    assert (await store.begin_turn(s, "a", branch_id="nope")).messages == []
    info = await store.get_session(s)
    assert info is not None and info.fence == 4


async def test_begin_turn_with_a_stale_fence_changes_nothing(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.claim(s, 5)
    await store.append(s, [user("kept")])
    before = await store.get_session(s)
    with pytest.raises(StaleLeaseError) as info:
        await store.begin_turn(s, "a", fence=4)
    assert info.value.details == {"session_id": s, "fence": 4, "newest": 5}
    assert await store.get_session(s) == before
    assert await contents(store, s) == [(1, "kept")]
    # A stale holder is refused whatever the agent.
    with pytest.raises(StaleLeaseError):
        await store.begin_turn(s, "other", fence=1)


async def test_begin_turn_on_another_agents_session_reads_nothing(store: StateStore) -> None:
    """The caller refuses the turn; the fence is recorded all the same (the lease is
    the session's, whatever agent its turn asked for), as ensure_session + claim did."""
    s = sid()
    await store.ensure_session(s, "alpha")
    await store.append(s, [user("private")])
    start = await store.begin_turn(s, "beta", fence=2)
    assert (start.info.agent, start.messages, start.branch_id) == ("alpha", [], TRUNK)
    info = await store.get_session(s)
    assert info is not None and (info.agent, info.fence) == ("alpha", 2)
    assert await contents(store, s) == [(1, "private")]


async def test_begin_turn_without_a_fence_records_none(store: StateStore) -> None:
    s = sid()
    fresh = await store.begin_turn(s, "a")
    assert (fresh.info.fence, fresh.branch_id, fresh.messages) == (0, TRUNK, [])
    await store.claim(s, 4)
    await store.append(s, [user("x")])
    again = await store.begin_turn(s, "a")
    assert again.info.fence == 4
    assert [m.content for m in again.messages] == ["x"]
    info = await store.get_session(s)
    assert info is not None and info.fence == 4


async def test_concurrent_begin_turns_create_one_session(store: StateStore) -> None:
    s = sid()
    starts = await asyncio.gather(
        *(store.begin_turn(s, f"a{i}", fence=1) for i in range(10)), return_exceptions=True
    )
    infos = [start.info for start in starts if isinstance(start, TurnStart)]
    assert len(infos) == 10, starts
    assert len({info.agent for info in infos}) == 1
    assert [b.branch_id for b in await store.list_branches(s)] == [TRUNK]


async def test_sql_turn_steps_are_single_short_transactions(store: StateStore) -> None:
    """begin_turn, checkpoint_step and commit_turn each run one write transaction of a
    few statements on the hot path (the worker's CPU per turn)."""
    if not isinstance(store, SqlStateStore):
        pytest.skip("counts SQL statements")
    s, t = sid(), f"t-{uuid.uuid4().hex}"
    await store.ensure_session(s, "a")
    await store.append(s, [user("before")])
    statements: list[str] = []
    commits: list[int] = []

    def on_statement(_conn: object, _cursor: object, sql: str, *_args: object) -> None:
        if not sql.startswith("BEGIN"):
            statements.append(sql)

    def on_commit(_conn: object) -> None:
        commits.append(1)

    engine = store.sync_engine  # the one its transactions run on
    event.listen(engine, "before_cursor_execute", on_statement)
    event.listen(engine, "commit", on_commit)
    try:
        counts = []
        steps = [
            lambda: store.begin_turn(s, "a", fence=1),
            lambda: store.checkpoint_step(
                TurnCheckpoint(session_id=s, turn_id=t, step=1, messages=[]), fence=1
            ),
            lambda: store.commit_turn(s, [user("q")], record(s, t), fence=1, branch_id=TRUNK),
        ]
        for step in steps:
            statements.clear()
            commits.clear()
            await step()
            counts.append((len(statements), len(commits)))
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)
        event.remove(engine, "commit", on_commit)
    # begin_turn: the upsert and the read; checkpoint_step: the upsert; commit_turn:
    # the fence (reading the branch's tip on SQLite), the record, the messages, the
    # checkpoint's removal. PostgreSQL's begin_turn and commit_turn are each one
    # call of a function that runs their statements, its own transaction (no
    # COMMIT). tests/test_sql_round_trips.py counts PostgreSQL's round trips.
    if store.dialect == "sqlite":
        assert counts == [(2, 1), (1, 1), (4, 1)]
    else:
        assert counts == [(1, 0), (1, 1), (1, 0)]
    assert await contents(store, s) == [(1, "before"), (2, "q")]
