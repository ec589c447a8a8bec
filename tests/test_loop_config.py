"""LoopConfig: each loop knob declared once, checked at construction, and every one
settable from ``Agent`` (the knobs ``Agent`` once lacked take effect in a real run)."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import time
from typing import Any

import pytest

from reactq.shared.errors import ParserError
from reactq.shared.messages import ToolCall
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnStatus
from reactq.worker import Agent, LoopConfig, ScriptedLLM, ToolMode, tool
from reactq.worker.agent.interventions import ToolCallInfo
from reactq.worker.agent.llm.base import LLMClient, LLMResponse
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.loop import RunResult
from reactq.worker.agent.parsers import ParsedStep
from reactq.worker.agent.usage import ModelPrice
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user

pinged: list[str] = []


@tool
def ping(n: int) -> str:
    """Answer pong."""
    pinged.append(f"ping {n}")
    return f"pong {n}"


def ping_call(n: int, usage: dict[str, int] | None = None) -> LLMResponse:
    call = ToolCall(id=f"c{n}", name="ping", arguments=f'{{"n": {n}}}')
    return LLMResponse(tool_calls=[call], finish_reason="tool_calls", usage=usage or {})


async def run(agent: Agent, llm: LLMClient, bus: ListBus, **options: Any) -> RunResult:
    """One run of the agent's real loop (AgentLoop), as a worker builds it."""
    loop = agent.build_loop(llm, settings=Settings())
    return await loop.run([user("go")], emitter_for(bus), **options)


# -- the declaration ---------------------------------------------------------------


