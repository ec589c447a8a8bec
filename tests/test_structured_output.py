"""Structured output (issue 15, item 3) in the kernel, through the real openai SDK: the
schema is asked for (NATIVE: ``response_format``; JSON/PROSE: the format section), the
final answer is validated, one retry carries the validation error, then the run ends
with status ``invalid_output``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from reactq.shared.turns import TurnStatus
from reactq.worker.agent import AgentLoop, LoopConfig, Registry, ToolMode, tool
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.definitions import Agent, AgentConfigError
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user


class Weather(BaseModel):
    """A weather report."""

    model_config = ConfigDict(extra="forbid")
    city: str
    temp_c: int


WEATHER_SCHEMA: dict[str, Any] = {
    "title": "Weather report",
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
    "required": ["city", "temp_c"],
}


@tool(read_only=True)
async def get_weather(city: str) -> dict[str, object]:
    """Weather in a city."""
    return {"city": city, "temp_c": 18}


TOOLS = Registry([get_weather])
GOOD = {"city": "Oslo", "temp_c": 18}


def loop_for(llm: Any, **knobs: Any) -> AgentLoop:
    return AgentLoop(llm, TOOLS, LoopConfig(model="m", output_type=Weather, **knobs))


async def test_native_asks_for_a_json_schema_and_ends_with_the_validated_object() -> None:
    handler = scripted(
        Reply.tool_calls([("get_weather", {"city": "Oslo"})]), Reply.text(json.dumps(GOOD))
    )
    async with endpoint(handler) as (server, llm):
        bus = ListBus()
        result = await loop_for(llm).run([user("weather?")], emitter_for(bus))
    assert result.status is TurnStatus.COMPLETED
    assert result.output == GOOD and json.loads(result.text) == GOOD
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Weather"
    # A closed model with every field required fits the provider's strict mode.
    assert fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["required"] == ["city", "temp_c"]
    # A turn calls tools first and still ends with structured output.
    assert "tools" in server.requests[0] and server.requests[1]["response_format"] == fmt
    assert bus.types().count("action") == 1


async def test_a_schema_dict_works_and_is_not_strict_when_it_is_open() -> None:
    async with endpoint(scripted(Reply.text('```json\n{"city": "Rome", "temp_c": 30}\n```'))) as (
        server,
        llm,
    ):
        loop = AgentLoop(llm, TOOLS, LoopConfig(model="m", output_type=WEATHER_SCHEMA))
        result = await loop.run([user("x")], emitter_for(ListBus()))
    assert result.output == {"city": "Rome", "temp_c": 30}
    schema = server.requests[0]["response_format"]["json_schema"]
    assert schema["name"] == "Weather_report" and schema["strict"] is False


@pytest.mark.parametrize("mode", [ToolMode.JSON, ToolMode.PROSE])
async def test_text_modes_ask_in_their_envelope_and_validate(mode: ToolMode) -> None:
    if mode is ToolMode.JSON:
        call = '{"action": "tool", "tool": "get_weather", "args": {"city": "Oslo"}}'
        final = json.dumps({"action": "final", "answer": GOOD})
    else:
        call = 'Thought: look\nAction: get_weather\nAction Input: {"city": "Oslo"}'
        final = f"Thought: done\nFinal Answer: {json.dumps(GOOD)}"
    async with endpoint(scripted(Reply.text(call), Reply.text(final))) as (server, llm):
        result = await loop_for(llm, tool_mode=mode).run([user("x")], emitter_for(ListBus()))
    assert result.status is TurnStatus.COMPLETED and result.output == GOOD
    request = server.requests[0]
    assert "response_format" not in request
    system = request["messages"][0]["content"]
    assert '"temp_c"' in system and "JSON Schema" in system


async def test_a_wrong_answer_gets_one_retry_with_the_validation_error() -> None:
    handler = scripted(Reply.text('{"city": "Oslo"}'), Reply.text(json.dumps(GOOD)))
    async with endpoint(handler) as (server, llm):
        result = await loop_for(llm).run([user("x")], emitter_for(ListBus()))
    assert result.status is TurnStatus.COMPLETED and result.output == GOOD
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"city": "Oslo"}'}
    assert "temp_c" in retry[-1]["content"] and retry[-1]["role"] == "user"
    # Neither the refused answer nor the reminder is kept.
    assert [m.role for m in result.messages] == ["assistant"]


@pytest.mark.parametrize("mode", [ToolMode.NATIVE, ToolMode.JSON, ToolMode.PROSE])
async def test_a_second_wrong_answer_ends_the_run_with_invalid_output(mode: ToolMode) -> None:
    bad = {
        ToolMode.NATIVE: "not json at all",
        ToolMode.JSON: '{"action": "final", "answer": {"city": 3}}',
        ToolMode.PROSE: "Final Answer: the weather is fine",
    }[mode]
    async with endpoint(scripted(Reply.text(bad), Reply.text(bad))) as (server, llm):
        bus = ListBus()
        result = await loop_for(llm, tool_mode=mode, error_fallback_message="sorry").run(
            [user("x")], emitter_for(bus)
        )
    assert (result.status, result.text, result.output) == (
        TurnStatus.INVALID_OUTPUT,
        "sorry",
        None,
    )
    assert result.error is not None and result.error.code == "invalid_output"
    assert bus.of("error")[0].code == "invalid_output"
    assert len(server.requests) == 2


async def test_a_structured_answer_is_not_streamed_piecewise() -> None:
    async with endpoint(scripted(Reply.text(json.dumps(GOOD)))) as (server, llm):
        bus = ListBus()
        result = await loop_for(llm, stream=True).run([user("x")], emitter_for(bus))
    assert result.output == GOOD and "delta" not in bus.types()
    assert server.requests[0]["stream"] is True and "response_format" in server.requests[0]


def test_output_type_is_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="output_type"):
        LoopConfig(output_type=int)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="output_type"):
        LoopConfig(output_type={"type": "string"})
    with pytest.raises(AgentConfigError, match="output_type"):
        Agent(name="x", output_type="Weather")
    assert Agent(name="x", output_type=Weather).loop.output_type is Weather
