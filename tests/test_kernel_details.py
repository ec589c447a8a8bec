"""Issue 22, item 4: the loop's details, each found by running the kernel against the
ScriptedServer: call ids, the error text the model reads, announcing a step's calls,
bounded concurrency, what text modes stream, and agents that must use a tool."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from reactq.shared.turns import TurnStatus
from reactq.testing import run_turn
from reactq.worker.agent import AgentLoop, LoopConfig, Registry, ToolMode, tool
from reactq.worker.agent.llm.replies import completion_body
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.definitions import Agent
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user

running = 0
peak = 0
order: list[str] = []


@tool(read_only=True)
async def read(key: str) -> str:
    """Read a key (waits a little, so reads overlap)."""
    global running, peak
    running += 1
    peak = max(peak, running)
    order.append(f"run read {key}")
    await asyncio.sleep(0.02)
    running -= 1
    return f"r={key}"


@tool(writes=True)
async def write(key: str) -> str:
    """Write a key."""
    order.append(f"run write {key}")
    await asyncio.sleep(0.01)
    return "saved"


@tool(timeout=0.05)
async def slow() -> str:
    """Never finishes in time."""
    await asyncio.Event().wait()
    return "unreachable"


TOOLS = Registry([read, write, slow])


def without_call_ids(reply: Reply) -> Any:
    """A handler answering ``reply`` as an endpoint that omits tool-call ids would."""

    def handler(request: dict[str, Any]) -> Reply:
        body = completion_body(reply, request)
        for call in body["choices"][0]["message"].get("tool_calls") or ():
            del call["id"]
        return Reply.raw(200, json.dumps(body).encode())

    return handler


async def test_synthesised_call_ids_are_unique_across_the_turn() -> None:
    replies = [Reply.tool_calls([("read", {"key": "a"}), ("read", {"key": "b"})])] * 2
    handlers = [without_call_ids(r) for r in replies] + [lambda _r: Reply.text("done")]

    def handler(request: dict[str, Any]) -> Reply:
        return handlers.pop(0)(request)

    async with endpoint(handler) as (server, llm):
        bus = ListBus()
        result = await AgentLoop(llm, TOOLS, LoopConfig(model="m")).run(
            [user("x")], emitter_for(bus)
        )
    assert result.status is TurnStatus.COMPLETED
    ids = [a.call_id for a in bus.of("action")]
    assert len(ids) == 4 and all(ids) and len(set(ids)) == 4, ids
    last = server.requests[-1]["messages"]
    sent = [c["id"] for m in last if m["role"] == "assistant" for c in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert sent == answered == ids


async def test_the_tool_error_the_model_reads_starts_with_its_code() -> None:
    calls = [("slow", {}), ("read", '{"key": '), ("nope", {})]
    handler = scripted(Reply.tool_calls(calls), Reply.text("ok"))
    async with endpoint(handler) as (server, llm):
        bus = ListBus()
        await AgentLoop(llm, TOOLS, LoopConfig(model="m")).run([user("x")], emitter_for(bus))
    failed = bus.of("tool_failed")
    assert [f.code for f in failed] == ["tool_timeout", "invalid_arguments", "unknown_tool"]
    sent = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert sent == [f"[{f.code}] {f.error}" for f in failed]
    assert sent[0] == "[tool_timeout] the tool timed out after 0.05 s"


async def test_every_call_is_announced_before_any_runs_and_results_follow_in_order() -> None:
    order.clear()
    calls = [("read", {"key": "1"}), ("read", {"key": "2"}), ("write", {"key": "w"}),
             ("read", {"key": "3"})]  # fmt: skip
    handler = scripted(Reply.tool_calls(calls), Reply.text("done"))

    def on_event(event: Any) -> None:
        if event.type in ("action", "observation", "tool_failed"):
            order.append(event.type)

    async with endpoint(handler) as (_server, llm):
        bus = ListBus(on_event)
        await AgentLoop(llm, TOOLS, LoopConfig(model="m")).run([user("x")], emitter_for(bus))
    assert order[:4] == ["action"] * 4, order
    assert order.index("run write w") < order.index("run read 3")
    assert [o.output for o in bus.of("observation")] == ["r=1", "r=2", "saved", "r=3"]


@pytest.mark.parametrize(("limit", "expected"), [(None, 8), (3, 3), (1, 1)])
async def test_max_parallel_tools_bounds_concurrent_reads(limit: int | None, expected: int) -> None:
    global peak
    peak = 0
    calls = [("read", {"key": str(i)}) for i in range(12)]
    knobs: dict[str, Any] = {} if limit is None else {"max_parallel_tools": limit}
    handler = scripted(Reply.tool_calls(calls), Reply.text("done"))
    async with endpoint(handler) as (_server, llm):
        bus = ListBus()
        await AgentLoop(llm, TOOLS, LoopConfig(model="m", **knobs)).run(
            [user("x")], emitter_for(bus)
        )
    assert peak == expected
    assert [o.output for o in bus.of("observation")] == [f"r={i}" for i in range(12)]


def test_max_parallel_tools_is_validated() -> None:
    bad: Any
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_parallel_tools"):
            LoopConfig(max_parallel_tools=bad)


TEXT_TURNS = {
    ToolMode.JSON: (
        '{"thought": "need it", "action": "tool", "tool": "read", "args": {"key": "k"}}',
        '{"thought": "got it", "action": "final", "answer": "The \\"value\\" is r=k.\\nBye"}',
    ),
    ToolMode.PROSE: (
        'Thought: need it\nAction: read\nAction Input: {"key": "k"}',
        'Thought: got it\nFinal Answer: The "value" is r=k.\nBye',
    ),
}


@pytest.mark.parametrize("mode", [ToolMode.JSON, ToolMode.PROSE])
async def test_text_modes_stream_only_the_final_answer(mode: ToolMode) -> None:
    call, final = TEXT_TURNS[mode]
    handler = scripted(Reply.text(call, pieces=9), Reply.text(final, pieces=13))
    async with endpoint(handler) as (_server, llm):
        bus = ListBus()
        config = LoopConfig(model="m", tool_mode=mode, stream=True, delta_interval=0)
        result = await AgentLoop(llm, TOOLS, config).run([user("x")], emitter_for(bus))
    assert result.text == 'The "value" is r=k.\nBye'
    deltas = [d.text for d in bus.of("delta")]
    assert "".join(deltas) == result.text, deltas
    assert len(deltas) > 1  # streamed, not sent whole at the end


async def test_require_tool_before_final_reminds_the_model_then_goes_on() -> None:
    handler = scripted(
        Reply.text("I know it without looking."),
        Reply.tool_calls([("read", {"key": "k"})]),
        Reply.text("It is r=k."),
    )
    async with endpoint(handler) as (server, llm):
        bus = ListBus()
        config = LoopConfig(model="m", require_tool_before_final=True)
        result = await AgentLoop(llm, TOOLS, config).run([user("x")], emitter_for(bus))
    assert (result.status, result.text) == (TurnStatus.COMPLETED, "It is r=k.")
    reminder = server.requests[1]["messages"][-1]
    assert reminder["role"] == "user" and "tool" in reminder["content"]
    # Neither the refused answer nor the reminder stays in the conversation.
    assert [m.role for m in result.messages] == ["assistant", "tool", "assistant"]


async def test_a_model_that_keeps_refusing_to_use_a_tool_ends_with_tool_required() -> None:
    agent = Agent(name="strict", tools=[read], require_tool_before_final=True)
    handler = scripted(*[Reply.text("No tools for me.")] * 5)
    async with endpoint(handler) as (server, llm):
        outcome = await run_turn(agent, "x", llm=llm)
    final = outcome.final
    assert final.status == TurnStatus.ERROR and final.code == "tool_required"
    assert [e.code for e in outcome.events if e.type == "error"] == ["tool_required"]
    assert server.request_count == 3  # the answer, then two reminders


def test_require_tool_before_final_needs_a_tool() -> None:
    with pytest.raises(ValueError, match="require_tool_before_final"):
        AgentLoop(object(), Registry(), LoopConfig(require_tool_before_final=True))  # type: ignore[arg-type]
