"""OpenAICompatibleClient (the real openai SDK) against the ScriptedServer, and its fakes."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk

from reactq.shared.errors import (
    ContextLengthExceededError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMServerError,
)
from reactq.shared.messages import ToolCall
from reactq.worker.agent.llm import LLMClient, LLMResponse, OpenAICompatibleClient, ScriptedLLM
from reactq.worker.agent.llm.parse import StreamAssembler
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer, demo_model

HI = [{"role": "user", "content": "hi"}]
KEY = "sk-test-secret-123"


def fixed(reply: Reply) -> Any:
    return lambda request: reply


def client_for(server: ScriptedServer, **options: Any) -> OpenAICompatibleClient:
    options = {"api_key": KEY, "max_retries": 0, "timeout": 10, **options}
    return OpenAICompatibleClient(base_url=server.base_url, **options)


ERRORS = {
    "500": (Reply.error(500, "boom"), LLMServerError),
    "503": (Reply.error(503, "overloaded"), LLMServerError),
    "429": (Reply.error(429, "slow down"), LLMRateLimitError),
    "400": (Reply.error(400, "bad"), LLMBadRequestError),
    "404": (Reply.error(404, "no such model"), LLMBadRequestError),
    "ctx_code": (
        Reply.error(400, {"error": {"message": "too long", "code": "context_length_exceeded"}}),
        ContextLengthExceededError,
    ),
    "ctx_text": (
        Reply.error(400, "This model's maximum context length is 8192 tokens"),
        ContextLengthExceededError,
    ),
    "garbage_200": (Reply.raw(200, b"certainly not json"), LLMResponseError),
    "html_200": (Reply.raw(200, b"<html>proxy</html>", "text/html"), LLMResponseError),
    "no_choices": (Reply.raw(200, b'{"id": "x", "choices": []}'), LLMResponseError),
    "envelope_200": (Reply.raw(200, b'{"error": {"message": "oops"}}'), LLMResponseError),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("case", list(ERRORS))
async def test_errors_map_onto_shared_errors(case: str, stream: bool) -> None:
    reply, expected = ERRORS[case]
    async with ScriptedServer(fixed(reply)) as server:
        async with client_for(server) as llm:
            with pytest.raises(expected) as info:
                await llm.complete(HI, model="m", tools=None, stream=stream)
    assert isinstance(info.value, LLMError)
    assert info.value.__cause__ is None  # no SDK exception (with request headers) chained


async def test_connection_refused_and_timeout_are_connection_errors() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with OpenAICompatibleClient(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0
    ) as llm:
        with pytest.raises(LLMConnectionError, match="failed"):
            await llm.complete(HI, model="m", tools=None)

    async with ScriptedServer(fixed(Reply.text("late")), latency=5) as server:
        async with client_for(server, timeout=0.2) as llm:
            with pytest.raises(LLMConnectionError, match="timed out"):
                await llm.complete(HI, model="m", tools=None)


async def test_the_api_key_never_appears_in_errors_or_repr() -> None:
    async with ScriptedServer(fixed(Reply.error(401, f"key {KEY} revoked"))) as server:
        async with client_for(server) as llm:
            assert KEY not in repr(llm)
            with pytest.raises(LLMBadRequestError) as info:
                await llm.complete(HI, model="m", tools=None)
    assert KEY not in str(info.value) and "***" in str(info.value)
    assert KEY not in json.dumps(info.value.to_dict())


async def test_retries_then_succeeds_and_usage_is_reported() -> None:
    replies = [Reply.error(503, "busy", headers={"retry-after-ms": "1"}), Reply.text("ok")]
    async with ScriptedServer(lambda request: replies.pop(0)) as server:
        async with client_for(server, max_retries=2) as llm:
            response = await llm.complete(HI, model="m", tools=None)
    assert response.content == "ok" and response.finish_reason == "stop"
    assert len(server.requests) == 2
    assert set(response.usage) == {"prompt_tokens", "completion_tokens", "total_tokens"}


async def test_no_env_fallback_and_a_placeholder_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # The endpoint comes from the caller (Agent.build_llm: from Settings), never from
    # the environment, not even through the SDK's own OPENAI_BASE_URL fallback.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    async with OpenAICompatibleClient(max_retries=0) as llm:
        assert llm.base_url == "https://api.openai.com/v1/"
    async with ScriptedServer(fixed(Reply.text("local"))) as server:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        async with OpenAICompatibleClient(base_url=server.base_url, max_retries=0) as llm:
            response = await llm.complete(HI, model="m", tools=None)
        assert response.content == "local"
        assert server.requests[0]["model"] == "m"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_tool_calls_round_trip(stream: bool) -> None:
    reply = Reply.tool_calls(
        [("a", {"x": 1}), ("b", "{not json")], content="thinking", call_ids=["c1", "c2"]
    )
    tools = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}]
    async with ScriptedServer(fixed(reply)) as server:
        async with client_for(server) as llm:
            response = await llm.complete(HI, model="m", tools=tools, stream=stream)
    assert response.content == "thinking" and response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        ToolCall(id="c1", name="a", arguments='{"x": 1}'),
        ToolCall(id="c2", name="b", arguments="{not json"),
    ]
    assert server.requests[0]["tools"] == tools


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_the_body_is_what_the_sdk_would_send_with_its_transform(stream: bool) -> None:
    from openai._utils._transform import async_maybe_transform
    from openai.types.chat import completion_create_params

    history = [
        {"role": "system", "content": "be brief"},
        *HI,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "content": "é \u2603", "tool_call_id": "c1", "name": "a"},
    ]
    tools = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}]
    async with ScriptedServer(fixed(Reply.text("ok"))) as server:
        async with client_for(server) as llm:
            await llm.complete(history, model="m", tools=tools, stream=stream)
    sent = server.requests[0]
    expected = await async_maybe_transform(
        {"messages": history, "tools": tools}, completion_create_params.CompletionCreateParamsBase
    )
    assert (sent["messages"], sent["tools"]) == (expected["messages"], expected["tools"])
    assert sent["messages"] == history and sent.get("stream", False) is stream


def _chunk(delta: dict[str, Any], finish: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(
        {
            "id": "x",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


async def test_stream_assembly_whatever_the_chunking() -> None:
    assembler = StreamAssembler()
    fragments: list[dict[str, Any]] = [
        {"content": "Hel"},
        {"content": "lo"},
        {"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "se", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "first"}}]},
        {"tool_calls": [{"index": 1, "function": {"name": "cond", "arguments": '{"k'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": '": 1}'}}]},
    ]
    for delta in fragments:
        await assembler.add(_chunk(delta))
    await assembler.add(_chunk({}, "tool_calls"))
    response = assembler.result()
    assert response.content == "Hello" and response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        ToolCall(id="c1", name="first", arguments="{}"),
        ToolCall(id="c2", name="second", arguments='{"k": 1}'),
    ]
    with pytest.raises(LLMResponseError, match="no stream events"):
        StreamAssembler().result()


async def test_scripted_llm_replays_a_script_or_a_function() -> None:
    llm = ScriptedLLM(["one", LLMResponse(content="two"), LLMRateLimitError("slow")])
    assert isinstance(llm, LLMClient)
    assert (await llm.complete(HI, model="m", tools=None)).content == "one"
    assert (await llm.complete(HI, model="m", tools=None)).content == "two"
    with pytest.raises(LLMRateLimitError):
        await llm.complete(HI, model="m", tools=None)
    with pytest.raises(LLMResponseError, match="no response left"):
        await llm.complete(HI, model="m", tools=None)
    assert len(llm.calls) == 4 and llm.remaining == 0

    async def echo(messages: list[dict[str, Any]], tools: Any) -> LLMResponse:
        return LLMResponse(content=f"{len(messages)} messages, tools={tools is not None}")

    assert (await ScriptedLLM(echo).complete(HI, model="m", tools=[])).content == (
        "1 messages, tools=True"
    )


async def test_server_serves_hundreds_of_concurrent_requests() -> None:
    async def handler(request: dict[str, Any]) -> Reply:
        return Reply.text(request["messages"][0]["content"])

    async with ScriptedServer(handler, latency=0.3, max_requests=50) as server:
        async with client_for(server) as llm:
            started = time.monotonic()
            results = await asyncio.gather(
                *(
                    llm.complete(
                        [{"role": "user", "content": str(i)}],
                        model="m",
                        tools=None,
                        stream=i % 2 == 1,
                    )
                    for i in range(300)
                )
            )
            elapsed = time.monotonic() - started
    assert [r.content for r in results] == [str(i) for i in range(300)]
    assert elapsed < 5, f"latency is not concurrent: {elapsed:.1f}s for 300 requests"
    assert server.request_count == 300 and len(server.requests) == 50  # bounded


async def test_thread_hosted_server() -> None:
    server = ScriptedServer(demo_model).start_in_thread()
    try:
        async with client_for(server) as llm:
            response = await llm.complete(HI, model="m", tools=None)
        assert response.content == "[offline demo model] You said: hi"
        assert server.requests[-1]["messages"] == HI
    finally:
        server.stop()
    with pytest.raises(OSError):  # it really stopped listening
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


async def test_server_routes_and_keep_alive() -> None:
    async with ScriptedServer() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            for path, status in (("/v1/models", 200), ("/v1/nothing", 404)):
                writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(f"HTTP/1.1 {status}".encode())
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                body = json.loads(await reader.readexactly(length))
                assert ("data" in body) if status == 200 else ("error" in body)
            body_bytes = b"{broken"
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 7\r\n\r\n" + body_bytes
            )
            await writer.drain()
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 400")
        finally:
            writer.close()
            await writer.wait_closed()


def test_demo_model_is_stateless_and_deterministic() -> None:
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    ask = {"messages": [{"role": "user", "content": "What's the weather in Paris?"}]}
    call = demo_model({**ask, "tools": [weather]})
    assert call.calls == (("get_weather", '{"city": "Paris"}'),)
    assert demo_model(ask).content == "[offline demo model] You said: What's the weather in Paris?"
    result = {
        "role": "tool",
        "tool_call_id": "c",
        "content": json.dumps({"city": "Paris", "temperature_c": 21, "conditions": "sunny"}),
    }
    answer = demo_model({"messages": [*ask["messages"], {"role": "assistant"}, result]})
    assert answer.content == "[offline demo model] It is 21°C and sunny in Paris."
    assert demo_model({"messages": [{"role": "user", "content": "hello"}]}).content == (
        "[offline demo model] You said: hello"
    )


def test_command_line_server_answers_with_the_demo_model() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "reactq.worker.agent.llm",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once listening
        assert f"http://127.0.0.1:{port}/v1" in line, line + (
            proc.stderr.read() if proc.stderr else ""
        )

        async def ask() -> LLMResponse:
            async with OpenAICompatibleClient(
                base_url=f"http://127.0.0.1:{port}/v1", max_retries=0
            ) as llm:
                return await llm.complete(HI, model="m", tools=None, stream=True)

        assert asyncio.run(ask()).content == "[offline demo model] You said: hi"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
