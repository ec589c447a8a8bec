"""Delegation across the pool, on real worker processes and the scripted model: child
turns on any worker, the parent parked (no slot held) while they run, progress
forwarded, budgets and usage, cancellation, depth and cycles, a parent's worker
killed mid-delegation."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from reactq.producer import Producer
from reactq.shared.errors import ApprovalClosedError
from reactq.shared.events import Event, FinalEvent, StartedEvent, SubagentEvent
from reactq.shared.keys import Keys
from reactq.shared.protocol.children import child_ids
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from reactq.worker.local import run_local_turn
from tests.delegation_agents import orchestrator, script
from tests.helpers import WorkerPool, wait_until, worker_pid

pytestmark = pytest.mark.e2e

AGENTS = "tests.delegation_agents:agents"
FAST_RECOVERY = {
    "REACTQ_LEASE_TTL_SECONDS": "1.5",
    "REACTQ_REAPER_INTERVAL_SECONDS": "0.3",
}


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    server = ScriptedServer(script).start_in_thread()
    yield server
    server.stop()


@pytest.fixture
def env(redis_url: str, namespace: str, model: ScriptedServer, tmp_path: Path) -> dict[str, str]:
    return {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-d{uuid.uuid4().hex[:6]}",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
        **FAST_RECOVERY,
    }


@pytest.fixture
def make_pool(
    redis_url: str, env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., WorkerPool]]:
    pools: list[WorkerPool] = []

    def make(count: int = 1, concurrency: int = 16, agents: str = AGENTS) -> WorkerPool:
        logs = tmp_path / f"pool{len(pools)}"
        logs.mkdir()
        pool = WorkerPool(env, logs, agents=agents, concurrency=concurrency)
        pools.append(pool)
        pool.start(count)
        return pool

    yield make
    for pool in pools:
        pool.stop()


def wait_ready(redis_url: str, env: dict[str, str], count: int) -> None:
    WorkerPool(env, Path("/nonexistent")).wait_ready(redis_url, env["REACTQ_NAMESPACE"], count)


@pytest.fixture
async def producer(env: dict[str, str]) -> AsyncIterator[Producer]:
    p = Producer(Settings.from_env(env))
    yield p
    await p.close()


def sid() -> str:
    return f"d-{uuid.uuid4().hex[:10]}"


async def events_of(p: Producer, s: str, turn_id: str | None = None) -> list[Event]:
    return [e for e in await p.bus.read(s, after="0") if turn_id is None or e.turn_id == turn_id]


async def test_delegate_and_delegate_parallel_run_child_turns_on_the_pool(
    make_pool, producer: Producer, redis_url: str, env: dict[str, str]
) -> None:
    make_pool(2)
    wait_ready(redis_url, env, 2)
    p = producer

    # One task: the child's answer is the tool's result.
    s1 = sid()
    one = await p.submit(s1, "ask researcher: the tides", agent="orchestrator")
    final = await one.result(timeout=60)
    assert (final.status, final.text) == (
        "completed",
        "orchestrator got: researcher did: the tides",
    )
    (entry,) = final.subagents or []
    assert (entry["agent"], entry["status"]) == ("researcher", "completed")
    assert final.usage["total_tokens"] >= entry["usage"]["total_tokens"] > 0

    # The child is an ordinary turn in its own session, with its stream and history.
    assert entry["session_id"].startswith(one.turn_id)
    child = [e for e in await events_of(p, entry["session_id"]) if isinstance(e, FinalEvent)]
    assert [(e.turn_id, e.text) for e in child] == [(entry["turn_id"], "researcher did: the tides")]
    assert [m.content for m in await p.history(entry["session_id"])] == [
        "the tides",
        "researcher did: the tides",
    ]
    status = await p.turn_info(entry["turn_id"])
    assert status is not None and status.status is TurnStatus.COMPLETED

    # Its progress reached the parent's session as subagent events, the final among them.
    forwarded = [e for e in await events_of(p, s1, one.turn_id) if isinstance(e, SubagentEvent)]
    assert {e.event for e in forwarded} >= {"queued", "started", "final"}
    assert all(e.child_session_id == entry["session_id"] for e in forwarded)
    (done,) = [e for e in forwarded if e.event == "final"]
    assert (done.text, done.status, done.agent) == (
        "researcher did: the tides",
        "completed",
        "researcher",
    )
    assert sum(isinstance(e, FinalEvent) for e in await events_of(p, s1, one.turn_id)) == 1
    # The parent ran twice (it parked while its child ran), the child once.
    started = [e for e in await events_of(p, s1, one.turn_id) if isinstance(e, StartedEvent)]
    assert [e.attempt for e in started] == [1, 2]

    # `reactq watch` shows the tree: the child's lines indented under the parent's.
    watch = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reactq.cli",
        "watch",
        s1,
        "--from",
        "0",
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
    )
    shown: list[str] = []
    try:
        assert watch.stdout is not None
        while not any("final      [completed] orchestrator got" in line for line in shown):
            line = await asyncio.wait_for(watch.stdout.readline(), 30)
            assert line, f"watch ended early: {shown}"
            shown.append(line.decode().rstrip("\n"))
    finally:
        watch.terminate()
        await watch.wait()
    tag = one.turn_id[:8]
    assert f"{tag}   └ researcher queued the tides" in shown
    assert f"{tag}   └ researcher final [completed] researcher did: the tides" in shown

    # Several tasks at once: every answer, in order.
    s2 = sid()
    both = await p.submit(s2, "ask researcher,coder: the moon", agent="orchestrator")
    final = await both.result(timeout=60)
    assert final.status == "completed"
    answers = json.loads(final.text.removeprefix("orchestrator got: "))
    assert answers == [
        {
            "agent": "researcher",
            "status": "completed",
            "result": "researcher did: the moon (researcher)",
        },
        {"agent": "coder", "status": "completed", "result": "coder did: the moon (coder)"},
    ]
    assert [e["agent"] for e in final.subagents or []] == ["researcher", "coder"]
    # The final's usage: its children's, and its own attempt's model calls (the
    # attempt that parked published the usage of its call too, with its reply).
    assert final.usage["total_tokens"] == (
        sum(e["usage"]["total_tokens"] for e in final.subagents or [])
        + sum(
            e.total_tokens
            for e in await events_of(p, s2, both.turn_id)
            if e.type == "usage"
            and e.attempt == final.attempt
            and not (e.model or "").startswith("subagent:")
        )
    )


async def test_a_pool_of_two_slots_runs_four_parents_of_two_children_each(
    make_pool, producer: Producer, redis_url: str, env: dict[str, str]
) -> None:
    # One worker, two turns at a time: a parent waiting for its children must hold
    # no slot, or four parents would fill the pool and wait forever.
    make_pool(1, concurrency=2)
    wait_ready(redis_url, env, 1)
    handles = [
        await producer.submit(
            sid(), f"ask researcher,coder: job{i} sleep=0.2", agent="orchestrator"
        )
        for i in range(4)
    ]
    finals = await asyncio.gather(*(h.result(timeout=120) for h in handles))
    assert [f.status for f in finals] == ["completed"] * 4
    for i, final in enumerate(finals):
        assert f"job{i}" in final.text
        assert [e["status"] for e in final.subagents or []] == ["completed", "completed"]


async def test_a_failed_child_is_a_tool_error_with_its_status(
    make_pool, producer: Producer, redis_url: str, env: dict[str, str]
) -> None:
    make_pool(1)
    wait_ready(redis_url, env, 1)
    # coder's child turns run under max_total_tokens=100 (the orchestrator's Subagent);
    # a "big" task spends 800 on its first call.
    handle = await producer.submit(sid(), "ask coder: a big refactor", agent="orchestrator")
    final = await handle.result(timeout=60)
    assert final.status == "completed"
    assert final.text.startswith(
        "orchestrator got: [subagent_failed] subagent coder ended budget_exceeded"
    )
    (entry,) = final.subagents or []
    assert entry["status"] == "budget_exceeded" and entry["usage"]["total_tokens"] == 800


async def test_depth_limit_and_cycles_are_tool_errors(
    make_pool, producer: Producer, redis_url: str, env: dict[str, str]
) -> None:
    make_pool(1)
    wait_ready(redis_url, env, 1)
    # deep > researcher > deep: researcher may not delegate back to deep.
    cycle = await producer.submit(sid(), "ask researcher: ask deep: hello", agent="deep")
    final = await cycle.result(timeout=60)
    assert final.status == "completed"
    assert "researcher got: [delegation_refused] 'deep' is already in this chain" in final.text
    assert "deep > researcher" in final.text

    # orchestrator > researcher > deep: deep's limit is 2, so it may not go one deeper.
    deep = await producer.submit(
        sid(), "ask researcher: ask deep: ask deeper: hi", agent="orchestrator"
    )
    final = await deep.result(timeout=60)
    assert final.status == "completed"
    assert "[delegation_refused] the chain of delegations" in final.text
    assert "max_delegation_depth" in final.text
    # The root's session sees its grandchild's progress too, one level deeper.
    tree = {
        (e.agent, e.depth, e.event)
        for e in await events_of(producer, final.session_id, deep.turn_id)
        if isinstance(e, SubagentEvent)
    }
    assert {
        ("researcher", 1, "final"),
        ("deep", 2, "queued"),
        ("deep", 2, "started"),
        ("deep", 2, "final"),
    } <= tree
    assert all(kind != "subagent" for _, _, kind in tree)
    # Not a subagent at all: refused before anything runs.
    stray = await producer.submit(sid(), "ask deeper: x", agent="orchestrator")
    final = await stray.result(timeout=60)
    assert "[delegation_refused] 'deeper' is not one of your subagents" in final.text
    assert final.subagents is None


async def test_cancelling_the_parent_cancels_its_running_children(
    make_pool, producer: Producer, redis_url: str, env: dict[str, str]
) -> None:
    make_pool(1)
    wait_ready(redis_url, env, 1)
    s = sid()
    handle = await producer.submit(
        s, "ask researcher,coder: slow work sleep=30", agent="orchestrator"
    )

    async def children_started() -> bool:
        return await producer.turn_status(handle.turn_id) is TurnStatus.AWAITING_CHILDREN and (
            sum(
                isinstance(e, SubagentEvent) and e.event == "started"
                for e in await events_of(producer, s, handle.turn_id)
            )
            == 2
        )

    await wait_until(children_started, 60, "both children to start")
    # It waits for no person: nobody may decide on its calls, none is pending.
    assert await producer.pending_approvals() == []
    with pytest.raises(ApprovalClosedError, match="awaiting_children"):
        await producer.approve(handle.turn_id, "any")
    outcome = await producer.cancel(handle.turn_id)
    assert outcome.outcome == "cancelled"
    final = await handle.result(timeout=10)
    assert final.status == "cancelled"
    assert "waited for its child turns" in final.text
    kids = [child_ids(handle.turn_id, c, i) for c, i in await _keys(producer, s, handle.turn_id)]
    assert len(kids) == 2

    async def children_cancelled() -> bool:
        statuses = [await producer.turn_status(t) for _, t in kids]
        return statuses == [TurnStatus.CANCELLED, TurnStatus.CANCELLED]

    await wait_until(children_cancelled, 30, "the children to be cancelled")

    # An interrupt of the parent (a newer message) cancels its children the same way.
    first = await producer.submit(
        s, "ask researcher: more slow work sleep=30", agent="orchestrator"
    )

    async def parked() -> bool:
        return await producer.turn_status(first.turn_id) is TurnStatus.AWAITING_CHILDREN

    await wait_until(parked, 60, "the second parent to park")
    (child,) = [child_ids(first.turn_id, c, i) for c, i in await _keys(producer, s, first.turn_id)]
    newer = await producer.submit(s, "never mind", agent="orchestrator", strategy="interrupt")
    assert (await first.result(timeout=30)).status == "cancelled"
    assert (await newer.result(timeout=30)).text == "orchestrator did: never mind"

    async def child_cancelled() -> bool:
        return await producer.turn_status(child[1]) is TurnStatus.CANCELLED

    await wait_until(child_cancelled, 30, "the interrupted parent's child to be cancelled")


async def test_outside_the_pool_a_delegation_is_a_tool_error(
    model: ScriptedServer, tmp_path: Path
) -> None:
    settings = Settings.from_env(
        {
            "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'local.db'}",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "test-key",
        }
    )
    final = await run_local_turn(settings, orchestrator, "local-1", "ask researcher: x")
    assert final.status == "completed"
    assert final.text.startswith(
        "orchestrator got: [delegation_refused] delegation needs the worker pool"
    )


async def _keys(p: Producer, s: str, turn_id: str) -> list[tuple[str, int]]:
    """The (call id, index) of each child the turn made."""
    fields = await p.redis.hkeys(Keys(p.settings.namespace).children(s, turn_id))
    found = []
    for raw in fields:
        name = raw.decode() if isinstance(raw, bytes) else raw
        if name.startswith("c:"):
            call, _, index = name[2:].rpartition("#")
            found.append((call, int(index)))
    return sorted(found)


async def test_the_parents_worker_killed_while_children_run(
    make_pool, producer: Producer, redis_url: str, env: dict[str, str]
) -> None:
    # The parent's agent on one worker, the children's on another: killing the first
    # while the children run leaves them running; a new worker resumes the parent.
    parents = make_pool(1, agents="tests.delegation_agents:orchestrator")
    make_pool(1, agents="tests.delegation_agents:workers")
    wait_ready(redis_url, env, 2)
    s = sid()
    handle = await producer.submit(s, "ask researcher,coder: survive sleep=2", agent="orchestrator")

    async def children_running() -> bool:
        return (
            sum(
                isinstance(e, SubagentEvent) and e.event == "started"
                for e in await events_of(producer, s, handle.turn_id)
            )
            == 2
        )

    await wait_until(children_running, 60, "both children to start")
    (first,) = [
        e for e in await events_of(producer, s, handle.turn_id) if isinstance(e, StartedEvent)
    ]
    os.kill(worker_pid(first.worker), signal.SIGKILL)
    parents.procs[0].wait(10)
    parents.start(1)
    final = await handle.result(timeout=90)
    assert final.status == "completed"
    assert [e["status"] for e in final.subagents or []] == ["completed", "completed"]
    # Each child ran once: one started, one final, in its own session.
    for entry in final.subagents or []:
        events = await events_of(producer, entry["session_id"], entry["turn_id"])
        assert [e.attempt for e in events if isinstance(e, StartedEvent)] == [1]
        assert sum(isinstance(e, FinalEvent) for e in events) == 1
    started = [
        e for e in await events_of(producer, s, handle.turn_id) if isinstance(e, StartedEvent)
    ]
    assert started[-1].worker != first.worker


async def test_children_outliving_the_parents_wait_are_cancelled(
    make_pool, producer: Producer, redis_url: str, env: dict[str, str]
) -> None:
    env["REACTQ_DELEGATION_TIMEOUT_SECONDS"] = "2"
    make_pool(1)
    wait_ready(redis_url, env, 1)
    handle = await producer.submit(sid(), "ask researcher: stuck sleep=60", agent="orchestrator")
    final = await handle.result(timeout=60)
    assert final.status == "completed"
    assert final.text.startswith(
        "orchestrator got: [subagent_failed] subagent researcher ended cancelled"
    )
    (entry,) = final.subagents or []
    assert entry["status"] == "cancelled"
