"""The session protocol's own pieces: typed outcomes of the queue on a real Redis,
the control notices, the dispatch's Celery app, the turn endings, and where its
Lua lives (every script a .lua file; one writer of the deadline set)."""

from __future__ import annotations

import ast
import json
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

import reactq
from reactq.shared.audit import AuditedBus, MemoryAuditSink
from reactq.shared.bus import ScriptGuard, TurnEmitter, publish_all
from reactq.shared.bus_memory import MemoryEventBus
from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.errors import InvalidTurnError, StaleLeaseError
from reactq.shared.events import ActionEvent, FinalEvent, ObservationEvent, UsageEvent
from reactq.shared.keys import Keys
from reactq.shared.messages import ChatMessage
from reactq.shared.protocol import endings
from reactq.shared.protocol.control import CancelMode, CancelNotice
from reactq.shared.protocol.deadlines import Deadlines
from reactq.shared.protocol.dispatch import VISIBILITY_TIMEOUT_SECONDS, celery_app
from reactq.shared.protocol.endings import Failure
from reactq.shared.protocol.lease import SessionLease
from reactq.shared.protocol.outcomes import CancelOutcome, ClaimedTurn, LeaseEnd, SubmitStatus
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.protocol.steps import TurnSteps
from reactq.shared.redis_client import connect
from reactq.shared.settings import Settings
from reactq.shared.state import MemoryStateStore, TurnCheckpoint
from reactq.shared.turns import (
    TURN_ID_RE,
    MultitaskStrategy,
    TurnRequest,
    TurnStatus,
    new_turn_id,
    validate_turn_id,
)

PACKAGE = Path(reactq.__file__).parent


def sid() -> str:
    return f"p-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def keys(where: tuple[str, Keys]) -> Keys:
    return where[1]


@pytest.fixture
async def redis(where: tuple[str, Keys]) -> AsyncIterator[Redis]:
    client = connect(where[0], 32)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def queue(redis: Redis, keys: Keys) -> SessionQueue:
    return SessionQueue(redis, keys)


def turn(session: str, strategy: MultitaskStrategy = MultitaskStrategy.ENQUEUE) -> TurnRequest:
    return TurnRequest(session_id=session, agent="alpha", message="hi", strategy=strategy)


async def test_submit_outcomes_are_typed(queue: SessionQueue) -> None:
    s = sid()
    first, second = turn(s), turn(s)
    queued = await queue.submit(first)
    assert (queued.status, queued.position, queued.needs_dispatch) == (SubmitStatus.QUEUED, 1, True)
    behind = await queue.submit(second)
    assert (behind.position, behind.needs_dispatch) == (2, False)
    rejected = await queue.submit(turn(s, MultitaskStrategy.REJECT))
    assert rejected.status is SubmitStatus.REJECTED and not rejected.needs_dispatch
    mismatch = await queue.submit(TurnRequest(session_id=s, agent="beta", message="hi"))
    assert (mismatch.status, mismatch.session_agent) == (SubmitStatus.AGENT_MISMATCH, "alpha")

    claimed = await queue.claim_next(s)
    assert claimed is not None and (claimed.turn_id, claimed.attempt) == (first.turn_id, 1)
    interrupt = await queue.submit(turn(s, MultitaskStrategy.INTERRUPT))
    assert interrupt.stopped_running == first.turn_id
    assert interrupt.dropped_pending == (second.turn_id,)
    assert interrupt.needs_dispatch  # the pending list held only the dropped turn
    assert await queue.cancel_mode(s, first.turn_id) is CancelMode.INTERRUPT


