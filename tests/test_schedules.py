"""Scheduled turns without beat: their store on every backend, their ticks, and the
Producer's, SyncProducer's and ``reactq schedule``'s add / list / pause / resume / remove,
with a clear error for every bad input and nothing stored then.

Firing (``reactq beat`` processes, real workers) is tests/test_schedules_beat.py.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reactq import Producer, SyncProducer
from reactq.producer.schedules import fire
from reactq.shared.errors import (
    AgentMismatchError,
    EmptyMessageError,
    InvalidScheduleError,
    InvalidSessionIdError,
    ScheduleNotFoundError,
    ScheduleTooFrequentError,
    UnknownAgentError,
)
from reactq.shared.schedules import Schedule, latest_tick, new_schedule_id, next_tick
from reactq.shared.settings import Settings
from reactq.shared.state import open_store
from reactq.shared.state.schedule_store import schedules_for
from reactq.shared.tenancy import TenantIdentity
from reactq.shared.turns import TurnRequest
from tests.helpers import clean_env, run_cli
from tests.state_fixtures import url_fixture  # noqa: F401 - the backends' fixture


def _at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _schedule(session_id: str = "s-1", **fields: object) -> Schedule:
    base: dict[str, object] = {
        "schedule_id": new_schedule_id(),
        "session_id": session_id,
        "agent": "alpha",
        "message": "report",
        "cron": "0 9 * * 1-5",
        "created_at": time.time(),
    }
    return Schedule.model_validate({**base, **fields})


# --- ticks ---------------------------------------------------------------------------


def test_a_cron_ticks_in_utc_on_the_days_it_names() -> None:
    weekdays = _schedule(cron="0 9 * * 1-5")
    saturday_noon = _at("2026-12-05T12:00:00")
    assert latest_tick(weekdays, saturday_noon) == _at("2026-12-04T09:00:00")  # Friday
    assert next_tick(weekdays, saturday_noon) == _at("2026-12-07T09:00:00")  # Monday
    # A tick is its own latest, and the next one comes after it.
    assert latest_tick(weekdays, _at("2026-12-07T09:00:00")) == _at("2026-12-07T09:00:00")
    assert next_tick(weekdays, _at("2026-12-07T09:00:00")) == _at("2026-12-08T09:00:00")


def test_missed_ticks_collapse_into_the_latest() -> None:
    hourly = _schedule(cron="30 * * * *", created_at=_at("2026-01-01T00:00:00"))
    # Three days of missed ticks: the one to fire is the newest, whatever came before.
    assert latest_tick(hourly, _at("2026-12-05T12:10:00")) == _at("2026-12-05T11:30:00")
    every = _schedule(cron=None, every=5, created_at=100.0)
    assert latest_tick(every, 104.9) is None
    assert latest_tick(every, 105) == 105
    assert latest_tick(every, 10_003) == 10_000
    assert next_tick(every, 10_003) == 10_005


# --- the store, on every backend -----------------------------------------------------


async def test_the_store_keeps_schedules(url: str) -> None:
    state = await open_store(url)
    try:
        store = schedules_for(state)
        session = f"s-{uuid.uuid4().hex[:10]}"
        tenant = TenantIdentity(name="acme", prefix="s-", agents=frozenset({"alpha"}))
        first = _schedule(session, created_at=1.0, metadata={"team": "ops"}, tenant=tenant)
        second = _schedule(session, cron=None, every=60, created_at=2.0, fresh_sessions=True)
        other = _schedule(f"o-{uuid.uuid4().hex[:10]}", created_at=3.0)
        for schedule in (second, other, first):
            await store.add(schedule)
        assert await store.get(first.schedule_id) == first
        assert first.tenant == tenant
        assert [s.schedule_id for s in await store.find(session)] == [
            first.schedule_id,
            second.schedule_id,
        ]
        assert {first.schedule_id, other.schedule_id} <= {s.schedule_id for s in await store.find()}
        changed = await store.update(
            first.schedule_id, paused=True, last_run_at=5.0, last_turn_id="t_x"
        )
        assert changed is not None and changed.paused and changed.last_run_at == 5.0
        assert await store.get(first.schedule_id) == changed
        assert await store.update("sch_0000000000000000", paused=True) is None
        assert await store.delete(first.schedule_id)
        assert not await store.delete(first.schedule_id)
        assert await store.get(first.schedule_id) is None
        assert [s.schedule_id for s in await store.find(session)] == [second.schedule_id]
        for schedule in (second, other):
            await store.delete(schedule.schedule_id)
    finally:
        await state.close()


# --- the Producer --------------------------------------------------------------------


@pytest.fixture
def settings(redis_url: str, namespace: str, tmp_path: Path) -> Settings:
    return Settings.from_env(
        {},
        redis_url=redis_url,
        namespace=f"{namespace}-sched",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/state.db",
    )


@pytest.fixture
async def producer(settings: Settings) -> AsyncIterator[Producer]:
    async with Producer(settings) as p:
        await p.registry.register_agents(["alpha", "beta"], "test-registry")
        yield p


async def test_producer_adds_lists_pauses_resumes_and_removes(producer: Producer) -> None:
    session = f"s-{uuid.uuid4().hex[:10]}"
    added = await producer.add_schedule(
        session, "the daily report", agent="alpha", cron=" 0  9 * * 1-5 "
    )
    assert added.cron == "0 9 * * 1-5" and not added.paused and added.last_run_at is None
    assert added.schedule_id.startswith("sch_")
    every = await producer.add_schedule(session, "ping", agent="alpha", every=90)
    assert [s.schedule_id for s in await producer.list_schedules(session)] == [
        added.schedule_id,
        every.schedule_id,
    ]
    assert await producer.get_schedule(added.schedule_id) == added

    paused = await producer.pause_schedule(added.schedule_id)
    assert paused.paused
    assert (await producer.get_schedule(added.schedule_id)).paused  # type: ignore[union-attr]
    before = time.time()
    resumed = await producer.resume_schedule(added.schedule_id)
    # Resumed: fires from its next tick on, the ones missed while paused are not made up.
    assert not resumed.paused and resumed.last_run_at is not None
    assert resumed.last_run_at >= before

    await producer.delete_schedule(added.schedule_id)
    assert await producer.get_schedule(added.schedule_id) is None
    assert [s.schedule_id for s in await producer.list_schedules(session)] == [every.schedule_id]
    for call in (
        producer.pause_schedule,
        producer.resume_schedule,
        producer.delete_schedule,
    ):
        with pytest.raises(ScheduleNotFoundError, match=added.schedule_id) as caught:
            await call(added.schedule_id)
        assert caught.value.code == "schedule_not_found"


@pytest.mark.parametrize(
    ("session_id", "message", "agent", "timing", "error", "needle"),
    [
        ("s-{u}", "hi", "alpha", {"cron": "0 9 * *"}, InvalidScheduleError, "has 4 fields"),
        ("s-{u}", "hi", "alpha", {"cron": "61 * * * *"}, InvalidScheduleError, "not valid"),
        ("s-{u}", "hi", "alpha", {"cron": "0 0 31 2 *"}, InvalidScheduleError, "never occurs"),
        ("s-{u}", "hi", "alpha", {"every": 0}, InvalidScheduleError, "from 1 to 2147483647"),
        ("s-{u}", "hi", "alpha", {"every": 2**31}, InvalidScheduleError, "from 1 to 2147483647"),
        ("s-{u}", "hi", "alpha", {"every": 10**30}, InvalidScheduleError, "got 1000000"),
        ("s-{u}", "hi", "alpha", {}, InvalidScheduleError, "either a cron expression"),
        (
            "s-{u}",
            "hi",
            "alpha",
            {"cron": "* * * * *", "every": 5},
            InvalidScheduleError,
            "either a cron",
        ),
        ("bad id {u}", "hi", "alpha", {"every": 60}, InvalidSessionIdError, "invalid session id"),
        ("s-{u}", "  ", "alpha", {"every": 60}, EmptyMessageError, "empty"),
        ("s-{u}", "hi", "nobody", {"every": 60}, UnknownAgentError, "no worker hosts agent"),
        ("s-{u}", "hi", "alpha", {"every": 59}, ScheduleTooFrequentError, "minimum interval of 60"),
        (
            "s-{u}",
            "hi",
            "alpha",
            {"every": 1},
            InvalidScheduleError,
            "REACTQ_SCHEDULE_MIN_INTERVAL",
        ),
    ],
)
async def test_bad_input_is_refused_and_nothing_is_stored(
    producer: Producer,
    session_id: str,
    message: str,
    agent: str,
    timing: dict[str, object],
    error: type[Exception],
    needle: str,
) -> None:
    session = session_id.format(u=uuid.uuid4().hex[:8])
    before = await producer.list_schedules()
    with pytest.raises(error, match=needle):
        await producer.add_schedule(session, message, agent=agent, **timing)  # type: ignore[arg-type]
    assert await producer.list_schedules() == before


async def test_a_session_keeps_its_agent(producer: Producer) -> None:
    session = f"s-{uuid.uuid4().hex[:10]}"
    await (await producer.state_store()).ensure_session(session, "alpha")
    with pytest.raises(AgentMismatchError, match="belongs to agent 'alpha'"):
        await producer.add_schedule(session, "hi", agent="beta", every=60)
    assert await producer.list_schedules(session) == []


async def _announce(settings: Settings) -> None:
    async with Producer(settings) as p:
        await p.registry.register_agents(["alpha", "beta"], "test-registry")


def test_sync_producer_has_the_same_calls(settings: Settings) -> None:
    asyncio.run(_announce(settings))
    with SyncProducer(settings) as producer:
        session = f"s-{uuid.uuid4().hex[:10]}"
        added = producer.add_schedule(session, "hi", agent="alpha", cron="*/5 * * * *")
        assert producer.list_schedules(session) == [added]
        assert producer.get_schedule(added.schedule_id) == added
        assert producer.pause_schedule(added.schedule_id).paused
        assert not producer.resume_schedule(added.schedule_id).paused
        producer.delete_schedule(added.schedule_id)
        assert producer.list_schedules(session) == []
        with pytest.raises(ScheduleNotFoundError):
            producer.delete_schedule(added.schedule_id)


# --- reactq schedule -----------------------------------------------------------------


def test_the_cli_adds_lists_pauses_resumes_and_removes(settings: Settings) -> None:
    asyncio.run(_announce(settings))
    env = clean_env(
        REACTQ_REDIS_URL=settings.redis_url,
        REACTQ_NAMESPACE=settings.namespace,
        REACTQ_DATABASE_URL=settings.database_url,
    )
    session = f"s-{uuid.uuid4().hex[:10]}"
    added = run_cli(
        env,
        "schedule",
        "add",
        "0 9 * * 1-5",
        "--session",
        session,
        "--agent",
        "alpha",
        "--message",
        "the daily report",
        "--json",
    )
    assert added.returncode == 0, added.stderr
    schedule = json.loads(added.stdout)
    schedule_id = schedule["schedule_id"]
    assert schedule["cron"] == "0 9 * * 1-5" and schedule["session_id"] == session

    listed = run_cli(env, "schedule", "ls", "--session", session)
    assert listed.returncode == 0, listed.stderr
    assert schedule_id in listed.stdout and "'0 9 * * 1-5'" in listed.stdout
    assert "09:00:00" in listed.stdout  # its next tick

    paused = run_cli(env, "schedule", "pause", schedule_id)
    assert paused.returncode == 0 and "paused" in paused.stdout
    assert "paused" in run_cli(env, "schedule", "ls").stdout
    resumed = run_cli(env, "schedule", "resume", schedule_id)
    assert resumed.returncode == 0 and "next" in resumed.stdout
    removed = run_cli(env, "schedule", "rm", schedule_id)
    assert removed.returncode == 0 and f"removed {schedule_id}" in removed.stdout
    assert schedule_id not in run_cli(env, "schedule", "ls").stdout

    gone = run_cli(env, "schedule", "rm", schedule_id)
    assert gone.returncode == 2 and "[schedule_not_found]" in gone.stderr
    bad = run_cli(
        env, "schedule", "add", "0 25 * * *", "--session", session, "--agent", "alpha",
        "--message", "x",
    )  # fmt: skip
    assert bad.returncode == 2 and "[invalid_schedule]" in bad.stderr, bad.stderr
    unknown = run_cli(
        env, "schedule", "add", "--every", "60", "--session", session, "--agent", "nobody",
        "--message", "x",
    )  # fmt: skip
    assert unknown.returncode == 2 and "[unknown_agent]" in unknown.stderr
    assert schedule_id not in run_cli(env, "schedule", "ls").stdout


async def test_deleting_a_session_removes_its_schedules(producer: Producer) -> None:
    session = f"s-{uuid.uuid4().hex[:10]}"
    await (await producer.state_store()).ensure_session(session, "alpha")
    added = await producer.add_schedule(session, "hi", agent="alpha", every=60)
    kept = await producer.add_schedule(f"o-{uuid.uuid4().hex[:8]}", "hi", agent="alpha", every=60)
    deleted = await producer.delete_session(session)
    assert deleted.schedules_deleted == [added.schedule_id]
    assert await producer.get_schedule(added.schedule_id) is None
    assert await producer.get_schedule(kept.schedule_id) == kept


def test_beat_refuses_a_memory_state_store(settings: Settings) -> None:
    env = clean_env(
        REACTQ_REDIS_URL=settings.redis_url,
        REACTQ_NAMESPACE=settings.namespace,
        REACTQ_DATABASE_URL="memory://",
    )
    refused = run_cli(env, "beat")
    assert refused.returncode == 2 and "[config_error]" in refused.stderr, refused.stderr
    assert "REACTQ_DATABASE_URL" in refused.stderr


async def test_a_fired_turn_acts_for_the_key_that_added_its_schedule(producer: Producer) -> None:
    """Issue 29: the identity a schedule was added with (the gateway passes its caller's
    key) is the ``tenant`` of every turn it fires, whatever its metadata says."""
    session = f"acme-{uuid.uuid4().hex[:10]}"
    acme = TenantIdentity(name="acme", prefix="acme-")
    added = await producer.add_schedule(
        session, "report", agent="alpha", every=60, metadata={"tenant": "beta"}, tenant=acme
    )
    assert (await producer.get_schedule(added.schedule_id)) == added
    turn_id = await fire(producer, added.schedule_id, added.created_at + 60, claim_ttl=3600)
    assert turn_id is not None
    pending = await producer.redis.lrange(producer.keys.pending(session), 0, -1)
    turns = [TurnRequest.parse(raw) for raw in pending]
    assert [(t.turn_id, t.tenant) for t in turns] == [(turn_id, acme)]
    assert turns[0].metadata["tenant"] == "beta"


async def test_a_schedule_of_fresh_sessions_runs_each_tick_in_a_new_one(
    producer: Producer,
) -> None:
    """Issue 31: a stateless cron's ticks each on a new thread (LangGraph's behaviour):
    ``{session_id}-{tick}``, the schedule's session id the prefix they share."""
    prefix = f"acme-{uuid.uuid4().hex[:10]}"
    added = await producer.add_schedule(
        prefix, "report", agent="alpha", every=60, fresh_sessions=True
    )
    assert (await producer.get_schedule(added.schedule_id)) == added and added.fresh_sessions
    ticks = [added.created_at + 60, added.created_at + 120]
    for tick in ticks:
        assert await fire(producer, added.schedule_id, tick, claim_ttl=3600) is not None
    for tick in ticks:
        session = f"{prefix}-{int(tick)}"
        pending = await producer.redis.lrange(producer.keys.pending(session), 0, -1)
        assert [TurnRequest.parse(raw).message for raw in pending] == ["report"]
    assert await producer.redis.llen(producer.keys.pending(prefix)) == 0
    # Deleting the sessions later leaves the schedule: it names none of them.
    assert await producer.get_schedule(added.schedule_id) is not None
