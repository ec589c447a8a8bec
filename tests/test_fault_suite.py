"""Issue 28, the fault suite: a few hundred turns over many sessions on real workers,
state and audit log in a private PostgreSQL, events, queues and the broker in a private
Redis with its AOF, while one server is broken a few times: Redis restarted, Redis
paused (SIGSTOP) past the lease, PostgreSQL restarted (``pg_ctl -m fast stop``).

Once the run has settled (waited on with a deadline), every turn must have exactly one
final, ``completed``; its messages stored once and no error fallback committed as an
assistant message; its ``queued`` and ``final`` rows in the audit log; each session's
finals in submission order; nothing left running (no running slot, no lease, no
pending turn, every status final). Each scenario prints its counts
(``tests/fault_checks.py``) whatever the outcome, so ``make test`` shows them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from reactq.producer import Producer, TurnHandle
from reactq.shared.keys import Keys
from reactq.shared.redis_client import text
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.fault_checks import Tally, open_work, tally
from tests.fault_servers import PrivatePostgres, PrivateRedis
from tests.helpers import WorkerPool, lookup_then_answer, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

SESSIONS, TURNS_PER_SESSION, WORKERS = 20, 15, 3
LATENCY = 0.5
"""Seconds a model call takes (two a turn), so every session has a turn in flight
whenever a fault lands."""
LEASE_TTL = 2.0
SETTLE_TIMEOUT = 90.0
"""How long after the last fault every turn gets to end and every session to empty."""


@dataclass(frozen=True)
class Fault:
    """One way of breaking a server, done ``times`` over the run, each ``down`` s long."""

    name: str
    times: int
    down: float
    fail: Callable[[PrivateRedis, PrivatePostgres], None]
    mend: Callable[[PrivateRedis, PrivatePostgres], None]


FAULTS = {
    "redis-restart": Fault("redis-restart", 3, 2.0, lambda r, p: r.stop(), lambda r, p: r.start()),
    "redis-pause": Fault("redis-pause", 3, 5.0, lambda r, p: r.pause(), lambda r, p: r.resume()),
    "postgres-restart": Fault(
        "postgres-restart", 2, 3.0, lambda r, p: p.stop("fast"), lambda r, p: p.start()
    ),
}


@pytest.fixture(scope="module")
def pool_env(
    private_redis: PrivateRedis,
    private_postgres: PrivatePostgres,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, str], WorkerPool]]:
    """Real workers on the private Redis (queues, events, broker) and a fresh database
    of the private PostgreSQL (state and audit log), with the scripted model. One pool
    for every scenario (a pool's start costs more than a scenario on a busy machine);
    each scenario has sessions of its own, and starts once the pool is whole again."""
    server = ScriptedServer(lookup_then_answer, latency=LATENCY).start_in_thread()
    database = f"faults_{uuid.uuid4().hex[:10]}"
    url = asyncio.run(private_postgres.create_database(database))
    env = {
        "REACTQ_REDIS_URL": private_redis.url,
        "REACTQ_NAMESPACE": f"faults-{uuid.uuid4().hex[:6]}",
        "REACTQ_DATABASE_URL": url,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        "REACTQ_LEASE_TTL_SECONDS": str(LEASE_TTL),
        "REACTQ_REAPER_INTERVAL_SECONDS": "0.3",
    }
    pool = WorkerPool(env, tmp_path_factory.mktemp("fault-workers"), concurrency=16)
    try:
        pool.start(WORKERS)
        # Three workers import everything at once: on a busy machine that takes a while.
        pool.wait_ready(private_redis.url, env["REACTQ_NAMESPACE"], WORKERS, timeout=180)
        yield env, pool
    finally:
        pool.stop()
        server.stop()


@pytest.fixture
def servers_up(
    pool_env: tuple[dict[str, str], WorkerPool],
    private_redis: PrivateRedis,
    private_postgres: PrivatePostgres,
) -> Iterator[tuple[dict[str, str], WorkerPool]]:
    """The pool, with both servers up before and after the test whatever it did."""
    env, pool = pool_env
    pool.wait_ready(private_redis.url, env["REACTQ_NAMESPACE"], WORKERS)
    yield env, pool
    private_redis.ensure_running()
    private_postgres.ensure_running()


async def _ended_count(client: aioredis.Redis, keys: Keys, sessions: list[str]) -> int | None:
    """How many turns have a final status in Redis; None while Redis does not answer."""
    try:
        total = 0
        for sid in sessions:
            values = await client.hvals(keys.turns(sid))
            total += sum(1 for v in values if TurnStatus(text(v)).is_final)
        return total
    except (RedisError, OSError):
        return None


async def _inject(
    fault: Fault,
    redis: PrivateRedis,
    postgres: PrivatePostgres,
    env: dict[str, str],
    sessions: list[str],
    total: int,
) -> list[int]:
    """Break and mend the server ``fault.times`` times, spread over the run: fault
    ``i`` lands once ``(i + 1) / (times + 2)`` of the turns have ended and the pool has
    ended a turn a session since the fault before (so each one hits a pool at work, not
    one still recovering), or 20 s after the last one, should the pool be stuck.
    Returns the turns open at each."""
    keys = Keys(env["REACTQ_NAMESPACE"])
    open_at: list[int] = []
    ended_before = 0
    for i in range(fault.times):
        target = max(total * (i + 1) // (fault.times + 2), ended_before + len(sessions))
        deadline = time.monotonic() + 20
        ended: int | None = None
        while time.monotonic() < deadline:
            client = aioredis.Redis.from_url(redis.url, socket_timeout=2)
            try:
                ended = await _ended_count(client, keys, sessions)
            finally:
                await client.aclose()
            if ended is not None and ended >= target:
                break
            await asyncio.sleep(0.1)
        open_at.append(total - (ended or 0))
        ended_before = ended or ended_before
        await asyncio.to_thread(fault.fail, redis, postgres)
        # The fault's length is the point here, not a wait for state.
        await asyncio.sleep(fault.down)
        await asyncio.to_thread(fault.mend, redis, postgres)
    return open_at


async def _settle(producer: Producer, handles: list[TurnHandle]) -> bool:
    """Wait until every turn has a final and no session has work left, then until the
    audit log holds every turn's final row; False when the deadline passes first."""
    left: list[str] = []

    async def settled() -> bool:
        try:
            left[:] = await open_work(producer, handles)
        except (RedisError, OSError) as exc:
            left[:] = [f"redis: {exc!r}"]
        return not left

    try:
        await wait_until(settled, SETTLE_TIMEOUT, "every turn to end")
    except AssertionError:
        return False
    audit = await producer.audit_log()
    assert audit is not None
    sessions = sorted({h.session_id for h in handles})

    async def audited() -> bool:
        finals = 0
        for sid in sessions:
            finals += len({e.turn_id for e in await audit.session_events(sid, types={"final"})})
        return finals >= len(handles)

    try:
        await wait_until(audited, 15, "every turn's final row in the audit log")
    except AssertionError:
        pass  # counted by the tally, turn by turn
    return True


def _report(t: Tally, capsys: pytest.CaptureFixture[str], record: Callable[..., None]) -> None:
    record("fault_counts", t.line())
    with capsys.disabled():
        print(f"\n{t.line()}")


@pytest.mark.parametrize("name", list(FAULTS))
async def test_turns_survive_faults(
    name: str,
    servers_up: tuple[dict[str, str], WorkerPool],
    private_redis: PrivateRedis,
    private_postgres: PrivatePostgres,
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[..., None],
) -> None:
    fault = FAULTS[name]
    env, pool = servers_up
    run = uuid.uuid4().hex[:6]
    sessions = [f"fault-{run}-{i}" for i in range(SESSIONS)]
    started = time.monotonic()
    handles: list[TurnHandle] = []
    texts: dict[str, str] = {}
    async with Producer(Settings.from_env(env)) as producer:
        for turn in range(TURNS_PER_SESSION):
            # A round at once: each session's turns still go in one after another.
            messages = [f"{sid} #{turn}" for sid in sessions]
            pairs = zip(sessions, messages, strict=True)
            round_ = await asyncio.gather(*(producer.submit(s, m, agent="e2e") for s, m in pairs))
            handles += round_
            texts.update((h.turn_id, m) for h, m in zip(round_, messages, strict=True))
    open_at = await _inject(
        fault, private_redis, private_postgres, env, sessions, total=len(handles)
    )
    # A producer of its own after the faults: every connection of the first one is gone.
    async with Producer(Settings.from_env(env)) as producer:
        settled = await _settle(producer, handles)
        counts = await tally(name, producer, handles, texts)
    counts.settled = settled
    counts.faults = len(open_at)
    counts.open_at_faults = open_at
    counts.elapsed = time.monotonic() - started
    _report(counts, capsys, record_property)

    assert all(n > 0 for n in open_at), f"each fault must land mid-run: {open_at}"
    failures = counts.failures()
    assert not failures, "\n".join([counts.line(), *failures, pool.logs()[-3000:]])
