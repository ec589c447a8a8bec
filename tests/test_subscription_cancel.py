"""A subscriber that goes away: a web backend cancels the task streaming a session's
events when the browser disconnects, often while the subscription sits in
``XREAD BLOCK`` and sometimes just as an event arrives. The task must end promptly
and its connection must not go back to the producer's pool with a reply pending
(redis-py issue #2663: the next command on it would read the XREAD's answer).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest
from redis.asyncio import ConnectionPool

from reactq.producer.client import Producer
from reactq.shared.events import DeltaEvent, Event
from reactq.shared.settings import Settings

SUBSCRIBERS = 50
BOUND = 2.0  # seconds a cancelled subscriber may take to end


@pytest.fixture
async def producer(redis_url: str, namespace: str) -> AsyncIterator[Producer]:
    settings = Settings(redis_url=redis_url, namespace=namespace)
    async with Producer(settings) as p:
        yield p


def _in_use(producer: Producer) -> int:
    pool: ConnectionPool = producer.redis.connection_pool
    return len(pool._in_use_connections)  # redis-py has no public in-use count


async def _follow(producer: Producer, session_id: str) -> None:
    async for _event in producer.subscribe(session_id, after="0"):
        pass


async def _ended_within(task: asyncio.Task[Any], bound: float) -> float:
    loop = asyncio.get_running_loop()
    began = loop.time()
    done, _ = await asyncio.wait({task}, timeout=bound)
    assert done, f"a cancelled subscriber still runs after {bound}s"
    assert task.cancelled(), f"the cancellation was swallowed: {task!r}"
    return loop.time() - began


async def _pool_is_sound(producer: Producer) -> None:
    """Every connection is back, and each answers its own command, not an old XREAD's."""
    for _ in range(int(BOUND / 0.01)):  # a connection is released just after its task ends
        if not _in_use(producer):
            break
        await asyncio.sleep(0.01)
    assert _in_use(producer) == 0
    keys = [f"{producer.settings.namespace}:probe:{i}" for i in range(SUBSCRIBERS)]
    for i, key in enumerate(keys):
        await producer.redis.set(key, str(i), ex=60)
    answers = await asyncio.gather(*(producer.redis.get(key) for key in keys))
    assert answers == [str(i).encode() for i in range(SUBSCRIBERS)]
    assert _in_use(producer) == 0


async def test_cancelled_subscribers_end_promptly_and_return_their_connections(
    producer: Producer,
) -> None:
    rng = random.Random(7)
    sessions = [f"s-{uuid.uuid4().hex[:12]}" for _ in range(SUBSCRIBERS)]
    tasks = [asyncio.create_task(_follow(producer, s)) for s in sessions]
    await asyncio.sleep(0.2)  # all blocked in XREAD
    assert _in_use(producer) == SUBSCRIBERS

    async def cancel_one(i: int) -> float:
        await asyncio.sleep(rng.uniform(0, 1.5))
        if i % 2:
            # Right as an event arrives: the XREAD's reply is on its way back.
            await producer.bus.publish(DeltaEvent(session_id=sessions[i], turn_id="t", text="x"))
        tasks[i].cancel()
        return await _ended_within(tasks[i], BOUND)

    took = await asyncio.gather(*(cancel_one(i) for i in range(SUBSCRIBERS)))
    assert max(took) < BOUND
    await _pool_is_sound(producer)

    # A new subscription works and reads what its session has.
    published = await producer.bus.publish(
        DeltaEvent(session_id=sessions[1], turn_id="t", text="y")
    )
    sub = producer.subscribe(sessions[1], after="0")
    async with asyncio.timeout(BOUND):
        got = [await anext(sub), await anext(sub)]
    assert got[-1].id == published.id


async def test_aclose_from_another_task_ends_the_reader(producer: Producer) -> None:
    session_id = f"s-{uuid.uuid4().hex[:12]}"
    sub = producer.subscribe(session_id)
    reader = asyncio.create_task(anext(sub))
    await asyncio.sleep(0.2)  # blocked in XREAD
    await sub.aclose()  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(StopAsyncIteration):
        async with asyncio.timeout(BOUND):
            await reader
    assert loop.time() - began < BOUND
    await _pool_is_sound(producer)


async def test_a_cancelled_events_generator_is_closed(producer: Producer) -> None:
    # TurnHandle.events() is an async generator over subscribe(): cancelling the task
    # that iterates it ends the generator too, so a later aclose() has nothing to wait for.
    session_id = f"s-{uuid.uuid4().hex[:12]}"

    async def events() -> AsyncGenerator[Event, None]:
        async for event in producer.subscribe(session_id, after="0"):
            yield event

    gen = events()
    reader = asyncio.create_task(anext(gen))
    await asyncio.sleep(0.2)
    reader.cancel()
    await _ended_within(reader, BOUND)
    async with asyncio.timeout(BOUND):
        await gen.aclose()
    await _pool_is_sound(producer)
