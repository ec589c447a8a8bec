"""Gateway fan-out benchmark: many SSE subscribers on a few sessions, one gateway.

Starts one `reactq serve` process, connects N SSE subscribers spread over K
sessions, and publishes turn-shaped events (queued, started, thoughts, action,
observation, final) on those sessions at a fixed rate for a while. Reports
events/s delivered, p50/p99 publish->client latency and the gateway's RSS; then,
in the same run on the same Redis, the same subscribers reading Redis directly
(one XREAD BLOCK connection each, the bus's own subscribe) as the floor.

    .venv/bin/python bench/gateway.py --subscribers 1000 --sessions 10 --rate 20 --seconds 10

``--burst N`` measures a burst instead: N events published in one round trip to
one session that ``--subscribers`` readers watch, each reading as fast as it can.
A reader the gateway cuts (its stream ends early) counts as cut. It reports the
events each reader got, the readers cut and the delivery rate, beside the same
readers on Redis directly (the floor), as a ratio::

    .venv/bin/python bench/gateway.py --burst 1400 --subscribers 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from redis.asyncio import BlockingConnectionPool, Redis  # noqa: E402

from reactq.shared.bus_redis import RedisEventBus  # noqa: E402
from reactq.shared.events import (  # noqa: E402
    ActionEvent,
    BaseEvent,
    FinalEvent,
    ObservationEvent,
    QueuedEvent,
    StartedEvent,
    ThoughtEvent,
)
from reactq.shared.keys import Keys  # noqa: E402
from reactq.shared.redis_client import forget_namespace, lua_source  # noqa: E402
from reactq.shared.turns import TurnStatus  # noqa: E402


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@dataclass
class Tally:
    """What the subscribers received."""

    latencies: list[float] = field(default_factory=list)
    delivered: int = 0
    first: float = 0.0
    last: float = 0.0

    def record(self, ts: float) -> None:
        now = time.time()
        self.latencies.append(now - ts)
        self.delivered += 1
        self.first = self.first or now
        self.last = now


def turn_events(session: str, n: int) -> list[BaseEvent]:
    """One turn's worth of events, shaped like a real run's."""
    tid = f"t_bench{n}"
    base = {"session_id": session, "turn_id": tid}
    return [
        QueuedEvent(**base, agent="bench", message=f"question {n}"),
        StartedEvent(**base, seq=1, worker="bench"),
        ThoughtEvent(**base, seq=2, text="Let me look that up. " * 4),
        ActionEvent(**base, seq=3, tool="lookup", args={"key": f"k{n}"}),
        ObservationEvent(**base, seq=4, tool="lookup", output=json.dumps({"value": "x" * 200})),
        ThoughtEvent(**base, seq=5, text="Found it. " * 4),
        FinalEvent(**base, seq=6, text=f"answer {n}", status=TurnStatus.COMPLETED),
    ]


async def publish(bus: RedisEventBus, sessions: list[str], rate: float, seconds: float) -> int:
    """Publish events round-robin over the sessions at ``rate`` per session per second."""
    interval = 1.0 / (rate * len(sessions))
    start = time.monotonic()
    count = 0
    turn = 0
    pending: dict[str, list[BaseEvent]] = {s: [] for s in sessions}
    while time.monotonic() - start < seconds:
        session = sessions[count % len(sessions)]
        if not pending[session]:
            turn += 1
            pending[session] = turn_events(session, turn)
        event = pending[session].pop(0).model_copy(update={"ts": time.time()})
        await bus.publish(event)
        count += 1
        delay = start + count * interval - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    return count


async def sse_subscriber(port: int, session: str, tally: Tally, ready: asyncio.Event) -> None:
    """A minimal SSE client on a raw socket (cheap enough to run a thousand)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(
        f"GET /v1/sessions/{session}/events?after=$ HTTP/1.1\r\nHost: bench\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"retry:"):
                ready.set()
            elif line.startswith(b"data: "):
                # Chunked encoding puts size lines between; only data lines matter here.
                tally.record(json.loads(line[6:])["ts"])
    finally:
        writer.close()


async def redis_subscriber(
    bus: RedisEventBus, session: str, tally: Tally, ready: asyncio.Event
) -> None:
    subscription = bus.subscribe(session)
    await subscription.start()
    ready.set()
    async for event in subscription:
        tally.record(event.ts)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def wait_http(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the gateway exited")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            await writer.drain()
            ok = (await reader.readline()).startswith(b"HTTP/1.1 200")
            writer.close()
            if ok:
                return
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("the gateway did not start in 30 s")


async def run_phase(
    name: str,
    subscribers: int,
    sessions: list[str],
    args: argparse.Namespace,
    bus: RedisEventBus,
    start_one: object,
) -> dict[str, float]:
    tally = Tally()
    readies = [asyncio.Event() for _ in range(subscribers)]
    tasks = [
        asyncio.create_task(start_one(sessions[i % len(sessions)], tally, readies[i]))  # type: ignore[operator]
        for i in range(subscribers)
    ]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
    await asyncio.sleep(0.5)
    t0 = time.monotonic()
    published = await publish(bus, sessions, args.rate, args.seconds)
    expected = published * subscribers // len(sessions)
    deadline = time.monotonic() + 15
    while tally.delivered < expected and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - t0
    if name == "redis":
        # Let the blocking reads end by themselves (within block_ms): cancelling a
        # thousand of them at once can wedge the connection pool.
        await bus.close()
        await asyncio.wait(tasks, timeout=10)
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=10)
    span = max(tally.last - tally.first, 1e-9)
    return {
        "published": published,
        "expected": expected,
        "delivered": tally.delivered,
        "events_per_s": tally.delivered / span,
        "p50_ms": pct(tally.latencies, 50) * 1000,
        "p99_ms": pct(tally.latencies, 99) * 1000,
        "elapsed_s": elapsed,
    }


@dataclass
class Reader:
    """One burst reader's count, whether its stream ended early, and when it finished."""

    got: int = 0
    cut: bool = False
    done_at: float = 0.0


async def burst_sse_reader(port: int, session: str, want: int, ready: asyncio.Event) -> Reader:
    """Read an SSE stream until ``want`` events or its end (the gateway cut it)."""
    out = Reader()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(
        f"GET /v1/sessions/{session}/events?after=$ HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    )
    await writer.drain()
    try:
        while out.got < want:
            line = await reader.readline()
            if line.startswith(b"retry:"):
                ready.set()
            elif line.startswith(b"id: "):
                out.got += 1
            elif line in (b"0\r\n", b""):
                # The last chunk (or the connection's end) before all came: cut.
                out.cut = True
                break
    finally:
        out.done_at = time.monotonic()
        writer.close()
    return out


async def burst_redis_reader(
    bus: RedisEventBus, session: str, want: int, ready: asyncio.Event
) -> Reader:
    out = Reader()
    subscription = bus.subscribe(session)
    await subscription.start()
    ready.set()
    try:
        async for _event in subscription:
            out.got += 1
            if out.got >= want:
                break
    finally:
        out.done_at = time.monotonic()
        await subscription.aclose()
    return out


async def publish_burst(redis: Redis, keys: Keys, session: str, count: int) -> None:
    """``count`` events with the bus's own script, in one pipeline (one round trip)."""
    script = redis.register_script(lua_source("reactq.shared.bus", "bus_append", "bus_publish"))
    pipe = redis.pipeline(transaction=False)
    events = [e for n in range(count // 7 + 1) for e in turn_events(session, n)][:count]
    for event in events:
        payload = event.model_dump_json(exclude={"id"})
        await script(
            keys=[keys.events(session), keys.channel(session)],
            args=[max(10_000, count), 600, payload],
            client=pipe,
        )
    await pipe.execute()


async def run_burst(
    name: str, args: argparse.Namespace, redis: Redis, keys: Keys, start_one: object
) -> dict[str, float]:
    session = f"bench-burst-{name}-{uuid.uuid4().hex[:6]}"
    readies = [asyncio.Event() for _ in range(args.subscribers)]
    tasks = [
        asyncio.create_task(start_one(session, args.burst, ready))  # type: ignore[operator]
        for ready in readies
    ]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
    await asyncio.sleep(0.5)
    t0 = time.monotonic()
    await publish_burst(redis, keys, session, args.burst)
    done, pending = await asyncio.wait(tasks, timeout=60)
    for task in pending:
        task.cancel()
    readers: list[Reader] = [t.result() for t in done]
    readers += [Reader(cut=True) for _ in pending]
    await redis.delete(keys.events(session))
    got = sorted(r.got for r in readers)
    elapsed = max((r.done_at for r in readers if r.done_at), default=t0) - t0
    return {
        "min": got[0],
        "median": got[len(got) // 2],
        "max": got[-1],
        "cut": sum(r.cut for r in readers),
        "delivered": sum(got),
        "events_per_s": sum(got) / max(elapsed, 1e-9),
        "elapsed_s": elapsed,
    }


async def bench_burst(
    args: argparse.Namespace, namespace: str, proc: subprocess.Popen[bytes], port: int
) -> None:
    keys = Keys(namespace)
    redis = Redis.from_pool(
        BlockingConnectionPool.from_url(
            args.redis, max_connections=args.subscribers + 50, timeout=30, socket_timeout=10
        )
    )
    bus = RedisEventBus(redis, keys, block_ms=2000)
    try:
        await wait_http(port, proc)

        async def via_gateway(session: str, want: int, ready: asyncio.Event) -> Reader:
            return await burst_sse_reader(port, session, want, ready)

        async def via_redis(session: str, want: int, ready: asyncio.Event) -> Reader:
            return await burst_redis_reader(bus, session, want, ready)

        gateway = await run_burst("gateway", args, redis, keys, via_gateway)
        rss, peak = rss_mb(proc.pid)
        floor = await run_burst("redis", args, redis, keys, via_redis)
    finally:
        await bus.close()
        await redis.aclose()
    print(
        f"a burst of {args.burst} events (one pipeline) to {args.subscribers} readers "
        "of one session"
    )
    print(f"{'':24}{'events per reader min/median/max':>34}{'cut':>6}{'events/s':>12}")
    for name, r in (("one gateway process", gateway), ("Redis directly (floor)", floor)):
        spread = f"{r['min']:.0f}/{r['median']:.0f}/{r['max']:.0f}"
        print(f"{name:24}{spread:>34}{r['cut']:>6.0f}{r['events_per_s']:>12.0f}")
    delivered = gateway["delivered"] / max(floor["delivered"], 1)
    rate = gateway["events_per_s"] / max(floor["events_per_s"], 1e-9)
    print(f"gateway / floor: {delivered:.0%} of the events delivered, {rate:.2f}x the rate")
    print(f"gateway RSS after the burst: {rss:.0f} MiB (peak {peak:.0f} MiB)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--rate", type=float, default=20.0, help="events/s per session")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--burst", type=int, default=0, help="measure a burst of this many events instead"
    )
    parser.add_argument(
        "--redis", default=os.environ.get("REACTQ_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    return parser.parse_args()


def start_gateway(args: argparse.Namespace, namespace: str) -> tuple[subprocess.Popen[bytes], int]:
    """A `reactq serve` process on a free loopback port (no keys: loopback only)."""
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="reactq-bench-gw-")
    env = {
        **os.environ,
        "REACTQ_REDIS_URL": args.redis,
        "REACTQ_NAMESPACE": namespace,
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/state.db",
        "REACTQ_API_KEYS": "",
    }
    reactq = str(Path(sys.executable).parent / "reactq")
    with open(Path(tmp) / "gateway.log", "wb") as log:
        proc = subprocess.Popen(
            [reactq, "serve", "--port", str(port), "--loglevel", "warning"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc, port


async def bench(
    args: argparse.Namespace, namespace: str, proc: subprocess.Popen[bytes], port: int
) -> None:
    keys = Keys(namespace)
    redis = Redis.from_pool(
        BlockingConnectionPool.from_url(
            args.redis, max_connections=args.subscribers + 50, timeout=30, socket_timeout=10
        )
    )
    bus = RedisEventBus(redis, keys, block_ms=2000)
    sessions = [f"bench-{i}" for i in range(args.sessions)]
    try:
        await wait_http(port, proc)
        idle_rss, _ = rss_mb(proc.pid)

        async def via_gateway(session: str, tally: Tally, ready: asyncio.Event) -> None:
            await sse_subscriber(port, session, tally, ready)

        async def via_redis(session: str, tally: Tally, ready: asyncio.Event) -> None:
            await redis_subscriber(bus, session, tally, ready)

        gateway = await run_phase("gateway", args.subscribers, sessions, args, bus, via_gateway)
        rss, peak = rss_mb(proc.pid)
        floor = await run_phase("redis", args.subscribers, sessions, args, bus, via_redis)
    finally:
        for s in sessions:
            await redis.delete(keys.events(s))
        await bus.close()
        await redis.aclose()

    print(
        f"{args.subscribers} subscribers on {args.sessions} sessions, "
        f"{args.rate:g} events/s per session for {args.seconds:g} s "
        f"({gateway['published']:.0f} events published per phase)"
    )
    print(f"{'':24}{'delivered':>14}{'events/s':>12}{'p50':>10}{'p99':>10}")
    for name, r in (("one gateway process", gateway), ("Redis directly (floor)", floor)):
        print(
            f"{name:24}{r['delivered']:>7.0f}/{r['expected']:<6.0f}{r['events_per_s']:>12.0f}"
            f"{r['p50_ms']:>8.1f}ms{r['p99_ms']:>8.1f}ms"
        )
    print(
        f"gateway RSS: {idle_rss:.0f} MiB idle, {rss:.0f} MiB after the run (peak {peak:.0f} MiB)"
    )


def main() -> None:
    args = parse_args()
    namespace = f"bench-gw-{uuid.uuid4().hex[:8]}"
    proc, port = start_gateway(args, namespace)
    try:
        asyncio.run((bench_burst if args.burst else bench)(args, namespace, proc, port))
    finally:
        proc.terminate()
        proc.wait(15)
        forget_namespace(args.redis, namespace)  # whatever the run left in Redis


if __name__ == "__main__":
    main()
