"""SQLite group commit: write transactions, BEGIN/COMMIT pairs and the writer thread's
CPU per turn, with many turns at once.

    .venv/bin/python bench/sqlite_group.py [--turns 3200] [--concurrency 64]
        [--pause 0.05] [--group 1,32] [--memory]

Each of ``concurrency`` coroutines runs turns on sessions of its own (a new one every
5 turns: ``begin_turn`` reads the whole history), each turn a ``begin_turn`` then a
``commit_turn`` (two write transactions), as a worker holding that many turns does.
``--pause``: seconds between a turn's two writes, drawn from 0 to twice that (the
model's latency; 0 makes every write queue behind the others). ``--group``: the
bounds compared (``_GROUP`` in shared/state/sql/sqlite_lanes.py; 1 is each write in a
transaction of its own, as before group commit). CPU figures come from /proc (the
writer thread's and the whole process's), in 10 ms ticks: run enough turns.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event

from bench.proc import cpu_seconds
from bench.state import TURN
from reactq.shared.state import TurnRecord
from reactq.shared.state.sql import sqlite_lanes
from reactq.shared.state.sql.store import SqlStateStore
from reactq.shared.turns import TurnStatus

WRITER = "reactq-sqlite-writer-0"


def writer_stat() -> str:
    """The /proc stat file of the store's writer thread."""
    for thread in threading.enumerate():
        if thread.name == WRITER:
            return f"/proc/self/task/{thread.native_id}/stat"
    raise RuntimeError(f"no thread {WRITER}")


async def measure(url: str, turns: int, concurrency: int, pause: float) -> dict[str, float]:
    """Run the turns on a fresh store at ``url``; the figures per turn."""
    store = await SqlStateStore.open(url)
    counts = {"begin": 0, "commit": 0}

    def on_begin(conn: object) -> None:
        counts["begin"] += 1

    def on_commit(conn: object) -> None:
        counts["commit"] += 1

    event.listen(store.sync_engine, "begin", on_begin)
    event.listen(store.sync_engine, "commit", on_commit)
    per = max(turns // concurrency, 1)

    async def turns_of(k: int) -> None:
        session = ""
        for i in range(per):
            if i % 5 == 0:
                session = f"s{k}-{i}"
            fence = i % 5 + 1
            await store.begin_turn(session, "bench", fence=fence)
            if pause:
                await asyncio.sleep(random.uniform(0, 2 * pause))
            record = TurnRecord(
                turn_id=f"{session}-t{i}", session_id=session, status=TurnStatus.COMPLETED
            )
            await store.commit_turn(session, TURN, record, fence=fence)

    try:
        await store.begin_turn("warm-up", "bench")  # starts the threads
        stat = writer_stat()
        counts.update(begin=0, commit=0)
        writer0, process0 = cpu_seconds(stat), cpu_seconds("/proc/self/stat")
        start = time.perf_counter()
        await asyncio.gather(*(turns_of(k) for k in range(concurrency)))
        wall = time.perf_counter() - start
        writer = cpu_seconds(stat) - writer0
        process = cpu_seconds("/proc/self/stat") - process0
    finally:
        await store.close()
    n = per * concurrency
    return {
        "BEGIN per turn": counts["begin"] / n,
        "COMMIT per turn": counts["commit"] / n,
        "writer CPU ms/turn": writer / n * 1000,
        "process CPU ms/turn": process / n * 1000,
        "turns/s": n / wall,
    }


def main() -> None:
    """Run the benchmark once per group bound; print a table, a column each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=3200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--pause", type=float, default=0.05, help="s between a turn's writes")
    parser.add_argument("--group", default="1,32", help="group bounds to compare")
    parser.add_argument("--memory", action="store_true", help="in-memory SQLite")
    args = parser.parse_args()
    bounds = [int(b) for b in args.group.split(",")]
    results = []
    for bound in bounds:
        sqlite_lanes._GROUP = bound
        with tempfile.TemporaryDirectory() as tmp:
            url = "sqlite+aiosqlite://" if args.memory else f"sqlite+aiosqlite:///{tmp}/g.db"
            results.append(asyncio.run(measure(url, args.turns, args.concurrency, args.pause)))
    print(
        f"{args.turns} turns, {args.concurrency} at once, "
        f"{args.pause * 1000:.0f} ms mean pause between a turn's writes"
    )
    print(f"{'group bound':<22}" + "".join(f"{b:>10}" for b in bounds))
    for row in results[0]:
        print(f"{row:<22}" + "".join(f"{result[row]:>10.3f}" for result in results))


if __name__ == "__main__":
    main()
