"""Bad input at submit: a clear error, and nothing enqueued or published."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from reactq.producer import Producer
from reactq.shared.errors import (
    AgentMismatchError,
    EmptyMessageError,
    InvalidSessionIdError,
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


async def test_a_session_keeps_its_first_agent(producer: Producer) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await producer.redis.hset(producer.keys.meta(sid), "agent", "alpha")
    with pytest.raises(AgentMismatchError, match="belongs to agent 'alpha', not 'beta'"):
        await producer.submit(sid, "hello", agent="beta")
    await _nothing_enqueued(producer, sid)
