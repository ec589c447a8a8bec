"""Durable turns on real worker processes: a turn whose worker is SIGKILLed resumes
from its last checkpointed step, and the tools of completed steps do not run again."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.shared.events import FinalEvent, StartedEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from tests.helpers import WorkerPool, last_user_text, wait_until, worker_pid

pytestmark = pytest.mark.e2e

FAST_RECOVERY = {
    "REACTQ_LEASE_TTL_SECONDS": "1.5",
    "REACTQ_REAPER_INTERVAL_SECONDS": "0.3",
}


def durable_script(request: Mapping[str, Any]) -> Reply:
    """tick 1, tick 2, stall, then answer: one step per tool result in the request."""
    path = last_user_text(request).partition("path=")[2]
    done = sum(1 for m in request["messages"] if m["role"] == "tool")
    if done < 2:
        return Reply.tool_calls([("tick", {"path": path, "n": done + 1})])
    if done == 2:
        return Reply.tool_calls([("stall", {"path": path})])
    return Reply.text("durable done")


@pytest.fixture
def pool_env(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    server = ScriptedServer(durable_script).start_in_thread()
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-d{uuid.uuid4().hex[:6]}",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        **FAST_RECOVERY,
    }
    pool = WorkerPool(env, tmp_path, agents="tests.pool_agents:agents")
    try:
        pool.start(2)
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 2)
        yield env
    finally:
        pool.stop()
        server.stop()


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    p = Producer(Settings.from_env(pool_env))
    yield p
    await p.close()


async def test_a_killed_turn_resumes_from_its_last_step(producer: Producer, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    s = f"d-{uuid.uuid4().hex[:10]}"
    handle = await producer.submit(s, f"work path={effects}", agent="durable")

    def lines() -> list[str]:
        return effects.read_text().splitlines() if effects.exists() else []

    await wait_until(lambda: any(line.startswith("stall") for line in lines()), 30, "the stall")
    events = [e for e in await producer.bus.read(s, after="0") if e.turn_id == handle.turn_id]
    started = [e for e in events if isinstance(e, StartedEvent)]
    assert len(started) == 1 and started[0].resumed_from_step is None
    os.kill(worker_pid(started[0].worker), signal.SIGKILL)

    final = await handle.result(timeout=30)
    assert (final.status, final.text) == ("completed", "durable done")
    # The two completed steps' tools ran once; the call in flight ran again, told so.
    assert lines() == [
        "tick 1 attempt=1 resumed=False",
        "tick 2 attempt=1 resumed=False",
        "stall attempt=1 resumed=False",
        "stall attempt=2 resumed=True",
    ]
    events = [e for e in await producer.bus.read(s, after="0") if e.turn_id == handle.turn_id]
    started = [e for e in events if isinstance(e, StartedEvent)]
    assert [(e.attempt, e.resumed_from_step) for e in started] == [(1, None), (2, 2)]
    assert sum(isinstance(e, FinalEvent) for e in events) == 1
    history = await producer.history(s)
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [m.content for m in history if m.role == "tool"] == ["ticked 1", "ticked 2", "stalled"]
    # No lock stays stuck: the session's next turn runs.
    nxt = await producer.submit(s, f"again path={tmp_path / 'other.txt'}", agent="durable")
    await asyncio.wait_for(nxt.result(timeout=30), 40)