async def test_cancel_outcomes_are_typed(queue: SessionQueue) -> None:
    s = sid()
    running, waiting = turn(s), turn(s)
    await queue.submit(running)
    await queue.submit(waiting)
    await queue.claim_next(s)

    dropped = await queue.cancel(s, waiting.turn_id)
    assert (dropped.outcome, dropped.status) == (CancelOutcome.CANCELLED, TurnStatus.CANCELLED)
    flagged = await queue.cancel(s, running.turn_id)
    assert (flagged.outcome, flagged.status) == (CancelOutcome.CANCELLING, TurnStatus.RUNNING)
    assert await queue.cancel_mode(s, running.turn_id) is CancelMode.CANCEL
    await queue.finish(s, running.turn_id, TurnStatus.CANCELLED)
    done = await queue.cancel(s, running.turn_id)
    assert (done.outcome, done.status) == (CancelOutcome.ALREADY_FINISHED, TurnStatus.CANCELLED)
    unknown = await queue.cancel(s, "t_nosuchturn")
    assert (unknown.outcome, unknown.status, unknown.session_id) == (CancelOutcome.UNKNOWN, None, s)


async def test_submit_lease_and_reaper_share_one_deadline(redis: Redis, keys: Keys) -> None:
    queue = SessionQueue(redis, keys, dispatch_grace_seconds=0)
    lease, deadlines = SessionLease(redis, keys, 30, "w"), Deadlines(redis, keys)
    s = sid()
    await queue.submit(turn(s))
    assert s in await deadlines.reap(limit=10_000)  # a lost dispatch is found
    token = await lease.acquire(s)
    assert token is not None and s not in await deadlines.expired(limit=10_000)
    await deadlines.watch(s)  # pulls the holder's deadline in, never out
    assert s in await deadlines.expired(limit=10_000)
    assert await lease.holds(s, token) and not await lease.holds(s, token + 1)
    assert await lease.release(s, token)
    assert await redis.zscore(keys.lease_deadlines(s), s) is None


def test_cancel_notices() -> None:
    notice = CancelNotice("t_1", CancelMode.INTERRUPT)
    assert CancelNotice.decode(notice.encode()) == notice
    assert CancelNotice.decode(b'{"op": "cancel", "turn_id": "t_2"}') == CancelNotice("t_2")
    assert CancelNotice.decode('{"op": "cancel", "turn_id": "t_3", "mode": "odd"}') == (
        CancelNotice("t_3", CancelMode.CANCEL)
    )
    assert CancelNotice.decode('{"op": "other"}') is None
    for bad in ("not json", "[1]", None):
        with pytest.raises(ValueError):
            CancelNotice.decode(bad)


def test_one_celery_configuration_for_both_sides() -> None:
    settings = Settings(redis_url="redis://127.0.0.1:6379/0", namespace="ns")
    sender, worker = celery_app(settings), celery_app(settings, consumer=True)
    for app in (sender, worker):
        assert app.conf.task_serializer == "json" and app.conf.accept_content == ["json"]
        assert app.conf.task_ignore_result
    assert worker.conf.task_acks_late and worker.conf.task_reject_on_worker_lost
    assert worker.conf.broker_transport_options == {
        "visibility_timeout": VISIBILITY_TIMEOUT_SECONDS
    }
    assert worker.conf.broker_transport.endswith("transport:RedisTransport")
    assert not sender.conf.task_acks_late


async def test_endings_publish_one_final_each() -> None:
    bus, store = MemoryEventBus(), MemoryStateStore()
    req = turn("s-endings")
    final = await endings.rejected(bus, req)
    assert final.status is TurnStatus.REJECTED
    final = await endings.cancelled(bus, "s-endings", "t_queued", "superseded")
    assert (final.status, final.attempt) == (TurnStatus.CANCELLED, 0)

    await store.ensure_session("s-endings", "alpha")
    emitter = TurnEmitter(bus, "s-endings", "t_lost", attempt=3)
    final = await endings.failed(emitter, Failure.MAX_ATTEMPTS, "gave up", store=store, fence=1)
    assert final.status is TurnStatus.ERROR
    record = await store.get_turn("t_lost")
    assert record is not None and record.error == "max_attempts"
    # The next holder finds it committed: the stream has its final, so no second one.
    again = TurnEmitter(bus, "s-endings", "t_lost", attempt=4)
    assert await endings.committed(again, record) is None

    events = await bus.read("s-endings")
    finals = [e for e in events if isinstance(e, FinalEvent)]
    assert [(e.turn_id, e.status) for e in finals] == [
        (req.turn_id, "rejected"),
        ("t_queued", "cancelled"),
        ("t_lost", "error"),
    ]
    assert [e.type for e in events if e.turn_id == "t_lost"] == ["error", "final"]


