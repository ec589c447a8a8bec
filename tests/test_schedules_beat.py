"""Scheduled turns fired by real ``reactq beat`` processes against real Redis (and, in
the end-to-end test, run by a real worker to a final).

Two beats fire each tick once; a tick missed while no beat ran fires once, not once
per missed tick; a paused schedule fires nothing until resumed.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from reactq import Producer
from reactq.shared.events import FinalEvent, QueuedEvent
from reactq.shared.schedules import latest_tick
from reactq.shared.settings import Settings
from reactq.shared.state.schedule_store import schedules_for
from reactq.shared.turns import TurnStatus
from tests.helpers import ROOT, lookup_then_answer, running_pool, wait_until

pytestmark = pytest.mark.e2e

REFRESH = "0.5"


@contextmanager
def beats(env: dict[str, str], log_dir: Path, count: int) -> Iterator[list[Path]]:
    """``count`` real ``reactq beat`` processes; yields their log files."""
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    full = {**os.environ, **env, "REACTQ_SCHEDULE_REFRESH_SECONDS": REFRESH}
    full["PYTHONUNBUFFERED"] = "1"
    try:
        for index in range(count):
            log = log_dir / f"beat-{uuid.uuid4().hex[:6]}-{index}.log"
            with open(log, "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "reactq.cli", "beat"],
                        cwd=ROOT,
                        env=full,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
            logs.append(log)
        yield logs
        for proc, log in zip(procs, logs, strict=True):
            assert proc.poll() is None, f"beat exited:\n{log.read_text()[-3000:]}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def env(redis_url: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    return {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-beat{uuid.uuid4().hex[:6]}",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/state.db",
    }


@pytest.fixture
async def producer(env: dict[str, str]) -> AsyncIterator[Producer]:
    settings = Settings.from_env(
        {},
        redis_url=env["REACTQ_REDIS_URL"],
        namespace=env["REACTQ_NAMESPACE"],
        database_url=env["REACTQ_DATABASE_URL"],
        schedule_min_interval_seconds=1,  # ticks a second apart: the tests wait for them
    )
    async with Producer(settings) as p:
        # Announced as a worker would: the turns wait in the queue, no worker runs them.
        await p.registry.register_agents(["alpha"], "test-registry")
        yield p


async def fired(producer: Producer, session_id: str) -> list[Any]:
    """The ticks (``scheduled_for``) of the turns submitted in the session, in order."""
    events = await producer.bus.read(session_id, after="0")
    return [e.metadata["scheduled_for"] for e in events if isinstance(e, QueuedEvent)]


def logged(logs: list[Path], needle: str) -> list[int]:
    """How many lines of each log hold ``needle``."""
    return [log.read_text(errors="replace").count(needle) for log in logs]


async def test_two_beats_fire_each_tick_once(producer: Producer, tmp_path: Path, env: dict) -> None:
    session = f"s-{uuid.uuid4().hex[:10]}"
    schedule = await producer.add_schedule(session, "tick", agent="alpha", every=1)
    with beats(env, tmp_path, 2) as logs:
        await wait_until(lambda: _count_at_least(producer, session, 6), 60, "six ticks fired")
        # Both beats were at work: each either fired a tick or found it claimed.
        await wait_until(
            lambda: all(
                s + c > 0
                for s, c in zip(
                    logged(logs, "submitted turn"),
                    logged(logs, "claimed by another beat"),
                    strict=True,
                )
            ),
            30,
            "both beats to meet a tick",
        )
    ticks = await fired(producer, session)
    assert len(ticks) == len(set(ticks)), f"a tick fired twice: {ticks}"
    # In order, a whole second apart (a beat held up past a tick fires only the latest).
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert all(gap >= 1 and gap == int(gap) for gap in gaps), ticks
    assert sum(logged(logs, "claimed by another beat")) + sum(logged(logs, "fired already")) > 0, (
        "the beats never raced for a tick"
    )
    stored = await producer.get_schedule(schedule.schedule_id)
    assert stored is not None and stored.last_turn_id is not None and stored.last_error is None


async def _count_at_least(producer: Producer, session: str, n: int) -> bool:
    return len(await fired(producer, session)) >= n


async def test_a_missed_tick_fires_once(producer: Producer, tmp_path: Path, env: dict) -> None:
    session = f"s-{uuid.uuid4().hex[:10]}"
    five_minutes_ago = time.gmtime(time.time() - 300)
    daily = f"{five_minutes_ago.tm_min} {five_minutes_ago.tm_hour} * * *"
    schedule = await producer.add_schedule(session, "daily", agent="alpha", cron=daily)
    # Its last firing was three days ago: three ticks were missed while no beat ran.
    three_days_ago = time.time() - 3 * 86400
    store = schedules_for(await producer.state_store())
    await store.update(schedule.schedule_id, last_run_at=three_days_ago)
    missed = await store.update(schedule.schedule_id)
    assert missed is not None
    latest = latest_tick(missed, time.time())
    with beats(env, tmp_path, 2):
        await wait_until(lambda: _count_at_least(producer, session, 1), 60, "the missed tick")
        # Several refreshes later (0.5 s each), still one.
        await asyncio.sleep(3)
    assert await fired(producer, session) == [latest]
    stored = await producer.get_schedule(schedule.schedule_id)
    assert stored is not None and stored.last_run_at == latest


async def test_pause_stops_firing_and_resume_starts_again(
    producer: Producer, tmp_path: Path, env: dict
) -> None:
    session = f"s-{uuid.uuid4().hex[:10]}"
    schedule = await producer.add_schedule(session, "tick", agent="alpha", every=1)
    with beats(env, tmp_path, 1):
        await wait_until(lambda: _count_at_least(producer, session, 2), 60, "two ticks")
        await producer.pause_schedule(schedule.schedule_id)
        at_pause = len(await fired(producer, session))
        await asyncio.sleep(3)
        settled = len(await fired(producer, session))
        # At most the one firing that read the schedule before the pause.
        assert settled <= at_pause + 1
        await asyncio.sleep(3)
        assert len(await fired(producer, session)) == settled, "a paused schedule fired"
        await producer.resume_schedule(schedule.schedule_id)
        await wait_until(
            lambda: _count_at_least(producer, session, settled + 1), 30, "a tick after resume"
        )


async def test_a_scheduled_turn_runs_to_its_final(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    ns = f"{namespace}-beate2e"
    with running_pool(redis_url, ns, tmp_path, lookup_then_answer) as env:
        settings = Settings.from_env(
            {},
            redis_url=redis_url,
            namespace=ns,
            database_url=env["REACTQ_DATABASE_URL"],
            schedule_min_interval_seconds=1,
        )
        async with Producer(settings) as producer:
            session = f"s-{uuid.uuid4().hex[:10]}"
            schedule = await producer.add_schedule(
                session, "the weather", agent="e2e", every=2, metadata={"team": "ops"}
            )
            with beats(env, tmp_path, 1):
                final = await _first_final(producer, session)
            await producer.delete_schedule(schedule.schedule_id)
        assert final.status == TurnStatus.COMPLETED
        assert final.text == "answer to: the weather"
        info = await _turn_info(settings, final.turn_id)
        assert info["metadata"]["schedule_id"] == schedule.schedule_id
        assert info["metadata"]["team"] == "ops"


async def _first_final(producer: Producer, session: str) -> FinalEvent:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for event in await producer.bus.read(session, after="0"):
            if isinstance(event, FinalEvent):
                return event
        await asyncio.sleep(0.1)
    raise AssertionError("no scheduled turn reached its final in 90 s")


async def _turn_info(settings: Settings, turn_id: str) -> dict[str, Any]:
    async with Producer(settings) as producer:
        info = await producer.turn_info(turn_id)
    assert info is not None
    return info.model_dump()
