"""Pool benchmarks: real `reactq worker` processes, the scripted model over HTTP.

Scenarios (``--scenario``, default ``basic``):

- ``basic``: N turns over K sessions; turns/s and p50/p99 from submit to
  ``started`` and to ``final``; beside it, on the same Redis, a bare Celery no-op
  task round trip as the floor, with the ratio.
- ``inflight``: one worker process, model latency 1 s per call, 2 calls per turn,
  1,000 turns over 1,000 sessions submitted at once: turns/s, peak turns in
  flight (against LangGraph Platform's default of 10 per worker), peak RSS, p99.
- ``recovery``: SIGKILL the worker running a turn; time until the re-run turn's
  ``final`` (lease TTL + reaper period bound it).
- ``scaling``: turns/s and CPU per turn of the workers, Redis and PostgreSQL
  (from /proc and INFO cpu) with 1, 2 and 4 worker processes on PostgreSQL state:
  which part saturates first (docs/scaling.md works from these figures).
- ``approval``: turns whose tool call needs a person, parked; the latency from a
  decision (``Producer.approve``) to the resumed attempt's ``started``, p50/p99.
- ``cpu``: the worker process's CPU milliseconds per turn (all threads, from
  /proc) on SQLite and PostgreSQL, beside a bare Celery worker's CPU per no-op
  task on the same Redis, with the ratio. ``--sessions`` defaults to one per turn.
- ``checkpoint``: what step checkpoints cost: turns of ``--steps`` tool steps run
  by the worker's ``AgentRunner`` (scripted model, no latency) on SQLite and
  PostgreSQL, with checkpoints and with a store that skips them (one commit per
  turn); ms per turn and the ratio.

    .venv/bin/python bench/pool.py --scenario basic --turns 400 --sessions 40 --latency 0.05
    .venv/bin/python bench/pool.py --scenario inflight
    .venv/bin/python bench/pool.py --scenario recovery
    .venv/bin/python bench/pool.py --scenario scaling
    .venv/bin/python bench/pool.py --scenario checkpoint --turns 200 --steps 3
    .venv/bin/python bench/pool.py --scenario approval --turns 100
    .venv/bin/python bench/pool.py --scenario cpu --turns 300 --latency 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.proc import TICK  # noqa: E402
from bench.proc import cpu_seconds as proc_cpu_seconds  # noqa: E402
from reactq.producer import Producer  # noqa: E402
from reactq.shared.redis_client import forget_namespace  # noqa: E402
from reactq.shared.settings import Settings  # noqa: E402
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer  # noqa: E402
from tests.helpers import WorkerPool, lookup_then_answer, worker_pid  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) the process has used so far."""
    return proc_cpu_seconds(f"/proc/{pid}/stat")


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Bench:
    """One pool (workers + scripted model) in a fresh namespace."""

    def __init__(
        self,
        args: argparse.Namespace,
        latency: float,
        handler: Any = lookup_then_answer,
        agents: str = "tests.pool_agents:agent",
        **env: str,
    ) -> None:
        self.args = args
        self.agents = agents
        self.namespace = f"bench{uuid.uuid4().hex[:8]}"
        self.tmp = Path(tempfile.mkdtemp(prefix="reactq-bench-"))
        self.server = ScriptedServer(handler, latency=latency, max_requests=10)
        self.server.start_in_thread()
        self.env = {
            "REACTQ_REDIS_URL": args.redis_url,
            "REACTQ_NAMESPACE": self.namespace,
            "REACTQ_DATABASE_URL": args.database_url
            or f"sqlite+aiosqlite:///{self.tmp / 'state.db'}",
            "OPENAI_BASE_URL": self.server.base_url,
            "OPENAI_API_KEY": "bench",
            **env,
        }

    def pool(self, workers: int, concurrency: int) -> WorkerPool:
        pool = WorkerPool(
            self.env,
            self.tmp,
            agents=self.agents,
            concurrency=concurrency,
            loglevel=self.args.loglevel,
        )
        pool.start(workers)
        pool.wait_ready(self.args.redis_url, self.namespace, workers)
        return pool

    def close(self) -> None:
        self.server.stop()
        forget_namespace(self.args.redis_url, self.namespace)

    def producer(self, connections: int) -> Producer:
        # One blocking stream read per followed turn: size the pool to follow them all.
        pool = BlockingConnectionPool.from_url(
            self.args.redis_url, max_connections=connections + 16, timeout=60
        )
        return Producer(Settings.from_env(self.env), redis=Redis.from_pool(pool))


