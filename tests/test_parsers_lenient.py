"""What the text-mode parsers accept from a small real model (issue 22, item 7): each
answer below is one Qwen2.5 0.5B wrote (or its shape), and each must be read as the
call or answer it plainly is, or refused with a message that tells the model what
went wrong."""

from __future__ import annotations

import pytest

from reactq.shared.errors import ParserError
from reactq.shared.turns import TurnStatus
from reactq.worker.agent import AgentLoop, LoopConfig, Registry, tool
from reactq.worker.agent.llm.base import RequestOptions
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.modes import (
    JSON_OUTPUT_FORMAT,
    PROSE_OUTPUT_FORMAT,
    TEXT_MODE_STOP,
    resolve_mode,
)
from reactq.worker.agent.parsers import JsonParser, ProseParser
from reactq.worker.agent.visible import VisibleText
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user

PARIS = {"city": "Paris"}


def test_a_prose_call_followed_by_invented_text_is_the_call() -> None:
    parse = ProseParser().parse
    # Cut by the stop sequence inside the invented "User: Observation (...)" line.
    step = parse('Action: get_weather\nAction Input: {"city": "Paris"}\nUser: ')
    assert (step.tool, step.args, step.final) == ("get_weather", PARIS, None)
    # An invented answer after the call is never trusted.
    step = parse(
        'Action: get_weather\nAction Input: {"city": "Paris"}\n'
        "Final Answer: It is sunny in Paris, 22 degrees."
    )
    assert (step.tool, step.args, step.final) == ("get_weather", PARIS, None)


def test_a_prose_marker_after_a_copied_role_label_counts() -> None:
    step = ProseParser().parse('Assistant: Action: get_weather\nAction Input: {"city": "Paris"}')
    assert (step.tool, step.args) == ("get_weather", PARIS)
    assert ProseParser().parse("Assistant: Final Answer: 17 degrees").final == "17 degrees"


def test_a_json_call_followed_by_an_invented_result_and_answer_is_the_call() -> None:
    step = JsonParser().parse(
        '{"action": "tool", "tool": "get_weather", "args": {"city": "Paris"}}\n'
        'Observation (get_weather): {"temp_c": 22}\n'
        '{"action": "final", "answer": "22 degrees"}'
    )
    assert (step.tool, step.args, step.final) == ("get_weather", PARIS, None)


def test_a_json_call_in_a_code_fence_is_the_call() -> None:
    step = JsonParser().parse(
        '```json\n{"action": "tool", "tool": "get_weather", "args": {"city": "Paris"}}\n```'
    )
    assert (step.tool, step.args) == ("get_weather", PARIS)


@pytest.mark.parametrize(
    "text",
    [
        # The tool's name in "action" beside "tool" (and an invented thought).
        '{"thought": "It is 17 C.", "action": "get_weather", "tool": "get_weather", '
        '"args": {"city": "Paris"}}',
        # The tool's name in "action" alone.
        '{"action": "get_weather", "args": {"city": "Paris"}}',
        # The function-calling shape the model was trained on, arguments as an object
        # or as a JSON string.
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',
    ],
)
def test_a_json_call_in_a_mixed_up_shape_is_the_call(text: str) -> None:
    step = JsonParser().parse(text)
    assert (step.tool, step.args, step.final) == ("get_weather", PARIS, None)


def test_what_is_not_a_call_is_still_refused() -> None:
    for text in (
        '{"city": "Paris", "temp_c": 22}',  # an invented result
        '{"action": "final"}',
        '{"name": "get_weather", "arguments": "not json"}',
        '{"action": "get_weather", "args": "Paris"}',
    ):
        with pytest.raises(ParserError):
            JsonParser().parse(text)


@pytest.mark.parametrize("parser", [JsonParser(), ProseParser()])
def test_an_empty_answer_says_why_it_may_be_empty(parser: JsonParser | ProseParser) -> None:
    # The stop sequences cut an answer that opens with an invented Observation to "".
    with pytest.raises(ParserError, match="starts with an Observation is cut off"):
        parser.parse("  \n")


def test_the_text_modes_stop_before_an_invented_observation() -> None:
    for mode in ("json", "prose"):
        settings = resolve_mode(mode)
        assert settings.stop == TEXT_MODE_STOP and "Observation (" in settings.stop
        assert settings.observation_note
    assert resolve_mode("native").stop == ()
    # An agent's own format gets no note written for the default one.
    assert resolve_mode("json", output_format="Answer in JSON.").observation_note == ""
    # Each default format shows a worked call and answer.
    assert '"tool": "get_time", "args": {"city": "Oslo"}' in JSON_OUTPUT_FORMAT
    assert "Action: get_time\nAction Input:" in PROSE_OUTPUT_FORMAT


def test_stop_sequences_reach_the_request_except_where_refused() -> None:
    options = RequestOptions(stop=TEXT_MODE_STOP, seed=7)
    assert options.to_request("qwen2.5")["stop"] == list(TEXT_MODE_STOP)
    assert options.to_request("qwen2.5")["seed"] == 7
    # OpenAI's reasoning models answer 400 to "stop".
    assert "stop" not in options.to_request("o4-mini")
    for bad in (("a",) * 5, ("",), "Observation"):
        with pytest.raises(ValueError, match="stop_sequences"):
            RequestOptions(stop=bad)  # type: ignore[arg-type]


async def test_a_text_mode_turn_sends_stops_and_notes_and_says_what_went_wrong() -> None:
    """Through the real SDK to the scripted server: an answer cut to nothing by a stop
    sequence is retried with a reminder naming why; the call's result carries the
    note on what to answer next; the answer ends the turn."""

    @tool(read_only=True)
    async def get_weather(city: str) -> dict[str, object]:
        """Weather in a city."""
        return {"city": city, "temp_c": 17}

    replies = scripted(
        Reply.text(""),
        Reply.text('{"action": "get_weather", "args": {"city": "Paris"}}'),
        Reply.text('{"action": "final", "answer": "17 degrees in Paris"}'),
    )
    async with endpoint(replies) as (server, llm):
        config = LoopConfig(model="m", tool_mode="json", seed=3)
        result = await AgentLoop(llm, Registry([get_weather]), config).run(
            [user("weather in Paris?")], emitter_for(ListBus())
        )
    assert (result.status, result.text) == (TurnStatus.COMPLETED, "17 degrees in Paris")
    first, retry, last = server.requests
    assert first["stop"] == list(TEXT_MODE_STOP) and first["seed"] == 3
    assert "starts with an Observation is cut off" in retry["messages"][-1]["content"]
    observation = last["messages"][-1]["content"]
    assert observation.startswith('Observation (get_weather): {"city": "Paris"')
    assert observation.endswith('give your final answer ({"action": "final", ...}) using it.')

    async with endpoint(scripted(Reply.text("Final Answer: hi"))) as (server, llm):
        config = LoopConfig(model="m", tool_mode="prose", stop_sequences=())
        await AgentLoop(llm, Registry([get_weather]), config).run(
            [user("hi")], emitter_for(ListBus())
        )
    assert "stop" not in server.requests[0]


def test_a_streamed_prose_call_after_a_role_label_shows_nothing() -> None:
    """The stream filter reads the markers as the parser does: an invented answer after
    a labelled call is never shown."""
    visible = VisibleText("prose")
    text = 'Assistant: Action: get_weather\nAction Input: {"city": "Paris"}\nFinal Answer: 22 C\n'
    shown = "".join(visible.feed(piece) for piece in text)
    assert shown == "" and ProseParser().parse(text).tool == "get_weather"
