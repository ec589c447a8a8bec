"""EventBus: Redis (on a real server) and memory, with the same semantics."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from reactq.shared.bus import (
    EventBus,
    PublishGuard,
    Subscription,
    TurnEmitter,
    parse_stream_id,
    stream_id_gt,
)
from reactq.shared.bus_memory import MemoryEventBus
from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.errors import InvalidStreamIdError, LeaseLostError
from reactq.shared.events import DeltaEvent, Event, FinalEvent, StartedEvent, UsageEvent
from reactq.shared.keys import Keys
from reactq.shared.protocol.lease import SessionLease
from reactq.shared.turns import TurnStatus


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


def delta(session_id: str, text: str) -> DeltaEvent:
    return DeltaEvent(session_id=session_id, turn_id="t1", text=text)


AnyBus = RedisEventBus | MemoryEventBus


async def take(sub: Subscription, n: int, within: float = 10.0) -> list[Event]:
    """The next ``n`` events of ``sub``, failing after ``within`` seconds."""
    out: list[Event] = []
    async with asyncio.timeout(within):
        while len(out) < n:
            out.append(await anext(sub))
    return out


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


@pytest.fixture(params=["redis", "memory"])
async def bus(request: pytest.FixtureRequest) -> AsyncIterator[AnyBus]:
    made: AnyBus
    client = None
    if request.param == "redis":
        # Sync fixtures only: an async one cannot be requested from inside this one.
        client = Redis.from_url(request.getfixturevalue("redis_url"))
        # A small batch makes replay cross several reads before going live.
        made = RedisEventBus(
            client, Keys(request.getfixturevalue("namespace")), block_ms=200, batch=16
        )
    else:
        made = MemoryEventBus()
    try:
        yield made
    finally:
        await made.close()
        if client is not None:
            await client.aclose()


# --- ids ------------------------------------------------------------------------


def test_stream_ids_compare_as_numbers() -> None:
    assert stream_id_gt("10-0", "9-5")
    assert stream_id_gt("1-10", "1-9")
    assert not stream_id_gt("1-9", "1-10")
    assert not stream_id_gt("5-1", "5-1")
    assert stream_id_gt("1-0", "0")
    assert parse_stream_id("7") == (7, 0)
    with pytest.raises(ValueError, match="not a stream id"):
        parse_stream_id("abc")


MAX = 2**64 - 1
"""Redis's largest milliseconds or sequence number (each is a uint64)."""
BAD_IDS = [
    "\u0661\u0662",
    "12-\u0663",
    "\uff11\uff12",
    str(MAX + 1),
    f"0-{MAX + 1}",
    "9" * 21,
    "1\n",
    "1-2\n",
    " 1",
    "1-",
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_stream_ids_are_ascii_digits_within_redis_range(bad: str) -> None:
    # Before: `\d` took any Unicode digit and the numbers had no bound, so Redis was
    # the first to refuse them (a ResponseError mid-stream).
    with pytest.raises(InvalidStreamIdError, match="not a stream id"):
        parse_stream_id(bad)


def test_the_edges_of_the_range_are_ids() -> None:
    assert parse_stream_id(f"{MAX}-{MAX}") == (MAX, MAX)
    assert parse_stream_id(str(MAX)) == (MAX, 0)
    assert parse_stream_id("0") == (0, 0)
    assert parse_stream_id("00000000000000000007-01") == (7, 1)


# --- both buses -----------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_both_buses_refuse_a_bad_after_before_any_read(bus: AnyBus, bad: str) -> None:
    with pytest.raises(InvalidStreamIdError):
        bus.subscribe(sid(), after=bad)
    with pytest.raises(InvalidStreamIdError):
        await bus.read(sid(), after=bad)


async def test_nothing_comes_after_the_largest_id(bus: AnyBus) -> None:
    s = sid()
    await bus.publish(delta(s, "a"))
    assert await bus.read(s, after=f"{MAX}-{MAX}") == []
    assert await bus.read(s, after=str(MAX)) == []


async def test_publish_returns_increasing_ids(bus: AnyBus) -> None:
    assert isinstance(bus, EventBus)
    s = sid()
    event = delta(s, "a")
    published = [await bus.publish(delta(s, str(i))) for i in range(20)]
    assert event.id is None
    ids = [e.id for e in published]
    assert all(i is not None for i in ids)
    assert all(stream_id_gt(b, a) for a, b in itertools.pairwise(ids))  # type: ignore[arg-type]
    stored = await bus.read(s)
    assert [e.id for e in stored] == ids
    assert [e.text for e in stored] == [str(i) for i in range(20)]  # type: ignore[union-attr]
    assert [e.id for e in await bus.read(s, after=ids[4], count=3)] == ids[5:8]  # type: ignore[arg-type]
    assert await bus.read(sid()) == []


async def test_replay_then_live_without_gap_or_duplicate(bus: AnyBus) -> None:
    s = sid()
    before = [await bus.publish(delta(s, f"old{i}")) for i in range(30)]
    live_ids: list[str | None] = []

    async def publisher() -> None:
        for i in range(100):
            live_ids.append((await bus.publish(delta(s, f"new{i}"))).id)
            if i % 7 == 0:
                await asyncio.sleep(0)

    async with bus.subscribe(s, after="0") as sub:
        task = asyncio.create_task(publisher())
        got = await take(sub, 130)
        await task
    assert [e.id for e in got] == [e.id for e in before] + live_ids


async def test_resume_strictly_after_an_id(bus: AnyBus) -> None:
    s = sid()
    ids = [(await bus.publish(delta(s, str(i)))).id for i in range(5)]
    assert ids[2] is not None
    async with bus.subscribe(s, after=ids[2]) as sub:
        got = await take(sub, 2)
        assert [e.id for e in got] == ids[3:]
        later = await bus.publish(delta(s, "later"))
        assert [e.id for e in await take(sub, 1)] == [later.id]


async def test_live_only_starts_at_subscribe(bus: AnyBus) -> None:
    s = sid()
    for i in range(3):
        await bus.publish(delta(s, str(i)))
    sub = bus.subscribe(s)
    assert isinstance(sub, Subscription)
    await sub.start()
    new = [await bus.publish(delta(s, f"n{i}")) for i in range(2)]
    assert [e.id for e in await take(sub, 2)] == [e.id for e in new]
    await sub.aclose()
    with pytest.raises(StopAsyncIteration):
        await anext(sub)


async def test_live_only_on_a_new_session(bus: AnyBus) -> None:
    s = sid()
    async with bus.subscribe(s, after="$") as sub:
        await sub.start()
        first = await bus.publish(StartedEvent(session_id=s, turn_id="t"))
        assert [e.id for e in await take(sub, 1)] == [first.id]


async def test_bad_after_is_refused(bus: AnyBus) -> None:
    with pytest.raises(ValueError, match="not a stream id"):
        bus.subscribe(sid(), after="yesterday")


async def test_close_ends_subscriptions(bus: AnyBus) -> None:
    s = sid()
    sub = bus.subscribe(s, after="0")
    waiting = asyncio.create_task(take(sub, 1))
    await asyncio.sleep(0.05)  # let it block
    await bus.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 5)