async def run_turns(bench: Bench, turns: int, sessions: int) -> dict[str, Any]:
    """Submit ``turns`` over ``sessions`` at once; follow each to its final."""
    producer = bench.producer(turns)
    try:
        run = uuid.uuid4().hex[:6]
        sids = [f"bench-{run}-{i}" for i in range(sessions)]
        to_started: list[float] = []
        to_final: list[float] = []
        spans: list[tuple[float, float]] = []

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            handle = await producer.submit(sids[i % sessions], f"turn {i}", agent="e2e")
            began = t0
            async for event in handle.events():
                if event.type == "started" and event.attempt == 1:
                    began = time.perf_counter()
                    to_started.append(began - t0)
                if event.type == "final":
                    end = time.perf_counter()
                    to_final.append(end - t0)
                    spans.append((began, end))
                    if event.status != "completed":
                        raise RuntimeError(f"turn ended {event.status}: {event.text}")

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(turns)))
        elapsed = time.perf_counter() - start
    finally:
        await producer.close()
    edges = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return {
        "turns/s": turns / elapsed,
        "elapsed": elapsed,
        "peak in flight": peak,
        "started p50": statistics.median(to_started),
        "started p99": pct(to_started, 99),
        "final p50": statistics.median(to_final),
        "final p99": pct(to_final, 99),
    }


async def run_sequential(bench: Bench, turns: int) -> dict[str, float]:
    """One turn at a time on an idle pool: the latency a lone user sees."""
    producer = bench.producer(4)
    to_started: list[float] = []
    to_final: list[float] = []
    try:
        sid = f"seq-{uuid.uuid4().hex[:6]}"
        for i in range(turns):
            t0 = time.perf_counter()
            handle = await producer.submit(f"{sid}-{i}", f"turn {i}", agent="e2e")
            async for event in handle.events():
                if event.type == "started":
                    to_started.append(time.perf_counter() - t0)
                if event.type == "final":
                    to_final.append(time.perf_counter() - t0)
    finally:
        await producer.close()
    return {
        "started p50": statistics.median(to_started),
        "started p99": pct(to_started, 99),
        "final p50": statistics.median(to_final),
        "final p99": pct(to_final, 99),
    }


def bench_noop(
    env: dict[str, str], tasks: int, concurrency: int, loglevel: str = "WARNING"
) -> dict[str, float]:
    """Round trips of a no-op Celery task (send, run, result back through Redis)."""
    os.environ.update(env)
    from bench.noop_app import noop

    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bench.noop_app", "worker", "--pool=threads",
         f"--concurrency={concurrency}", f"--loglevel={loglevel}", "--without-mingle",
         "--without-gossip", f"--queues={env['REACTQ_NAMESPACE']}.noop"],
        cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        noop.delay(0).get(timeout=60)  # warm: the worker is up
        latencies = []
        for i in range(min(tasks, 200)):
            t0 = time.perf_counter()
            noop.delay(i).get(timeout=30)
            latencies.append(time.perf_counter() - t0)
        cpu0 = cpu_seconds(proc.pid)
        start = time.perf_counter()
        results = [noop.delay(i) for i in range(tasks)]
        for r in results:
            r.get(timeout=60)
        elapsed = time.perf_counter() - start
        cpu = cpu_seconds(proc.pid) - cpu0
        return {
            "tasks/s": tasks / elapsed,
            "cpu per task": cpu / tasks,
            "round trip p50": statistics.median(latencies),
            "round trip p99": pct(latencies, 99),
        }
    finally:
        proc.terminate()
        proc.wait(30)


