"""State store benchmark: appends/s, reads/s and the cost of a turn commit, per backend.

    .venv/bin/python bench/state.py [--ops 500] [--backends memory,sqlite,postgres,redis]

Each backend runs the same work on one event loop, one operation at a time (the
latency a single turn sees), then with ``--concurrency`` sessions at once (what a
worker holding many turns sees). PostgreSQL gets a scratch database (created and
dropped); Redis a scratch namespace (deleted). A backend that cannot be reached
prints its reason instead of figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.state import StateStore, TurnRecord, open_store
from reactq.shared.turns import TurnStatus

PG = os.environ.get("REACTQ_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("REACTQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

TURN = [
    ChatMessage(role="user", content="What's the weather in Paris and in Rome?"),
    ChatMessage(
        role="assistant",
        tool_calls=[
            ToolCall(id="c1", name="weather", arguments='{"city": "Paris"}'),
            ToolCall(id="c2", name="weather", arguments='{"city": "Rome"}'),
        ],
    ),
    ChatMessage(role="tool", content="18C, cloudy", name="weather", tool_call_id="c1"),
    ChatMessage(role="tool", content="24C, sunny", name="weather", tool_call_id="c2"),
    ChatMessage(role="assistant", content="Paris: 18C and cloudy. Rome: 24C and sunny."),
    ChatMessage(role="assistant", content="Anything else?"),
]


async def admin_sql(statement: str) -> None:
    """Run one statement on the PostgreSQL server's admin connection."""
    import asyncpg

    conn = await asyncpg.connect(PG.replace("postgresql+asyncpg://", "postgresql://"), timeout=5)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextmanager
def scratch_database(backend: str) -> Iterator[str]:
    """``scratch_url`` for a caller without a running loop (the pool benchmarks, whose
    workers are other processes): an empty SQLite file or PostgreSQL database."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite+aiosqlite:///{tmp}/state.db"
        return
    if backend != "postgres":
        raise SystemExit(f"unknown backend {backend!r}")
    name = f"reactq_bench_{uuid.uuid4().hex[:8]}"
    asyncio.run(admin_sql(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{PG.rpartition('/')[0]}/{name}"
    finally:
        asyncio.run(admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@asynccontextmanager
async def scratch_url(backend: str) -> AsyncIterator[str]:
    """A URL of an empty store of ``backend``, cleaned up afterwards."""
    if backend == "memory":
        yield "memory://"
    elif backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite+aiosqlite:///{tmp}/bench.db"
    elif backend == "postgres":
        name = f"reactq_bench_{uuid.uuid4().hex[:8]}"
        await admin_sql(f'CREATE DATABASE "{name}"')
        try:
            yield f"{PG.rpartition('/')[0]}/{name}"
        finally:
            await admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    elif backend == "redis":
        from redis.asyncio import Redis

        namespace = f"rqbench{uuid.uuid4().hex[:8]}"
        try:
            yield f"{REDIS}?namespace={namespace}"
        finally:
            client = Redis.from_url(REDIS)
            try:
                batch = [k async for k in client.scan_iter(match=f"{namespace}*", count=1000)]
                if batch:
                    await client.delete(*batch)
            finally:
                await client.aclose()
    else:
        raise SystemExit(f"unknown backend {backend!r}")


async def timed(n: int, op: Callable[[int], Awaitable[None]]) -> list[float]:
    """Run ``op(i)`` n times in sequence; return each duration in seconds."""
    durations = []
    for i in range(n):
        start = time.perf_counter()
        await op(i)
        durations.append(time.perf_counter() - start)
    return durations


async def concurrent_rate(
    sessions: int, per: int, op: Callable[[int, int], Awaitable[None]]
) -> float:
    """Operations per second with ``sessions`` coroutines doing ``per`` each."""

    async def one(k: int) -> None:
        for i in range(per):
            await op(k, i)

    start = time.perf_counter()
    await asyncio.gather(*(one(k) for k in range(sessions)))
    return sessions * per / (time.perf_counter() - start)


async def measure(store: StateStore, ops: int, concurrency: int) -> dict[str, float]:
    run = uuid.uuid4().hex[:6]
    s = f"bench-{run}"
    await store.ensure_session(s, "bench")
    appends = await timed(
        ops, lambda i: store.append(s, [ChatMessage(role="user", content=f"m{i}")])
    )
    reader = f"bench-{run}-r"
    await store.ensure_session(reader, "bench")
    await store.append(reader, [*TURN] * 8)  # a 48-message conversation
    reads = await timed(ops, lambda i: store.get_messages(reader))

    async def commit(i: int) -> None:
        rec = TurnRecord(turn_id=f"{s}-t{i}", session_id=s, status=TurnStatus.COMPLETED)
        await store.commit_turn(s, TURN, rec, fence=1)

    commits = await timed(max(ops // 5, 20), commit)
    sessions = [f"bench-{run}-c{k}" for k in range(concurrency)]
    for name in sessions:
        await store.ensure_session(name, "bench")
    per = max(ops // concurrency, 5)
    conc_appends = await concurrent_rate(
        concurrency,
        per,
        lambda k, i: store.append(sessions[k], [ChatMessage(role="user", content=f"{i}")]),
    )
    conc_reads = await concurrent_rate(concurrency, per, lambda k, i: _read(store, reader))
    return {
        "appends/s": len(appends) / sum(appends),
        "reads/s (48 msgs)": len(reads) / sum(reads),
        "commit 6 msgs p50 ms": statistics.median(commits) * 1000,
        "commit 6 msgs p95 ms": statistics.quantiles(commits, n=20)[18] * 1000,
        f"appends/s x{concurrency}": conc_appends,
        f"reads/s x{concurrency}": conc_reads,
    }


async def _read(store: StateStore, session_id: str) -> None:
    await store.get_messages(session_id)


async def bench(backend: str, ops: int, concurrency: int) -> dict[str, float] | str:
    try:
        async with scratch_url(backend) as url:
            store = await open_store(url)
            try:
                return await measure(store, ops, concurrency)
            finally:
                await store.close()
    except (OSError, ImportError) as exc:
        return f"unavailable: {type(exc).__name__}: {exc}"[:60]


def main() -> None:
    """Run the benchmark and print a table, one column per backend."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=500, help="operations per measurement")
    parser.add_argument("--concurrency", type=int, default=16, help="sessions at once")
    parser.add_argument("--backends", default="memory,sqlite,postgres,redis")
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    results = {b: asyncio.run(bench(b, args.ops, args.concurrency)) for b in backends}
    rows = next((list(r) for r in results.values() if isinstance(r, dict)), [])
    width = max([len(r) for r in rows] + [10])
    print(f"{'':<{width}}" + "".join(f"{b:>12}" for b in backends))
    for row in rows:
        cells = "".join(
            (f"{r[row]:>12.0f}" if r[row] >= 100 else f"{r[row]:>12.3f}")
            if isinstance(r, dict)
            else f"{'n/a':>12}"
            for r in results.values()
        )
        print(f"{row:<{width}}{cells}")
    for backend, result in results.items():
        if isinstance(result, str):
            print(f"{backend}: {result}")


if __name__ == "__main__":
    main()