async def test_cancelling_a_subscriber_is_prompt(bus: AnyBus) -> None:
    s = sid()
    sub = bus.subscribe(s, after="0")
    waiting = asyncio.create_task(take(sub, 1))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, 5)
    # The bus still works for others afterwards.
    published = await bus.publish(delta(s, "x"))
    assert [e.id for e in await bus.read(s)] == [published.id]


async def test_turn_emitter_numbers_events(bus: AnyBus) -> None:
    s = sid()
    emitter = TurnEmitter(bus, s, "t9", attempt=2)
    await emitter.emit(StartedEvent, worker="w1")
    final = await emitter.emit(FinalEvent, text="done", status=TurnStatus.COMPLETED)
    assert final.id is not None and final.seq == 2
    stored = await bus.read(s)
    assert [(e.type, e.seq, e.attempt, e.turn_id) for e in stored] == [
        ("started", 1, 2, "t9"),
        ("final", 2, 2, "t9"),
    ]


async def test_events_emitted_later_go_out_first_with_the_next_one(bus: AnyBus) -> None:
    # A usage note waits for the event that follows it, and both reach a live
    # subscriber in the order they were made, with their own ids.
    s = sid()
    sub = bus.subscribe(s, after=None)
    await sub.start()
    emitter = TurnEmitter(bus, s, "t9")
    await emitter.emit(StartedEvent, worker="w1")
    emitter.emit_later(UsageEvent, prompt_tokens=3, completion_tokens=1, total_tokens=4)
    emitter.emit_later(UsageEvent, prompt_tokens=5, completion_tokens=1, total_tokens=6)
    assert [e.type for e in await bus.read(s)] == ["started"]  # nothing yet
    final = await emitter.emit(FinalEvent, text="done", status=TurnStatus.COMPLETED)
    live = await take(sub, 4)
    await sub.aclose()
    assert [(e.type, e.seq) for e in live] == [
        ("started", 1),
        ("usage", 2),
        ("usage", 3),
        ("final", 4),
    ]
    ids = [e.id for e in live]
    assert all(stream_id_gt(b, a) for a, b in itertools.pairwise(ids))  # type: ignore[arg-type]
    assert final.id == ids[-1] and [e.id for e in await bus.read(s)] == ids
    # flush publishes what waits when no event follows.
    emitter.emit_later(UsageEvent, prompt_tokens=1, completion_tokens=1, total_tokens=2)
    await emitter.flush()
    assert [e.type for e in await bus.read(s)][-1] == "usage"


