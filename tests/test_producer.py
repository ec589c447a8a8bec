"""Bad input at submit: a clear error, and nothing enqueued or published."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from reactq.producer import Producer
from reactq.shared.errors import (
    AgentMismatchError,
    EmptyMessageError,
    InvalidMessageError,
    InvalidMetadataError,
    InvalidSessionIdError,
    InvalidStreamIdError,
    InvalidTurnError,
    MessageTooLargeError,
    UnknownAgentError,
)
from reactq.shared.settings import Settings


@pytest.fixture
async def producer(redis_url: str, namespace: str) -> AsyncIterator[Producer]:
    settings = Settings.from_env(
        {}, redis_url=redis_url, namespace=f"{namespace}-producer", max_message_bytes=1000
    )
    async with Producer(settings) as p:
        # Announce agents as a worker would, without running one: these tests
        # stop before anything reaches the broker.
        await p.registry.register_agents(["alpha", "beta"], "test-registry")
        yield p


async def _nothing_enqueued(p: Producer, sid: str) -> None:
    assert await p.redis.llen(p.keys.pending(sid)) == 0
    assert await p.bus.read(sid, after="0") == []


@pytest.mark.parametrize(
    ("session_id", "message", "agent", "error", "needle"),
    [
        ("s-{u}", "", "alpha", EmptyMessageError, "empty"),
        ("s-{u}", "   \n", "alpha", EmptyMessageError, "empty"),
        ("s-{u}", "x" * 1001, "alpha", MessageTooLargeError, "1001 bytes"),
        ("s-{u}", "é" * 501, "alpha", MessageTooLargeError, "1002 bytes"),
        ("bad id {u}", "hi", "alpha", InvalidSessionIdError, "[A-Za-z0-9._:-]"),
        ("s/{u}", "hi", "alpha", InvalidSessionIdError, "invalid session id"),
        ("x" * 129, "hi", "alpha", InvalidSessionIdError, "1-128"),
        ("", "hi", "alpha", InvalidSessionIdError, "invalid session id"),
        ("s-{u}\n", "hi", "alpha", InvalidSessionIdError, "invalid session id"),
        (".", "hi", "alpha", InvalidSessionIdError, "not '.' or '..'"),
        ("..", "hi", "alpha", InvalidSessionIdError, "not '.' or '..'"),
        ("s-{u}", "hi \ud800", "alpha", InvalidMessageError, "lone surrogate"),
        ("s-{u}", "hi", "nobody", UnknownAgentError, "no worker hosts agent 'nobody'"),
    ],
)
async def test_bad_turns_are_refused(
    producer: Producer, session_id: str, message: str, agent: str, error: type, needle: str
) -> None:
    sid = session_id.replace("{u}", uuid.uuid4().hex[:8])
    with pytest.raises(error) as caught:
        await producer.submit(sid, message, agent=agent)
    assert needle in str(caught.value)
    if len(sid) <= 128 and sid and " " not in sid and "/" not in sid:
        await _nothing_enqueued(producer, sid)


def _circular() -> dict[str, object]:
    loop: dict[str, object] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [
        ({"k": "\ud800"}, "surrogates not allowed"),
        ({"\udfff": 1}, "surrogates not allowed"),
        ({"k": [{"deep": "x\udc00"}]}, "surrogates not allowed"),
        ({"k": object()}, "unknown type"),
        ({"k": b"\xff"}, "invalid utf-8"),
        (_circular(), "Circular reference"),
        ({1: "one"}, "a dict with string keys"),
        ("not a dict", "a dict with string keys"),
        (["a", "list"], "a dict with string keys"),
    ],
)
async def test_metadata_that_cannot_travel_as_json_is_refused(
    producer: Producer, metadata: object, needle: str
) -> None:
    # Before: a bare PydanticSerializationError or ValidationError, after the checks.
    sid = f"s-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InvalidMetadataError) as caught:
        await producer.submit(sid, "hi", agent="alpha", metadata=metadata)  # type: ignore[arg-type]
    assert isinstance(caught.value, InvalidTurnError)
    assert caught.value.code == "invalid_metadata"
    assert needle in str(caught.value)
    await _nothing_enqueued(producer, sid)


@pytest.mark.parametrize("agent", [None, 7, b"alpha", ["alpha"]])
async def test_an_agent_that_is_not_a_name_is_refused(producer: Producer, agent: object) -> None:
    # Before: redis-py's DataError for None (Redis was asked about it).
    sid = f"s-{uuid.uuid4().hex[:8]}"
    with pytest.raises(UnknownAgentError, match="agent must be an agent's name"):
        await producer.submit(sid, "hi", agent=agent)  # type: ignore[arg-type]
    await _nothing_enqueued(producer, sid)


@pytest.mark.parametrize(
    "after",
    [
        "\u0661\u0662",
        "\u0661\u0662-\u0663",
        "99999999999999999999",
        f"1-{2**64}",
        "12\n",
        "1-",
        "-1",
        "",
        "+",
    ],
)
def test_subscribe_refuses_a_stream_id_redis_would_refuse(producer: Producer, after: str) -> None:
    # Before: redis-py's ResponseError on the first read (Unicode digits passed `\d`).
    with pytest.raises(InvalidStreamIdError, match="not a stream id") as caught:
        producer.subscribe("s-1", after=after)
    assert caught.value.code == "invalid_stream_id"
    assert isinstance(caught.value, InvalidTurnError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("session_id", ["abc\n", ".", "..", "a b", None])
def test_subscribe_refuses_a_bad_session_id(producer: Producer, session_id: object) -> None:
    with pytest.raises(InvalidSessionIdError):
        producer.subscribe(session_id, after="0")  # type: ignore[arg-type]


async def test_subscribe_after_the_largest_id_waits_for_nothing(producer: Producer) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    largest = f"{2**64 - 1}-{2**64 - 1}"
    sub = producer.subscribe(sid, after=largest)
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(sub), 0.3)
    finally:
        await sub.aclose()


async def test_a_session_keeps_its_first_agent(producer: Producer) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await producer.redis.hset(producer.keys.meta(sid), "agent", "alpha")
    with pytest.raises(AgentMismatchError, match="belongs to agent 'alpha', not 'beta'"):
        await producer.submit(sid, "hello", agent="beta")
    await _nothing_enqueued(producer, sid)
