"""A turn's messages are committed at most once, whatever the interleaving.

The race (issue 12, item 1): a worker pauses in the middle of its commit, past the
fence check and before the write, long enough to lose its lease. The new holder
re-issues the turn as attempt 2 and asks the store whether it was committed (not
yet), then records its fence; the paused commit lands in between, and the turn
runs and is committed a second time. Each test below holds the stale commit at
that point with a gate (no timing luck), on the backends several workers share.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.util import await_only

from reactq.shared.errors import TurnCommittedError
from reactq.shared.events import FinalEvent
from reactq.shared.state import StateStore, TurnRecord, open_store
from reactq.shared.state.redis.store import RedisStateStore
from reactq.shared.state.sql import ops as sql_ops
from reactq.shared.state.sql.store import SqlStateStore
from reactq.shared.turns import TurnStatus, new_turn_id
from tests.drain_support import AGENT, drain_rig, turn_messages
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    contents,
    record,
    shared_url_fixture,
    sid,
)


class Gate:
    """Holds the first commit that reaches it until ``release`` is set."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.used = False
        self.holder: asyncio.Future[None] | None = None  # PostgreSQL's gate

    async def pause(self) -> None:
        if self.used:
            return
        self.used = True
        self.reached.set()
        await self.release.wait()


async def hold_commits(store: StateStore, gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put ``gate`` at the critical point of ``store``'s commit.

    SQL: inside the commit's transaction, after the session row is locked and the
    fence checked, before anything is written (on SQLite before the messages'
    insert; on PostgreSQL, whose commit is one call of ``reactq_commit_turn``, as
    the call inserts the record: ``hold_postgres_commits``). Redis: before the
    script that checks the fence and writes (one atomic step: nothing can come
    between them).
    """
    if isinstance(store, SqlStateStore) and store.dialect == "postgresql":
        await hold_postgres_commits(store, gate)
        return
    if isinstance(store, SqlStateStore):
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def pause() -> None:
            # The transaction is synchronous: on SQLite it runs in the store's thread,
            # on PostgreSQL in run_sync's greenlet on the loop.
            if threading.get_ident() == loop_thread:
                await_only(gate.pause())
            else:
                asyncio.run_coroutine_threadsafe(gate.pause(), loop).result()

        def gated(real: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any) -> Any:
                pause()
                return real(*args)

            return call

        monkeypatch.setattr(sql_ops, "append_rows", gated(sql_ops.append_rows))
    else:
        assert isinstance(store, RedisStateStore)
        real_script = store._write_script

        async def gated_script(*args: Any, **kwargs: Any) -> Any:
            await gate.pause()
            return await real_script(*args, **kwargs)

        monkeypatch.setattr(store, "_write_script", gated_script)


_WAITING_AT_THE_GATE = text(
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    " AND wait_event = 'relation' AND query LIKE '%reactq_commit_turn%'"
)


async def hold_postgres_commits(store: SqlStateStore, gate: Gate) -> None:
    """The gate on PostgreSQL: a lock on the ``turns`` table, held by a connection of
    its own (reads still pass). The commit's call waits for it as it inserts the
    turn's record, the session row locked and the fence checked; the gate is reached
    once a call waits on the table (another commit waits on the row instead)."""
    holder = await store.engine.connect()
    await holder.execute(text("LOCK TABLE turns IN EXCLUSIVE MODE"))
    watcher = await store.engine.execution_options(isolation_level="AUTOCOMMIT").connect()

    async def hold() -> None:
        try:
            # Autocommit: pg_stat_activity is read afresh in each transaction only.
            for _ in range(1000):  # 10 s at most: the test then finds the gate unreached
                if await watcher.scalar(_WAITING_AT_THE_GATE):
                    break
                await asyncio.sleep(0.01)
            else:
                return
            gate.used = True
            gate.reached.set()
            await gate.release.wait()
        finally:
            await holder.rollback()
            await holder.close()
            await watcher.close()

    gate.holder = asyncio.ensure_future(hold())


@pytest.fixture(name="gate")
async def gate_fixture() -> AsyncIterator[Gate]:
    """A Gate, opened at the end whatever happened (PostgreSQL's holds a table lock)."""
    gate = Gate()
    yield gate
    gate.release.set()
    if gate.holder is not None:
        await asyncio.wait_for(gate.holder, 10)


@pytest.fixture
async def stores(shared_url: str) -> AsyncIterator[tuple[StateStore, StateStore]]:
    """Two workers' stores on one backend (two engines, two clients)."""
    first, second = await open_store(shared_url), await open_store(shared_url)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


def completed(session_id: str, turn_id: str, attempt: int, text: str) -> TurnRecord:
    return record(session_id, turn_id, attempt=attempt, final_text=text)


async def test_a_commit_of_a_turn_racing_a_paused_one_is_refused(
    stores: tuple[StateStore, StateStore], gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two commits of one turn (the old holder's, paused, and the new holder's): one lands."""
    old, new = stores
    s, t = sid(), new_turn_id()
    await old.ensure_session(s, AGENT)
    await old.claim(s, 1)
    await hold_commits(old, gate, monkeypatch)
    paused = asyncio.ensure_future(
        old.commit_turn(s, turn_messages(t, "q"), completed(s, t, 1, "first"), fence=1)
    )
    await asyncio.wait_for(gate.reached.wait(), 10)

    async def second_commit() -> None:
        await new.commit_turn(s, turn_messages(t, "q"), completed(s, t, 2, "second"), fence=1)

    racing = asyncio.ensure_future(second_commit())
    await asyncio.sleep(0)  # the second commit is on its way (on SQL: waiting on the lock)
    gate.release.set()
    results = await asyncio.wait_for(asyncio.gather(paused, racing, return_exceptions=True), 30)
    landed = [r for r in results if r is None]
    refused = [r for r in results if isinstance(r, TurnCommittedError)]
    assert (len(landed), len(refused)) == (1, 1), results
    assert len(await new.get_messages(s)) == 4
    stored = await new.get_turn(t)
    assert stored is not None and stored.final_text in ("first", "second")


async def test_a_paused_commit_landing_before_the_new_holders_fence_is_not_run_again(
    redis_url: str,
    namespace: str,
    stores: tuple[StateStore, StateStore],
    gate: Gate,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The drain's retry path against a stale commit held past its fence check.

    Worker 1 claims the turn and commits it, paused at the critical point; its lease
    lapses; worker 2's drain re-issues the turn (attempt 2). The paused commit lands
    just as worker 2 records its fence (on SQL, while worker 2 waits for the row
    lock). Worker 2 must find the turn committed: it stores nothing more, calls no
    model, and publishes the turn's one final from the committed record.
    """
    old_store, new_store = stores
    async with drain_rig(redis_url, namespace, new_store, worker="w2") as rig:
        s = sid()
        turn = rig.turn(s, "paused mid-commit")
        t = turn.turn_id
        await rig.queue.submit(turn)

        # Worker 1: lease, claim (attempt 1), fence, run ... and its commit pauses.
        token1 = await rig.lease.acquire(s)
        assert token1 is not None
        first = await rig.queue.claim_next(s)
        assert first is not None and (first.turn_id, first.attempt) == (t, 1)
        rig.claims.clear()
        await old_store.ensure_session(s, AGENT)
        await old_store.claim(s, token1)
        await hold_commits(old_store, gate, monkeypatch)
        stale = asyncio.ensure_future(
            old_store.commit_turn(
                s, turn_messages(t, turn.message), completed(s, t, 1, "by worker 1"), token1
            )
        )
        await asyncio.wait_for(gate.reached.wait(), 10)
        await rig.redis.delete(rig.keys.lease(s))  # worker 1 is paused past its lease TTL

        # Worker 2 records its fence: the paused commit lands right then.
        real_claim: Callable[[str, int], Awaitable[None]] = new_store.claim
        fenced: list[int] = []

        async def claim_as_the_paused_commit_lands(session_id: str, fence: int) -> None:
            fenced.append(fence)
            if isinstance(new_store, SqlStateStore):
                # Worker 1 holds the lock: worker 2's fence waits for its commit.
                waiting = asyncio.ensure_future(real_claim(session_id, fence))
                await asyncio.sleep(0)
                gate.release.set()
                await waiting
            else:
                gate.release.set()
                await stale
                await real_claim(session_id, fence)

        monkeypatch.setattr(new_store, "claim", claim_as_the_paused_commit_lands)
        ran = await asyncio.wait_for(rig.drainer.drain(s), 30)
        await asyncio.wait_for(stale, 10)  # worker 1's commit went through, once

        assert ran == 1 and fenced and fenced[0] > token1
        assert [c.attempt for c in rig.claims] == [2]
        messages = await new_store.get_messages(s)
        assert len(messages) == 4, [m.content for m in messages]
        assert {m.turn_id for m in messages} == {t}
        stored = await new_store.get_turn(t)
        assert stored is not None and (stored.attempt, stored.final_text) == (1, "by worker 1")
        assert rig.llm.calls == []  # not run again
        finals = await rig.finals(s, t)
        assert [(f.status, f.text, f.attempt) for f in finals] == [
            (TurnStatus.COMPLETED, "by worker 1", 2)
        ]
        assert await rig.slot_and_lease(s) == (None, None)
        assert await rig.queue.turn_status(t) == (s, TurnStatus.COMPLETED)


@pytest.mark.parametrize("final_published", [False, True])
async def test_the_retry_of_a_committed_turn_stores_it_once_with_one_final(
    redis_url: str, namespace: str, shared_url: str, final_published: bool
) -> None:
    """Attempt 1 committed and died (before or after its final); attempt 2 ends the
    turn from the record, and the session's next turn runs on top of it."""
    store = await open_store(shared_url)
    try:
        async with drain_rig(redis_url, namespace, store) as rig:
            s = sid()
            turn = rig.turn(s, "committed then died")
            t = turn.turn_id
            await rig.queue.submit(turn)
            token1 = await rig.lease.acquire(s)
            assert token1 is not None
            assert await rig.queue.claim_next(s) is not None
            rig.claims.clear()
            await store.ensure_session(s, AGENT)
            await store.commit_turn(
                s, turn_messages(t, turn.message), completed(s, t, 1, "done once"), token1
            )
            if final_published:
                await rig.bus.publish(_final(s, t, "done once"))
            await rig.redis.delete(rig.keys.lease(s))  # the holder died
            later = rig.turn(s, "the next one")
            await rig.queue.submit(later)

            assert await asyncio.wait_for(rig.drainer.drain(s), 30) == 2
            assert [(c.turn_id, c.attempt) for c in rig.claims] == [
                (t, 2),
                (later.turn_id, 1),
            ]
            finals = await rig.finals(s, t)
            assert len(finals) == 1 and finals[0].text == "done once"
            assert finals[0].attempt == (1 if final_published else 2)
            nxt = await rig.finals(s, later.turn_id)
            assert [(f.status, f.text) for f in nxt] == [
                (TurnStatus.COMPLETED, "answer to: the next one")
            ]
            messages = await store.get_messages(s)
            assert [m.turn_id for m in messages] == [t] * 4 + [later.turn_id] * 4
            assert await rig.slot_and_lease(s) == (None, None)
    finally:
        await store.close()


def _final(session_id: str, turn_id: str, text: str) -> FinalEvent:
    return FinalEvent(
        session_id=session_id, turn_id=turn_id, seq=9, text=text, status=TurnStatus.COMPLETED
    )


async def test_a_worker_lost_between_its_commit_and_its_final_ends_the_turn_once(
    redis_url: str, namespace: str, shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain publishes a turn's final in the call that finishes it (after the
    commit): a worker lost before that call published nothing, and the turn is still
    in its slot. The next attempt finds it committed and publishes its one final."""
    store = await open_store(shared_url)
    try:
        async with drain_rig(redis_url, namespace, store) as rig:
            s = sid()
            turn = rig.turn(s, "lost before its final")
            t = turn.turn_id
            await rig.queue.submit(turn)

            async def lost(*args: Any, **kwargs: Any) -> Any:
                raise ConnectionError("the worker is gone")

            monkeypatch.setattr(rig.queue, "_next_final", lost)
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(rig.drainer.drain(s), 30)
            stored = await store.get_turn(t)
            assert stored is not None and stored.attempt == 1  # committed ...
            assert await rig.finals(s, t) == []  # ... and nothing published
            assert await rig.queue.turn_status(t) == (s, TurnStatus.RUNNING)
            monkeypatch.undo()
            rig.claims.clear()
            calls = len(rig.llm.calls)

            assert await asyncio.wait_for(rig.drainer.drain(s), 30) == 1
            assert [c.attempt for c in rig.claims] == [2]
            assert len(rig.llm.calls) == calls  # not run again
            finals = await rig.finals(s, t)
            assert [(f.status, f.text, f.attempt) for f in finals] == [
                (TurnStatus.COMPLETED, stored.final_text, 2)
            ]
            assert len(await store.get_messages(s)) == 4
            assert await rig.slot_and_lease(s) == (None, None)
            assert await rig.queue.turn_status(t) == (s, TurnStatus.COMPLETED)
    finally:
        await store.close()
