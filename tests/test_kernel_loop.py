"""AgentLoop through the real openai SDK against a ScriptedServer on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from reactq.shared.errors import LLMServerError
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.turns import TurnStatus
from reactq.worker.agent import (
    AgentLoop,
    LLMResponse,
    LoopConfig,
    Registry,
    ScriptedLLM,
    ToolContext,
    tool,
)
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.loop import format_tool_result
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user

seen_contexts: list[ToolContext] = []


@tool
async def add(a: int, b: int, ctx: ToolContext) -> int:
    """Add two integers."""
    seen_contexts.append(ctx)
    return a + b


@tool
def boom(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"exploded: {reason}")


@tool(timeout=0.1)
async def sleepy() -> str:
    """Never finishes in time."""
    await asyncio.Event().wait()
    return "unreachable"


TOOLS = Registry([add, boom, sleepy])

stream_modes = pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])


@stream_modes
async def test_tool_call_then_final_answer(stream: bool) -> None:
    seen_contexts.clear()
    handler = scripted(
        Reply.tool_calls([("add", {"a": 2, "b": 3})], content="Let me add.", call_ids=["c1"]),
        Reply.text("The sum is 5."),
    )
    async with endpoint(handler) as (server, llm):
        loop = AgentLoop(
            llm, TOOLS, LoopConfig(model="m", system_prompt="Be exact.", stream=stream)
        )
        bus = ListBus()
        result = await loop.run([user("2+3?")], emitter_for(bus))

    assert result.status is TurnStatus.COMPLETED and result.error is None
    assert result.text == "The sum is 5."
    expected = ["usage", "thought", "action", "observation", "usage"]
    if stream:  # the text, as coalesced deltas, before each call's usage
        expected = ["delta", "usage", "thought", "action", "observation", "delta", "usage"]
        assert [e.text for e in bus.of("delta")] == ["Let me add.", "The sum is 5."]
    assert bus.types() == expected
    action, observation = bus.of("action")[0], bus.of("observation")[0]
    assert (action.tool, action.args, action.call_id) == ("add", {"a": 2, "b": 3}, "c1")
    assert (observation.tool, observation.call_id, observation.output) == ("add", "c1", "5")
    assert [e.seq for e in bus.events] == list(range(1, len(expected) + 1))
    assert seen_contexts == [ToolContext(session_id="s1", turn_id="t1", attempt=1)]

    assert [(m.role, m.content) for m in result.messages] == [
        ("assistant", "Let me add."),
        ("tool", "5"),
        ("assistant", "The sum is 5."),
    ]
    assert result.messages[0].tool_calls == [
        ToolCall(id="c1", name="add", arguments='{"a": 2, "b": 3}')
    ]
    assert (result.messages[1].tool_call_id, result.messages[1].name) == ("c1", "add")
    assert all(m.turn_id == "t1" for m in result.messages)
    usage = [e for e in bus.of("usage")]
    assert result.usage["total_tokens"] == sum(e.total_tokens for e in usage) > 0

    first, second = server.requests
    assert first["messages"] == [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "2+3?"},
    ]
    assert [t["function"]["name"] for t in first["tools"]] == ["add", "boom", "sleepy"]
    assert "ctx" not in first["tools"][0]["function"]["parameters"]["properties"]
    assert bool(first.get("stream")) is stream
    assert second["messages"][-1] == {
        "role": "tool", "content": "5", "name": "add", "tool_call_id": "c1"
    }  # fmt: skip
    assert second["messages"][-2]["tool_calls"][0]["id"] == "c1"


FAILURES = {
    "tool_raises": (("boom", {"reason": "x"}), "tool_error", "RuntimeError: exploded: x"),
    "unknown_tool": (("nope", {}), "unknown_tool", "there is no tool named 'nope'"),
    "invalid_json": (("add", '{"a": 1,'), "invalid_arguments", "not valid JSON"),
    "not_an_object": (("add", "[1, 2]"), "invalid_arguments", "must be a JSON object"),
    "failing_validation": (
        ("add", {"a": "one", "b": 2}),
        "invalid_arguments",
        "a: Input should be a valid integer",
    ),
    "timeout": (("sleepy", {}), "tool_timeout", "timed out after 0.1 s"),
}


@pytest.mark.parametrize("case", list(FAILURES))
@stream_modes
async def test_tool_failures_go_back_to_the_model(case: str, stream: bool) -> None:
    call, code, fragment = FAILURES[case]
    handler = scripted(Reply.tool_calls([call], call_ids=["bad1"]), Reply.text("recovered"))
    async with endpoint(handler) as (server, llm):
        loop = AgentLoop(llm, TOOLS, LoopConfig(model="m", stream=stream))
        bus = ListBus()
        result = await loop.run([user("go")], emitter_for(bus))

    assert (result.status, result.text) == (TurnStatus.COMPLETED, "recovered")
    assert [t for t in bus.types() if t != "delta"] == ["usage", "action", "tool_failed", "usage"]
    failed = bus.of("tool_failed")[0]
    assert (failed.tool, failed.call_id, failed.code) == (call[0], "bad1", code)
    assert fragment in failed.error
    sent = server.requests[1]["messages"][-1]
    assert sent["role"] == "tool" and sent["tool_call_id"] == "bad1"
    assert sent["content"] == f"[{code}] {failed.error}"
    if case == "invalid_json":
        assert bus.of("action")[0].args == '{"a": 1,'  # the raw text when not JSON


async def test_iteration_cap_ends_with_the_fallback_message() -> None:
    def always_calls(request: dict[str, Any]) -> Reply:
        return Reply.tool_calls([("add", {"a": 1, "b": 1})])

    async with endpoint(always_calls) as (server, llm):
        loop = AgentLoop(
            llm, TOOLS, LoopConfig(model="m", max_iterations=3, fallback_message="gave up")
        )
        result = await loop.run([user("loop")], emitter_for(ListBus()))

    assert (result.status, result.text, result.error) == (
        TurnStatus.MAX_ITERATIONS,
        "gave up",
        None,
    )
    assert len(server.requests) == 3
    assert [m.role for m in result.messages] == ["assistant", "tool"] * 3 + ["assistant"]
    assert result.messages[-1].content == "gave up"


@stream_modes
async def test_llm_error_after_retries_gives_error_event_and_fallback(stream: bool) -> None:
    def failing(request: dict[str, Any]) -> Reply:
        # retry-after-ms keeps the SDK's backoff short.
        return Reply.error(500, "upstream exploded", headers={"retry-after-ms": "1"})

    async with endpoint(failing, max_retries=1) as (server, llm):
        loop = AgentLoop(
            llm, TOOLS, LoopConfig(model="m", error_fallback_message="sorry", stream=stream)
        )
        bus = ListBus()
        result = await loop.run([user("hi")], emitter_for(bus))

    assert len(server.requests) == 2  # one try + one retry
    assert (result.status, result.text) == (TurnStatus.ERROR, "sorry")
    assert isinstance(result.error, LLMServerError)
    assert bus.types() == ["error"]
    error = bus.of("error")[0]
    assert error.code == "llm_server_error" and "upstream exploded" in error.message
    assert error.context["status"] == 500 and error.context["iteration"] == 1
    assert [(m.role, m.content) for m in result.messages] == [("assistant", "sorry")]
    assert "final" not in bus.types()  # the runner emits final, after the commit


async def test_streamed_tool_call_fragments_are_assembled() -> None:
    args_one = {"city": "São Paulo", "note": 'quotes " and {braces}', "n": [1, 2, 3]}
    args_two = '{"a": 40, "b": 2}'
    handler = scripted(
        Reply.tool_calls([("echo", args_one), ("add", args_two)], content="Two calls.", pieces=9),
        Reply.text("done, très bien", pieces=5),
    )
    got: list[dict[str, Any]] = []

    @tool
    def echo(city: str, note: str, n: list[int]) -> dict[str, Any]:
        got.append({"city": city, "note": note, "n": n})
        return {"city": city}

    async with endpoint(handler) as (server, llm):
        loop = AgentLoop(llm, Registry([echo, add]), LoopConfig(model="m", stream=True))
        bus = ListBus()
        result = await loop.run([user("go")], emitter_for(bus))

    assert result.text == "done, très bien"
    assert got == [args_one]
    calls = result.messages[0].tool_calls or []
    assert [c.name for c in calls] == ["echo", "add"]
    assert json.loads(calls[0].arguments) == args_one and calls[1].arguments == args_two
    assert [o.output for o in bus.of("observation")] == ['{"city": "São Paulo"}', "42"]
    assert server.requests[0]["stream_options"] == {"include_usage": True}


async def test_empty_registry_sends_no_tools_key() -> None:
    async with endpoint(scripted(Reply.text("plain"))) as (server, llm):
        result = await AgentLoop(llm, config=LoopConfig(model="m")).run(
            [user("hi")], emitter_for(ListBus())
        )
    assert result.text == "plain"
    assert "tools" not in server.requests[0]
    assert server.requests[0]["messages"] == [{"role": "user", "content": "hi"}]


async def test_final_text_is_returned_word_for_word() -> None:
    text = '  Line one.\n\n```json\n{"x": 1}\n```\n  '
    llm = ScriptedLLM([text])
    result = await AgentLoop(llm, config=LoopConfig(model="m")).run(
        [user("hi")], emitter_for(ListBus())
    )
    assert result.text == text and result.messages[-1].content == text


async def test_history_is_sent_and_an_error_mid_turn_keeps_history_valid() -> None:
    history = [
        ChatMessage(role="user", content="earlier"),
        ChatMessage(role="assistant", content="answer"),
    ]
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(id="c1", name="add", arguments='{"a":1,"b":2}')]),
            LLMServerError("down", status=503),
        ]
    )
    result = await AgentLoop(llm, TOOLS, LoopConfig(model="m")).run(
        [*history, user("now")], emitter_for(ListBus())
    )
    assert [m["content"] for m in llm.calls[0].messages] == ["earlier", "answer", "now"]
    assert result.status is TurnStatus.ERROR
    assert [m.role for m in result.messages] == ["assistant", "tool", "assistant"]


async def test_nothing_escapes_run_but_cancellation() -> None:
    # A broken bus: the run still returns, in ERROR.
    with_usage = LLMResponse(content="hi", usage={"total_tokens": 3})
    result = await AgentLoop(ScriptedLLM([with_usage]), config=LoopConfig(model="m")).run(
        [user("x")], emitter_for(ListBus(fail=True))
    )
    assert result.status is TurnStatus.ERROR and result.error is not None

    # A client raising something that is not an LLMError.
    result = await AgentLoop(ScriptedLLM([RuntimeError("bug")]), config=LoopConfig(model="m")).run(
        [user("x")], emitter_for(ListBus())
    )
    assert result.status is TurnStatus.ERROR and "RuntimeError: bug" in str(result.error)

    # Cancellation propagates (here: while a tool runs).
    started = asyncio.Event()

    @tool
    async def hang() -> None:
        started.set()
        await asyncio.Event().wait()

    llm = ScriptedLLM([LLMResponse(tool_calls=[ToolCall(id="c", name="hang")])])
    task = asyncio.create_task(
        AgentLoop(llm, Registry([hang]), LoopConfig(model="m", tool_timeout=None)).run(
            [user("x")], emitter_for(ListBus())
        )
    )
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_config_is_validated_at_construction() -> None:
    llm = ScriptedLLM([])
    with pytest.raises(ValueError, match=r"tool_mode must be one of \['native', 'json', 'prose'\]"):
        AgentLoop(llm, config=LoopConfig(model="m", tool_mode="xml"))
    with pytest.raises(ValueError, match="max_iterations"):
        AgentLoop(llm, config=LoopConfig(model="m", max_iterations=0))
    with pytest.raises(ValueError, match="tool_timeout"):
        AgentLoop(llm, config=LoopConfig(model="m", tool_timeout=0))
    with pytest.raises(ValueError, match="model"):
        AgentLoop(llm, config=LoopConfig(model=""))


def test_tool_results_are_formatted_for_the_model() -> None:
    circular: list[Any] = []
    circular.append(circular)
    assert format_tool_result("as is") == "as is"
    assert format_tool_result({"t": "21°C", "n": None}) == '{"t": "21°C", "n": null}'
    assert format_tool_result({"when": object}) == '{"when": "<class \'object\'>"}'
    assert format_tool_result(circular) == "[[...]]"


def test_models_and_dataclasses_are_formatted_by_field() -> None:
    from pydantic import BaseModel

    class Weather(BaseModel):
        city: str
        temp: float

    assert format_tool_result(Weather(city="Oslo", temp=-2)) == '{"city": "Oslo", "temp": -2.0}'
    assert format_tool_result([ToolContext("s", "t", 1)]) == (
        '[{"session_id": "s", "turn_id": "t", "attempt": 1, "resumed": false, '
        '"context": {}, "metadata": {}, "agent": "", "store": null, "emitter": null, '
        '"fence": null, "tenant": null}]'
    )
