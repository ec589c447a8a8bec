"""``reactq demo``: the pool at work, or the same agent in-process without Redis.

The demo's agent ships in the package (``reactq.demo.weather:agent``), so the
demo runs from any directory, whatever the application beside it names its modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from redis import Redis as SyncRedis
from redis.exceptions import RedisError

from reactq.producer.client import Producer
from reactq.producer.render import render
from reactq.shared.events import Event
from reactq.shared.redis_client import forget_namespace
from reactq.shared.services import redact_url
from reactq.shared.settings import Settings
from reactq.worker.cli import model_endpoint
from reactq.worker.definitions import Agent, load_agents
from reactq.worker.local import run_local_turn

CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Sydney", "Toronto", "Nairobi"]
DEMO_AGENT = "reactq.demo.weather:agent"


def _redis_answers(url: str) -> bool:
    try:
        client = SyncRedis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (RedisError, OSError):
        return False


def _plan(sessions: int, tag: str) -> list[tuple[str, str]]:
    """(session, message) pairs; every other session is double-texted."""
    turns = []
    for i in range(sessions):
        sid = f"demo-{tag}-{i}"
        turns.append((sid, f"What's the weather in {CITIES[i % len(CITIES)]}?"))
        if i % 2 == 0:
            turns.append((sid, f"And in {CITIES[(i + 3) % len(CITIES)]}?"))
    return turns


def run_demo(sessions: int = 4, in_process: bool = False) -> int:
    """Run the demo; returns the exit code.

    Like its Redis namespace, the demo's state is its own: unless
    ``REACTQ_DATABASE_URL`` names one, its sessions go to a throwaway SQLite
    database, not to the user's (``Settings.database_url``'s default).
    """
    agents = load_agents([DEMO_AGENT])
    settings = Settings.from_env()
    state = redact_url(settings.database_url)
    with contextlib.ExitStack() as stack:
        if "database_url" not in settings.model_fields_set:
            state = "a throwaway SQLite database, removed now"
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="reactq-demo-")))
            settings = settings.model_copy(
                update={"database_url": f"sqlite+aiosqlite:///{scratch / 'state.db'}"}
            )
        settings = stack.enter_context(model_endpoint(settings, agents))
        if not in_process and _redis_answers(settings.redis_url):
            return asyncio.run(_pool_demo(settings, sessions))
        reason = "as asked" if in_process else f"Redis does not answer at {settings.redis_url}"
        print(f"reactq demo: {reason}: running the agent in-process on SQLite, no pool.\n")
        return asyncio.run(_local_demo(settings, agents["weather"], sessions, state))


async def _local_demo(settings: Settings, agent: Agent, sessions: int, state: str) -> int:
    tag = uuid.uuid4().hex[:6]
    ok = 0
    plan = _plan(sessions, tag)
    for sid, message in plan:
        print(f"--- {sid}: {message}")
        final = await run_local_turn(settings, agent, sid, message, on_event=_print_line)
        ok += final.status == "completed"
    print(f"\nsummary: {ok}/{len(plan)} turns completed in-process (state: {state})")
    return 0 if ok == len(plan) else 1


async def _pool_demo(settings: Settings, sessions: int) -> int:
    tag = uuid.uuid4().hex[:6]
    namespace = f"{settings.namespace}-demo-{tag}"
    logs = Path(".reactq/demo-logs")
    logs.mkdir(parents=True, exist_ok=True)
    demo = settings.model_copy(update={"namespace": namespace})
    # The workers read their settings back from this: the namespace, and the model
    # endpoint (the offline model, when this process started it).
    env = demo.child_env(PYTHONUNBUFFERED="1")
    print(
        f"reactq demo: Redis answers at {settings.redis_url}: starting 2 worker processes "
        f"(namespace {namespace}, logs in {logs}/)\n"
    )
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reactq.cli",
                "worker",
                "--agents",
                DEMO_AGENT,
                "--concurrency",
                "16",
                "--loglevel",
                "WARNING",
            ],
            env=env,
            stdout=open(logs / f"worker-{i}.log", "w"),
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    producer = Producer(demo)
    try:
        deadline = time.monotonic() + 60
        while await producer.redis.hlen(producer.keys.workers) < len(workers):
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                print(f"reactq demo: the workers did not come up; see {logs}/", file=sys.stderr)
                return 1
            await asyncio.sleep(0.2)
        plan = _plan(sessions, tag)
        per_worker: Counter[str] = Counter()
        turns = Counter(s for s, _ in plan)
        watchers = {
            sid: asyncio.create_task(_watch(producer, sid, per_worker, turns[sid])) for sid in turns
        }
        await asyncio.sleep(0.1)
        started = time.monotonic()
        submitted = []
        for sid, message in plan:
            handle = await producer.submit(sid, message, agent="weather")
            submitted.append((sid, handle, time.monotonic()))
        latencies, order_ok, completed = [], True, 0
        finished_at: dict[str, tuple[int, int]] = {}
        for sid, handle, t0 in submitted:
            final = await handle.result(timeout=120)
            latencies.append(time.monotonic() - t0)
            completed += final.status == "completed"
            position = _stream_position(final.id or "0-0")
            if finished_at.get(sid, (0, 0)) > position:
                order_ok = False
            finished_at[sid] = position
        elapsed = time.monotonic() - started
        # Each watcher ends after its session's last final; waiting on them (rather
        # than cancelling) lets the last lines print, and bounds a stuck reader.
        _, stuck = await asyncio.wait(watchers.values(), timeout=10)
        for task in stuck:
            task.cancel()
        print(
            f"\nsummary: {completed}/{len(plan)} turns completed over {len(watchers)} sessions "
            f"on 2 workers in {elapsed:.2f}s; order kept per session: "
            f"{'yes' if order_ok else 'NO'}; submit->final p50 "
            f"{statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms; "
            f"turns per worker: {', '.join(f'{w} {n}' for w, n in sorted(per_worker.items()))}"
        )
        return 0 if completed == len(plan) and order_ok else 1
    finally:
        await producer.close()
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
        forget_namespace(settings.redis_url, namespace)  # the demo leaves Redis as it was


async def _watch(producer: Producer, sid: str, per_worker: Counter[str], turns: int) -> None:
    """Print a session's events until its ``turns`` turns have each ended."""
    finals = 0
    async for event in producer.subscribe(sid, after="0"):
        if event.type == "started":
            per_worker[event.worker] += 1
        line = render(event, show_session=True)
        if line:
            print(line, flush=True)
        if event.type == "final":
            finals += 1
            if finals == turns:
                return


def _stream_position(event_id: str) -> tuple[int, int]:
    ms, _, n = event_id.partition("-")
    return int(ms), int(n or 0)


def _print_line(event: Event) -> None:
    line = render(event)
    if line:
        print(line, flush=True)
