"""The per-tool deadline: armed when a call first waits, counted from the call's start."""

from __future__ import annotations

import asyncio
import time

import pytest

from reactq.shared.messages import ToolCall
from reactq.worker.agent.config import LoopConfig
from reactq.worker.agent.executor import ToolExecutor
from reactq.worker.agent.tools import Registry, ToolContext, tool
from tests.kernel_support import ListBus, emitter_for

stopped: list[str] = []


@tool(timeout=0.05)
async def quick(x: str) -> str:
    """Finishes without waiting."""
    return f"quick {x}"


@tool(timeout=0.1)
async def hog_then_wait() -> str:
    """Holds the loop past its deadline, then waits: the wait must time out at once."""
    time.sleep(0.15)  # noqa: ASYNC251 - blocking on purpose
    await asyncio.sleep(5)
    return "unreachable"


@tool(timeout=5)
async def waits_long() -> str:
    """Waits until cancelled; notes that it saw the cancellation."""
    try:
        await asyncio.Event().wait()
    finally:
        stopped.append("waits_long")
    return "unreachable"


@tool(timeout=1)
async def waits_briefly() -> str:
    """Waits a few times, well within its deadline."""
    for _ in range(3):
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    return "done"


def executor() -> ToolExecutor:
    return ToolExecutor(
        Registry([quick, hog_then_wait, waits_long, waits_briefly]),
        LoopConfig(tool_timeout=60.0, tool_gate_timeout=None, repeat_call_limit=None),
    )


async def step(*names: str) -> list[str]:
    calls = [
        ToolCall(id=f"c{i}", name=name, arguments='{"x": "a"}' if name == "quick" else "{}")
        for i, name in enumerate(names)
    ]
    return await executor().run_step(
        calls, emitter_for(ListBus()), ToolContext(), iteration=1, seen={}
    )


async def test_a_call_that_never_waits_leaves_no_timer_behind() -> None:
    loop = asyncio.get_running_loop()
    before = len(loop._scheduled)  # type: ignore[attr-defined]
    assert await step("quick", "quick") == ["quick a", "quick a"]
    assert len(loop._scheduled) == before  # type: ignore[attr-defined]


async def test_the_deadline_counts_from_the_start_of_the_call() -> None:
    started = time.monotonic()
    (output,) = await step("hog_then_wait")
    assert output == "[tool_timeout] the tool timed out after 0.1 s"
    assert time.monotonic() - started < 1.0


async def test_a_call_that_waits_finishes_within_its_deadline() -> None:
    assert await step("waits_briefly", "quick") == ["done", "quick a"]


async def test_a_cancelled_turn_cancels_the_waiting_tool_and_is_not_a_timeout() -> None:
    stopped.clear()
    task = asyncio.ensure_future(step("waits_long"))
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stopped == ["waits_long"]