def print_turns(label: str, r: dict[str, Any]) -> None:
    print(label)
    print(f"  turns/s            {r['turns/s']:10.1f}   (peak in flight {r['peak in flight']})")
    print(f"  submit->started    p50 {ms(r['started p50'])}   p99 {ms(r['started p99'])}")
    print(f"  submit->final      p50 {ms(r['final p50'])}   p99 {ms(r['final p99'])}")


def scenario_basic(args: argparse.Namespace) -> None:
    bench = Bench(args, args.latency)
    try:
        pool = bench.pool(args.workers, args.concurrency)
        try:
            lone = asyncio.run(run_sequential(bench, 50))
            ours = asyncio.run(run_turns(bench, args.turns, args.sessions))
        finally:
            pool.stop()
        floor = bench_noop(bench.env, args.turns, args.concurrency, args.loglevel)
    finally:
        bench.close()
    print_turns(
        f"reactq pool: {args.turns} turns over {args.sessions} sessions, {args.workers} workers "
        f"x {args.concurrency}, model latency {args.latency * 1000:.0f} ms/call, 2 model calls "
        "+ 1 tool call per turn",
        ours,
    )
    print("one turn at a time on the idle pool (50 turns, fresh sessions)")
    print(f"  submit->started    p50 {ms(lone['started p50'])}   p99 {ms(lone['started p99'])}")
    print(f"  submit->final      p50 {ms(lone['final p50'])}   p99 {ms(lone['final p99'])}")
    print(f"bare Celery no-op task (same Redis, 1 worker x {args.concurrency} threads)")
    print(f"  tasks/s            {floor['tasks/s']:10.1f}")
    print(f"  round trip         p50 {ms(floor['round trip p50'])}   "
          f"p99 {ms(floor['round trip p99'])}")  # fmt: skip
    print("ratio")
    print(f"  throughput  reactq turns/s / no-op tasks/s           = "
          f"{ours['turns/s'] / floor['tasks/s']:.3f}")  # fmt: skip
    print(f"  latency     lone turn submit->started p50 / no-op round trip p50 = "
          f"{lone['started p50'] / floor['round trip p50']:.2f}")  # fmt: skip


def scenario_inflight(args: argparse.Namespace) -> None:
    turns = args.turns if args.turns != 400 else 1000
    bench = Bench(args, 1.0)
    try:
        pool = bench.pool(1, turns)
        try:
            result = asyncio.run(run_turns(bench, turns, turns))
            rss = peak_rss_mb(pool.procs[0].pid)
        finally:
            pool.stop()
    finally:
        bench.close()
    print_turns(
        f"in flight: 1 worker process --concurrency {turns}, model latency 1000 ms/call, "
        f"2 calls per turn, {turns} turns over {turns} sessions submitted at once",
        result,
    )
    ideal = turns / 2.0
    print(f"  ideal turns/s if all were in flight at once: {ideal:.0f} "
          f"(achieved {result['turns/s'] / ideal:.2f} of it)")  # fmt: skip
    print(f"  worker peak RSS    {rss:10.1f} MB")
    print(f"ratio: peak turns in flight / LangGraph Platform's default 10 per worker = "
          f"{result['peak in flight'] / 10:.0f}x")  # fmt: skip


def scenario_recovery(args: argparse.Namespace) -> None:
    bench = Bench(args, 2.0)
    try:
        pool = bench.pool(2, 8)
        s = Settings.from_env(bench.env)

        async def measure() -> float:
            producer = bench.producer(4)
            try:
                handle = await producer.submit(f"rec-{uuid.uuid4().hex[:6]}", "x", agent="e2e")
                async for event in handle.events():
                    if event.type == "started" and event.attempt == 1:
                        os.kill(worker_pid(event.worker), signal.SIGKILL)
                        killed = time.perf_counter()
                    if event.type == "final":
                        if event.status != "completed" or event.attempt != 2:
                            raise RuntimeError(f"unexpected final {event}")
                        return time.perf_counter() - killed
            finally:
                await producer.close()
            raise RuntimeError("no final")

        try:
            took = asyncio.run(measure())
        finally:
            pool.stop()
    finally:
        bench.close()
    bound = s.lease_ttl_seconds + s.reaper_interval_seconds
    print(f"recovery: SIGKILL of the worker running a turn (model 2 s/call) -> re-run final: "
          f"{took:.2f} s (lease TTL {s.lease_ttl_seconds:.0f} s + reaper "
          f"{s.reaper_interval_seconds:.0f} s = bound {bound:.0f} s, plus the re-run's own "
          f"4 s of model time); LangGraph Platform sweeps dead runs every 120 s")  # fmt: skip


