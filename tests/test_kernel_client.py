"""The hardened LLM client and request options, against provider faults on a real socket."""

from __future__ import annotations

import time
from typing import Any

import pytest
from openai import AsyncOpenAI

from reactq.shared.errors import LLMConnectionError
from reactq.shared.turns import TurnStatus
from reactq.worker.agent import (
    AgentLoop,
    LoopConfig,
    OpenAICompatibleClient,
    Registry,
    ScriptedLLM,
    tool,
)
from reactq.worker.agent.llm.base import RequestOptions, uses_max_completion_tokens
from reactq.worker.agent.llm.retry import RetryPolicy, parse_retry_after
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user


@tool
async def echo(text: str) -> str:
    """Echo."""
    return text


async def run_once(handler: Any, **client: Any) -> tuple[Any, ListBus, Any]:
    async with endpoint(handler, **client) as (server, llm):
        bus = ListBus()
        loop = AgentLoop(
            llm, Registry([echo]), LoopConfig(model="m", error_fallback_message="sorry")
        )
        result = await loop.run([user("x")], emitter_for(bus))
    return result, bus, server


async def test_direct_calls_send_what_the_sdk_sends() -> None:
    """DirectPost (llm/direct.py) sends the SDK's own request: its URL, key, platform
    and custom headers, and the same body; only the per-attempt headers differ."""
    seen = []
    for sdk in (False, True):
        async with endpoint(scripted(Reply.text("ok")), sdk=sdk, headers={"X-Tenant": "acme"}) as (
            server,
            llm,
        ):
            reply = await llm.complete([{"role": "user", "content": "hé"}], model="m", tools=None)
            assert reply.content == "ok"
            seen.append((server.request_headers[0], server.requests[0]))
    (direct, direct_body), (sdk_headers, sdk_body) = seen
    # Per attempt, or the server's own port (each path had a server of its own).
    per_attempt = {"x-stainless-retry-count", "x-stainless-read-timeout", "host"}
    assert direct_body == sdk_body
    assert direct["authorization"] == "Bearer sk-test" and direct["x-tenant"] == "acme"
    sdk_sent = {k: v for k, v in sdk_headers.items() if k not in per_attempt}
    assert {k: v for k, v in direct.items() if k in sdk_sent} == sdk_sent


async def test_a_refused_connection_fails_fast_on_both_paths() -> None:
    async with ScriptedServer(scripted(Reply.text("ok"))) as server:
        gone = server.base_url  # nothing listens there once the block ends
    for own in (None, AsyncOpenAI(base_url=gone, api_key="k", max_retries=0)):
        llm = OpenAICompatibleClient(base_url=gone, api_key="k", client=own, max_retries=0)
        try:
            with pytest.raises(LLMConnectionError, match="failed"):
                await llm.complete([{"role": "user", "content": "x"}], model="m", tools=None)
        finally:
            await llm.aclose()
            if own is not None:
                await own.close()


async def test_429_waits_for_retry_after_then_succeeds() -> None:
    handler = scripted(
        Reply.error(429, "slow", headers={"retry-after-ms": "150"}), Reply.text("ok")
    )
    started = time.monotonic()
    result, _, server = await run_once(handler, max_retries=2)
    assert result.text == "ok" and len(server.requests) == 2
    assert time.monotonic() - started >= 0.15


async def test_5xx_and_dropped_connections_retry_with_backoff_bounded_in_count() -> None:
    handler = scripted(Reply.error(500, "a"), Reply.error(503, "b"), Reply.text("ok"))
    result, _, server = await run_once(handler, max_retries=2)
    assert result.text == "ok" and len(server.requests) == 3

    always = scripted(*[Reply.error(502, "down")] * 5)
    result, bus, server = await run_once(always, max_retries=2)
    assert len(server.requests) == 3 and bus.of("error")[0].code == "llm_server_error"


async def test_other_4xx_fail_fast_and_retry_after_beyond_the_time_bound_gives_up() -> None:
    _, bus, server = await run_once(scripted(Reply.error(401, "no key")), max_retries=3)
    assert len(server.requests) == 1 and bus.of("error")[0].code == "llm_auth"

    slow = scripted(Reply.error(429, "later", headers={"Retry-After": "30"}))
    started = time.monotonic()
    _result, bus, server = await run_once(slow, max_retries=3, retry_max_total=1.0)
    assert time.monotonic() - started < 5 and len(server.requests) == 1
    assert bus.of("error")[0].code == "llm_rate_limited"


