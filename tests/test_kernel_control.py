"""Usage and cost, budgets, the iteration wrap-up, and cancellation (loop and runner)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reactq.shared.state.memory.store import MemoryStateStore
from reactq.shared.turns import TurnStatus
from reactq.worker.agent import AgentLoop, AgentRunner, LoopConfig, Registry, ScriptedLLM, tool
from reactq.worker.agent.cancel import CancelEvent
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.usage import ModelPrice
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user

calls: list[str] = []


@tool
async def ping(n: int) -> str:
    """Ping."""
    calls.append(f"ping {n}")
    return "pong"


USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
PRICES = {"m": ModelPrice(input_per_million=1000.0, output_per_million=5000.0)}


def ping_reply(n: int) -> Reply:
    return Reply.tool_calls([("ping", {"n": n})], usage=USAGE)


async def test_usage_per_call_with_cost_and_the_cumulative_on_the_final() -> None:
    handler = scripted(ping_reply(1), Reply.text("done", usage=USAGE))
    async with endpoint(handler) as (_, llm):
        loop = AgentLoop(llm, Registry([ping]), LoopConfig(model="m", prices=PRICES))
        bus = ListBus()
        runner = AgentRunner(loop, MemoryStateStore(), "a")
        final = await runner.run_turn(
            session_id="s1", message="x", turn_id="t1", emitter=emitter_for(bus)
        )
    usage = bus.of("usage")
    assert [(u.prompt_tokens, u.completion_tokens, u.total_tokens) for u in usage] == [
        (100, 20, 120)
    ] * 2
    assert usage[0].cost == pytest.approx(0.2)  # 100 x 1000/1M + 20 x 5000/1M
    assert final.usage["total_tokens"] == 240 and final.cost == pytest.approx(0.4)


@pytest.mark.parametrize(
    "knobs",
    [{"max_total_tokens": 200}, {"max_cost": 0.3, "prices": PRICES}],
    ids=["tokens", "cost"],
)
async def test_a_budget_stops_the_run_before_any_further_call(knobs: dict[str, Any]) -> None:
    calls.clear()
    handler = scripted(*[ping_reply(i) for i in range(5)])
    async with endpoint(handler) as (server, llm):
        bus = ListBus()
        loop = AgentLoop(
            llm, Registry([ping]), LoopConfig(model="m", budget_message="over", **knobs)
        )
        result = await loop.run([user("x")], emitter_for(bus))
    # Call 1 (120) runs its tool; call 2 (240 > 200, 0.4 > 0.3) spends the budget.
    assert (result.status, result.text) == (TurnStatus.BUDGET_EXCEEDED, "over")
    assert len(server.requests) == 2 and calls == ["ping 0"]
    assert bus.of("error")[0].code == "budget_exceeded"
    assert [m.role for m in result.messages] == ["assistant", "tool", "assistant"]
    with pytest.raises(ValueError, match="max_cost needs the price of model 'm'"):
        AgentLoop(ScriptedLLM([]), config=LoopConfig(model="m", max_cost=1.0))


async def test_the_wrap_up_lets_the_model_summarise_without_tools() -> None:
    handler = scripted(ping_reply(1), ping_reply(2), Reply.text("Summary: pong twice."))
    async with endpoint(handler) as (server, llm):
        loop = AgentLoop(
            llm, Registry([ping]), LoopConfig(model="m", max_iterations=2, wrap_up=True)
        )
        result = await loop.run([user("x")], emitter_for(ListBus()))
    assert (result.status, result.text) == (TurnStatus.MAX_ITERATIONS, "Summary: pong twice.")
    assert "tools" in server.requests[1] and "tools" not in server.requests[2]
    assert "Do not call any tool" in server.requests[2]["messages"][-1]["content"]


@pytest.mark.parametrize("event", [asyncio.Event, CancelEvent])
async def test_cancel_mid_stream_closes_the_generation(event: type[asyncio.Event]) -> None:
    # A plain Event is watched beside the call; the pool's CancelEvent stops it itself.
    cancel = event()
    stalled = Reply.text("one two three four", pieces=4).but(stall_after=3)

    def on_event(event: Any) -> None:
        if event.type == "delta":
            cancel.set()

    async with endpoint(scripted(stalled)) as (server, llm):
        bus = ListBus(on_event)
        loop = AgentLoop(llm, config=LoopConfig(model="m", stream=True, delta_interval=0))
        result = await asyncio.wait_for(loop.run([user("x")], emitter_for(bus), cancel=cancel), 5)
        async with asyncio.timeout(5):  # the server sees the client hang up
            while server.streams_abandoned == 0:  # noqa: ASYNC110 - a counter, no event
                await asyncio.sleep(0.01)
    assert result.status is TurnStatus.CANCELLED and bus.of("delta")


async def test_cancel_between_steps_with_a_callable_and_the_runner_commits_nothing() -> None:
    calls.clear()
    flag = {"stop": False}

    @tool
    async def stopper() -> str:
        """Asks for cancellation while it runs."""
        flag["stop"] = True
        return "ok"

    handler = scripted(Reply.tool_calls([("stopper", {})]), Reply.text("never"))
    store = MemoryStateStore()
    async with endpoint(handler) as (server, llm):
        runner = AgentRunner(AgentLoop(llm, Registry([stopper]), LoopConfig(model="m")), store, "a")
        bus = ListBus()
        final = await runner.run_turn(
            session_id="s1", message="x", turn_id="t1", emitter=emitter_for(bus),
            cancel=lambda: flag["stop"],
        )  # fmt: skip
    assert final.status is TurnStatus.CANCELLED and len(server.requests) == 1
    assert await store.get_messages("s1") == [] and await store.get_turn("t1") is None
    assert bus.types()[-1] == "final"

    already = asyncio.Event()
    already.set()
    llm2 = ScriptedLLM(["unused"])
    runner2 = AgentRunner(AgentLoop(llm2, config=LoopConfig(model="m")), store, "a")
    final = await runner2.run_turn(
        session_id="s2", message="x", turn_id="t2", emitter=emitter_for(ListBus()), cancel=already
    )
    assert final.status is TurnStatus.CANCELLED and llm2.calls == []
