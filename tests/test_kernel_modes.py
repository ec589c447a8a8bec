"""Tool modes (NATIVE, JSON, PROSE) and streaming, through the real openai SDK."""

from __future__ import annotations

import json

import pytest

from reactq.shared.turns import TurnStatus
from reactq.worker.agent import AgentLoop, LoopConfig, Registry, ScriptedLLM, ToolMode, tool
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.parsers import JsonParser, ProseParser
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user


@tool(read_only=True)
async def get_weather(city: str) -> dict[str, object]:
    """Weather in a city."""
    return {"city": city, "temp_c": 18}


TOOLS = Registry([get_weather])


async def test_native_text_shaped_calls_are_final_answers_word_for_word() -> None:
    envelope = '{"action": "tool", "tool": "get_weather", "args": {"city": "Paris"}}'
    prose = 'Action: get_weather\nAction Input: {"city": "Paris"}'
    for text in (envelope, prose):
        async with endpoint(scripted(Reply.text(text))) as (server, llm):
            bus = ListBus()
            result = await AgentLoop(llm, TOOLS, LoopConfig(model="m")).run(
                [user("x")], emitter_for(bus)
            )
        assert (result.status, result.text) == (TurnStatus.COMPLETED, text)
        assert "action" not in bus.types()
        assert server.requests[0]["tools"][0]["function"]["name"] == "get_weather"


async def test_native_empty_answer_gets_one_retry_then_errors() -> None:
    handler = scripted(Reply.text(""), Reply.text("Now I answer."))
    async with endpoint(handler) as (server, llm):
        result = await AgentLoop(llm, TOOLS, LoopConfig(model="m")).run(
            [user("x")], emitter_for(ListBus())
        )
    assert result.text == "Now I answer."
    assert "empty" in server.requests[1]["messages"][-1]["content"]
    assert [m.role for m in result.messages] == ["assistant"]  # the retry is not kept

    async with endpoint(scripted(Reply.text(""), Reply.text("  "))) as (server, llm):
        bus = ListBus()
        loop = AgentLoop(llm, TOOLS, LoopConfig(model="m", error_fallback_message="sorry"))
        result = await loop.run([user("x")], emitter_for(bus))
    assert (result.status, result.text) == (TurnStatus.ERROR, "sorry")
    assert bus.of("error")[0].code == "empty_response"


@pytest.mark.parametrize("mode", [ToolMode.JSON, ToolMode.PROSE])
async def test_text_modes_run_tools_listed_in_the_prompt(mode: ToolMode) -> None:
    if mode is ToolMode.JSON:
        call = 'Sure! ```json\n{"action": "tool", "tool": "get_weather", "args": {"city": "Oslo"}, "thought": "look"}\n```'  # noqa: E501
        final = '{"action": "final", "answer": "18 in Oslo"}'
    else:
        call = 'Thought: look\nAction: get_weather\nAction Input: ```{"city": "Oslo"}```'
        final = "Thought: done\nFinal Answer: 18 in Oslo"
    async with endpoint(scripted(Reply.text(call), Reply.text(final))) as (server, llm):
        bus = ListBus()
        loop = AgentLoop(
            llm, TOOLS, LoopConfig(model="m", tool_mode=mode, system_prompt="Be brief.")
        )
        result = await loop.run([user("weather?")], emitter_for(bus))
    assert (result.status, result.text) == (TurnStatus.COMPLETED, "18 in Oslo")
    first, second = server.requests
    assert "tools" not in first
    system = first["messages"][0]["content"]
    assert system.startswith("Be brief.") and "get_weather" in system and "Output format" in system
    assert bus.types() == ["usage", "thought", "action", "observation", "usage"]
    assert bus.of("action")[0].args == {"city": "Oslo"}
    assert second["messages"][-1]["role"] == "user"
    assert second["messages"][-1]["content"].startswith("Observation (get_weather): ")
    assert [m.role for m in result.messages] == ["assistant", "user", "assistant"]


