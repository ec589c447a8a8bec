"""Chaos: workers killed with SIGKILL while turns run. Nothing is lost, nothing
doubled, and each session keeps its order. Run alone with ``-m chaos``."""

from __future__ import annotations

import asyncio
import random
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from reactq.producer import Producer, TurnHandle
from reactq.shared.events import FinalEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.conftest import free_port
from tests.helpers import WorkerPool, lookup_then_answer, sleepy_lookup, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

SESSIONS, TURNS_PER_SESSION, WORKERS = 20, 10, 3


@pytest.fixture(params=["redis", "cluster"])
def chaos_pool(
    request: pytest.FixtureRequest,
    redis_url: str,
    namespace: str,
    postgres_url: str,
    tmp_path: Path,
) -> Iterator[tuple[WorkerPool, dict[str, str]]]:
    # Turns long enough (2 x 0.4 s of model time) that kills land mid-turn.
    server = ScriptedServer(lookup_then_answer, latency=0.4).start_in_thread()
    broker_url = redis_url
    if request.param == "cluster":
        # Leases, queues, deadlines and events on a Redis Cluster, the broker on one Redis.
        redis_url = request.getfixturevalue("redis_cluster_url")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_BROKER_URL": broker_url,
        "REACTQ_NAMESPACE": f"{namespace}-chaos-{request.param}",
        "REACTQ_DATABASE_URL": postgres_url,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        "REACTQ_LEASE_TTL_SECONDS": "1.5",
        "REACTQ_REAPER_INTERVAL_SECONDS": "0.3",
        # A kill every 1.5 s: give unlucky turns room to finish.
        "REACTQ_MAX_ATTEMPTS": "20",
    }
    pool = WorkerPool(env, tmp_path, concurrency=32)
    pool.start(WORKERS)
    try:
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], WORKERS)
        yield pool, env
    finally:
        pool.stop()
        server.stop()


async def _killer(pool: WorkerPool, stop: asyncio.Event, period: float) -> int:
    """Every ``period`` seconds SIGKILL a random live worker and start a new one."""
    rng = random.Random(7)
    kills = 0
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), period)
            break
        except TimeoutError:
            pass
        live = [p for p in pool.procs if p.poll() is None]
        if live:
            victim = rng.choice(live)
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            kills += 1
        pool.start(1)
    return kills


async def test_sigkill_chaos_loses_and_doubles_nothing(
    chaos_pool: tuple[WorkerPool, dict[str, str]],
) -> None:
    pool, env = chaos_pool
    run = uuid.uuid4().hex[:6]
    sessions = [f"chaos-{run}-{i}" for i in range(SESSIONS)]
    async with Producer(Settings.from_env(env)) as producer:
        stop = asyncio.Event()
        killer = asyncio.create_task(_killer(pool, stop, period=1.5))
        started = time.monotonic()
        handles = []
        for turn in range(TURNS_PER_SESSION):
            for sid in sessions:
                handles.append(await producer.submit(sid, f"{sid} #{turn}", agent="e2e"))
        try:
            finals = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 240)
        except TimeoutError:
            stop.set()
            await killer
            raise AssertionError(await _stuck(producer, handles, pool)) from None
        finally:
            stop.set()
            kills = await killer
        assert kills >= 2, "the test must actually kill workers while turns run"
        elapsed = time.monotonic() - started
        assert [f.status for f in finals] == ["completed"] * len(handles), (
            f"after {elapsed:.1f}s and {kills} kills:\n{pool.logs()[-3000:]}"
        )

        reruns = 0
        for sid in sessions:
            events = await producer.bus.read(sid, after="0")
            mine = [h.turn_id for h in handles if h.session_id == sid]
            finals_of = [e.turn_id for e in events if isinstance(e, FinalEvent)]
            assert finals_of == mine, "exactly one final per turn, in submission order"
            reruns += sum(1 for e in events if e.type == "started" and e.attempt > 1)
            history = await producer.history(sid)
            assert [m.content for m in history if m.role == "user"] == [
                f"{sid} #{t}" for t in range(TURNS_PER_SESSION)
            ]
            assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"] * (
                TURNS_PER_SESSION
            )
        assert reruns >= 1, "some turn must have been re-run after a kill"


