"""Pool benchmark: N turns over K sessions through real worker processes.

Prints turns/s and p50/p99 from submit to ``started`` and to ``final``, and in
the same run, on the same Redis, a bare Celery no-op task round trip as the
floor, with the ratio.

    .venv/bin/python bench/pool.py --turns 400 --sessions 40 --workers 2 --latency 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis as redis_sync

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from producer import Producer  # noqa: E402
from shared.settings import Settings  # noqa: E402
from tests.helpers import WorkerPool, lookup_then_answer  # noqa: E402
from worker.agent.llm.scripted_server import ScriptedServer  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


async def bench_pool(env: dict[str, str], turns: int, sessions: int) -> dict[str, float]:
    async with Producer(Settings.from_env(env)) as producer:
        run = uuid.uuid4().hex[:6]
        sids = [f"bench-{run}-{i}" for i in range(sessions)]
        to_started: list[float] = []
        to_final: list[float] = []

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            handle = await producer.submit(sids[i % sessions], f"turn {i}", agent="e2e")
            async for event in handle.events():
                if event.type == "started" and event.attempt == 1:
                    to_started.append(time.perf_counter() - t0)
                if event.type == "final":
                    to_final.append(time.perf_counter() - t0)
                    if event.status != "completed":
                        raise RuntimeError(f"turn ended {event.status}: {event.text}")

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(turns)))
        elapsed = time.perf_counter() - start
    return {
        "turns/s": turns / elapsed,
        "started p50": statistics.median(to_started),
        "started p99": pct(to_started, 99),
        "final p50": statistics.median(to_final),
        "final p99": pct(to_final, 99),
    }


def bench_noop(env: dict[str, str], tasks: int, concurrency: int) -> dict[str, float]:
    """Round trips of a no-op Celery task (send, run, result back through Redis)."""
    os.environ.update(env)
    from bench.noop_app import noop

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.noop_app",
            "worker",
            "--pool=threads",
            f"--concurrency={concurrency}",
            "--loglevel=WARNING",
            "--without-mingle",
            "--without-gossip",
            f"--queues={env['REACTQ_NAMESPACE']}.noop",
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        noop.delay(0).get(timeout=60)  # warm: the worker is up
        latencies = []
        for i in range(min(tasks, 200)):
            t0 = time.perf_counter()
            noop.delay(i).get(timeout=30)
            latencies.append(time.perf_counter() - t0)
        start = time.perf_counter()
        results = [noop.delay(i) for i in range(tasks)]
        for r in results:
            r.get(timeout=60)
        elapsed = time.perf_counter() - start
        return {
            "tasks/s": tasks / elapsed,
            "round trip p50": statistics.median(latencies),
            "round trip p99": pct(latencies, 99),
        }
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per model call")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REACTQ_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    args = parser.parse_args()

    namespace = f"bench{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="reactq-bench-"))
    server = ScriptedServer(lookup_then_answer, latency=args.latency).start_in_thread()
    env = {
        "REACTQ_REDIS_URL": args.redis_url,
        "REACTQ_NAMESPACE": namespace,
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "bench",
    }
    pool = WorkerPool(env, tmp, concurrency=args.concurrency)
    try:
        pool.start(args.workers)
        pool.wait_ready(args.redis_url, namespace, args.workers)
        ours = asyncio.run(bench_pool(env, args.turns, args.sessions))
    finally:
        pool.stop()
        server.stop()
    floor = bench_noop(env, args.turns, args.concurrency)
    _cleanup(args.redis_url, namespace)

    print(
        f"reactq pool: {args.turns} turns over {args.sessions} sessions, {args.workers} "
        f"workers x {args.concurrency}, model latency {args.latency * 1000:.0f} ms/call, "
        "2 model calls + 1 tool call per turn, SQLite state"
    )
    print(f"  turns/s            {ours['turns/s']:10.1f}")
    print(f"  submit->started    p50 {ms(ours['started p50'])}   p99 {ms(ours['started p99'])}")
    print(f"  submit->final      p50 {ms(ours['final p50'])}   p99 {ms(ours['final p99'])}")
    print(f"bare Celery no-op task (same Redis, 1 worker x {args.concurrency} threads)")
    print(f"  tasks/s            {floor['tasks/s']:10.1f}")
    print(
        f"  round trip         p50 {ms(floor['round trip p50'])}   "
        f"p99 {ms(floor['round trip p99'])}"
    )
    print("ratio")
    print(
        f"  throughput  reactq turns/s / no-op tasks/s   = {ours['turns/s'] / floor['tasks/s']:.2f}"
    )
    print(
        f"  latency     reactq submit->started p50 / no-op round trip p50 = "
        f"{ours['started p50'] / floor['round trip p50']:.2f}"
    )


def _cleanup(url: str, namespace: str) -> None:
    client = redis_sync.Redis.from_url(url)
    try:
        for pattern in (f"{namespace}*", f"_kombu.binding.{namespace}*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


if __name__ == "__main__":
    main()