@pytest.mark.parametrize("mode", [ToolMode.JSON, ToolMode.PROSE])
async def test_text_modes_retry_once_then_end_on_a_parser_error(mode: ToolMode) -> None:
    good = '{"action": "final", "answer": "ok"}' if mode is ToolMode.JSON else "Final Answer: ok"
    async with endpoint(scripted(Reply.text("rambling"), Reply.text(good))) as (server, llm):
        result = await AgentLoop(llm, TOOLS, LoopConfig(model="m", tool_mode=mode)).run(
            [user("x")], emitter_for(ListBus())
        )
    assert result.text == "ok"
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "rambling"}
    assert "could not be used" in retry[-1]["content"]

    async with endpoint(scripted(Reply.text("no"), Reply.text("still no"))) as (server, llm):
        bus = ListBus()
        result = await AgentLoop(llm, TOOLS, LoopConfig(model="m", tool_mode=mode)).run(
            [user("x")], emitter_for(bus)
        )
    assert result.status is TurnStatus.ERROR and bus.of("error")[0].code == "parser_error"


def test_parsers_recover_and_refuse() -> None:
    parsed = JsonParser().parse('noise {"x": 1} then {"action": "final", "answer": {"n": 2}}')
    assert parsed.final == '{"n": 2}'
    with pytest.raises(Exception, match='needs a "tool" name'):
        JsonParser().parse('{"action": "tool"}')
    step = ProseParser().parse('Action: lookup\nAction Input: see {"q": "a"} ok\nFinal Answer: x')
    assert (step.tool, step.args) == ("lookup", {"q": "a"})
    assert ProseParser().parse("Final Answer: done\nAction: late").final == "done"


def test_a_knob_of_another_mode_is_refused_naming_the_fix() -> None:
    llm = ScriptedLLM([])
    with pytest.raises(ValueError, match=r"parser= conflicts with tool_mode=ToolMode.NATIVE.*drop"):
        AgentLoop(llm, config=LoopConfig(model="m", parser=JsonParser()))
    with pytest.raises(ValueError, match="output_format= conflicts"):
        AgentLoop(llm, config=LoopConfig(model="m", output_format="x"))
    with pytest.raises(ValueError, match=r"tool_message_role='user' conflicts.*JSON"):
        AgentLoop(llm, config=LoopConfig(model="m", tool_message_role="user"))
    with pytest.raises(ValueError, match="tool_message_role='tool' conflicts with tool_mode=json"):
        AgentLoop(
            llm, config=LoopConfig(model="m", tool_mode=ToolMode.JSON, tool_message_role="tool")
        )
    loop = AgentLoop(llm, config=LoopConfig(model="m", tool_mode="prose", tool_message_role="user"))
    assert loop.mode.tool_message_role == "user" and loop.config.tool_mode is ToolMode.PROSE


async def test_streaming_coalesces_deltas_then_gives_the_full_final() -> None:
    text = "".join(f"word{i} " for i in range(40))
    async with endpoint(scripted(Reply.text(text, pieces=40))) as (_server, llm):
        bus = ListBus()
        loop = AgentLoop(llm, config=LoopConfig(model="m", stream=True, delta_interval=60.0))
        result = await loop.run([user("x")], emitter_for(bus))
    deltas = bus.of("delta")
    assert 1 <= len(deltas) < 5  # coalesced, not one publish per token
    assert "".join(d.text for d in deltas) == text == result.text


async def test_streamed_arguments_are_assembled_whatever_the_chunking() -> None:
    args = {"city": 'São Paulo "quoted" {x}'}
    for pieces in (1, 2, 7, 50):
        handler = scripted(
            Reply.tool_calls([("get_weather", args)], pieces=pieces), Reply.text("ok")
        )
        async with endpoint(handler) as (_server, llm):
            bus = ListBus()
            await AgentLoop(llm, TOOLS, LoopConfig(model="m", stream=True)).run(
                [user("x")], emitter_for(bus)
            )
        assert bus.of("action")[0].args == args
        assert json.loads(bus.of("observation")[0].output)["city"] == args["city"]