async def _stuck(producer: Producer, handles: list[TurnHandle], pool: WorkerPool) -> str:
    """What a chaos run that timed out left behind: each session whose turns did not
    all end, with its queue, lease and deadline, then the workers' logs."""
    keys, redis = producer.keys, producer.redis
    lines = []
    for sid in sorted({h.session_id for h in handles}):
        events = await producer.bus.read(sid, after="0")
        ended = {e.turn_id for e in events if isinstance(e, FinalEvent)}
        open_turns = [h.turn_id for h in handles if h.session_id == sid and h.turn_id not in ended]
        if not open_turns:
            continue
        lines.append(
            f"{sid}: no final for {open_turns}; pending={await redis.llen(keys.pending(sid))} "
            f"running={await redis.get(keys.running(sid))!r:.80} "
            f"lease={await redis.get(keys.lease(sid))!r} "
            f"deadline={await redis.zscore(keys.lease_deadlines(sid), sid)} "
            f"last={[(e.type, e.turn_id, getattr(e, 'attempt', None)) for e in events[-3:]]}"
        )
    return "turns did not end within 240 s:\n" + "\n".join(lines) + "\n" + pool.logs()[-6000:]


def _start_redis(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed: apt-get install redis-server")
    return subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(workdir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_redis(url: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            client = redis_sync.Redis.from_url(url, socket_connect_timeout=0.5)
            try:
                if client.ping():
                    return
            finally:
                client.close()
        except redis_sync.RedisError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"redis at {url} did not come up")
        time.sleep(0.05)


async def test_a_redis_restart_mid_turn_strands_nothing(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    data = tmp_path / "redis"
    data.mkdir()
    redis_proc = _start_redis(port, data)
    server = ScriptedServer(sleepy_lookup).start_in_thread()
    env = {
        "REACTQ_REDIS_URL": url,
        "REACTQ_NAMESPACE": "restart",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        "REACTQ_LEASE_TTL_SECONDS": "2",
        "REACTQ_REAPER_INTERVAL_SECONDS": "0.3",
    }
    pool = WorkerPool(env, tmp_path)
    try:
        _wait_redis(url)
        pool.start(2)
        pool.wait_ready(url, "restart", 2)
        sessions = [f"restart-{i}" for i in range(3)]
        async with Producer(Settings.from_env(env)) as producer:
            handles = [
                await producer.submit(s, f"sleep=1 {s} #{n}", agent="e2e")
                for n in range(2)
                for s in sessions
            ]

            async def first_started() -> bool:
                events = await producer.bus.read(sessions[0], after="0")
                return any(e.type == "started" for e in events)

            await wait_until(first_started, 20, "the first turn to start")
        # Restart Redis while turns are in flight (its AOF keeps the data).
        redis_proc.send_signal(signal.SIGTERM)
        redis_proc.wait(10)
        await asyncio.sleep(1.0)
        redis_proc = _start_redis(port, data)
        _wait_redis(url)

        async with Producer(Settings.from_env(env)) as producer:

            async def all_final() -> bool:
                for s in sessions:
                    events = await producer.bus.read(s, after="0")
                    done = {e.turn_id for e in events if e.type == "final"}
                    if not {h.turn_id for h in handles if h.session_id == s} <= done:
                        return False
                return True

            await wait_until(all_final, 90, f"every turn to end\n{pool.logs()[-2000:]}")
            for s in sessions:
                events = await producer.bus.read(s, after="0")
                finals = [e for e in events if isinstance(e, FinalEvent)]
                mine = [h.turn_id for h in handles if h.session_id == s]
                assert sorted(e.turn_id for e in finals) == sorted(mine), "one final per turn"
                assert {e.status for e in finals} <= {"completed", "error"}
            # No session stays locked once Redis is back.
            after = [await producer.submit(s, "after", agent="e2e") for s in sessions]
            assert {(await h.result(timeout=30)).status for h in after} == {"completed"}
    finally:
        pool.stop()
        server.stop()
        redis_proc.terminate()
        redis_proc.wait(10)
