"""Turns in flight in one real `reactq worker` process: bounded by its concurrency,
not by Celery's pool (a drain is handed to the worker's loop, which holds it); a full
worker keeps one message waiting and its consumer goes on (worker/handoff.py)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from reactq.producer import Producer
from reactq.shared.events import FinalEvent, StartedEvent
from reactq.shared.keys import Keys
from reactq.shared.protocol.dispatch import celery_app
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.helpers import WorkerPool, lookup_then_answer, sleepy_lookup, sync_client

pytestmark = pytest.mark.e2e

CONCURRENCY, TURNS = 6, 12


def pool_env(
    redis_url: str, namespace: str, tmp_path: Path, model: ScriptedServer
) -> dict[str, str]:
    """A worker's environment: the test's Redis and namespace, SQLite, the model."""
    return {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": namespace,
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
    }


async def test_a_worker_holds_its_concurrency_in_flight_and_no_more(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    # Each turn makes two model calls of 1.5 s: the first six overlap for seconds.
    model = ScriptedServer(lookup_then_answer, latency=1.5).start_in_thread()
    env = pool_env(redis_url, f"{namespace}-inflight", tmp_path, model)
    pool = WorkerPool(env, tmp_path, concurrency=CONCURRENCY)
    pool.start(1)
    try:
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 1)
        async with Producer(Settings.from_env(env)) as producer:
            run = uuid.uuid4().hex[:6]
            handles = [
                await producer.submit(f"inflight-{run}-{i}", f"turn {i}", agent="e2e")
                for i in range(TURNS)
            ]
            spans: list[tuple[float, float]] = []

            async def follow(i: int) -> None:
                started = 0.0
                async for event in handles[i].events():
                    if isinstance(event, StartedEvent):
                        started = event.ts
                    if isinstance(event, FinalEvent):
                        assert event.status == "completed", event
                        spans.append((started, event.ts))
                        return

            await asyncio.wait_for(asyncio.gather(*(follow(i) for i in range(TURNS))), 60)
    finally:
        pool.stop()
        model.stop()
    # The most turns that ran at the same moment (by the worker's own timestamps): all
    # of its concurrency, and never more.
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert peak == CONCURRENCY, spans


async def test_a_full_worker_keeps_one_message_and_answers_its_monitor(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    # Each turn's model calls take 2 s: two turns fill the worker for 4 s.
    model = ScriptedServer(sleepy_lookup).start_in_thread()
    env = pool_env(redis_url, f"{namespace}-full", tmp_path, model)
    settings = Settings.from_env(env)
    keys = Keys.for_settings(settings)
    redis = sync_client(redis_url)
    try:
        with WorkerPool(env, tmp_path, concurrency=2).running(1) as pool:
            async with Producer(settings) as producer:
                run = uuid.uuid4().hex[:6]
                handles = [
                    await producer.submit(f"full-{run}-{i}", f"sleep=2 turn {i}", agent="e2e")
                    for i in range(5)
                ]

                async def started(i: int) -> None:
                    async for event in handles[i].events():
                        if isinstance(event, StartedEvent):
                            return

                await asyncio.wait_for(asyncio.gather(started(0), started(1)), 20)
                await asyncio.sleep(0.5)
                # Full: the worker holds one more drain message, unacked, and leaves
                # the other two in the broker for an idle worker.
                assert redis.llen(keys.queue("e2e")) == 2, pool.logs()
                # Its consumer is not blocked waiting for a slot: it answers a monitor.
                (name,) = [n.decode() for n in redis.hkeys(f"{env['REACTQ_NAMESPACE']}:workers")]
                app = celery_app(settings)
                app.conf.update(keys.celery_isolation())
                replies = await asyncio.to_thread(app.control.ping, destination=[name], timeout=3.0)
                assert replies == [{name: {"ok": "pong"}}], pool.logs()
                # A slot freed runs the kept drain, then the next from the broker.
                for handle in handles:
                    final = await asyncio.wait_for(handle.result(), 30)
                    assert final.status == "completed", final
    finally:
        redis.close()
        model.stop()


async def test_a_full_worker_stopped_gives_its_waiting_message_back(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    model = ScriptedServer(sleepy_lookup).start_in_thread()
    # No reaper pass during the test: what the broker holds is what the worker did.
    env = pool_env(redis_url, f"{namespace}-stop", tmp_path, model)
    env["REACTQ_REAPER_INTERVAL_SECONDS"] = "120"
    settings = Settings.from_env(env)
    queue = Keys.for_settings(settings).queue("e2e")
    redis = sync_client(redis_url)
    pool = WorkerPool(env, tmp_path, concurrency=2)
    try:
        async with Producer(settings) as producer:
            run = uuid.uuid4().hex[:6]
            with pool.running(1):
                handles = [
                    await producer.submit(f"stop-{run}-{i}", f"sleep=1 turn {i}", agent="e2e")
                    for i in range(3)
                ]
                for _ in range(100):
                    statuses = [await producer.turn_status(h.turn_id) for h in handles]
                    if statuses.count(TurnStatus.RUNNING) == 2:
                        break
                    await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)
                # Two turns run; the third's drain message waits in the worker.
                assert redis.llen(queue) == 0, (statuses, pool.logs())
            # A warm shutdown: the two turns finished, and the waiting drain went back
            # to the broker, not lost until a reaper finds the session (handed over
            # by its drain, put back unacked, or both: a duplicate drain is a no-op).
            assert redis.llen(queue) >= 1, pool.logs()
            assert await producer.turn_status(handles[2].turn_id) is TurnStatus.QUEUED
            (tmp_path / "next").mkdir()
            with WorkerPool(env, tmp_path / "next", concurrency=2).running(1):
                final = await asyncio.wait_for(handles[2].result(), 30)
                assert final.status == "completed", final
    finally:
        redis.close()
        model.stop()
