"""A state database that goes away for a while costs latency, never a turn (issue 28,
item 1): the store's calls ride the outage out, the drain keeps the lease meanwhile,
a turn past the budget goes back to its queue, and audit rows wait in Redis.

PostgreSQL is reached through ``DatabaseProxy`` (tests/db_outage.py), which resets the
connections and refuses new ones while it is down: the errors are the driver's own.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from reactq.shared.audit import audit_row
from reactq.shared.audit_spill import AuditSpill, _insert_new
from reactq.shared.bus import TurnEmitter
from reactq.shared.bus_memory import MemoryEventBus
from reactq.shared.errors import StaleLeaseError, StoreUnavailableError, TurnCommittedError
from reactq.shared.events import FinalEvent, QueuedEvent
from reactq.shared.keys import Keys
from reactq.shared.settings import Settings
from reactq.shared.state.outage import is_outage
from reactq.shared.state.sql.audit import SqlAuditSink
from reactq.shared.state.sql.schema import audit_events
from reactq.shared.state.sql.store import SqlStateStore
from reactq.shared.turns import TurnStatus, new_turn_id
from reactq.worker.agent.llm.scripted import ScriptedLLM
from reactq.worker.agent.runner import AgentRunner
from tests.db_outage import DatabaseProxy, database_proxy
from tests.drain_support import AGENT, drain_rig, lookup_then_answer, turn_messages
from tests.helpers import wait_until
from tests.pool_agents import agent as e2e_agent
from tests.state_fixtures import record, sid

OUTAGE_LOG = "state database does not answer"


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[DatabaseProxy]:
    with database_proxy(postgres_url) as running:
        yield running


@pytest.fixture
async def store(proxy: DatabaseProxy) -> AsyncIterator[SqlStateStore]:
    opened = await SqlStateStore.open(proxy.url, outage_seconds=30)
    try:
        yield opened
    finally:
        proxy.up()
        await opened.close()


async def logged(caplog: pytest.LogCaptureFixture, text: str, count: int = 1) -> None:
    """Wait until ``text`` was logged ``count`` times (a call met the outage)."""
    await wait_until(
        lambda: sum(text in r.getMessage() for r in caplog.records) >= count, 20, repr(text)
    )


async def test_a_call_rides_out_an_outage(
    store: SqlStateStore, proxy: DatabaseProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "reactq.state")
    session = sid()
    await store.ensure_session(session, "a")  # a pooled connection, reset by the outage
    proxy.down()
    begun = asyncio.ensure_future(store.begin_turn(session, "a", fence=3))
    await logged(caplog, OUTAGE_LOG)
    assert not begun.done()
    proxy.up()
    start = await asyncio.wait_for(begun, 20)
    assert start.info.fence == 3
    assert any("answers again" in r.getMessage() for r in caplog.records)


async def test_past_the_budget_a_call_raises_store_unavailable(proxy: DatabaseProxy) -> None:
    store = await SqlStateStore.open(proxy.url, outage_seconds=0.3)
    try:
        proxy.down()
        with pytest.raises(StoreUnavailableError) as raised:
            await store.get_turn("t-missing")
        assert raised.value.code == "store_unavailable"
        assert isinstance(raised.value.__cause__, ConnectionError)
    finally:
        proxy.up()
        await store.close()


async def test_without_a_budget_the_driver_error_comes_at_once(proxy: DatabaseProxy) -> None:
    store = await SqlStateStore.open(proxy.url)  # the producer's and the gateway's
    try:
        proxy.down()
        with pytest.raises(ConnectionError):
            await store.get_turn("t-missing")
    finally:
        proxy.up()
        await store.close()


async def test_a_refusal_is_an_answer_not_an_outage(store: SqlStateStore) -> None:
    session = sid()
    await store.ensure_session(session, "a")
    await store.claim(session, 5)
    with pytest.raises(StaleLeaseError):
        await store.claim(session, 4)  # at once: a fence refusal is not retried
    assert not is_outage(StaleLeaseError("stale"))
    assert not is_outage(TurnCommittedError("twice"))
    assert not is_outage(IntegrityError("insert", {}, Exception("duplicate key")))
    assert is_outage(ConnectionRefusedError(111, "refused"))


async def test_a_commit_whose_answer_was_lost_is_refused_when_retried(
    store: SqlStateStore, proxy: DatabaseProxy, postgres_url: str
) -> None:
    """The commit lands while its client's connection is cut: the retry finds it and
    raises TurnCommittedError (the drain's "committed already"); stored once."""
    from tests.test_commit_once import Gate, hold_postgres_commits

    direct = await SqlStateStore.open(postgres_url)  # the gate's connections bypass the proxy
    gate = Gate()
    try:
        session, turn_id = sid(), new_turn_id()
        await store.begin_turn(session, "a", fence=1)
        await hold_postgres_commits(direct, gate)
        messages = turn_messages(turn_id, "hello")
        committing = asyncio.ensure_future(
            store.commit_turn(session, messages, record(session, turn_id), fence=1)
        )
        await asyncio.wait_for(gate.reached.wait(), 10)
        proxy.down(answers_lost=True)  # the call goes on at the server, unheard
        gate.release.set()
        assert gate.holder is not None
        await asyncio.wait_for(gate.holder, 10)
        proxy.up()
        with pytest.raises(TurnCommittedError):
            await asyncio.wait_for(committing, 30)
        stored = await direct.get_messages(session)
        assert [m.content for m in stored] == [m.content for m in messages]
    finally:
        gate.release.set()
        await direct.close()


async def test_a_turn_in_flight_completes_and_keeps_its_lease(
    redis_url: str,
    namespace: str,
    store: SqlStateStore,
    proxy: DatabaseProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The database goes away mid-turn for longer than the lease TTL: the turn ends
    completed, once, its messages stored once; the lease stayed this drain's, so a
    second worker's drain found the session held."""
    caplog.set_level(logging.INFO, "reactq.state")
    async with (
        drain_rig(redis_url, namespace, store, worker="w-1", lease_ttl=1.0) as rig,
        drain_rig(redis_url, namespace, store, worker="w-2", lease_ttl=1.0, keys=rig.keys) as peer,
    ):
        session = sid()
        turn = rig.turn(session, "hello")
        await rig.queue.submit(turn)
        proxy.down()  # before the turn's first store call: begin_turn rides it out
        draining = asyncio.ensure_future(rig.drainer.drain(session))
        await logged(caplog, OUTAGE_LOG)
        lease_key = rig.keys.lease(session)
        held = await rig.redis.get(lease_key)
        # Three lease TTLs down: the lease is renewed all along, never free.
        for _ in range(3):
            await asyncio.sleep(1.0)
            assert await rig.redis.get(lease_key) is not None
            assert await peer.drainer.drain(session) == 0  # held: the peer runs nothing
        assert held is not None
        assert rig.llm.calls == []  # the turn waits at its first store call
        proxy.up()
        assert await asyncio.wait_for(draining, 30) == 1
        finals = await rig.finals(session, turn.turn_id)
        assert [f.status for f in finals] == [TurnStatus.COMPLETED]
        stored = await store.get_messages(session)
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[-1].content == "answer to: hello"
        assert await rig.slot_and_lease(session) == (None, None)


async def test_a_turn_past_the_budget_goes_back_to_its_queue(
    redis_url: str, namespace: str, proxy: DatabaseProxy
) -> None:
    """Past REACTQ_STORE_OUTAGE_SECONDS the turn is given back, uncharged, its
    session's deadline due for the reaper; no error final. Once the database is back
    the next drain runs it to completion."""
    store = await SqlStateStore.open(proxy.url, outage_seconds=0.5)
    try:
        async with drain_rig(redis_url, namespace, store, lease_ttl=5.0) as rig:
            session = sid()
            turn = rig.turn(session, "hello")
            await rig.queue.submit(turn)
            proxy.down()
            await rig.drainer.drain(session)
            assert await rig.finals(session, turn.turn_id) == []
            slot, lease = await rig.slot_and_lease(session)
            assert slot is not None and lease is None  # back in its slot, lease free
            assert session in await rig.deadlines.expired()  # the reaper's to re-dispatch
            proxy.up()
            assert await rig.drainer.drain(session) == 1
            finals = await rig.finals(session, turn.turn_id)
            assert [f.status for f in finals] == [TurnStatus.COMPLETED]
            assert finals[0].attempt == 2
            claimed = rig.claims[-1]
            assert claimed.lost == 0  # uncharged: not counted against max_attempts
            assert len(await store.get_messages(session)) == 4
    finally:
        proxy.up()
        await store.close()


# --- the audit log ----------------------------------------------------------------


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


def queued(session: str, turn_id: str, n: int) -> QueuedEvent:
    event = QueuedEvent(session_id=session, turn_id=turn_id, agent="a", message=f"m{n}")
    return event.model_copy(update={"id": f"{1000 + n}-0"})


async def audit_count(store: SqlStateStore, turn_id: str) -> int:
    query = select(func.count()).where(audit_events.c.turn_id == turn_id)
    return int(await store._read(lambda conn: conn.execute(query).scalar_one()))


async def test_audit_rows_wait_in_redis_and_are_written_once(
    store: SqlStateStore, proxy: DatabaseProxy, redis: Redis, namespace: str
) -> None:
    keys = Keys(f"{namespace}-a{uuid.uuid4().hex[:6]}")
    spill = AuditSpill(redis, keys, max_rows=1000)
    sink = SqlAuditSink(store, batch=False, spill=spill)
    session, turn_id = sid(), new_turn_id()
    try:
        await sink.record(queued(session, turn_id, 0))  # the database answers
        proxy.down()
        for n in (1, 2):
            await sink.record(queued(session, turn_id, n))
        assert await spill.waiting() == 2
        proxy.up()
        # Behind the waiting rows, in order, until they are written back.
        await sink.record(queued(session, turn_id, 3))
        assert await spill.waiting() == 3
        assert await spill.write_back(store) == 3
        assert await spill.waiting() == 0
        await sink.record(queued(session, turn_id, 4))  # straight in again
        events = await sink.turn_events(turn_id)
        assert [e.id for e in events] == [f"{1000 + n}-0" for n in range(5)]
        assert await audit_count(store, turn_id) == 5
        # A writer that died after its insert and before taking the rows off the list
        # leaves them there: the next one skips what the table has.
        rows = [audit_row(queued(session, turn_id, n)) for n in (1, 2, 5, 5)]
        assert await store._write(lambda conn: _insert_new(rows, conn)) == 1
        assert await audit_count(store, turn_id) == 6
    finally:
        await redis.delete(keys.audit_spill)


async def test_audit_spill_is_bounded_and_says_what_it_dropped(
    redis: Redis, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    keys = Keys(f"{namespace}-b{uuid.uuid4().hex[:6]}")
    told: list[int] = []
    spill = AuditSpill(redis, keys, max_rows=3, on_dropped=told.append)
    session, turn_id = sid(), new_turn_id()
    try:
        await spill.hold([audit_row(queued(session, turn_id, n)) for n in range(2)])
        await spill.hold([audit_row(queued(session, turn_id, n)) for n in range(2, 5)])
        assert await spill.waiting() == 3
        assert told == [2] and spill.dropped == 2
        assert any(
            r.levelno == logging.ERROR and "REACTQ_AUDIT_SPILL_MAX_ROWS" in r.getMessage()
            for r in caplog.records
        )
        kept = [audit_row(queued(session, turn_id, n))["event_id"] for n in range(2, 5)]
        raw = await redis.lrange(keys.audit_spill, 0, -1)
        assert all(k.encode() in item for k, item in zip(kept, raw, strict=True))
    finally:
        await redis.delete(keys.audit_spill)


async def test_the_runner_leaves_a_pool_turn_to_the_drain_and_ends_an_embedded_one(
    proxy: DatabaseProxy,
) -> None:
    """Past the budget a fenced (pool) turn raises StoreUnavailableError, with no
    final (the drain gives it back); an embedded turn has no queue to go back to and
    ends in error with the code ``store_unavailable``."""
    store = await SqlStateStore.open(proxy.url, outage_seconds=0.2)
    bus = MemoryEventBus()
    try:
        runner = AgentRunner(
            e2e_agent.build_loop(ScriptedLLM(lookup_then_answer), settings=Settings()),
            store,
            AGENT,
        )
        proxy.down()
        session = sid()
        pool_turn = TurnEmitter(bus, session, new_turn_id())
        with pytest.raises(StoreUnavailableError):
            await runner.run_turn(
                session_id=session,
                message="hi",
                turn_id=pool_turn.turn_id,
                emitter=pool_turn,
                fence=1,
            )
        embedded = TurnEmitter(bus, session, new_turn_id())
        final = await runner.run_turn(
            session_id=session, message="hi", turn_id=embedded.turn_id, emitter=embedded
        )
        assert (final.status, final.code) == (TurnStatus.ERROR, "store_unavailable")
        finals = [e for e in await bus.read(session, after="0") if isinstance(e, FinalEvent)]
        assert [f.turn_id for f in finals] == [embedded.turn_id]
    finally:
        proxy.up()
        await bus.close()
        await store.close()


async def test_write_back_skips_rows_the_table_has_on_sqlite(tmp_path: Path) -> None:
    store = await SqlStateStore.open(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    try:
        session, turn_id = sid(), new_turn_id()
        rows = [audit_row(queued(session, turn_id, n)) for n in (1, 2, 2, 3)]
        assert await store._write(lambda conn: _insert_new(rows, conn)) == 3
        assert await store._write(lambda conn: _insert_new(rows, conn)) == 0
        assert await audit_count(store, turn_id) == 3
    finally:
        await store.close()