# --- Redis ----------------------------------------------------------------------


async def test_redis_stream_is_capped_and_expires(redis: Redis, keys: Keys) -> None:
    s = sid()
    bus = RedisEventBus(redis, keys, maxlen=10, ttl_seconds=120)
    last = None
    for i in range(400):
        last = await bus.publish(delta(s, str(i)))
    length = await redis.xlen(keys.events(s))
    # MAXLEN ~ trims whole macro nodes (100 entries by default), so it is approximate.
    assert 10 <= length < 400
    assert 0 < await redis.ttl(keys.events(s)) <= 120
    stored = await bus.read(s)
    assert stored[-1].id == last.id  # type: ignore[union-attr]
    await bus.close()


async def test_a_final_goes_out_only_under_its_lease_with_the_status_first(
    redis: Redis, keys: Keys
) -> None:
    s = sid()
    bus = RedisEventBus(redis, keys, block_ms=200)
    lease = SessionLease(redis, keys, ttl_seconds=30, owner="w1")
    token = await lease.acquire(s)
    assert token is not None
    emitter = TurnEmitter(bus, s, "t1")
    emitter.emit_later(UsageEvent, prompt_tokens=1, completion_tokens=1, total_tokens=2)
    final = emitter._build(FinalEvent, {"text": "done", "status": TurnStatus.COMPLETED})
    # Another token: nothing is published, no status recorded.
    with pytest.raises(LeaseLostError):
        await emitter._send(final, PublishGuard(token + 1, "t1", "completed", 60))
    assert await bus.read(s) == [] and not await redis.hexists(keys.turns(s), "t1")
    # The holder's token: the status first, then the events, in one call.
    emitter.emit_later(UsageEvent, prompt_tokens=1, completion_tokens=1, total_tokens=2)
    sent = await emitter._send(final, PublishGuard(token, "t1", "completed", 60))
    assert [e.type for e in await bus.read(s)] == ["usage", "final"]
    assert sent.id == (await bus.read(s))[-1].id
    assert await redis.hget(keys.turns(s), "t1") == b"completed"
    assert 0 < await redis.ttl(keys.turns(s)) <= 60
    await bus.close()


