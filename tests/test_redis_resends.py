"""A resent script acts once (issue 28, item 3).

redis-py sends a command again when its connection broke before the reply came
(``resilient_options``); the server may have run it already. These tests drop the
reply of a script the server has just run (``tests/redis_faults.py``), so the retry
runs it a second time, and check that every script that publishes or pushes acted
once: one event, one final, one claim, one push.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from reactq.shared.bus import PublishGuard, TurnEmitter
from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.events import FinalEvent, StartedEvent, UsageEvent
from reactq.shared.keys import Keys
from reactq.shared.protocol.approvals import Approvals, WaitingCall
from reactq.shared.protocol.lease import SessionLease
from reactq.shared.protocol.outcomes import ClaimedTurn, LeaseEnd
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.turns import TurnRequest, TurnStatus
from tests.redis_faults import ReplyDrops, dropping_client, names_key


@pytest.fixture
async def rig(redis_url: str, namespace: str) -> AsyncIterator[tuple[Redis, ReplyDrops, Keys]]:
    client, drops = dropping_client(redis_url)
    try:
        yield client, drops, Keys(f"{namespace}-rs{uuid.uuid4().hex[:6]}")
    finally:
        await client.aclose()


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


async def test_a_resent_publish_appends_once(rig: tuple[Redis, ReplyDrops, Keys]) -> None:
    client, drops, keys = rig
    bus, session = RedisEventBus(client, keys), sid()
    drops.arm(names_key(":events"))
    sent = await bus.publish(StartedEvent(session_id=session, turn_id="t_1", worker="w"))
    assert drops.dropped == 1
    stored = await bus.read(session)
    assert [e.id for e in stored] == [sent.id]


async def test_a_resent_guarded_final_is_published_once(
    rig: tuple[Redis, ReplyDrops, Keys],
) -> None:
    client, drops, keys = rig
    bus, session = RedisEventBus(client, keys), sid()
    lease = SessionLease(client, keys, ttl_seconds=30, owner="w")
    token = await lease.acquire(session)
    assert token is not None
    emitter = TurnEmitter(bus, session, "t_1")
    usage = emitter._build(UsageEvent, {"usage": {"total_tokens": 3}})
    final = emitter._build(FinalEvent, {"text": "done", "status": TurnStatus.COMPLETED})
    drops.arm(names_key(":events"))
    guard = PublishGuard(token, "t_1", "completed", 60)
    published = await bus.publish_many([usage, final], guard)
    assert drops.dropped == 1 and published is not None
    assert [e.type for e in await bus.read(session)] == ["usage", "final"]


async def test_a_resent_final_step_publishes_and_claims_once(
    rig: tuple[Redis, ReplyDrops, Keys],
) -> None:
    """The drain's step after a turn (queue_next_final.lua): its usage and final go out
    once, and the next turn is claimed once (a second run would re-issue it as
    attempt 2, charged as lost)."""
    client, drops, keys = rig
    bus, session = RedisEventBus(client, keys), sid()
    queue = SessionQueue(client, keys)
    lease = SessionLease(client, keys, ttl_seconds=30, owner="w")
    first = TurnRequest(session_id=session, agent="a", message="one")
    second = TurnRequest(session_id=session, agent="a", message="two")
    await queue.submit(first)
    await queue.submit(second)
    taken = await queue.take(session, lease)
    assert taken is not None and isinstance(taken[1], ClaimedTurn)
    token = taken[0]
    emitter = TurnEmitter(bus, session, first.turn_id)
    events = [
        emitter._build(UsageEvent, {"usage": {"total_tokens": 3}}),
        emitter._build(FinalEvent, {"text": "done", "status": TurnStatus.COMPLETED}),
    ]
    out = []

    async def publish(guard: object) -> bool:
        published = await bus.publish_many(events, guard)  # type: ignore[arg-type]
        out.extend(published or ())
        return published is not None

    drops.arm(names_key(":events"))
    step = await queue.advance(
        session, token, (first.turn_id, TurnStatus.COMPLETED), publish=publish
    )
    assert drops.dropped == 1
    assert [e.type for e in await bus.read(session)] == ["usage", "final"]
    assert isinstance(step, ClaimedTurn)
    assert (step.turn_id, step.attempt, step.lost) == (second.turn_id, 1, 0)
    assert await queue.advance(session, token, (second.turn_id, TurnStatus.COMPLETED)) in (
        LeaseEnd.RELEASED,
    )


async def test_a_resent_submit_pushes_once(rig: tuple[Redis, ReplyDrops, Keys]) -> None:
    """A second run of a push would find its own first push and think the session
    busy: a ``reject`` turn would be refused by itself (and dropped), an ``interrupt``
    one would cancel itself."""
    client, drops, keys = rig
    queue, session = SessionQueue(client, keys), sid()
    for strategy in ("reject", "interrupt"):
        turn = TurnRequest(session_id=session, agent="a", message="hi", strategy=strategy)
        drops.arm(names_key(":pending"))
        outcome = await queue.submit(turn)
        assert drops.dropped == (1 if strategy == "reject" else 2)
        assert (outcome.status, outcome.dropped_pending) == ("queued", ()), strategy
        assert await client.hget(keys.turns(session), turn.turn_id) == b"queued"
        assert await client.llen(keys.pending(session)) == 1
        await client.delete(keys.pending(session))


async def test_a_resent_take_hands_the_lease_and_the_turn_out_once(
    rig: tuple[Redis, ReplyDrops, Keys],
) -> None:
    """A second run of the drain's first step would find the lease its first run took
    and say the session is busy: nobody would run the turn until the lease expired."""
    client, drops, keys = rig
    queue, session = SessionQueue(client, keys), sid()
    lease = SessionLease(client, keys, ttl_seconds=30, owner="w")
    turn = TurnRequest(session_id=session, agent="a", message="hi")
    await queue.submit(turn)
    drops.arm(names_key(":fence"))
    taken = await queue.take(session, lease)
    assert drops.dropped == 1
    assert taken is not None and isinstance(taken[1], ClaimedTurn)
    assert (taken[1].turn_id, taken[1].attempt) == (turn.turn_id, 1)
    assert await lease.holds(session, taken[0])


async def test_a_resent_decision_is_not_its_own_conflict(
    rig: tuple[Redis, ReplyDrops, Keys],
) -> None:
    """A second run of a decision would find the decision its first run recorded and
    refuse it as a conflict, and the decider would never hear the turn is ready."""
    client, drops, keys = rig
    queue, session = SessionQueue(client, keys), sid()
    approvals = Approvals(client, keys)
    lease = SessionLease(client, keys, ttl_seconds=30, owner="w")
    turn = TurnRequest(session_id=session, agent="a", message="hi")
    await queue.submit(turn)
    assert await queue.take(session, lease) is not None
    call = WaitingCall("c1", "delete", {"path": "x"})
    assert await approvals.park(session, turn.turn_id, [call], 60) is not None
    drops.arm(names_key(":approvals"))
    outcome = await approvals.decide(session, turn.turn_id, {"c1": (True, None)}, "ann")
    assert drops.dropped == 1
    assert outcome.ready and [d.by for d in outcome.decided] == ["ann"]