def test_each_knob_is_declared_once_with_one_docstring_line() -> None:
    source = inspect.getsource(LoopConfig)
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    documented: dict[str, str] = {}
    for node, after in zip(body.body, [*body.body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            assert isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant), (
                f"LoopConfig.{node.target.id} has no docstring"
            )
            documented[node.target.id] = str(after.value.value)
    assert list(documented) == [f.name for f in dataclasses.fields(LoopConfig)]
    assert all(text and "\n" not in text for text in documented.values())


@pytest.mark.parametrize(
    ("knobs", "named"),
    [
        ({"model": ""}, "model"),
        ({"system_prompt": None}, "system_prompt"),
        ({"tool_mode": "xml"}, "tool_mode"),
        ({"parser": object()}, "parser"),
        ({"tool_mode": "json", "parser": object()}, "parser"),
        ({"tool_mode": "json", "output_format": ""}, "output_format"),
        ({"tool_message_role": "user"}, "tool_message_role"),
        ({"retry_reminder": ""}, "retry_reminder"),
        ({"max_iterations": 0}, "max_iterations"),
        ({"max_iterations": True}, "max_iterations"),
        ({"tool_timeout": 0}, "tool_timeout"),
        ({"fallback_message": ""}, "fallback_message"),
        ({"error_fallback_message": None}, "error_fallback_message"),
        ({"budget_message": ""}, "budget_message"),
        ({"cancelled_message": ""}, "cancelled_message"),
        ({"stream": "yes"}, "stream"),
        ({"delta_interval": -0.1}, "delta_interval"),
        ({"temperature": 3}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"reasoning_effort": "High!"}, "reasoning_effort"),
        ({"repeat_call_limit": 0}, "repeat_call_limit"),
        ({"wrap_up": None}, "wrap_up"),
        ({"context_budget": 0}, "context_budget"),
        ({"max_total_tokens": 0}, "max_total_tokens"),
        ({"max_cost": 0}, "max_cost"),
        ({"prices": {"m": 1.0}}, "prices"),
        ({"prices": [("m", 1.0)]}, "prices"),
        ({"model": "m", "max_cost": 1.0}, "max_cost"),
        ({"interventions": object()}, "interventions"),
        ({"hooks": object()}, "hooks"),
        ({"tool_gate": "yes"}, "tool_gate"),
        ({"tool_gate_timeout": 0}, "tool_gate_timeout"),
    ],
)
def test_a_bad_knob_is_a_value_error_naming_it(knobs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        LoopConfig(**knobs)


def test_the_tool_mode_is_stored_as_a_tool_mode_and_the_price_is_checked_once_known() -> None:
    assert LoopConfig(tool_mode="prose").tool_mode is ToolMode.PROSE
    # No model yet: the price is checked when a loop is built for the resolved one.
    config = LoopConfig(max_cost=1.0, prices={"priced": ModelPrice(1.0, 2.0)})
    agent = Agent(name="a", loop=config)
    assert agent.build_loop(ScriptedLLM([]), settings=Settings(model="priced")).price
    with pytest.raises(ValueError, match="max_cost needs the price of model 'gpt-4o-mini'"):
        agent.build_loop(ScriptedLLM([]), settings=Settings())


# -- the knobs Agent could not set before take effect --------------------------------


class AnswerParser:
    """A parser of one's own: ``ANSWER: <text>`` ends the turn."""

    def parse(self, text: str) -> ParsedStep:
        if text.startswith("ANSWER:"):
            return ParsedStep(final=text.removeprefix("ANSWER:").strip())
        raise ParserError("no ANSWER: line")


async def test_parser_output_format_and_retry_reminder_from_the_agent() -> None:
    agent = Agent(
        name="a",
        model="m",
        system_prompt="Be exact.",
        tool_mode=ToolMode.JSON,
        parser=AnswerParser(),
        output_format="Write ANSWER: and your answer.",
        retry_reminder="That was not it ({error}); write ANSWER: first.",
    )
    llm = ScriptedLLM(["rambling", "ANSWER: 42"])
    result = await run(agent, llm, ListBus())
    assert (result.status, result.text) == (TurnStatus.COMPLETED, "42")  # the agent's parser
    system = llm.calls[0].messages[0]["content"]
    assert system.startswith("Be exact.") and system.endswith("Write ANSWER: and your answer.")
    retry = llm.calls[1].messages[-1]["content"]
    assert retry == "That was not it (no ANSWER: line); write ANSWER: first."


async def test_budget_message_from_the_agent() -> None:
    agent = Agent(
        name="a", model="m", tools=[ping], max_total_tokens=50, budget_message="Budget spent."
    )
    llm = ScriptedLLM([ping_call(1, {"total_tokens": 80}), "never asked"])
    result = await run(agent, llm, bus := ListBus())
    assert (result.status, result.text) == (TurnStatus.BUDGET_EXCEEDED, "Budget spent.")
    assert len(llm.calls) == 1 and bus.of("error")[0].code == "budget_exceeded"


async def test_cancelled_message_from_the_agent() -> None:
    agent = Agent(name="a", model="m", tools=[ping], cancelled_message="Stopped, as asked.")
    llm = ScriptedLLM([ping_call(1), "never asked"])
    before = len(pinged)
    # The handle fires once the tool ran: the run stops before the next model call.
    result = await run(agent, llm, ListBus(), cancel=lambda: len(pinged) > before)
    assert (result.status, result.text) == (TurnStatus.CANCELLED, "Stopped, as asked.")
    assert len(llm.calls) == 1


async def test_delta_interval_from_the_agent() -> None:
    text = "".join(f"word{i} " for i in range(40))
    counts = {}
    for interval in (0.0, 60.0):
        agent = Agent(name="a", model="m", stream=True, delta_interval=interval)
        async with endpoint(scripted(Reply.text(text, pieces=40))) as (_server, llm):
            result = await run(agent, llm, bus := ListBus())
        assert result.text == text == "".join(d.text for d in bus.of("delta"))
        counts[interval] = len(bus.of("delta"))
    # 0: a delta per piece; 60 s: the pieces gathered into one or a few.
    assert counts[0.0] >= 20 and counts[60.0] < 5


async def test_tool_gate_timeout_from_the_agent() -> None:
    async def slow_gate(info: ToolCallInfo) -> bool:
        await asyncio.sleep(30)
        return True

    agent = Agent(name="a", model="m", tools=[ping], tool_gate=slow_gate, tool_gate_timeout=0.05)
    llm = ScriptedLLM([ping_call(7), "denied, fine"])
    before = len(pinged)
    started = time.monotonic()
    result = await run(agent, llm, bus := ListBus())
    assert time.monotonic() - started < 5  # the agent's 0.05 s, not the default 300 s
    assert result.text == "denied, fine" and len(pinged) == before
    assert bus.of("tool_failed")[0].code == "tool_denied"
    assert "no approval arrived in time" in llm.calls[1].messages[-1]["content"]


def test_an_agents_knobs_reach_its_loop_unchanged() -> None:
    agent = Agent(name="a", model="m", budget_message="b", delta_interval=0.2, tool_gate_timeout=9)
    loop = agent.build_loop(ScriptedLLM([]), settings=Settings())
    assert loop.config == agent.loop
    assert loop.executor.config is loop.config