async def test_redis_skips_unreadable_entries(redis: Redis, keys: Keys) -> None:
    s = sid()
    bus = RedisEventBus(redis, keys, block_ms=200)
    good1 = await bus.publish(delta(s, "good1"))
    stream = keys.events(s)
    await redis.xadd(stream, {"e": "not json"})
    await redis.xadd(stream, {"e": json.dumps({"v": 99, "type": "delta"})})
    await redis.xadd(stream, {"e": json.dumps({"type": "no-such-type"})})
    await redis.xadd(stream, {"other": "field"})
    await redis.xadd(stream, {"e": b"\xff\xfe"})
    good2 = await bus.publish(delta(s, "good2"))
    assert [e.id for e in await bus.read(s)] == [good1.id, good2.id]
    async with bus.subscribe(s, after="0") as sub:
        assert [e.id for e in await take(sub, 2)] == [good1.id, good2.id]
        await redis.xadd(stream, {"e": "garbage again"})
        good3 = await bus.publish(delta(s, "good3"))
        assert [e.id for e in await take(sub, 1)] == [good3.id]
    await bus.close()


async def test_redis_publishes_on_the_channel_with_the_id(redis: Redis, keys: Keys) -> None:
    s = sid()
    bus = RedisEventBus(redis, keys)
    pubsub = redis.pubsub()
    await pubsub.subscribe(keys.channel(s))
    try:
        published = await bus.publish(delta(s, "hello"))
        message = None
        async with asyncio.timeout(5):
            while message is None:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
        payload = json.loads(message["data"])
        assert payload["id"] == published.id
        assert payload["text"] == "hello" and payload["type"] == "delta"
        # The stream holds the event without its id (the entry id is the id).
        entries = await redis.xrange(keys.events(s))
        assert "id" not in json.loads(entries[0][1][b"e"])  # type: ignore[index]
    finally:
        await pubsub.aclose()
        await bus.close()


async def test_redis_from_url_owns_its_client(redis_url: str, namespace: str) -> None:
    bus = RedisEventBus.from_url(redis_url, namespace=namespace, maxlen=50)
    s = sid()
    published = await bus.publish(delta(s, "x"))
    assert [e.id for e in await bus.read(s)] == [published.id]
    sub = bus.subscribe(s)
    waiting = asyncio.create_task(take(sub, 1))
    await asyncio.sleep(0.05)
    await bus.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 5)


async def test_redis_block_must_stay_below_socket_timeout(redis_url: str, keys: Keys) -> None:
    client = Redis.from_url(redis_url, socket_timeout=1)
    try:
        with pytest.raises(ValueError, match="socket_timeout"):
            RedisEventBus(client, keys, block_ms=1000)
    finally:
        await client.aclose()


async def test_redis_with_decoded_responses(redis_url: str, keys: Keys) -> None:
    client = Redis.from_url(redis_url, decode_responses=True)
    bus = RedisEventBus(client, keys, block_ms=200)
    try:
        s = sid()
        first = await bus.publish(delta(s, "é 😀 lone \ud800"))
        async with bus.subscribe(s, after="0") as sub:
            got = await take(sub, 1)
        assert got == [first]
        assert await bus.read(s) == [first]
    finally:
        await bus.close()
        await client.aclose()


# --- memory ---------------------------------------------------------------------


async def test_memory_bus_caps_exactly_and_forgets_idle_sessions() -> None:
    bus = MemoryEventBus(maxlen=10, ttl_seconds=0.01)
    s = sid()
    ids = [(await bus.publish(delta(s, str(i)))).id for i in range(25)]
    assert [e.id for e in await bus.read(s)] == ids[-10:]
    await asyncio.sleep(0.02)
    await bus.publish(delta(sid(), "other"))  # publishing sweeps idle sessions
    assert await bus.read(s) == []
    # A session someone is subscribed to is kept however idle it is.
    watched = sid()
    await bus.publish(delta(watched, "w"))
    async with bus.subscribe(watched, after="0") as sub:
        await asyncio.sleep(0.02)
        await bus.publish(delta(sid(), "other"))
        assert len(await bus.read(watched)) == 1
        assert len(await take(sub, 1)) == 1
    await bus.close()
    with pytest.raises(RuntimeError, match="closed"):
        await bus.publish(delta(s, "late"))
