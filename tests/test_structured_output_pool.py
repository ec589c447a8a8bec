"""Structured output (issue 15, item 3) on real worker processes, the scripted model,
Redis and SQLite state: the final carries the validated object, the handles return it
typed, a model that keeps answering prose ends the turn with ``invalid_output``, and
the gateway shows the object in the turn's final."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.producer.sync import SyncProducer
from reactq.shared.errors import InvalidOutputError
from reactq.shared.settings import Settings
from tests import structured_agents
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import audited_events, running_pool, wait_until
from tests.structured_agents import Forecast

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("structured")
    with running_pool(
        redis_url,
        f"{namespace}-structured",
        tmp,
        structured_agents.weather_then_json,
        agents="tests.structured_agents:agents",
    ) as env:
        yield {**env, "REACTQ_TMP": str(tmp)}


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


def sid() -> str:
    return f"so-{uuid.uuid4().hex[:10]}"


async def test_a_turn_calls_a_tool_then_ends_with_a_typed_output(producer: Producer) -> None:
    handle = await producer.submit(sid(), "weather in Paris?", agent="forecast")
    final = await handle.result(timeout=30)
    assert final.status == "completed", final
    assert final.output == {"city": "Paris", "temp_c": 21}
    assert await handle.output(Forecast) == Forecast(city="Paris", temp_c=21)
    assert await handle.output() == {"city": "Paris", "temp_c": 21}
    assert [e.type for e in await audited_events(producer, handle.turn_id)].count("action") == 1


async def test_a_model_that_keeps_answering_prose_ends_with_invalid_output(
    producer: Producer,
) -> None:
    handle = await producer.submit(sid(), "weather?", agent="stubborn")
    final = await handle.result(timeout=30)
    assert (final.status, final.code, final.output) == ("invalid_output", "invalid_output", None)
    with pytest.raises(InvalidOutputError, match="invalid_output"):
        await handle.output(Forecast)


def test_the_sync_producer_returns_the_typed_output(pool_env: dict[str, str]) -> None:
    with SyncProducer(Settings.from_env(pool_env)) as sync:
        handle = sync.submit(sid(), "weather?", agent="forecast")
        assert handle.output(Forecast, timeout=30) == Forecast(city="Paris", temp_c=21)


@pytest.fixture(scope="module")
def gateway(pool_env: dict[str, str]) -> Iterator[Gateway]:
    gw = start_gateway(pool_env, Path(pool_env["REACTQ_TMP"]), None)
    try:
        yield gw
    finally:
        gw.stop()


async def test_the_gateway_shows_the_object_in_the_final(gateway: Gateway) -> None:
    s = sid()
    with gateway.client() as client:
        accepted = client.post(
            f"/v1/sessions/{s}/turns", json={"message": "hi", "agent": "forecast"}
        )
        assert accepted.status_code == 202, accepted.text
        turn_id = accepted.json()["turn_id"]
        found: dict[str, Any] = {}

        def ended() -> bool:
            found.update(client.get(f"/v1/turns/{turn_id}").json())
            return found.get("final") is not None

        await wait_until(ended, 30, "the turn's final over HTTP")
        assert found["final"]["output"] == {"city": "Paris", "temp_c": 21}
        schema = client.get("/openapi.json").json()["components"]["schemas"]
        assert "output" in schema["FinalEvent"]["properties"]
