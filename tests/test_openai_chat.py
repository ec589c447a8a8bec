"""Issue 33: ``POST /v1/chat/completions`` driven by the official ``openai`` SDK against
a real pool (`reactq serve`, real workers, the scripted model): stateless runs on the
request's messages, a session kept server side by ``X-Reactq-Session``, streaming with
``[DONE]`` and usage, the agent's tool calls kept server side, and errors as OpenAI's."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from reactq.worker.agent.llm.replies import Reply
from tests.gateway_support import Gateway, close_openai_clients, openai_client, start_gateway
from tests.helpers import last_user_text, running_pool

pytestmark = pytest.mark.e2e

KEY = "openai-chat-key"
LIMITED = "openai-chat-limited"
KEYS = f"{KEY},acme:{LIMITED};prefix=acme-;agents=durable"


def chat_model(request: Mapping[str, Any]) -> Reply:
    """``fail``: the model refuses; ``tool``: call ``lookup``, then answer with its
    result; else answer with every user and assistant message the model was sent."""
    text = last_user_text(request)
    last = request["messages"][-1]
    if "fail" in text:
        return Reply.error(400, "the scripted model refuses")
    if text.startswith("tool") and last["role"] == "user":
        return Reply.tool_calls([("lookup", {"key": text})])
    if last["role"] == "tool":
        return Reply.text(f"tool said: {last['content']}")
    seen = [
        f"{m['role']}:{m['content']}"
        for m in request["messages"]
        if m["role"] in ("user", "assistant") and isinstance(m["content"], str)
    ]
    return Reply.text(
        " | ".join(seen), usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    )


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("openai-chat")
    with running_pool(
        redis_url, f"{namespace}-oaic", tmp, chat_model, agents="tests.pool_agents:agents"
    ) as env:
        gw = start_gateway({**env, "REACTQ_API_KEYS": KEYS}, Path(tmp), KEY)
        try:
            yield gw
        finally:
            close_openai_clients()
            gw.stop()


def client(gateway: Gateway, key: str = KEY) -> openai.OpenAI:
    client: openai.OpenAI = openai_client(gateway, key, timeout=60)
    return client


def test_a_stateless_run_answers_on_the_given_history(gateway: Gateway) -> None:
    done = client(gateway).chat.completions.create(
        model="reactq/e2e",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi there"},
            {"role": "user", "content": "and now?"},
        ],
    )
    assert done.object == "chat.completion" and done.model == "reactq/e2e"
    choice = done.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    # The model saw the prior messages, in order.
    assert choice.message.content == "user:hello | assistant:hi there | user:and now?"
    assert done.usage is not None and done.usage.total_tokens == 10
    # Nothing was kept: a second run on only its own message sees only that.
    again = client(gateway).chat.completions.create(
        model="e2e", messages=[{"role": "user", "content": "alone"}]
    )
    assert again.choices[0].message.content == "user:alone"


def test_the_agents_tool_calls_stay_server_side(gateway: Gateway) -> None:
    done = client(gateway).chat.completions.create(
        model="reactq/e2e", messages=[{"role": "user", "content": "tool please"}]
    )
    message = done.choices[0].message
    assert message.tool_calls is None
    assert message.content is not None and "tool please" in message.content


def test_streamed_chunks_end_with_usage_and_done(gateway: Gateway) -> None:
    stream = client(gateway).chat.completions.create(
        model="reactq/e2e",
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "stream it"},
        ],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "user:first | assistant:ok | user:stream it"
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 10
    # The first chunk opens the assistant's message.
    assert chunks[0].choices[0].delta.role == "assistant"


def test_the_raw_stream_ends_with_done(gateway: Gateway) -> None:
    with httpx2.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={
            "model": "reactq/e2e",
            "messages": [{"role": "user", "content": "x"}],
            "stream": True,
        },
        timeout=60,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"


def test_async_client_streams_too(gateway: Gateway) -> None:
    async def run() -> str:
        async with openai.AsyncOpenAI(
            base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0
        ) as aclient:
            done = await aclient.chat.completions.create(
                model="reactq/e2e", messages=[{"role": "user", "content": "async"}]
            )
            assert done.choices[0].message.content == "user:async"
            stream = await aclient.chat.completions.create(
                model="reactq/e2e", messages=[{"role": "user", "content": "async s"}], stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    assert asyncio.run(run()) == "user:async s"


def test_a_session_header_keeps_the_history_server_side(gateway: Gateway) -> None:
    session = f"chat-{uuid.uuid4().hex[:8]}"
    headers = {"X-Reactq-Session": session}
    first = client(gateway).chat.completions.with_raw_response.create(
        model="reactq/e2e", messages=[{"role": "user", "content": "one"}], extra_headers=headers
    )
    assert first.headers["x-reactq-session"] == session
    assert first.parse().choices[0].message.content == "user:one"
    # Only the last user message is the turn: the earlier ones here are ignored.
    second = client(gateway).chat.completions.create(
        model="reactq/e2e",
        messages=[{"role": "user", "content": "ignored"}, {"role": "user", "content": "two"}],
        extra_headers=headers,
    )
    assert second.choices[0].message.content == "user:one | assistant:user:one | user:two"


def test_bad_input_gets_openai_errors(gateway: Gateway) -> None:
    c = client(gateway)
    with pytest.raises(openai.NotFoundError) as missing:
        c.chat.completions.create(
            model="reactq/nobody", messages=[{"role": "user", "content": "x"}]
        )
    assert missing.value.code == "model_not_found"
    bad: list[dict[str, Any]] = [
        {"model": "reactq/e2e", "messages": []},
        {"model": "reactq/e2e", "messages": [{"role": "wizard", "content": "x"}]},
        {"model": "reactq/e2e", "messages": [{"role": "user", "content": "x"}], "n": 2},
        {"model": "reactq/e2e", "messages": [{"role": "assistant", "content": "x"}]},
        {
            "model": "reactq/e2e",
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        },
    ]
    for kwargs in bad:
        with pytest.raises(openai.BadRequestError) as refused:
            c.chat.completions.create(**kwargs)
        body = refused.value.body
        assert isinstance(body, dict) and body["type"] == "invalid_request_error", kwargs
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(
            model="reactq/e2e",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"X-Reactq-Session": "../bad id"},
        )


def test_a_failed_turn_is_an_sdk_error(gateway: Gateway) -> None:
    with pytest.raises(openai.InternalServerError) as failed:
        client(gateway).chat.completions.create(
            model="reactq/e2e", messages=[{"role": "user", "content": "please fail"}]
        )
    assert failed.value.code is not None
    stream = client(gateway).chat.completions.create(
        model="reactq/e2e", messages=[{"role": "user", "content": "fail streamed"}], stream=True
    )
    with pytest.raises(openai.APIError):
        list(stream)


def test_a_limited_key_keeps_to_its_tenant(gateway: Gateway) -> None:
    limited = client(gateway, LIMITED)
    with pytest.raises(openai.NotFoundError) as hidden:
        limited.chat.completions.create(
            model="reactq/e2e", messages=[{"role": "user", "content": "x"}]
        )
    assert hidden.value.code == "model_not_found"
    # Its own agent works statelessly; another tenant's session is not there.
    done = limited.chat.completions.create(
        model="reactq/durable", messages=[{"role": "user", "content": "mine"}]
    )
    assert done.choices[0].message.content == "user:mine"
    with pytest.raises(openai.NotFoundError) as other:
        limited.chat.completions.create(
            model="reactq/durable",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"X-Reactq-Session": "globex-1"},
        )
    assert other.value.code == "session_not_found"
