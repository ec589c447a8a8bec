"""Issue 20, item 1, on real worker processes and SQLite state: a turn's audit log
holds every event of its stream, whoever published it (the producer's ``queued``,
its finals of turns that never ran, the workers' events), in stream order; for
completed, cancelled-while-queued, rejected, interrupted and re-run turns."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from reactq.producer import Producer
from reactq.shared.errors import TurnRejectedError
from reactq.shared.events import Event
from reactq.shared.settings import Settings
from tests.helpers import running_pool, sleepy_lookup, wait_until, worker_pid

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("audit-pool")
    # Recovery fast enough for a test, slow enough to act between a kill and the re-run.
    with running_pool(
        redis_url,
        f"{namespace}-audit",
        tmp,
        sleepy_lookup,
        workers=2,
        REACTQ_LEASE_TTL_SECONDS="3",
        REACTQ_REAPER_INTERVAL_SECONDS="0.3",
    ) as env:
        yield env


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


def sid() -> str:
    return f"audit-{uuid.uuid4().hex[:10]}"


def dumps(events: list[Event]) -> list[dict[str, object]]:
    return [e.model_dump(mode="json") for e in events]


async def stream_of(producer: Producer, session_id: str, turn_id: str) -> list[Event]:
    return [e for e in await producer.bus.read(session_id, after="0") if e.turn_id == turn_id]


async def assert_audit_is_stream(producer: Producer, session_id: str, turn_id: str) -> None:
    """The turn's audit equals its stream: the same events, ids and order. Workers
    write their rows in the background, hence the wait."""
    stream = await stream_of(producer, session_id, turn_id)
    assert stream and stream[0].type == "queued" and stream[-1].type == "final"

    async def same() -> bool:
        return dumps(await producer.turn_events(turn_id)) == dumps(stream)

    try:
        await wait_until(same, 10, f"the audit of {turn_id} to equal its stream")
    except AssertionError:
        audit = await producer.turn_events(turn_id)
        assert [(e.type, e.id) for e in audit] == [(e.type, e.id) for e in stream]
        raise


async def first_event(producer: Producer, session_id: str, kind: str, turn_id: str) -> Event:
    async for event in producer.subscribe(session_id, after="0"):
        if event.type == kind and event.turn_id == turn_id:
            return event
    raise AssertionError("stream ended")


async def test_a_completed_turn_has_its_queued_event(producer: Producer) -> None:
    s = sid()
    handle = await producer.submit(s, "plain", agent="e2e")
    assert (await handle.result(timeout=30)).status == "completed"
    await assert_audit_is_stream(producer, s, handle.turn_id)


async def test_a_turn_cancelled_while_queued(producer: Producer) -> None:
    s = sid()
    running = await producer.submit(s, "sleep=1 first", agent="e2e")
    queued = await producer.submit(s, "second", agent="e2e")
    assert (await producer.cancel(queued.turn_id)).outcome == "cancelled"
    assert (await queued.result(timeout=10)).status == "cancelled"
    assert (await running.result(timeout=30)).status == "completed"
    await assert_audit_is_stream(producer, s, queued.turn_id)
    await assert_audit_is_stream(producer, s, running.turn_id)


async def test_a_rejected_turn(producer: Producer) -> None:
    s = sid()
    busy = await producer.submit(s, "sleep=1 busy", agent="e2e")
    with pytest.raises(TurnRejectedError) as refused:
        await producer.submit(s, "refused", agent="e2e", strategy="reject")
    rejected = refused.value.details["turn_id"]
    assert (await busy.result(timeout=30)).status == "completed"
    assert [e.type for e in await stream_of(producer, s, rejected)] == ["queued", "final"]
    await assert_audit_is_stream(producer, s, rejected)


async def test_interrupted_and_dropped_turns(producer: Producer) -> None:
    s = sid()
    slow = await producer.submit(s, "sleep=1 slow", agent="e2e")
    waiting = await producer.submit(s, "waiting", agent="e2e")
    await asyncio.wait_for(first_event(producer, s, "observation", slow.turn_id), 30)
    new = await producer.submit(s, "instead", agent="e2e", strategy="interrupt")
    assert (await slow.result(timeout=10)).status == "cancelled"
    assert (await waiting.result(timeout=10)).status == "cancelled"
    assert (await new.result(timeout=30)).status == "completed"
    for turn_id in (slow.turn_id, waiting.turn_id, new.turn_id):
        await assert_audit_is_stream(producer, s, turn_id)


async def test_a_turn_re_run_after_its_worker_died(
    producer: Producer, pool_env: dict[str, str]
) -> None:
    s = sid()
    handle = await producer.submit(s, "sleep=1.5 survive", agent="e2e")
    started = await asyncio.wait_for(first_event(producer, s, "started", handle.turn_id), 30)
    os.kill(worker_pid(started.worker), signal.SIGKILL)
    # The rows a killed worker had not written yet are lost with it: take out what it
    # did write of its attempt, before the lease expires and the turn runs again.
    database = pool_env["REACTQ_DATABASE_URL"].removeprefix("sqlite+aiosqlite:///")
    with sqlite3.connect(database) as db:
        db.execute("DELETE FROM audit_events WHERE turn_id = ? AND attempt = 1", (handle.turn_id,))
    assert all(e.attempt != 1 for e in await producer.turn_events(handle.turn_id))

    assert (await handle.result(timeout=30)).status == "completed"
    stream = await stream_of(producer, s, handle.turn_id)
    assert [e.attempt for e in stream if e.type == "started"] == [1, 2]
    await assert_audit_is_stream(producer, s, handle.turn_id)
