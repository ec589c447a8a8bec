"""The pool under faults, on real worker processes: cancellation, the multitask
strategies, a worker killed or paused mid-turn, and warm shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from reactq.producer import Producer
from reactq.shared.errors import TurnRejectedError
from reactq.shared.events import Event, FinalEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.helpers import WorkerPool, last_user_text, sleepy_lookup, wait_until, worker_pid

pytestmark = pytest.mark.e2e

FAST_RECOVERY = {
    "REACTQ_LEASE_TTL_SECONDS": "1.5",
    "REACTQ_REAPER_INTERVAL_SECONDS": "0.3",
}


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedServer]:
    server = ScriptedServer(sleepy_lookup).start_in_thread()
    yield server
    server.stop()


@pytest.fixture
def make_pool(
    redis_url: str, namespace: str, model: ScriptedServer, tmp_path: Path
) -> Iterator[Callable[..., tuple[WorkerPool, dict[str, str]]]]:
    pools: list[WorkerPool] = []

    def make(count: int = 1, **extra: str) -> tuple[WorkerPool, dict[str, str]]:
        env = {
            "REACTQ_REDIS_URL": redis_url,
            "REACTQ_NAMESPACE": f"{namespace}-f{uuid.uuid4().hex[:6]}",
            "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "test-key",
            **FAST_RECOVERY,
            **extra,
        }
        pool = WorkerPool(env, tmp_path)
        pools.append(pool)
        pool.start(count)
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], count)
        return pool, env

    yield make
    for pool in pools:
        pool.stop()


@pytest.fixture
async def producers() -> AsyncIterator[Callable[[dict[str, str]], Producer]]:
    made: list[Producer] = []

    def make(env: dict[str, str]) -> Producer:
        made.append(Producer(Settings.from_env(env)))
        return made[-1]

    yield make
    for p in made:
        await p.close()


async def first_event(producer: Producer, sid: str, kind: str, turn_id: str) -> Event:
    async for event in producer.subscribe(sid, after="0"):
        if event.type == kind and event.turn_id == turn_id:
            return event
    raise AssertionError("stream ended")


async def turn_events(producer: Producer, sid: str, turn_id: str) -> list[Event]:
    return [e for e in await producer.bus.read(sid, after="0") if e.turn_id == turn_id]


def sid() -> str:
    return f"f-{uuid.uuid4().hex[:10]}"


async def test_cancel_queued_running_finished_and_unknown(make_pool, producers) -> None:
    _, env = make_pool(1)
    p = producers(env)
    s = sid()
    running = await p.submit(s, "sleep=5 first", agent="e2e")
    queued = await p.submit(s, "second", agent="e2e")
    await asyncio.wait_for(first_event(p, s, "started", running.turn_id), 20)

    result = await p.cancel(queued.turn_id)
    assert result.outcome == "cancelled"
    final = await queued.result(timeout=5)
    assert final.status == "cancelled"

    result = await p.cancel(running.turn_id)
    assert result.outcome == "cancelling"
    final = await running.result(timeout=10)
    assert final.status == "cancelled"
    assert await p.history(s) == []  # a cancelled turn commits nothing

    again = await p.cancel(running.turn_id)
    assert (again.outcome, again.status) == ("already_finished", "cancelled")
    assert (await p.cancel("t_nosuchturn")).outcome == "unknown"

    # The session is free again: the next turn runs.
    after = await p.submit(s, "third", agent="e2e")
    assert (await after.result(timeout=20)).status == "completed"
    assert [m.content for m in await p.history(s) if m.role == "user"] == ["third"]


async def test_reject_and_racing_producers(make_pool, producers) -> None:
    _, env = make_pool(1)
    a, b = producers(env), producers(env)
    s = sid()
    first = await a.submit(s, "sleep=2 busy", agent="e2e")
    with pytest.raises(TurnRejectedError):
        await b.submit(s, "refused", agent="e2e", strategy="reject")
    assert (await first.result(timeout=20)).status == "completed"

    # Two producers race on an idle session with "reject": exactly one wins.
    s2 = sid()
    outcomes = await asyncio.gather(
        *(
            p.submit(s2, f"sleep=1 race {i}", agent="e2e", strategy="reject")
            for i, p in enumerate([a, b, a, b])
        ),
        return_exceptions=True,
    )
    accepted = [o for o in outcomes if not isinstance(o, BaseException)]
    rejected = [o for o in outcomes if isinstance(o, TurnRejectedError)]
    assert len(accepted) == 1 and len(rejected) == 3
    assert (await accepted[0].result(timeout=20)).status == "completed"
    users = [m.content for m in await a.history(s2) if m.role == "user"]
    assert users == [accepted[0].queued.message]


async def test_rollback_discards_the_running_turn(make_pool, producers) -> None:
    _, env = make_pool(1)
    p = producers(env)
    s = sid()
    base = await p.submit(s, "base", agent="e2e")
    assert (await base.result(timeout=20)).status == "completed"
    slow = await p.submit(s, "sleep=5 slow", agent="e2e")
    waiting = await p.submit(s, "waiting", agent="e2e")
    await asyncio.wait_for(first_event(p, s, "started", slow.turn_id), 20)
    new = await p.submit(s, "instead", agent="e2e", strategy="rollback")

    assert (await slow.result(timeout=10)).status == "cancelled"
    assert (await waiting.result(timeout=10)).status == "cancelled"
    assert (await new.result(timeout=20)).status == "completed"
    users = [m.content for m in await p.history(s) if m.role == "user"]
    assert users == ["base", "instead"]


async def test_a_killed_worker_loses_nothing(make_pool, producers) -> None:
    _, env = make_pool(2)
    p = producers(env)
    s = sid()
    handle = await p.submit(s, "sleep=1 survive", agent="e2e")
    started = await asyncio.wait_for(first_event(p, s, "started", handle.turn_id), 20)
    assert started.type == "started"
    os.kill(worker_pid(started.worker), signal.SIGKILL)

    final = await handle.result(timeout=30)
    assert final.status == "completed"
    events = await turn_events(p, s, handle.turn_id)
    assert [e.attempt for e in events if e.type == "started"] == [1, 2]
    assert sum(isinstance(e, FinalEvent) for e in events) == 1
    history = await p.history(s)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]

    # The session is not left locked: the next turn runs at once.
    nxt = await p.submit(s, "next", agent="e2e")
    assert (await nxt.result(timeout=20)).status == "completed"


async def test_a_turn_lost_too_often_ends_in_error(make_pool, producers) -> None:
    _, env = make_pool(2, REACTQ_MAX_ATTEMPTS="1")
    p = producers(env)
    s = sid()
    handle = await p.submit(s, "sleep=3 doomed", agent="e2e")
    started = await asyncio.wait_for(first_event(p, s, "started", handle.turn_id), 20)
    os.kill(worker_pid(started.worker), signal.SIGKILL)
    final = await handle.result(timeout=30)
    assert final.status == "error"
    assert "lost with its worker 1 times" in final.text
    nxt = await p.submit(s, "next", agent="e2e")
    assert (await nxt.result(timeout=20)).status == "completed"


async def test_a_paused_holder_cannot_commit(make_pool, producers, model) -> None:
    pool, env = make_pool(2)
    p = producers(env)
    s = sid()
    handle = await p.submit(s, "sleep=2 paused", agent="e2e")
    started = await asyncio.wait_for(first_event(p, s, "started", handle.turn_id), 20)
    # Pause it inside its model call (not inside a database write, whose lock
    # would stall every writer until it resumes, as with any paused client).
    await wait_until(
        lambda: any(last_user_text(r) == "sleep=2 paused" for r in model.requests),
        10,
        "the model call of the turn",
    )
    paused = worker_pid(started.worker)
    os.kill(paused, signal.SIGSTOP)
    try:
        # Past its lease TTL, the other worker takes the session over.
        second = await asyncio.wait_for(first_event(p, s, "final", handle.turn_id), 30)
    finally:
        os.kill(paused, signal.SIGCONT)
    assert isinstance(second, FinalEvent) and second.status == "completed"
    assert second.attempt == 2

    # Let the resumed worker reach its commit (its model call ends) and be refused.
    await wait_until(
        lambda: "lease lost" in pool.logs(), 15, "the resumed worker to see its lease lost"
    )
    events = await turn_events(p, s, handle.turn_id)
    assert sum(isinstance(e, FinalEvent) for e in events) == 1
    history = await p.history(s)
    assert [m.content for m in history if m.role == "user"] == ["sleep=2 paused"]
    assert len(history) == 4


async def test_warm_shutdown_finishes_or_hands_over(make_pool, producers) -> None:
    pool, env = make_pool(1, REACTQ_SHUTDOWN_GRACE_SECONDS="0.5")
    p = producers(env)
    s = sid()
    handle = await p.submit(s, "sleep=3 long", agent="e2e")
    started = await asyncio.wait_for(first_event(p, s, "started", handle.turn_id), 20)
    pool.start(1)  # a second worker to hand over to
    pool.wait_ready(env["REACTQ_REDIS_URL"], env["REACTQ_NAMESPACE"], 2)
    os.kill(worker_pid(started.worker), signal.SIGTERM)

    final = await handle.result(timeout=30)
    assert final.status == "completed"
    events = await turn_events(p, s, handle.turn_id)
    runs = [e for e in events if e.type == "started"]
    assert len(runs) == 2 and runs[1].worker != runs[0].worker
    assert sum(isinstance(e, FinalEvent) for e in events) == 1
    assert len(await p.history(s)) == 4


async def test_interrupt_keeps_the_completed_steps(make_pool, producers) -> None:
    from reactq.worker.agent.runner import INTERRUPTED_MESSAGE

    _, env = make_pool(1)
    p = producers(env)
    s = sid()
    slow = await p.submit(s, "sleep=1.5 slow", agent="e2e")
    # Interrupt once the first step (a tool call and its result) is done.
    await asyncio.wait_for(first_event(p, s, "observation", slow.turn_id), 20)
    new = await p.submit(s, "instead", agent="e2e", strategy="interrupt")

    interrupted = await slow.result(timeout=10)
    assert (interrupted.status, interrupted.text) == ("cancelled", INTERRUPTED_MESSAGE)
    assert (await new.result(timeout=20)).status == "completed"
    history = await p.history(s)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"] * 2
    assert history[0].content == "sleep=1.5 slow"
    assert history[1].tool_calls and history[2].role == "tool"
    assert history[3].content == INTERRUPTED_MESSAGE
    assert history[4].content == "instead"


class FlakyProvider:
    """A model that fails a share of calls: 500s, 429s with Retry-After, and bodies
    that are not JSON, in a fixed pattern (stateful, so the pattern is exact)."""

    def __init__(self) -> None:
        self.calls = 0
        self.healthy = False

    def __call__(self, request: dict) -> object:
        from reactq.worker.agent.llm.scripted_server import Reply

        self.calls += 1
        n = self.calls
        if not self.healthy:
            if n % 4 == 1:
                return Reply.error(500, "scripted outage")
            if n % 4 == 2:
                return Reply.error(429, "slow down", headers={"Retry-After": "0.2"})
            if n % 23 == 0:
                return Reply.raw(200, b"<html>not json</html>", "text/html")
        return sleepy_lookup(request)


async def test_a_failing_provider_still_ends_every_turn_once(
    redis_url: str, namespace: str, tmp_path: Path, producers
) -> None:
    flaky = FlakyProvider()
    server = ScriptedServer(flaky).start_in_thread()
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-flaky",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
    }
    pool = WorkerPool(env, tmp_path)
    try:
        pool.start(2)
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 2)
        p = producers(env)
        sessions = [sid() for _ in range(6)]
        handles = [await p.submit(s, f"q{i}", agent="e2e") for i in range(4) for s in sessions]
        finals = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 120)
        statuses = [f.status for f in finals]
        assert set(statuses) <= {"completed", "error"}
        assert statuses.count("completed") >= len(handles) // 2, statuses
        for s in sessions:
            events = await p.bus.read(s, after="0")
            mine = [h.turn_id for h in handles if h.session_id == s]
            assert [e.turn_id for e in events if e.type == "final"] == mine
            for e in events:
                if isinstance(e, FinalEvent) and e.status == "error":
                    errors = [x for x in events if x.type == "error" and x.turn_id == e.turn_id]
                    assert errors and errors[0].code.startswith("llm_"), errors
        # Nothing stays locked: once the provider recovers, every session answers.
        flaky.healthy = True
        after = [await p.submit(s, "after", agent="e2e") for s in sessions]
        assert {(await h.result(timeout=30)).status for h in after} == {"completed"}
    finally:
        pool.stop()
        server.stop()