def _python_sources() -> list[Path]:
    return [
        Path(root, f)
        for root, _, files in os.walk(PACKAGE, followlinks=True)
        for f in files
        if f.endswith(".py")
    ]


def test_every_lua_script_is_a_lua_file() -> None:
    inline = [
        str(path)
        for path in _python_sources()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "redis.call(" in node.value
    ]
    assert inline == []


def test_the_deadline_set_has_one_writer() -> None:
    protocol = PACKAGE / "shared" / "protocol"
    writers = sorted(
        path.name
        for path in protocol.glob("*.lua")
        if "'ZADD'" in path.read_text() or "'ZREM'" in path.read_text()
    )
    assert writers == ["deadlines.lua"]


TURN_IDS = [
    "t_1",
    "t_a-B_9",
    "t_" + "x" * 126,
    "t_" + "x" * 127,
    "t_",
    "t_mal|pipe",
    "t_caf\u00e9",
    "t_new\nline",
    "t_ends\n",
    "t_dot.ted",
    "t_sp ace",
    "T_upper",
    "x_1",
    "",
]


def test_new_turn_ids_are_valid_and_the_rule_is_strict() -> None:
    made = {new_turn_id() for _ in range(100)}
    assert len(made) == 100
    assert all(TURN_ID_RE.fullmatch(t) and validate_turn_id(t) == t for t in made)
    valid = [t for t in TURN_IDS if TURN_ID_RE.fullmatch(t)]
    assert valid == ["t_1", "t_a-B_9", "t_" + "x" * 126]
    for bad in [t for t in TURN_IDS if t not in valid] + [None, 42, b"t_1"]:
        with pytest.raises(InvalidTurnError):
            validate_turn_id(bad)


async def test_the_claim_script_reads_turn_ids_as_turn_id_re_does(
    queue: SessionQueue, redis: Redis
) -> None:
    """The running slot holds a turn id the claim script found valid (or ''): the same
    rule as TURN_ID_RE, so finish always finds the turn it clears."""
    s = sid()
    for turn_id in TURN_IDS:
        item = {"v": 1, "turn_id": turn_id, "session_id": s, "agent": "alpha", "message": "m"}
        await redis.rpush(queue.keys.pending(s), json.dumps(item))
        claimed = await queue.claim_next(s)
        assert claimed is not None and claimed.attempt == 1 and not claimed.already_ran
        expected = turn_id if TURN_ID_RE.fullmatch(turn_id) else ""
        assert claimed.turn_id == expected, turn_id
        if expected:
            assert claimed.parse().turn_id == turn_id
        else:
            with pytest.raises(InvalidTurnError):
                claimed.parse()
        await queue.finish(s, claimed.turn_id, TurnStatus.ERROR)
        assert await redis.get(queue.keys.running(s)) is None, turn_id