def redis_cpu_seconds(url: str) -> float:
    """CPU time the Redis server has used so far (INFO cpu: user + system)."""
    import redis as redis_sync

    client = redis_sync.Redis.from_url(url)
    try:
        info = client.info("cpu")
    finally:
        client.close()
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def postgres_cpu_seconds() -> float:
    """CPU time PostgreSQL has used so far: every live postgres process's, plus what
    the postmaster has reaped from backends that exited (its children's time)."""
    procs: dict[str, list[str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if text[text.index("(") + 1 : text.rindex(")")].startswith("postgres"):
            procs[stat.parent.name] = text.rpartition(")")[2].split()
    ticks = 0
    for fields in procs.values():
        ticks += int(fields[11]) + int(fields[12])
        if fields[1] not in procs:  # the postmaster: its exited backends' time too
            ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def scenario_scaling(args: argparse.Namespace) -> None:
    """Turns/s and CPU per turn (workers, Redis, PostgreSQL) for 1, 2 and 4 worker
    processes on PostgreSQL state: which part would saturate first."""
    rows = {}
    backend = "given" if args.database_url else "postgres"
    for workers in (1, 2, 4):
        with state_url(args, backend) as url:
            bench = Bench(args, args.latency, REACTQ_DATABASE_URL=url)
            try:
                pool = bench.pool(workers, args.concurrency)
                pids = [p.pid for p in pool.procs]
                try:
                    asyncio.run(run_turns(bench, 40, 40))  # warm
                    before = (
                        sum(cpu_seconds(p) for p in pids),
                        redis_cpu_seconds(args.redis_url),
                        postgres_cpu_seconds(),
                    )
                    result = asyncio.run(run_turns(bench, args.turns, args.sessions))
                    after = (
                        sum(cpu_seconds(p) for p in pids),
                        redis_cpu_seconds(args.redis_url),
                        postgres_cpu_seconds(),
                    )
                finally:
                    pool.stop()
            finally:
                bench.close()
        per_turn = [(b - a) / args.turns for a, b in zip(before, after, strict=True)]
        rows[workers] = (result, per_turn)
    print(f"scaling on PostgreSQL state: {args.turns} turns over {args.sessions} sessions, "
          f"model latency {args.latency * 1000:.0f} ms/call, each worker --concurrency "
          f"{args.concurrency}, on this machine's {os.cpu_count()} cores (driver and model "
          "server included)")  # fmt: skip
    print("  workers  turns/s  vs 1   worker CPU/turn  Redis CPU/turn  PostgreSQL CPU/turn")
    base = rows[1][0]["turns/s"]
    for workers, (result, (worker, redis_cpu, pg_cpu)) in rows.items():
        print(f"  {workers:7d}  {result['turns/s']:7.1f}  {result['turns/s'] / base:4.2f}"
              f"  {ms(worker)}      {ms(redis_cpu)}     {ms(pg_cpu)}")  # fmt: skip
    worker, redis_cpu, pg_cpu = rows[1][1]
    print("  one core's worth of each, from the 1-worker row: "
          f"worker {1 / worker:.0f} turns/s, Redis {1 / redis_cpu:.0f} turns/s, "
          f"PostgreSQL {1 / pg_cpu:.0f} turns/s")  # fmt: skip


@contextlib.contextmanager
def state_url(args: argparse.Namespace, backend: str) -> Iterator[str]:
    """``--database-url`` if given, else an empty scratch store of ``backend``."""
    if args.database_url:
        yield args.database_url
        return
    sys.path.insert(0, str(ROOT / "bench"))
    from state import scratch_database

    with scratch_database(backend) as url:
        yield url


def scenario_cpu(args: argparse.Namespace) -> None:
    """CPU per turn of one worker process against CPU per no-op task of a bare Celery
    worker, both read from /proc over the measured run (warm-up excluded)."""
    backends = ["given"] if args.database_url else ["sqlite", "postgres"]
    floor: dict[str, float] | None = None
    for backend in backends:
        with state_url(args, backend) as url:
            bench = Bench(args, args.latency, REACTQ_DATABASE_URL=url)
            try:
                pool = bench.pool(1, args.concurrency)
                pid = pool.procs[0].pid
                try:
                    asyncio.run(run_turns(bench, 40, 40))  # warm: imports, connections
                    cpu0 = cpu_seconds(pid)
                    result = asyncio.run(run_turns(bench, args.turns, args.sessions))
                    cpu = cpu_seconds(pid) - cpu0
                finally:
                    pool.stop()
                if floor is None:
                    floor = bench_noop(
                        bench.env, max(args.turns, 1000), args.concurrency, args.loglevel
                    )
            finally:
                bench.close()
        per_turn = cpu / args.turns
        print(f"cpu {backend}: 1 worker process x {args.concurrency}, {args.turns} turns over "
              f"{args.sessions} sessions submitted at once, model latency "
              f"{args.latency * 1000:.0f} ms/call, 2 model calls + 1 tool call "
              "per turn")  # fmt: skip
        print(f"  worker CPU per turn        {ms(per_turn)}   ({result['turns/s']:.1f} turns/s, "
              f"p99 submit->final {ms(result['final p99']).strip()})")  # fmt: skip
        print(f"  bare Celery no-op task     {ms(floor['cpu per task'])}   "
              f"({floor['tasks/s']:.1f} tasks/s, same Redis as broker and results)")  # fmt: skip
        print(f"  ratio turn / no-op task    {per_turn / floor['cpu per task']:8.1f}x")


async def checkpoint_turns(url: str, turns: int, steps: int, skip: bool) -> float:
    """Seconds per turn of ``steps`` tool steps through AgentRunner on ``url``."""
    from reactq.shared.bus import TurnEmitter
    from reactq.shared.bus_memory import MemoryEventBus
    from reactq.shared.messages import ToolCall
    from reactq.shared.state import open_store
    from reactq.shared.state.base import TurnCheckpoint
    from reactq.worker import Agent, AgentRunner, LLMResponse, ScriptedLLM, tool

    @tool()
    def noop(n: int) -> str:
        """Do nothing."""
        return f"done {n}"

    def script() -> list[LLMResponse | str]:
        calls: list[LLMResponse | str] = [
            LLMResponse(tool_calls=[ToolCall(id=f"c{i}", name="noop", arguments=f'{{"n": {i}}}')])
            for i in range(steps)
        ]
        return [*calls, "finished"]

    agent = Agent(name="bench", model="m", tools=[noop])
    store = await open_store(url)
    if skip:

        async def no_checkpoint(checkpoint: TurnCheckpoint, fence: int | None = None) -> None:
            return None

        store.checkpoint_step = no_checkpoint  # type: ignore[method-assign]
    bus = MemoryEventBus()
    took = 0.0
    try:
        for i in range(turns):
            runner = AgentRunner(agent.build_loop(ScriptedLLM(script())), store, "bench")
            sid = f"ck-{uuid.uuid4().hex[:10]}"
            emitter = TurnEmitter(bus, sid, f"t-{uuid.uuid4().hex}")
            t0 = time.perf_counter()
            final = await runner.run_turn(
                session_id=sid, message=f"turn {i}", turn_id=emitter.turn_id, emitter=emitter,
                fence=1,
            )  # fmt: skip
            took += time.perf_counter() - t0
            assert final.status == "completed", final
    finally:
        await bus.close()
        await store.close()
    return took / turns


def pay_then_answer(request: dict[str, Any]) -> Reply:
    """Call ``pay`` (it needs approval), then answer with its result."""
    messages = request["messages"]
    start = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = [m["content"] for m in messages[start:] if m["role"] == "tool"]
    if not results:
        return Reply.tool_calls([("pay", {"path": os.devnull, "amount": 1})])
    return Reply.text(f"result: {results[-1]}")


def scenario_approval(args: argparse.Namespace) -> None:
    bench = Bench(args, 0.0, pay_then_answer, agents="tests.pool_agents:agents")
    try:
        pool = bench.pool(args.workers, args.concurrency)

        async def one(producer: Producer, i: int) -> float:
            handle = await producer.submit(f"ap-{i}-{uuid.uuid4().hex[:6]}", "pay", agent="durable")
            decided = 0.0
            resumed = 0.0
            async for event in handle.events():
                if event.type == "approval_requested":
                    call_id = event.calls[0]["call_id"]
                    decided = time.perf_counter()
                    await producer.approve(handle.turn_id, call_id, by="bench")
                elif event.type == "started" and event.attempt == 2:
                    resumed = time.perf_counter()
                elif event.type == "final":
                    if event.status != "completed" or not resumed:
                        raise RuntimeError(f"unexpected final {event}")
                    return resumed - decided
            raise RuntimeError("no final")

        async def run() -> list[float]:
            producer = bench.producer(args.sessions + 4)
            try:
                gate = asyncio.Semaphore(args.sessions)

                async def bounded(i: int) -> float:
                    async with gate:
                        return await one(producer, i)

                return list(await asyncio.gather(*(bounded(i) for i in range(args.turns))))
            finally:
                await producer.close()

        try:
            took = asyncio.run(run())
        finally:
            pool.stop()
    finally:
        bench.close()
    print(f"approval: {args.turns} parked turns ({args.sessions} at a time, {args.workers} "
          f"workers): decision -> resumed started p50 {ms(pct(took, 50))}, "
          f"p99 {ms(pct(took, 99))}")  # fmt: skip


def scenario_checkpoint(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from state import scratch_url

    async def one(backend: str) -> tuple[float, float]:
        async with scratch_url(backend) as url:
            await checkpoint_turns(url, 5, args.steps, False)  # warm up
            with_ck = await checkpoint_turns(url, args.turns, args.steps, False)
            without = await checkpoint_turns(url, args.turns, args.steps, True)
        return with_ck, without

    for backend in ("sqlite", "postgres"):
        try:
            with_ck, without = asyncio.run(one(backend))
        except Exception as exc:  # an unreachable server: say so, go on
            print(f"checkpoint {backend}: skipped ({type(exc).__name__}: {exc})")
            continue
        print(f"checkpoint {backend}: {args.turns} turns of {args.steps} tool steps; "
              f"per turn {ms(with_ck)} with step checkpoints ({2 * args.steps} writes + commit), "
              f"{ms(without)} with one commit per turn; ratio {with_ck / without:.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="basic",
                        choices=["basic", "inflight", "recovery", "scaling",
                                 "checkpoint", "approval", "cpu"])  # fmt: skip
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--sessions", type=int, default=None, help="default 40 (cpu: --turns)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per model call")
    parser.add_argument("--steps", type=int, default=3, help="tool steps per turn (checkpoint)")
    parser.add_argument("--database-url", default=None, help="state store (default: SQLite)")
    parser.add_argument(
        "--loglevel",
        default="INFO",
        help="of the reactq workers and of the bare Celery worker beside them (INFO: a "
        "reactq worker logs 1 line a turn, Celery 2 a task)",
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("REACTQ_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    args = parser.parse_args()
    if args.sessions is None:
        args.sessions = args.turns if args.scenario == "cpu" else 40
    {
        "basic": scenario_basic,
        "inflight": scenario_inflight,
        "recovery": scenario_recovery,
        "scaling": scenario_scaling,
        "checkpoint": scenario_checkpoint,
        "approval": scenario_approval,
        "cpu": scenario_cpu,
    }[args.scenario](args)


if __name__ == "__main__":
    main()
