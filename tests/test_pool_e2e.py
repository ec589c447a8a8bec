"""End to end on real parts: producer -> Redis broker -> two real `reactq worker`
processes -> the scripted model over HTTP -> events on Redis -> SQL state."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import pytest

from reactq.producer import Producer
from reactq.shared.events import Event, FinalEvent
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnRequest
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.conftest import delete_amqp_queues
from tests.helpers import WorkerPool, lookup_then_answer, wait_until

pytestmark = pytest.mark.e2e

SESSIONS, TURNS = 8, 5


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedServer]:
    # Some latency, so that two turns of one session would overlap if the lock failed.
    server = ScriptedServer(lookup_then_answer, latency=0.02).start_in_thread()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres", "rabbitmq", "cluster"])
def pool_env(
    request: pytest.FixtureRequest,
    redis_url: str,
    namespace: str,
    model: ScriptedServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp(f"pool-{request.param}")
    if request.param == "postgres":
        database_url = request.getfixturevalue("postgres_url")
    else:
        database_url = f"sqlite+aiosqlite:///{tmp / 'state.db'}"
    broker_url = redis_url
    if request.param == "cluster":
        # Events, leases, queues and the Redis state on a Redis Cluster; Celery's
        # broker on a single Redis (it has no cluster transport).
        redis_url = request.getfixturevalue("redis_cluster_url")
        database_url = f"{redis_url}?namespace={namespace}-state"
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_BROKER_URL": broker_url,
        "REACTQ_NAMESPACE": f"{namespace}-{request.param}",
        "REACTQ_DATABASE_URL": database_url,
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
        # A session left with work and no drain is the reaper's after a lease TTL:
        # short here, so the malformed-payload test does not wait the default 30 s.
        "REACTQ_LEASE_TTL_SECONDS": "3",
        "REACTQ_REAPER_INTERVAL_SECONDS": "0.5",
    }
    if request.param == "rabbitmq":
        # RabbitMQ as the broker; Redis still carries events, leases and queues.
        env["REACTQ_BROKER_URL"] = request.getfixturevalue("amqp_url")
    pool = WorkerPool(env, tmp)
    pool.start(2)
    try:
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 2)
        yield env
    finally:
        pool.stop()
        if request.param == "rabbitmq":
            delete_amqp_queues(env["REACTQ_BROKER_URL"], [f"{env['REACTQ_NAMESPACE']}.e2e"])


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


async def _collect_session(producer: Producer, sid: str, finals: int) -> list[Event]:
    """Replay a session from the start until ``finals`` final events were seen."""
    events: list[Event] = []
    seen = 0
    async for event in producer.subscribe(sid, after="0"):
        events.append(event)
        seen += event.type == "final"
        if seen == finals:
            return events
    return events


async def test_sessions_run_in_order_without_overlap(producer: Producer) -> None:
    import uuid

    run = uuid.uuid4().hex[:6]
    sessions = [f"e2e-{run}-{i}" for i in range(SESSIONS)]
    handles = []
    for turn in range(TURNS):
        for sid in sessions:
            handles.append(await producer.submit(sid, f"{sid} turn {turn}", agent="e2e"))

    finals = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 120)
    assert [f.status for f in finals] == ["completed"] * len(handles)
    assert all(
        f.text == f"answer to: {h.session_id} turn {t}"
        for f, h, t in zip(
            finals, handles, [i // SESSIONS for i in range(len(handles))], strict=True
        )
    )

    for sid in sessions:
        # A subscriber that joins after the turns finished replays every event.
        events = await asyncio.wait_for(_collect_session(producer, sid, TURNS), 30)
        stored = await producer.bus.read(sid, after="0")
        assert [e.id for e in events] == [e.id for e in stored]

        mine = [h.turn_id for h in handles if h.session_id == sid]
        per_turn_finals = {
            t: sum(1 for e in events if e.type == "final" and e.turn_id == t) for t in mine
        }
        assert per_turn_finals == dict.fromkeys(mine, 1), "each turn ends with exactly one final"

        # Once started, a turn's events are contiguous up to its final (queued
        # events of later turns may interleave), and turns run in submission order.
        running = [e for e in events if e.type != "queued"]
        order = []
        current = None
        for e in running:
            if current is None:
                assert e.type == "started", f"{e.type} outside a running turn"
                current = e.turn_id
                order.append(current)
            assert e.turn_id == current, "two turns of one session overlapped"
            if isinstance(e, FinalEvent):
                current = None
        assert order == mine

        history = await producer.history(sid)
        users = [m.content for m in history if m.role == "user"]
        assert users == [f"{sid} turn {t}" for t in range(TURNS)]
        roles = [m.role for m in history]
        assert roles == ["user", "assistant", "tool", "assistant"] * TURNS
        assert history[1].tool_calls and history[1].tool_calls[0].name == "lookup"
        assert history[3].content == f"answer to: {sid} turn 0"


async def test_malformed_payloads_are_reported_and_the_queue_goes_on(producer: Producer) -> None:
    import json
    import uuid

    sid = f"bad-{uuid.uuid4().hex[:8]}"
    pending = producer.keys.pending(sid)
    # A payload that names its turn but misses fields, then one that is not JSON.
    await producer.redis.rpush(pending, json.dumps({"v": 1, "turn_id": "t_badpayload", "x": 1}))
    await producer.redis.rpush(pending, "not json at all")
    # A drain task whose argument is not a session id at all.
    await asyncio.to_thread(
        producer.dispatcher.app.send_task,
        "reactq.drain",
        args=[{"no": "pe"}],
        queue=producer.keys.queue("e2e"),
    )
    handle = await producer.submit(sid, "still works", agent="e2e")
    final = await handle.result(timeout=60)
    assert final.status == "completed"
    assert final.text == "answer to: still works"

    events = await producer.bus.read(sid, after="0")
    bad = [e for e in events if e.turn_id == "t_badpayload"]
    assert [e.type for e in bad] == ["error", "final"]
    assert isinstance(bad[-1], FinalEvent) and bad[-1].status == "error"
    assert bad[-1].code == "invalid_turn"  # the final names its error, like the error event
    assert "malformed" in bad[-1].text
    assert await producer.redis.llen(pending) == 0
    assert [m.content for m in await producer.history(sid) if m.role == "user"] == ["still works"]


async def test_what_wedged_a_session_is_dropped_and_the_session_goes_on(
    producer: Producer,
) -> None:
    """Issue 12, items 2-4, on real workers: a turn id with a ``|``, bytes that are
    not UTF-8, and one turn pushed twice, ahead of a submitted turn."""
    import uuid

    sid = f"wedge-{uuid.uuid4().hex[:8]}"
    pending = producer.keys.pending(sid)
    piped = {"v": 1, "turn_id": "t_mal|pipe", "session_id": sid, "agent": "e2e", "message": "x"}
    twice = TurnRequest(session_id=sid, agent="e2e", message="pushed twice")
    await producer.redis.rpush(
        pending,
        twice.model_dump_json(),
        json.dumps(piped),
        b"\xff\xfe not UTF-8 \xc3",
        twice.model_dump_json(),
    )
    await producer.dispatcher.drain(sid, "e2e")
    handle = await producer.submit(sid, "after them", agent="e2e")
    final = await handle.result(timeout=60)
    assert (final.status, final.text) == ("completed", "answer to: after them")

    events = await producer.bus.read(sid, after="0")
    mine = [e for e in events if e.turn_id == twice.turn_id]
    assert [e.type for e in mine if e.type in ("started", "final")] == ["started", "final"]
    assert [e for e in events if e.turn_id == "t_mal|pipe"] == []
    assert [m.content for m in await producer.history(sid) if m.role == "user"] == [
        "pushed twice",
        "after them",
    ]
    assert await producer.redis.llen(pending) == 0

    async def at_rest() -> bool:
        keys = producer.keys
        return not await producer.redis.exists(keys.running(sid), keys.lease(sid))

    await wait_until(at_rest, 10, "the session to come to rest")
