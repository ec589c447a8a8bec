"""Count the Redis and SQL round trips one turn costs the worker.

The worker's kernel (``Bridge``: the drain, the runner, the stores, the bus) runs
in this process against the real Redis and a real SQLite or PostgreSQL database;
the scripted model answers over HTTP (2 model calls and 1 tool call per turn, as
in ``pool.py``). Every Redis command the kernel sends is counted at the socket (a
pipeline or a Lua script is one round trip), and every SQL statement and
transaction at the engine. Celery's own traffic (the drain message's delivery,
its ack) is not the kernel's and is not counted here: ``pool.py --scenario cpu``
measures the whole worker process.

    .venv/bin/python bench/roundtrips.py              # SQLite and PostgreSQL
    .venv/bin/python bench/roundtrips.py --turns 50 --detail
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import hashlib
import os
import pstats
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from redis.asyncio.connection import AbstractConnection
from sqlalchemy import event
from sqlalchemy.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.proc import cpu_seconds  # noqa: E402
from reactq.shared.redis_client import forget_namespace  # noqa: E402
from reactq.shared.settings import Settings  # noqa: E402
from reactq.shared.turns import TurnRequest  # noqa: E402
from reactq.worker.agent.llm.scripted_server import ScriptedServer  # noqa: E402
from reactq.worker.bridge import Bridge  # noqa: E402
from tests.helpers import lookup_then_answer  # noqa: E402
from tests.pool_agents import agent  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from state import scratch_database  # noqa: E402

REDIS = os.environ.get("REACTQ_REDIS_URL", "redis://127.0.0.1:6379/0")


class Counter:
    """What the kernel sent, while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.redis: collections.Counter[str] = collections.Counter()
        self.sql: collections.Counter[str] = collections.Counter()
        self.scripts: dict[str, str] = {}
        self.loop_cpu = 0.0
        self.store_cpu = 0.0
        # The SQL hooks fire on the SQLite store's threads (its writer and readers).
        self.sql_lock = threading.Lock()

    def sql_event(self, label: str) -> None:
        if self.on:
            with self.sql_lock:
                self.sql[label] += 1

    def name_scripts(self) -> None:
        """Map every Lua script's SHA to a name (EVALSHA shows only the SHA): the
        module constant holding its source."""
        for name, module in list(sys.modules.items()):
            if not name.startswith("reactq."):
                continue
            for attr, value in vars(module).items():
                if isinstance(value, str) and "redis.call" in value:
                    sha = hashlib.sha1(value.encode()).hexdigest()
                    self.scripts[sha] = f"{name.rpartition('.')[2]}.{attr}"

    def redis_command(self, args: Any) -> None:
        if not self.on:
            return
        # One packed write is one round trip; a pipeline packs several commands.
        names = []
        chunks = args if isinstance(args, list) else [args]
        for chunk in chunks:
            text = bytes(chunk).decode("utf-8", "replace")
            parts = text.split("\r\n")
            if len(parts) > 2 and parts[0].startswith("*"):
                name = parts[2].upper()
                if name == "EVALSHA" and len(parts) > 4:
                    name = f"lua:{self.scripts.get(parts[4], parts[4][:8])}"
                names.append(name)
        label = names[0] if len(names) == 1 else f"pipeline({'+'.join(names)})"
        self.redis[label] += 1


COUNT = Counter()
READ_END = "ROLLBACK (a read's end)"
ALONE = "(statements run alone: no BEGIN/COMMIT)"


def _autocommit(conn: Any) -> bool:
    """Whether the connection runs each statement as its own transaction (no BEGIN,
    COMMIT or ROLLBACK reaches the server; SQLAlchemy's events fire all the same)."""
    return conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"