async def test_claims_of_what_cannot_be_a_turn(queue: SessionQueue, redis: Redis) -> None:
    s = sid()
    pending = queue.keys.pending(s)
    await redis.rpush(pending, b"\xff\xfe{not utf-8")
    claimed = await queue.claim_next(s)
    assert claimed is not None and (claimed.turn_id, claimed.readable) == ("", False)
    assert "\ufffd" in claimed.payload
    with pytest.raises(InvalidTurnError, match="UTF-8"):
        claimed.parse()
    await queue.finish(s, claimed.turn_id, TurnStatus.ERROR)

    # A turn id runs once: a copy of it behind it, or pushed after it ran, is dropped
    # from pending by the claim and never enters the running slot.
    once = turn(s)
    await queue.submit(once)
    await redis.rpush(pending, once.model_dump_json())
    first = await queue.claim_next(s)
    assert first is not None and (first.turn_id, first.attempt) == (once.turn_id, 1)
    await queue.finish(s, once.turn_id, TurnStatus.COMPLETED)
    copy = await queue.claim_next(s)
    assert copy is not None and (copy.turn_id, copy.already_ran) == (once.turn_id, "completed")
    assert await redis.get(queue.keys.running(s)) is None
    assert await queue.claim_next(s) is None
    assert await queue.turn_status(once.turn_id) == (s, TurnStatus.COMPLETED)

    # A cancelled turn's copy does not run either.
    cancelled = turn(s)
    await queue.submit(cancelled)
    await redis.rpush(pending, cancelled.model_dump_json())
    assert (await queue.cancel(s, cancelled.turn_id)).outcome is CancelOutcome.CANCELLED
    copy = await queue.claim_next(s)
    assert copy is not None and copy.already_ran == "cancelled"
    assert await queue.claim_next(s) is None


async def test_submit_refuses_an_invalid_turn_id(queue: SessionQueue, redis: Redis) -> None:
    s = sid()
    bad = turn(s).model_copy(update={"turn_id": "t_mal|pipe"})
    with pytest.raises(InvalidTurnError, match="turn id"):
        await queue.submit(bad)
    assert await redis.llen(queue.keys.pending(s)) == 0


async def test_a_turns_steps_are_fenced_by_the_lease_and_go_with_the_turn(
    queue: SessionQueue, redis: Redis, keys: Keys
) -> None:
    s = sid()
    first = turn(s)
    await queue.submit(first)
    lease = SessionLease(redis, keys, ttl_seconds=30, owner="w1")
    token = await lease.acquire(s)
    assert token is not None
    claimed = await queue.claim_next(s)
    assert claimed is not None and claimed.turn_id == first.turn_id
    steps = TurnSteps(redis, keys, ttl_seconds=60)
    step = TurnCheckpoint(
        session_id=s,
        turn_id=first.turn_id,
        step=1,
        messages=[ChatMessage(role="assistant", content="thinking")],
        branch_id="trunk",
    )
    await steps.checkpoint_step(step, fence=token)
    assert await steps.get_checkpoint(s, first.turn_id) == step
    # A holder whose token no longer holds the lease writes nothing.
    with pytest.raises(StaleLeaseError):
        await steps.checkpoint_step(step.model_copy(update={"step": 2}), fence=token + 1)
    assert (await steps.get_checkpoint(s, first.turn_id)).step == 1  # type: ignore[union-attr]
    await lease.release(s, token)
    with pytest.raises(StaleLeaseError):  # nobody holds it now
        await steps.checkpoint_step(step, fence=token)
    # The turn's end drops its steps, in the same call as it clears the running slot.
    await queue.finish(s, first.turn_id, TurnStatus.COMPLETED)
    assert await steps.get_checkpoint(s, first.turn_id) is None
    assert not await redis.exists(keys.steps(s))


async def test_advance_finishes_claims_or_releases_in_one_step(
    queue: SessionQueue, redis: Redis, keys: Keys
) -> None:
    s = sid()
    first, second = turn(s), turn(s)
    await queue.submit(first)
    await queue.submit(second)
    lease = SessionLease(redis, keys, ttl_seconds=30, owner="w1")
    token = await lease.acquire(s)
    assert token is not None
    claimed = await queue.advance(s, token)
    assert isinstance(claimed, ClaimedTurn) and claimed.turn_id == first.turn_id
    # Finishing the first claims the second.
    nxt = await queue.advance(s, token, (first.turn_id, TurnStatus.COMPLETED))
    assert isinstance(nxt, ClaimedTurn) and nxt.turn_id == second.turn_id
    assert await redis.hget(keys.turns(s), first.turn_id) == b"completed"
    # A stale token claims nothing and releases nothing (the turn is still finished).
    third = turn(s)
    await queue.submit(third)
    lost = await queue.advance(s, token + 1, (second.turn_id, TurnStatus.COMPLETED))
    assert lost is LeaseEnd.LOST and await lease.holds(s, token)
    assert await redis.hget(keys.turns(s), second.turn_id) == b"completed"
    # With nothing left, the same step gives the lease up and drops the deadline.
    last = await queue.advance(s, token)
    assert isinstance(last, ClaimedTurn) and last.turn_id == third.turn_id
    end = await queue.advance(s, token, (third.turn_id, TurnStatus.COMPLETED))
    assert end is LeaseEnd.RELEASED
    assert await lease.holder(s) is None
    assert await redis.zscore(keys.lease_deadlines(s), s) is None
    assert not await queue.has_work(s)


