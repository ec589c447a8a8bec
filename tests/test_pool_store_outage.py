"""A PostgreSQL restart under load, on real worker processes and a real gateway
(issue 28, item 1): "a database blink must cost latency, never a turn".

The pool's database is reached through ``DatabaseProxy`` (tests/db_outage.py): while
it is down, every connection through it is reset and new ones are refused, as during
``pg_ctl -m fast stop`` and a restart. The lease TTL is shorter than the outage, so a
lease not renewed meanwhile would let the reaper hand a turn to a second holder (an
attempt 2 would show).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from reactq.producer import Producer
from reactq.shared.events import FinalEvent
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.db_outage import DatabaseProxy, database_proxy
from tests.gateway_support import start_gateway
from tests.helpers import scripted_pool, sleepy_lookup, wait_until

pytestmark = pytest.mark.e2e

SESSIONS = 6
TURNS = 3
OUTAGE_SECONDS = 3.0
FAST = {"REACTQ_LEASE_TTL_SECONDS": "1.5", "REACTQ_REAPER_INTERVAL_SECONDS": "0.3"}


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[DatabaseProxy]:
    with database_proxy(postgres_url) as running:
        yield running


async def finals_of(producer: Producer, session: str) -> list[FinalEvent]:
    return [e for e in await producer.bus.read(session, after="0") if isinstance(e, FinalEvent)]


async def blink(proxy: DatabaseProxy) -> None:
    """The database away for OUTAGE_SECONDS (the test's own action, not a wait)."""
    proxy.down()
    try:
        await asyncio.sleep(OUTAGE_SECONDS)
    finally:
        proxy.up()


async def test_turns_in_flight_ride_out_two_database_restarts(
    redis_url: str, namespace: str, tmp_path: Path, proxy: DatabaseProxy
) -> None:
    server = ScriptedServer(sleepy_lookup)
    with scripted_pool(
        redis_url,
        f"{namespace}-dbo",
        tmp_path,
        server,
        workers=2,
        REACTQ_DATABASE_URL=proxy.url,
        **FAST,
    ) as (env, pool):
        async with Producer(Settings.from_env(env)) as producer:
            sessions = [f"dbo-{i}-{time.monotonic_ns()}" for i in range(SESSIONS)]
            handles = [
                await producer.submit(s, f"sleep=0.2 turn {n} of {s}", agent="e2e")
                for n in range(TURNS)
                for s in sessions
            ]

            async def started() -> bool:
                events = [e for s in sessions for e in await producer.bus.read(s, after="0")]
                return sum(e.type == "started" for e in events) >= SESSIONS

            await wait_until(started, 30, "turns in flight")
            await blink(proxy)
            # A submit while the database is away still enqueues (it goes to Redis).
            proxy.down()
            try:
                late = [await producer.submit(s, "sleep=0.2 late", agent="e2e") for s in sessions]
            finally:
                proxy.up()
            handles += late
            await blink(proxy)

            async def all_ended() -> bool:
                finals = [f for s in sessions for f in await finals_of(producer, s)]
                return len(finals) >= len(handles)

            await wait_until(all_ended, 120, f"{len(handles)} finals\n{pool.logs()}")
            by_turn: dict[str, list[FinalEvent]] = {}
            for s in sessions:
                for final in await finals_of(producer, s):
                    by_turn.setdefault(final.turn_id, []).append(final)
            assert sorted(by_turn) == sorted(h.turn_id for h in handles)
            for turn_id, finals in by_turn.items():
                assert [(f.status, f.attempt) for f in finals] == [(TurnStatus.COMPLETED, 1)], (
                    turn_id,
                    finals,
                )
            for s in sessions:
                history = await producer.history(s)
                assert len(history) == 4 * (TURNS + 1), s  # each turn's messages once

            # The audit log: every turn's queued and final, the rows written while the
            # database was away included (they waited in Redis).
            async def audited() -> bool:
                for handle in handles:
                    types = [e.type for e in await producer.turn_events(handle.turn_id)]
                    if "queued" not in types or "final" not in types:
                        return False
                return True

            await wait_until(audited, 60, "every turn's queued and final in the audit log")
            for handle in handles:
                events = await producer.turn_events(handle.turn_id)
                assert sum(e.type == "final" for e in events) == 1
    assert "reactq_error" not in pool.logs()


async def test_the_gateway_accepts_a_turn_while_the_database_is_away(
    redis_url: str, namespace: str, tmp_path: Path, proxy: DatabaseProxy
) -> None:
    """POST /v1/sessions/S/turns with the database down answers 202, and the turn
    completes once the database is back (it waited, it did not fail)."""
    server = ScriptedServer(sleepy_lookup)
    with scripted_pool(
        redis_url, f"{namespace}-dbg", tmp_path, server, REACTQ_DATABASE_URL=proxy.url, **FAST
    ) as (env, pool):
        # A loaded machine takes a while to import the gateway: no speed is tested here.
        gateway = start_gateway(env, tmp_path, None, timeout=120)
        with gateway, gateway.client() as client:
            session = f"dbg-{time.monotonic_ns()}"
            proxy.down(turn_away=True)
            try:
                response = client.post(
                    f"/v1/sessions/{session}/turns", json={"message": "hello", "agent": "e2e"}
                )
                assert response.status_code == 202, response.text
                turn_id = response.json()["turn_id"]
                status_of = lambda: client.get(f"/v1/turns/{turn_id}").json().get("status")  # noqa: E731
                await wait_until(lambda: status_of() == "running", 60, "the turn running")
                tried = proxy.turned_away
                # The worker's first store call meets the outage (and the reaper's
                # write-back may try too): the turn must still be running after it.
                await wait_until(
                    lambda: proxy.turned_away > tried + 2 or status_of() != "running",
                    60,
                    "store calls",
                )
                assert status_of() == "running"
            finally:
                proxy.up()

            def completed() -> bool:
                try:
                    status = client.get(f"/v1/turns/{turn_id}").json().get("status")
                except httpx2.TransportError:
                    return False
                assert status != "error", pool.logs()
                return status == "completed"

            await wait_until(completed, 90, f"the turn completed\n{pool.logs()}")


async def test_a_turn_past_the_budget_is_given_back_and_completes_later(
    redis_url: str, namespace: str, tmp_path: Path, proxy: DatabaseProxy
) -> None:
    """With REACTQ_STORE_OUTAGE_SECONDS=1 the turn outlives its worker's budget: it is
    given back (no error final), re-dispatched by the reaper, and completes once the
    database is back, with exactly one final."""
    server = ScriptedServer(sleepy_lookup)
    with scripted_pool(
        redis_url,
        f"{namespace}-dbb",
        tmp_path,
        server,
        REACTQ_DATABASE_URL=proxy.url,
        REACTQ_STORE_OUTAGE_SECONDS="1",
        **FAST,
    ) as (env, pool):
        async with Producer(Settings.from_env(env)) as producer:
            session = f"dbb-{time.monotonic_ns()}"
            proxy.down()
            try:
                handle = await producer.submit(session, "hello", agent="e2e")
                await wait_until(lambda: "given back" in pool.logs(), 60, "a give-back")
                assert await finals_of(producer, session) == []
            finally:
                proxy.up()
            final = await handle.result(timeout=90)
            assert final.status == TurnStatus.COMPLETED and final.attempt >= 2
            assert len(await finals_of(producer, session)) == 1
            assert len(await producer.history(session)) == 4
