"""``reactq demo``: the pool at work, or the same agent in-process without Redis.

The demo's agent ships in the package (``reactq.demo.weather:agent``), so the
demo runs from any directory, whatever the application beside it names its modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
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
from reactq.worker.tasks import worker_name

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


def run_demo(sessions: int = 4, in_process: bool = False, kill: bool = True) -> int:
    """Run the demo; returns the exit code.

    On the pool, ``kill`` SIGKILLs the worker running the first tool call, and the
    other worker finishes its turns. Like its Redis namespace, the demo's state is its
    own: unless
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
            return asyncio.run(_pool_demo(settings, sessions, kill))
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


WORKERS = 2
DEMO_LEASE_SECONDS = 3.0
"""The demo workers' lease: a killed worker's sessions are taken over this long after."""


@dataclass
class _Pool:
    """The demo's worker processes and what the demo saw of them."""

    procs: dict[str, subprocess.Popen[bytes]]
    """Worker name (``reactq-<pid>@<host>``) -> its process."""
    kill: bool
    attempts: dict[str, list[str]] = field(default_factory=dict)
    """Turn id -> the workers that started it, in order."""
    killed: str | None = None
    killed_turn: str | None = None

    def label(self, worker: str) -> str:
        """``worker-1``... by start order (the names carry a pid, which says little)."""
        names = list(self.procs)
        return f"worker-{names.index(worker) + 1}" if worker in names else worker

    def started(self, turn_id: str, worker: str) -> None:
        """A turn began (or began again) on ``worker``."""
        self.attempts.setdefault(turn_id, []).append(worker)

    def mid_tool(self, turn_id: str, worker: str) -> None:
        """A turn called its tool on ``worker``: the first time, kill that worker, while
        the tool runs (the other worker takes the turn over from its checkpoint)."""
        if not self.kill or self.killed is not None or worker not in self.procs:
            return
        self.killed, self.killed_turn = worker, turn_id
        self.procs[worker].send_signal(signal.SIGKILL)
        print(f"*** demo: SIGKILL to {self.label(worker)} while turn {turn_id} runs its tool")


async def _pool_demo(settings: Settings, sessions: int, kill: bool) -> int:
    tag = uuid.uuid4().hex[:6]
    namespace = f"{settings.namespace}-demo-{tag}"
    logs = Path(tempfile.mkdtemp(prefix="reactq-demo-logs-"))
    # A short lease, so that the killed worker's sessions are taken over in seconds
    # rather than half a minute: the producer's too, whose submissions a worker must
    # start within it (a drain message the killed worker had taken is sent again then).
    demo = settings.model_copy(
        update={
            "namespace": namespace,
            "lease_ttl_seconds": DEMO_LEASE_SECONDS,
            "reaper_interval_seconds": 1.0,
        }
    )
    # The workers read their settings back from this: the namespace, the lease, and the
    # model endpoint (the offline model, when this process started it).
    env = demo.child_env(PYTHONUNBUFFERED="1")
    print(
        f"reactq demo: Redis answers at {settings.redis_url}: starting {WORKERS} worker "
        f"processes (namespace {namespace}), 2 turns at a time each\n"
    )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reactq.cli",
                "worker",
                "--agents",
                DEMO_AGENT,
                # Two turns at a time: the turns spread over both workers.
                "--concurrency",
                "2",
                "--loglevel",
                "WARNING",
            ],
            env=env,
            stdout=open(logs / f"worker-{i + 1}.log", "wb"),
            stderr=subprocess.STDOUT,
        )
        for i in range(WORKERS)
    ]
    pool = _Pool({worker_name(p.pid): p for p in procs}, kill)
    producer = Producer(demo)
    ok = False
    try:
        deadline = time.monotonic() + 60
        while await producer.redis.hlen(producer.keys.workers) < len(procs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                print("reactq demo: the workers did not come up", file=sys.stderr)
                return 1
            await asyncio.sleep(0.2)
        ok = await _run_plan(producer, pool, _plan(sessions, tag))
        return 0 if ok else 1
    finally:
        await producer.close()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        forget_namespace(settings.redis_url, namespace)  # the demo leaves Redis as it was
        if ok:
            shutil.rmtree(logs, ignore_errors=True)
        else:
            print(f"reactq demo: the workers' logs are in {logs}/", file=sys.stderr)


async def _run_plan(producer: Producer, pool: _Pool, plan: list[tuple[str, str]]) -> bool:
    """Submit ``plan``, stream it, print the summary; whether every turn completed in
    order."""
    turns = Counter(s for s, _ in plan)
    watchers = {sid: asyncio.create_task(_watch(producer, sid, pool, turns[sid])) for sid in turns}
    await asyncio.sleep(0.1)
    started = time.monotonic()
    submitted = []
    for sid, message in plan:
        # The second message of a session goes in while its first still runs: a
        # double-text, queued behind it (strategy "enqueue").
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
    doubled = sum(1 for n in turns.values() if n > 1)
    print(
        f"\nsummary: {completed}/{len(plan)} turns completed over {len(turns)} sessions "
        f"({doubled} double-texted) in {elapsed:.2f}s; order kept per session: "
        f"{'yes' if order_ok else 'NO'}; submit->final p50 "
        f"{statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
    )
    started_on = Counter(w for workers in pool.attempts.values() for w in workers)
    ran = ", ".join(f"{pool.label(w)} {started_on[w]}" for w in pool.procs)
    print(f"turns started per worker: {ran}")
    if pool.killed is not None and pool.killed_turn is not None:
        taken = [t for t, ws in pool.attempts.items() if pool.killed in ws]
        others = sorted({pool.label(ws[-1]) for t, ws in pool.attempts.items() if t in taken})
        print(
            f"{pool.label(pool.killed)} was SIGKILLed mid-turn: the {len(taken)} turn(s) it "
            f"had started were finished by {', '.join(others)}; turn {pool.killed_turn} "
            f"resumed from its checkpoint (attempt {len(pool.attempts[pool.killed_turn])})"
        )
    return completed == len(plan) and order_ok


async def _watch(producer: Producer, sid: str, pool: _Pool, turns: int) -> None:
    """Print a session's events until its ``turns`` turns have each ended."""
    finals = 0
    worker_of: dict[str, str] = {}
    async for event in producer.subscribe(sid, after="0"):
        if event.type == "started":
            worker_of[event.turn_id] = event.worker
            pool.started(event.turn_id, event.worker)
        line = render(event, show_session=True)
        if line:
            print(line, flush=True)
        if event.type == "action" and event.turn_id in worker_of:
            pool.mid_tool(event.turn_id, worker_of[event.turn_id])
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
