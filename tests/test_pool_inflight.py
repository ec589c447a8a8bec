"""Turns in flight in one real `reactq worker` process: bounded by its concurrency,
not by Celery's threads (a drain is handed to the worker's loop, which holds it)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from reactq.producer import Producer
from reactq.shared.events import FinalEvent, StartedEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from reactq.worker.tasks import HANDOFF_THREADS
from tests.helpers import WorkerPool, lookup_then_answer

pytestmark = pytest.mark.e2e

CONCURRENCY, TURNS = 6, 12


async def test_a_worker_holds_its_concurrency_in_flight_and_no_more(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    # Each turn makes two model calls of 1.5 s: the first six overlap for seconds.
    model = ScriptedServer(lookup_then_answer, latency=1.5).start_in_thread()
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-inflight",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
    }
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
    # of its concurrency, far more than Celery's threads, and never more.
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert HANDOFF_THREADS < CONCURRENCY
    assert peak == CONCURRENCY, spans