def patch() -> None:
    """Count at the socket (Redis) and at the engine (SQL)."""
    original = AbstractConnection.send_packed_command

    async def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        COUNT.redis_command(command)
        await original(self, command, check_health)

    AbstractConnection.send_packed_command = send_packed_command  # type: ignore[method-assign]

    @event.listens_for(Engine, "before_cursor_execute")
    def statement(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        COUNT.sql_event(" ".join(sql.split()[:4])[:60])

    @event.listens_for(Engine, "commit")
    def commit(conn: Any) -> None:
        if not _autocommit(conn):
            COUNT.sql_event("COMMIT")

    @event.listens_for(Engine, "rollback")
    def rollback(conn: Any) -> None:
        COUNT.sql_event(ALONE if _autocommit(conn) else READ_END)


def measure(backend: str, turns: int) -> None:
    server = ScriptedServer(lookup_then_answer, latency=0.0, max_requests=10)
    server.start_in_thread()
    namespace = f"rt{uuid.uuid4().hex[:8]}"
    try:
        with scratch_database(backend) as url:
            settings = Settings.from_env(
                {
                    "REACTQ_REDIS_URL": REDIS,
                    "REACTQ_NAMESPACE": namespace,
                    "REACTQ_DATABASE_URL": url,
                    "OPENAI_BASE_URL": server.base_url,
                    "OPENAI_API_KEY": "bench",
                    "REACTQ_CONCURRENCY": "4",
                }
            )
            bridge = Bridge(settings, {"e2e": agent}, f"rt-{namespace}")
            bridge.start()
            try:
                drainer = bridge.drainer
                assert drainer is not None

                async def one(i: int) -> None:
                    sid = f"rt-{namespace}-{i}"
                    turn = TurnRequest(session_id=sid, message=f"turn {i}", agent="e2e")
                    await drainer.queue.submit(turn)
                    COUNT.on = True
                    ran = await drainer.drain(sid)
                    COUNT.on = False
                    assert ran == 1, ran

                for i in range(5):  # warm: scripts loaded, connections open, caches
                    bridge.run(one(-1 - i))
                COUNT.redis.clear()
                COUNT.sql.clear()
                loop_thread = bridge.run(_native_id())
                cpu0, store0 = thread_cpu(loop_thread), store_threads_cpu()
                profiler = cProfile.Profile() if ARGS.profile else None
                if profiler is not None:
                    bridge.loop.call_soon_threadsafe(profiler.enable)
                for i in range(turns):
                    bridge.run(one(i))
                if profiler is not None:
                    bridge.run(_call(profiler.disable))
                    stats = pstats.Stats(profiler)
                    stats.sort_stats(ARGS.profile).print_stats(60)
                COUNT.loop_cpu = (thread_cpu(loop_thread) - cpu0) / turns
                store1 = store_threads_cpu()
                used = sum(cpu - store0.get(tid, 0.0) for tid, cpu in store1.items())
                COUNT.store_cpu = used / turns
            finally:
                bridge.stop()
    finally:
        server.stop()
        forget_namespace(REDIS, namespace)
    report(backend, turns)


async def _call(fn: Any) -> None:
    fn()


async def _native_id() -> int:
    return threading.get_native_id()


def thread_cpu(tid: int) -> float:
    """CPU seconds (user + system) a thread of this process has used."""
    return cpu_seconds(f"/proc/self/task/{tid}/stat")


def store_threads_cpu() -> dict[int, float]:
    """CPU seconds so far of the SQLite store's threads (its writer and readers), by
    native id: the SQL statements run there, not on the loop."""
    return {
        thread.native_id: thread_cpu(thread.native_id)
        for thread in threading.enumerate()
        if thread.name.startswith("reactq-sqlite") and thread.native_id is not None
    }


def report(backend: str, turns: int) -> None:
    redis_total = sum(COUNT.redis.values()) / turns
    ends = ("COMMIT", "ROLLBACK", ALONE)
    statements = sum(v for k, v in COUNT.sql.items() if not k.startswith(ends))
    commits = COUNT.sql["COMMIT"]
    print(f"{backend}: one turn (2 model calls + 1 tool call, a new session), worker kernel")
    print(f"  loop thread CPU    {COUNT.loop_cpu * 1000:5.1f} ms (one turn at a time)")
    if COUNT.store_cpu:
        print(f"  SQL store threads  {COUNT.store_cpu * 1000:5.1f} ms (SQLite's transactions)")
    print(f"  Redis round trips  {redis_total:5.1f}")
    reads = COUNT.sql[READ_END] / turns
    alone = COUNT.sql[ALONE] / turns
    print(f"  SQL statements     {statements / turns:5.1f}   write transactions "
          f"{commits / turns:4.1f}   reads {reads:4.1f}   runs without a "
          f"transaction {alone:4.1f}")  # fmt: skip
    if ARGS.detail:
        for name, n in COUNT.redis.most_common():
            print(f"    redis {n / turns:5.1f}  {name}")
        for name, n in COUNT.sql.most_common():
            print(f"    sql   {n / turns:5.1f}  {name}")


ARGS = argparse.Namespace(detail=False, profile=None)


def main() -> None:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], action="append")
    parser.add_argument("--detail", action="store_true", help="list every command")
    parser.add_argument(
        "--profile",
        choices=["cumulative", "tottime"],
        help="cProfile the loop thread (SQLite's statements run on the store's threads)",
    )
    ARGS = parser.parse_args()
    COUNT.name_scripts()
    patch()
    for backend in ARGS.backend or ["sqlite", "postgres"]:
        COUNT.redis.clear()
        COUNT.sql.clear()
        measure(backend, ARGS.turns)


if __name__ == "__main__":
    main()
