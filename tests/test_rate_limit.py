"""A rate limit the whole pool shares (issue 22, item 6): one token bucket per endpoint
and model in Redis, drawn from by every worker in one Lua call; a turn that waits
says so (``rate_limited``); the provider's ``x-ratelimit-*`` headers tighten the
budget. On real parts: Redis (and the Redis Cluster), the scripted server over HTTP,
the openai SDK, and real ``reactq worker`` processes."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from reactq import Agent, Model, RateLimit
from reactq.producer import Producer
from reactq.shared.events import ErrorEvent, Event, FinalEvent, RateLimitedEvent
from reactq.shared.keys import Keys
from reactq.shared.messages import ChatMessage
from reactq.shared.protocol.ratelimit import ProviderLimits, RateBudget, bucket_name
from reactq.shared.redis_client import connect
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.ratelimit import RateLimiters, estimate_tokens
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from reactq.worker.definitions import AgentConfigError
from tests.helpers import WorkerPool, lookup_then_answer
from tests.kernel_support import ListBus, emitter_for, endpoint


@pytest.fixture
async def budget(where: tuple[str, Keys]) -> AsyncIterator[RateBudget]:
    client = connect(where[0], 32)
    try:
        yield RateBudget(client, where[1])
    finally:
        await client.aclose()


def bucket() -> str:
    return bucket_name("http://127.0.0.1:9/v1", f"m-{uuid.uuid4().hex[:8]}")


# -- the value and its checks ------------------------------------------------------------


def test_a_rate_limit_is_checked_at_construction() -> None:
    for knobs, match in (
        ({}, "give requests_per_minute, tokens_per_minute or both"),
        ({"requests_per_minute": 0}, "requests_per_minute must be > 0"),
        ({"tokens_per_minute": -5}, "tokens_per_minute must be > 0"),
        ({"requests_per_minute": 60, "burst_seconds": 0}, "burst_seconds must be > 0"),
    ):
        with pytest.raises(ValueError, match=match):
            RateLimit(**knobs)
    with pytest.raises(AgentConfigError, match="rate_limit must be a RateLimit"):
        Agent(name="a", rate_limit=60)  # type: ignore[arg-type]


def test_each_endpoint_and_model_has_a_bucket_under_its_own_hash_tag() -> None:
    keys = Keys("ns", shards=8)
    one = bucket_name("http://a/v1", "m1")
    assert one == bucket_name("http://a/v1", "m1")
    assert len({one, bucket_name("http://a/v1", "m2"), bucket_name("http://b/v1", "m1")}) == 3
    key = keys.rate_limit(one)
    assert key.startswith("ns:") and key.count("{") == 1 and key.endswith("}")
    tag = key[key.index("{") + 1 : -1]
    assert tag != keys.tag("s1") and "#" not in tag  # not a session shard's tag


def test_agents_resolve_their_limits_per_endpoint(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "OPENAI_BASE_URL": "http://127.0.0.1:8/v1",
            "REACTQ_LLM_REQUESTS_PER_MINUTE": "120",
            "REACTQ_LLM_TOKENS_PER_MINUTE": "9000",
        }
    )
    pooled = Agent(name="pooled", fallback_models=["spare"])
    own, spare = pooled.endpoints(settings)
    assert own.rate_limit == RateLimit(requests_per_minute=120, tokens_per_minute=9000)
    assert spare.rate_limit == own.rate_limit  # same endpoint, its own bucket (per model)
    elsewhere = Agent(
        name="elsewhere",
        base_url="http://127.0.0.1:9/v1",
        rate_limit=RateLimit(requests_per_minute=30),
        fallback_models=[
            Model("far", base_url="http://127.0.0.1:7/v1"),
            Model("far-limited", base_url="http://127.0.0.1:7/v1", rate_limit=RateLimit(10)),
        ],
    )
    own, far, limited = elsewhere.endpoints(settings)
    assert own.rate_limit == RateLimit(requests_per_minute=30)
    assert far.rate_limit is None  # the pool's limit is the pool endpoint's only
    assert limited.rate_limit == RateLimit(requests_per_minute=10)


def test_a_request_is_estimated_from_its_characters() -> None:
    messages = [{"role": "user", "content": "x" * 400}]
    assert 100 <= estimate_tokens(messages, None) <= 120
    tools = [{"type": "function", "function": {"name": "t", "description": "y" * 400}}]
    assert estimate_tokens(messages, tools) >= 200


def test_provider_headers_are_read() -> None:
    limits = ProviderLimits.from_headers(
        {
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-remaining-tokens": "1500",
            "x-ratelimit-reset-requests": "1m30.5s",
            "x-ratelimit-reset-tokens": "20ms",
        }
    )
    assert limits == ProviderLimits(0, 1500, 90.5, 0.02)
    assert ProviderLimits.from_headers({"content-type": "application/json"}) is None
    assert ProviderLimits.from_headers({"x-ratelimit-remaining-requests": "soon"}) is None


# -- the bucket, one Lua call each, on a real Redis and on the Cluster ------------------


async def test_the_bucket_grants_its_burst_then_spaces_requests(budget: RateBudget) -> None:
    b, limit = bucket(), RateLimit(requests_per_minute=600, burst_seconds=0.5)  # 10/s, 5 at once
    grants = [await budget.take(b, limit) for _ in range(5)]
    assert all(g.granted for g in grants)
    refused = await budget.take(b, limit)
    assert not refused.granted and refused.limit == "requests"
    assert 0.0 < refused.wait <= 0.11
    await asyncio.sleep(refused.wait)
    assert (await budget.take(b, limit)).granted


async def test_many_takers_never_exceed_the_rate(budget: RateBudget) -> None:
    b, limit = bucket(), RateLimit(requests_per_minute=1200, burst_seconds=0.05)  # 20/s, 1 at once
    granted: list[float] = []

    async def taker() -> None:
        while time.monotonic() < stop:
            grant = await budget.take(b, limit)
            if grant.granted:
                granted.append(time.monotonic())
            else:
                await asyncio.sleep(grant.wait)

    # The script loaded first: redis-py's cluster client trips over eight first calls
    # racing to load it (NoScriptError, a connection torn down while it is set up).
    await budget.take(bucket(), limit)
    stop = time.monotonic() + 1.0
    await asyncio.gather(*(taker() for _ in range(8)))
    assert 15 <= len(granted) <= 22, len(granted)  # 1 at once, then 20 a second


async def test_tokens_wait_a_big_request_goes_into_debt_and_usage_corrects(
    budget: RateBudget,
) -> None:
    b, limit = bucket(), RateLimit(tokens_per_minute=60_000)  # 1000 a second, 1000 at once
    assert (await budget.take(b, limit, tokens=800)).granted
    short = await budget.take(b, limit, tokens=800)
    assert not short.granted and short.limit == "tokens"
    assert 0.5 <= short.wait <= 0.7  # 600 tokens missing at 1000 a second
    # The call used 100 tokens, not 800: the difference comes back.
    await budget.settle(b, limit, tokens=-700)
    assert (await budget.take(b, limit, tokens=800)).granted

    big = bucket()
    assert (await budget.take(big, limit, tokens=5000)).granted  # a full bucket lends
    owed = await budget.take(big, limit, tokens=10)
    assert not owed.granted and owed.wait >= 3.9  # the debt is paid off first


async def test_provider_headers_tighten_the_budget(budget: RateBudget) -> None:
    b, limit = bucket(), RateLimit(requests_per_minute=6000, burst_seconds=1)  # 100 at once
    assert (await budget.take(b, limit)).granted
    await budget.settle(b, limit, provider=ProviderLimits(remaining_requests=0, reset_requests=0.6))
    held = await budget.take(b, limit)
    assert not held.granted and held.limit == "provider" and 0.4 <= held.wait <= 0.6
    await asyncio.sleep(held.wait)
    assert (await budget.take(b, limit)).granted
    # Remaining budget below the bucket's level lowers it.
    await budget.settle(b, limit, provider=ProviderLimits(remaining_requests=2, reset_requests=5))
    assert (await budget.take(b, limit)).granted
    assert (await budget.take(b, limit)).granted
    assert not (await budget.take(b, limit)).granted


async def test_the_bucket_key_expires(where: tuple[str, Keys], budget: RateBudget) -> None:
    b = bucket()
    await budget.take(b, RateLimit(requests_per_minute=60))
    ttl = await budget.redis.pttl(where[1].rate_limit(b))
    assert 0 < ttl <= 5 * 60 * 1000


# -- headers reach the response, on every path ------------------------------------------


@pytest.mark.parametrize("path", ["direct", "sdk", "stream"])
async def test_the_clients_surface_the_providers_rate_headers(path: str) -> None:
    headers = {"x-ratelimit-remaining-requests": "7", "x-ratelimit-reset-requests": "2s"}

    def handler(request: dict[str, Any]) -> Reply:
        return Reply.text("hi").but(headers=tuple(headers.items()))

    async with endpoint(handler, sdk=path == "sdk") as (_, llm):
        response = await llm.complete(
            [{"role": "user", "content": "hi"}], model="m", tools=None, stream=path == "stream"
        )
    assert response.content == "hi"
    assert response.limits == ProviderLimits(remaining_requests=7, reset_requests=2.0)


# -- a turn that waits says so, once per wait --------------------------------------------


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = connect(redis_url, 16)
    try:
        yield client
    finally:
        await client.aclose()


async def test_a_turn_that_waits_publishes_one_rate_limited_event(
    redis: Redis, namespace: str, tmp_path: Path
) -> None:
    settings = Settings.from_env({"REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/s.db"})
    agent = Agent(
        name="limited",
        model=f"m-{uuid.uuid4().hex[:8]}",
        rate_limit=RateLimit(requests_per_minute=120, burst_seconds=0.1),  # 2/s, 1 at once
    )
    limiters = RateLimiters(RateBudget(redis, Keys(namespace)))
    async with endpoint(lambda request: Reply.text("fine")) as (_, llm):
        loop = agent.build_loop(
            llm, settings=settings, limiters=limiters.for_agent(agent, settings)
        )
        buses = [ListBus() for _ in range(3)]
        started = time.monotonic()
        results = await asyncio.gather(
            *(
                loop.run([ChatMessage(role="user", content="hi")], emitter_for(bus, f"t{n}"))
                for n, bus in enumerate(buses)
            )
        )
        elapsed = time.monotonic() - started
    assert [r.text for r in results] == ["fine"] * 3
    assert 0.9 <= elapsed <= 2.5  # three calls at two a second, one at once
    waits = sorted(len(bus.of("rate_limited")) for bus in buses)
    assert waits == [0, 1, 1]  # once per wait, not once per poll
    event = next(e for bus in buses for e in bus.of("rate_limited"))
    assert isinstance(event, RateLimitedEvent)
    assert (event.model, event.limit) == (agent.loop.model, "requests") and event.wait > 0


async def test_provider_headers_hold_every_turn_on_the_model(
    redis: Redis, namespace: str, tmp_path: Path
) -> None:
    settings = Settings.from_env({"REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/s.db"})
    agent = Agent(
        name="held", model=f"m-{uuid.uuid4().hex[:8]}", rate_limit=RateLimit(6000, 1_000_000)
    )
    spent = (("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "800ms"))
    replies = [Reply.text("first").but(headers=spent), Reply.text("second")]
    limiters = RateLimiters(RateBudget(redis, Keys(namespace)))
    async with endpoint(lambda request: replies.pop(0)) as (_, llm):
        loop = agent.build_loop(
            llm, settings=settings, limiters=limiters.for_agent(agent, settings)
        )
        first = await loop.run([ChatMessage(role="user", content="a")], emitter_for(ListBus()))
        bus = ListBus()
        started = time.monotonic()
        second = await loop.run([ChatMessage(role="user", content="b")], emitter_for(bus))
        waited = time.monotonic() - started
    assert (first.text, second.text) == ("first", "second")
    (event,) = bus.of("rate_limited")
    assert event.limit == "provider" and 0.5 <= waited <= 2.0


# -- the pool: three workers against a server that allows N requests a second -----------


N = 10
"""Requests a second the scripted server answers before it answers 429."""


@pytest.mark.e2e
async def test_three_workers_share_one_budget_and_never_meet_a_429(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    server = ScriptedServer(lookup_then_answer, requests_per_second=N).start_in_thread()
    ns = f"{namespace}-ratelimit"
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": ns,
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        # No retries: a 429 would reach its turn.
        "REACTQ_LLM_MAX_RETRIES": "0",
    }
    pool = WorkerPool(env, tmp_path, agents="tests.ratelimit_agents:agent", concurrency=16)
    turns = 36  # two model calls each
    try:
        pool.start(3)
        pool.wait_ready(redis_url, ns, 3)
        async with Producer(Settings.from_env(env)) as producer:
            handles = [
                await producer.submit(f"rl-{n}-{uuid.uuid4().hex[:6]}", f"q{n}", agent="limited")
                for n in range(turns)
            ]

            async def events_of(handle: Any) -> list[Event]:
                return [e async for e in handle.events()]

            every = await asyncio.wait_for(
                asyncio.gather(*(events_of(h) for h in handles)), timeout=120
            )
    finally:
        pool.stop()
        server.stop()
    finals = [events[-1] for events in every]
    assert all(isinstance(f, FinalEvent) and f.status == "completed" for f in finals), [
        (f.status, getattr(f, "code", None)) for f in finals
    ]
    errors = [e for events in every for e in events if isinstance(e, ErrorEvent)]
    assert not errors
    assert server.rate_limited == 0, f"{server.rate_limited} answers were 429"
    assert any(isinstance(e, RateLimitedEvent) for events in every for e in events)
    times = server.request_times
    assert len(times) == 2 * turns
    rate = (len(times) - 1) / (times[-1] - times[0])
    assert 0.6 * N <= rate <= N, rate  # near N, never over it