def test_retry_policy_arithmetic() -> None:
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0, jitter=0.5)
    assert all(0.5 <= policy.delay(1, None) <= 1.0 for _ in range(50))
    assert all(2.0 <= policy.delay(5, None) <= 4.0 for _ in range(50))
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)


FAULTS = {
    "not_json": (Reply.raw(200, b"certainly not json"), "llm_undecodable"),
    "envelope_200": (Reply.raw(200, b'{"error": {"message": "oops"}}'), "llm_error_envelope"),
    "no_choices": (
        Reply.raw(200, b'{"id": "x", "object": "chat.completion", "choices": []}'),
        "llm_no_choices",
    ),
    "context_code": (
        Reply.error(400, {"error": {"message": "too long", "code": "context_length_exceeded"}}),
        "context_length_exceeded",
    ),
    "context_text": (
        Reply.error(400, "This model's maximum context length is 8192 tokens"),
        "context_length_exceeded",
    ),
}


@pytest.mark.parametrize("sdk", [False, True], ids=["direct", "sdk"])
@pytest.mark.parametrize("case", list(FAULTS))
async def test_each_fault_is_classified_and_the_run_ends_with_an_error_event(
    case: str, sdk: bool
) -> None:
    # The same codes whether the call went out on DirectPost or through the SDK's post.
    reply, code = FAULTS[case]
    result, bus, _ = await run_once(scripted(reply), sdk=sdk)
    assert (result.status, result.text) == (TurnStatus.ERROR, "sorry")
    assert bus.types() == ["error"] and bus.of("error")[0].code == code
    assert result.error is not None and result.error.code == code


async def test_a_stream_cut_mid_way_is_classified_and_not_rerun() -> None:
    handler = scripted(Reply.text("a long answer", pieces=6).but(cut_after=3), Reply.text("again"))
    async with endpoint(handler, max_retries=2) as (server, llm):
        bus = ListBus()
        result = await AgentLoop(
            llm, config=LoopConfig(model="m", stream=True, delta_interval=0)
        ).run([user("x")], emitter_for(bus))
    assert result.status is TurnStatus.ERROR and bus.of("error")[0].code == "llm_stream_cut"
    assert bus.of("delta") and len(server.requests) == 1  # text was shown: never re-run


async def test_request_options_follow_the_model_rules() -> None:
    handler = scripted(*[Reply.text("ok")] * 4)
    async with endpoint(handler) as (server, llm):
        for model, options in (
            ("gpt-4o", {}),
            ("gpt-5.1", {"max_tokens": 50, "reasoning_effort": "low"}),
            ("openai/o3-mini", {"max_tokens": 7, "temperature": 0.5}),
            ("m", {"temperature": None, "max_tokens": 9}),
        ):
            await AgentLoop(llm, config=LoopConfig(model=model, **options)).run(
                [user("x")], emitter_for(ListBus())
            )
    first, gpt5, o3, plain = server.requests
    assert first["temperature"] == 0.0 and "max_tokens" not in first
    assert gpt5["max_completion_tokens"] == 50 and gpt5["reasoning_effort"] == "low"
    assert "max_tokens" not in gpt5 and gpt5["temperature"] == 0.0
    assert o3["max_completion_tokens"] == 7 and o3["temperature"] == 0.5
    assert "temperature" not in plain and plain["max_tokens"] == 9
    assert uses_max_completion_tokens("ft:o4-mini:acme") and not uses_max_completion_tokens("o10x")
    with pytest.raises(ValueError, match="temperature"):
        RequestOptions(temperature=3)
    with pytest.raises(ValueError, match="reasoning_effort"):
        AgentLoop(ScriptedLLM([]), config=LoopConfig(model="m", reasoning_effort="High!"))


async def test_a_cut_off_generation_is_marked_in_the_text_and_the_usage_event() -> None:
    cut = Reply(content="The answer is", finish_reason="length")
    result, bus, _ = await run_once(scripted(cut))
    assert result.text.startswith("The answer is") and "cut off" in result.text
    usage = bus.of("usage")[0]
    assert usage.truncated and usage.finish_reason == "length"


async def test_cut_off_arguments_ask_for_a_reissue_and_deep_arguments_are_refused() -> None:
    cut = Reply(calls=(("echo", '{"text": "abc'),), finish_reason="length")
    deep = "[" * 65 + "]" * 65
    handler = scripted(cut, Reply.tool_calls([("echo", '{"text": ' + deep + "}")]), Reply.text("k"))
    result, bus, _server = await run_once(handler)
    first, second = bus.of("tool_failed")
    assert first.code == "truncated_arguments" and "re-issue the call" in first.error
    assert second.code == "invalid_arguments" and "deeper than 64" in second.error
    assert result.text == "k"
