"""Issue 15, items 1, 2 and 6, on real worker processes, the scripted model, Redis and
SQLite state: a turn's context reaches its tools, interventions and system prompt;
its metadata is kept on its record, its status and the audit log; overrides the agent
allows apply to one turn and others are refused at submit; every turn records the
agent's configuration version; a session over its token budget refuses turns."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.producer.sync import SyncProducer
from reactq.shared.errors import (
    ContextTooLargeError,
    InvalidOverrideError,
    OverrideNotAllowedError,
)
from reactq.shared.events import QueuedEvent
from reactq.shared.settings import Settings
from tests import turn_input_agents
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import audited_events, running_pool, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("turn-inputs")
    with running_pool(
        redis_url,
        f"{namespace}-inputs",
        tmp,
        turn_input_agents.whoami_then_answer,
        agents="tests.turn_input_agents:agents",
        REACTQ_MAX_CONTEXT_BYTES="2048",
    ) as env:
        yield {**env, "REACTQ_TMP": str(tmp)}


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


def sid() -> str:
    return f"in-{uuid.uuid4().hex[:10]}"


async def queued_nothing(producer: Producer, session_id: str) -> None:
    assert await producer.redis.llen(producer.keys.pending(session_id)) == 0
    assert await producer.bus.read(session_id) == []


# -- item 1: context and metadata ------------------------------------------------------


async def test_a_tool_reads_the_tenant_from_the_turns_context(producer: Producer) -> None:
    s = sid()
    handle = await producer.submit(
        s, "who am I?", agent="ctx", context={"tenant": "acme"}, metadata={"plan": "pro"}
    )
    final = await handle.result(timeout=30)
    assert final.status == "completed", final
    assert '"tenant": "acme"' in final.text and '"plan": "pro"' in final.text
    # The system prompt was a function of the context; the intervention saw it too.
    assert "system=You serve tenant acme." in final.text
    assert "seen by the intervention for acme" in final.text
    # The context itself is never published (only what the tool made of it); the
    # metadata is, on the queued event.
    events = [e async for e in handle.events()]
    queued = events[0]
    assert isinstance(queued, QueuedEvent) and queued.metadata == {"plan": "pro"}
    assert all("acme" not in e.model_dump_json() for e in events if e.type in {"queued", "started"})


async def test_metadata_is_kept_on_the_record_the_status_and_the_audit_log(
    producer: Producer,
) -> None:
    s = sid()
    handle = await producer.submit(s, "hello", agent="ctx", metadata={"order": 42})
    await handle.result(timeout=30)
    info = await producer.turn_info(handle.turn_id)
    assert info is not None and info.metadata == {"order": 42}
    record = await (await producer.state_store()).get_turn(handle.turn_id)
    assert record is not None and record.metadata == {"order": 42}
    (queued,) = [e for e in await producer.turn_events(handle.turn_id) if e.type == "queued"]
    assert isinstance(queued, QueuedEvent) and queued.metadata == {"order": 42}


async def test_a_context_over_the_limit_is_refused_and_nothing_is_enqueued(
    producer: Producer,
) -> None:
    s = sid()
    with pytest.raises(ContextTooLargeError, match="REACTQ_MAX_CONTEXT_BYTES"):
        await producer.submit(s, "hi", agent="ctx", context={"blob": "x" * 4096})
    await queued_nothing(producer, s)


# -- item 2: overrides and the configuration version -------------------------------------


async def test_an_allowed_override_applies_to_that_turn_only(producer: Producer) -> None:
    s = sid()
    first = await producer.submit(
        s, "a", agent="ctx", overrides={"model": "scripted-large", "temperature": 0.7}
    )
    text = (await first.result(timeout=30)).text
    assert "model=scripted-large" in text and "temperature=0.7" in text
    second = await producer.submit(s, "b", agent="ctx")
    text = (await second.result(timeout=30)).text
    assert "model=scripted |" in text and "temperature=0.0" in text


async def test_an_override_the_agent_does_not_allow_is_refused_at_submit(
    producer: Producer,
) -> None:
    s = sid()
    with pytest.raises(OverrideNotAllowedError, match="'max_cost'") as refused:
        await producer.submit(s, "a", agent="ctx", overrides={"max_cost": 1.0})
    assert refused.value.details["field"] == "max_cost"
    with pytest.raises(InvalidOverrideError, match="'max_iterations'"):
        await producer.submit(s, "a", agent="ctx", overrides={"max_iterations": 0})
    with pytest.raises(OverrideNotAllowedError, match="'model'"):
        await producer.submit(s, "a", agent="budgeted", overrides={"model": "x"})
    await queued_nothing(producer, s)


async def test_every_turn_records_the_agents_configuration_version(producer: Producer) -> None:
    version = turn_input_agents.agent.config_version
    assert version != turn_input_agents.budgeted.config_version
    handle = await producer.submit(sid(), "v?", agent="ctx")
    final = await handle.result(timeout=30)
    assert final.config_version == version
    started = [e for e in await audited_events(producer, handle.turn_id) if e.type == "started"]
    assert started and all(e.config_version == version for e in started)  # type: ignore[union-attr]
    info = await producer.turn_info(handle.turn_id)
    assert info is not None and info.config_version == version
    record = await (await producer.state_store()).get_turn(handle.turn_id)
    assert record is not None and record.config_version == version


# -- item 6: budgets across turns --------------------------------------------------------


async def test_a_session_over_its_token_budget_refuses_the_next_turn(
    producer: Producer, pool_env: dict[str, str]
) -> None:
    s = sid()
    for _ in range(2):  # 100 tokens a turn; the second starts at 100, under 150
        final = await (await producer.submit(s, "spend", agent="budgeted")).result(timeout=30)
        assert final.status == "completed", final
    usage = await producer.usage(s)
    assert (usage.turns, usage.total_tokens, usage.prompt_tokens) == (2, 200, 160)
    refused = await (await producer.submit(s, "more", agent="budgeted")).result(timeout=30)
    assert refused.status == "budget_exceeded"
    assert refused.code == "session_budget_exceeded"
    assert "session_max_tokens=150" in refused.text and "200 spent" in refused.text
    assert refused.usage == {}
    assert (await producer.usage(s)).total_tokens == 200  # the refused turn spent nothing
    with SyncProducer(Settings.from_env(pool_env)) as sync:
        assert sync.usage(s) == usage


# -- the gateway ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(pool_env: dict[str, str]) -> Iterator[Gateway]:
    gw = start_gateway(pool_env, Path(pool_env["REACTQ_TMP"]), None)
    try:
        yield gw
    finally:
        gw.stop()


async def test_the_gateway_takes_context_metadata_overrides_and_shows_usage(
    producer: Producer, gateway: Gateway
) -> None:
    s = sid()
    body: dict[str, Any] = {
        "message": "hi",
        "agent": "ctx",
        "context": {"tenant": "globex"},
        "metadata": {"source": "http"},
        "overrides": {"temperature": 0.5},
    }
    with gateway.client() as client:
        accepted = client.post(f"/v1/sessions/{s}/turns", json=body)
        assert accepted.status_code == 202, accepted.text
        turn_id = accepted.json()["turn_id"]
        refused = client.post(
            f"/v1/sessions/{s}/turns", json={**body, "overrides": {"max_cost": 2}}
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["code"] == "override_not_allowed"
        assert refused.json()["field"] == "body.overrides"
        found: dict[str, Any] = {}

        def ended() -> bool:
            found.update(client.get(f"/v1/turns/{turn_id}").json())
            return found.get("final") is not None

        await wait_until(ended, 30, "the turn's final over HTTP")
        final = found
        assert final is not None
        assert "globex" in final["final_text"] and "temperature=0.5" in final["final_text"]
        assert final["metadata"] == {"source": "http"}
        assert final["config_version"] == turn_input_agents.agent.config_version
        usage = client.get(f"/v1/sessions/{s}/usage")
        assert usage.status_code == 200, usage.text
    assert usage.json()["total_tokens"] == 100 and usage.json()["turns"] == 1