async def test_a_final_goes_out_in_the_drains_next_step_under_the_lease(
    queue: SessionQueue, redis: Redis, keys: Keys
) -> None:
    """``advance`` with ``publish``: the final (after its queued events) is published,
    its status recorded, the turn finished and the next claimed (or the lease given
    up) in one call; a token that lost the lease does none of it."""
    s = sid()
    first, second = turn(s), turn(s)
    await queue.submit(first)
    await queue.submit(second)
    lease = SessionLease(redis, keys, ttl_seconds=30, owner="w1")
    taken = await queue.take(s, lease)
    assert taken is not None
    token = taken[0]
    sink = MemoryAuditSink()
    bus = AuditedBus(RedisEventBus(redis, keys), sink)

    def final_of(turn_id: str) -> list[FinalEvent | UsageEvent]:
        emitter = TurnEmitter(bus, s, turn_id)
        usage = emitter._build(UsageEvent, {"prompt_tokens": 1, "total_tokens": 1})
        final = emitter._build(FinalEvent, {"text": "done", "status": TurnStatus.COMPLETED})
        return [usage, final]

    def publisher(
        events: list[FinalEvent | UsageEvent], out: list[str]
    ) -> Callable[[ScriptGuard], Awaitable[bool]]:
        async def publish(guard: ScriptGuard) -> bool:
            published = await publish_all(bus, events, guard)
            out.extend(e.id or "" for e in published or ())
            return published is not None

        return publish

    done = (first.turn_id, TurnStatus.COMPLETED)
    # A holder that lost the lease: no final, no status, no finish, no claim.
    ids: list[str] = []
    lost = await queue.advance(s, token + 1, done, publish=publisher(final_of(first.turn_id), ids))
    assert lost is LeaseEnd.LOST and ids == []
    assert await bus.read(s) == [] and sink.events == []
    assert await redis.hget(keys.turns(s), first.turn_id) == b"running"
    assert await redis.llen(keys.pending(s)) == 1 and await lease.holds(s, token)
    # The holder: the events out (in the audit log too), the turn finished, the next
    # one claimed.
    nxt = await queue.advance(s, token, done, publish=publisher(final_of(first.turn_id), ids))
    assert isinstance(nxt, ClaimedTurn) and nxt.turn_id == second.turn_id
    published = await bus.read(s)
    assert [(e.type, e.seq) for e in published] == [("usage", 1), ("final", 2)]
    assert ids == [e.id for e in published] == [e.id for e in sink.events]
    assert await redis.hget(keys.turns(s), first.turn_id) == b"completed"
    # With nothing left, the same call gives the lease up and drops the deadline.
    end = await queue.advance(
        s,
        token,
        (second.turn_id, TurnStatus.COMPLETED),
        publish=publisher(final_of(second.turn_id), ids),
    )
    assert end is LeaseEnd.RELEASED and await lease.holder(s) is None
    assert await redis.zscore(keys.lease_deadlines(s), s) is None
    assert await redis.hget(keys.turns(s), second.turn_id) == b"completed"
    assert [e.type for e in await bus.read(s)].count("final") == 2
    assert not await queue.has_work(s)


