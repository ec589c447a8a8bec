"""The gateway's fan-out on a real Redis: one pub/sub connection, reference-counted
subscriptions, buffers bounded in events and bytes that cut only a listener that
falls behind (not one a burst never gave a turn), and a replay-to-live seam
without loss or repeats."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from reactq.producer.gateway.fanout import Fanout, Listener
from reactq.producer.gateway.sse import event_stream
from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.events import ThoughtEvent
from reactq.shared.keys import Keys
from reactq.shared.redis_client import lua_join, lua_source, once_key_id
from tests.helpers import wait_until


@pytest.fixture
async def parts(redis_url: str, namespace: str) -> AsyncIterator[tuple[Redis, Keys, RedisEventBus]]:
    redis = Redis.from_url(redis_url)
    keys = Keys(f"{namespace}-fan")
    bus = RedisEventBus(redis, keys)
    try:
        yield redis, keys, bus
    finally:
        await bus.close()
        await redis.aclose()


async def _numsub(redis: Redis, channel: str) -> int:
    result = await redis.pubsub_numsub(channel)
    return int(result[0][1])


def _thought(session: str, n: int, text: str = "") -> ThoughtEvent:
    return ThoughtEvent(session_id=session, turn_id="t_fan", seq=n, text=text or f"thought {n}")


async def test_one_subscription_per_session_reference_counted(
    parts: tuple[Redis, Keys, RedisEventBus],
) -> None:
    redis, keys, bus = parts
    fanout = Fanout(redis, keys, buffer=100)
    await fanout.start()
    try:
        sessions = [f"fan-{uuid.uuid4().hex[:8]}" for _ in range(5)]
        listeners = [await fanout.attach(s) for s in sessions for _ in range(4)]
        assert fanout.channel_count == 5 and fanout.listener_count == 20
        for s in sessions:
            # Twenty clients, one server-side subscriber per session.
            assert await _numsub(redis, keys.channel(s)) == 1
        published = await bus.publish(_thought(sessions[0], 1))
        for listener in listeners[:4]:
            frame = await listener.get(5)
            assert frame is not None and frame.id == published.id and frame.type == "thought"
        for listener in listeners[4:]:
            assert listener.pending == 0
        for listener in listeners[:3]:
            await fanout.detach(listener)
        assert await _numsub(redis, keys.channel(sessions[0])) == 1
        await fanout.detach(listeners[3])

        async def unsubscribed() -> bool:
            return await _numsub(redis, keys.channel(sessions[0])) == 0

        await wait_until(unsubscribed, 5, "the last listener to unsubscribe")
        # Attach again at once after the last detach: subscribed again, nothing missed.
        again = await fanout.attach(sessions[0])
        assert await _numsub(redis, keys.channel(sessions[0])) == 1
        published = await bus.publish(_thought(sessions[0], 2))
        frame = await again.get(5)
        assert frame is not None and frame.id == published.id
        for listener in [*listeners[4:], again]:
            await fanout.detach(listener)
        await wait_until(lambda: fanout.channel_count == 0, 5, "every channel to be released")
    finally:
        await fanout.close()


async def test_a_slow_client_is_cut_off_not_buffered_forever(
    parts: tuple[Redis, Keys, RedisEventBus],
) -> None:
    redis, keys, bus = parts
    fanout = Fanout(redis, keys, buffer=3)
    await fanout.start()
    try:
        session = f"fan-{uuid.uuid4().hex[:8]}"
        slow = await fanout.attach(session)
        fast = await fanout.attach(session)
        received = []
        for n in range(10):
            await bus.publish(_thought(session, n))
            frame = await fast.get(5)
            assert frame is not None
            received.append(frame.id)
        assert len(received) == 10 and not fast.overflowed
        await wait_until(lambda: slow.overflowed, 5, "the slow listener to overflow")
        assert await slow.get(1) is None
        await fanout.detach(slow)
        await fanout.detach(fast)
    finally:
        await fanout.close()


async def _publish_burst(redis: Redis, keys: Keys, events: list[ThoughtEvent]) -> None:
    """Publish with the bus's own script, all in one round trip: the fan-out's socket
    gets them back to back."""
    source = lua_join(
        lua_source("reactq.shared.redis_client", "once"),
        lua_source("reactq.shared.bus", "bus_append", "bus_publish"),
    )
    script = redis.register_script(source)
    pipe = redis.pipeline(transaction=False)
    for event in events:
        sid = event.session_id
        keys_ = [keys.events(sid), keys.channel(sid), keys.once(sid, once_key_id())]
        payload = event.model_dump_json(exclude={"id"})
        await script(keys=keys_, args=[10_000, 60, payload], client=pipe)
    await pipe.execute()


async def test_a_burst_overflows_no_listener_that_keeps_up(
    parts: tuple[Redis, Keys, RedisEventBus],
) -> None:
    redis, keys, _ = parts
    fanout = Fanout(redis, keys, buffer=100)
    await fanout.start()
    session = f"fan-{uuid.uuid4().hex[:8]}"
    burst = 1000

    async def keep_up(listener: Listener) -> int:
        got = 0
        while got < burst and await listener.get(10) is not None:
            got += 1
        return got

    try:
        listeners = [await fanout.attach(session) for _ in range(20)]
        readers = [asyncio.create_task(keep_up(listener)) for listener in listeners]
        # Ten times the buffer at once: each listener keeps up, so none is cut.
        await _publish_burst(redis, keys, [_thought(session, n) for n in range(burst)])
        got = await asyncio.wait_for(asyncio.gather(*readers), 30)
        assert got == [burst] * len(listeners)
        assert not any(listener.overflowed for listener in listeners)
        for listener in listeners:
            await fanout.detach(listener)
    finally:
        await fanout.close()


async def test_the_byte_cap_cuts_a_listener_that_holds_too_much(
    parts: tuple[Redis, Keys, RedisEventBus],
) -> None:
    redis, keys, bus = parts
    fanout = Fanout(redis, keys, buffer=1000, buffer_bytes=100_000)
    await fanout.start()
    session = f"fan-{uuid.uuid4().hex[:8]}"
    try:
        slow = await fanout.attach(session)
        fast = await fanout.attach(session)
        # One event over the cap still reaches a listener that keeps up: else it
        # would be cut at that event on every resume.
        huge = await bus.publish(_thought(session, 0, text="h" * 250_000))
        frame = await fast.get(5)
        assert frame is not None and frame.id == huge.id and not fast.overflowed
        # Later ones pile up in the slow listener: cut once they pass 100 kB, far
        # under its 1000 events.
        for n in range(1, 8):
            published = await bus.publish(_thought(session, n, text="x" * 30_000))
            frame = await fast.get(5)
            assert frame is not None and frame.id == published.id
        assert slow.overflowed and not fast.overflowed
        assert await slow.get(1) is None
        await fanout.detach(slow)
        await fanout.detach(fast)
    finally:
        await fanout.close()


async def test_replay_then_live_loses_and_repeats_nothing(
    parts: tuple[Redis, Keys, RedisEventBus],
) -> None:
    redis, keys, bus = parts
    fanout = Fanout(redis, keys, buffer=10_000)
    await fanout.start()
    session = f"fan-{uuid.uuid4().hex[:8]}"
    total = 300

    async def publish() -> None:
        for n in range(total):
            await bus.publish(_thought(session, n))
            if n % 20 == 0:
                await asyncio.sleep(0)

    try:
        for n in range(50):
            await bus.publish(_thought(session, -n))
        publisher = asyncio.create_task(publish())
        await asyncio.sleep(0.01)
        listener = await fanout.attach(session)
        stream = event_stream(
            redis, keys, fanout, listener, after="0", turn_id=None, heartbeat_seconds=5
        )
        ids = []
        async for chunk in stream:
            for line in chunk.decode().splitlines():
                if line.startswith("id: "):
                    ids.append(line[4:])
            if len(ids) == total + 50:
                break
        await stream.aclose()
        await publisher
        stored = [e.id for e in await bus.read(session, "0")]
        assert ids == stored
        assert fanout.listener_count == 0
    finally:
        await fanout.close()
