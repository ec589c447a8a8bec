"""Issue 20, item 2, on a real worker, a real gateway and SQLite state: once Redis
forgot a turn (its stream expired, later its status), its status, attempt, final
text, usage and times come from the state store, through the Producer, the
SyncProducer and ``GET /v1/turns/{id}``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.producer.sync import SyncProducer
from reactq.shared.settings import Settings
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import running_pool, sleepy_lookup

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("turn-status")
    with running_pool(redis_url, f"{namespace}-ts", tmp, sleepy_lookup) as env:
        yield {**env, "REACTQ_TMP": str(tmp)}


@pytest.fixture(scope="module")
def gateway(pool_env: dict[str, str]) -> Iterator[Gateway]:
    gw = start_gateway(pool_env, Path(pool_env["REACTQ_TMP"]), None)
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


def sid() -> str:
    return f"ts-{uuid.uuid4().hex[:10]}"


async def forget_stream(producer: Producer, session_id: str) -> None:
    """What ``REACTQ_EVENT_TTL_SECONDS`` does an hour after the session's last event."""
    assert await producer.redis.delete(producer.keys.events(session_id)) == 1


async def forget_turn(producer: Producer, session_id: str, turn_id: str) -> None:
    """What ``REACTQ_SESSION_META_TTL_SECONDS`` does to the turn's status and index."""
    assert await producer.redis.hdel(producer.keys.turns(session_id), turn_id) == 1
    assert await producer.redis.delete(producer.keys.turn_index(turn_id)) == 1


def over_http(gateway: Gateway, turn_id: str) -> dict[str, Any]:
    with gateway.client() as client:
        response = client.get(f"/v1/turns/{turn_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_completed_turn_after_its_stream_and_status_expired(
    producer: Producer, gateway: Gateway, pool_env: dict[str, str]
) -> None:
    s = sid()
    handle = await producer.submit(s, "remember me", agent="e2e")
    final = await handle.result(timeout=30)
    assert final.status == "completed" and final.usage["total_tokens"] > 0
    live = over_http(gateway, handle.turn_id)
    assert live["final"]["id"] == final.id

    async def check_from_store() -> None:
        body = over_http(gateway, handle.turn_id)
        assert (body["status"], body["attempt"], body["final"]) == ("completed", 1, live["final"])
        assert await producer.turn_status(handle.turn_id) == "completed"
        assert body == {**live, "source": "store"}
        info = await producer.turn_info(handle.turn_id)
        assert info is not None and info.model_dump(mode="json") == body

    # The stream expired, the status is still in Redis: the final comes from the store.
    await forget_stream(producer, s)
    await check_from_store()
    # Then Redis forgot the turn altogether.
    await forget_turn(producer, s, handle.turn_id)
    await check_from_store()

    # What the stream said, and the store says: the times, the final text, the usage.
    assert live["source"] == "stream" and live["final_text"] == "answer to: remember me"
    assert live["usage"] == final.usage and live["ended_at"] == final.ts
    assert live["submitted_at"] == handle.queued.ts
    assert live["submitted_at"] <= live["started_at"] <= live["ended_at"]

    with SyncProducer(Settings.from_env(pool_env)) as sync:
        assert sync.turn_status(handle.turn_id) == "completed"
        stored = sync.turn_info(handle.turn_id)
        assert stored is not None and stored.final_text == "answer to: remember me"


async def test_a_turn_that_never_ran_after_redis_forgot_it(
    producer: Producer, gateway: Gateway
) -> None:
    s = sid()
    running = await producer.submit(s, "sleep=1 first", agent="e2e")
    queued = await producer.submit(s, "second", agent="e2e")
    assert (await producer.cancel(queued.turn_id)).outcome == "cancelled"
    cancelled = await queued.result(timeout=10)
    await running.result(timeout=30)
    await forget_stream(producer, s)
    await forget_turn(producer, s, queued.turn_id)

    assert await producer.turn_status(queued.turn_id) == "cancelled"
    assert over_http(gateway, queued.turn_id)["status"] == "cancelled"
    info = await producer.turn_info(queued.turn_id)
    assert info is not None
    assert (info.status, info.attempt, info.source) == ("cancelled", 0, "store")
    assert info.final_text == cancelled.text and info.started_at is None
    assert (info.submitted_at, info.ended_at) == (queued.queued.ts, cancelled.ts)


async def test_an_unknown_turn(producer: Producer, gateway: Gateway) -> None:
    assert await producer.turn_status("t_nosuchturn") is None
    with gateway.client() as client:
        missing = client.get("/v1/turns/t_nosuchturn")
    assert missing.status_code == 404 and missing.json()["code"] == "turn_not_found"
    assert await producer.turn_info("t_nosuchturn") is None