async def test_take_claims_the_first_turn_with_the_lease_or_gives_it_back(
    queue: SessionQueue, redis: Redis, keys: Keys
) -> None:
    s = sid()
    lease = SessionLease(redis, keys, ttl_seconds=30, owner="w1")
    # Nothing to claim: the lease is given straight back, the deadline dropped.
    empty = await queue.take(s, lease)
    assert empty is not None and empty[1] is LeaseEnd.RELEASED
    assert await lease.holder(s) is None
    assert await redis.zscore(keys.lease_deadlines(s), s) is None
    first = turn(s)
    await queue.submit(first)
    taken = await queue.take(s, lease)
    assert taken is not None
    token, claimed = taken
    assert token > empty[0]  # a new fencing token for each grant
    assert isinstance(claimed, ClaimedTurn) and (claimed.turn_id, claimed.attempt) == (
        first.turn_id,
        1,
    )
    assert await lease.holder(s) == (token, "w1")
    assert await redis.zscore(keys.lease_deadlines(s), s) is not None
    # Held: another worker's take does nothing.
    other = SessionLease(redis, keys, ttl_seconds=30, owner="w2")
    assert await queue.take(s, other) is None
    assert await lease.holds(s, token)
    end = await queue.advance(s, token, (first.turn_id, TurnStatus.COMPLETED))
    assert end is LeaseEnd.RELEASED and await lease.holder(s) is None


async def test_a_steps_events_go_out_with_its_checkpoint_under_the_lease(
    queue: SessionQueue, redis: Redis, keys: Keys
) -> None:
    s = sid()
    first = turn(s)
    await queue.submit(first)
    taken = await queue.take(s, SessionLease(redis, keys, ttl_seconds=30, owner="w1"))
    assert taken is not None
    token = taken[0]
    sink = MemoryAuditSink()
    bus = AuditedBus(RedisEventBus(redis, keys), sink)
    emitter = TurnEmitter(bus, s, first.turn_id)
    steps = TurnSteps(redis, keys, ttl_seconds=60)
    step = TurnCheckpoint(
        session_id=s,
        turn_id=first.turn_id,
        step=0,
        messages=[ChatMessage(role="assistant", content="calling")],
        branch_id="trunk",
    )
    emitter.emit_later(ActionEvent, tool="lookup", args={"key": "x"}, call_id="c1")
    await emitter.checkpoint(steps, step, fence=token)
    assert await steps.get_checkpoint(s, first.turn_id) == step
    published = await bus.read(s)
    assert [(e.type, e.seq) for e in published] == [("action", 1)]
    assert [e.id for e in sink.events] == [published[0].id]  # the audit log has it
    # A holder that lost the lease stores nothing and publishes nothing.
    emitter.emit_later(ObservationEvent, tool="lookup", call_id="c1", output="x")
    with pytest.raises(StaleLeaseError):
        await emitter.checkpoint(steps, step.model_copy(update={"step": 1}), fence=token + 1)
    assert (await steps.get_checkpoint(s, first.turn_id)) == step
    assert len(await bus.read(s)) == 1 and len(sink.events) == 1
    # Without events, the checkpoint alone (fenced the same way).
    await emitter.checkpoint(steps, step.model_copy(update={"step": 1}), fence=token)
    assert (await steps.get_checkpoint(s, first.turn_id)).step == 1  # type: ignore[union-attr]


async def test_a_steps_events_follow_its_checkpoint_in_the_embedded_mode() -> None:
    """A state store as the step store and the memory bus: two calls, in that order."""
    store, bus = MemoryStateStore(), MemoryEventBus()
    s, t = sid(), new_turn_id()
    await store.ensure_session(s, "alpha")
    emitter = TurnEmitter(bus, s, t)
    step = TurnCheckpoint(session_id=s, turn_id=t, step=0, messages=[], branch_id="trunk")
    emitter.emit_later(ActionEvent, tool="lookup", args={}, call_id="c1")
    await emitter.checkpoint(store, step)
    stored = await store.get_checkpoint(s, t)
    assert stored is not None and (stored.turn_id, stored.step) == (t, 0)
    assert [e.type for e in await bus.read(s)] == ["action"]
