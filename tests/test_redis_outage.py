"""A Redis outage mid-turn is not the turn's end (issue 28, item 2).

A turn that meets Redis away (a checkpoint or a publish that cannot reach it) stays in
the running slot, and the next holder runs it again from its checkpoint as attempt
n+1: no error final, no apology in the conversation. A turn leaves its running slot
only once its final is out; a final that cannot go out leaves it for the next holder.
The faults are injected in-process (``tests/redis_faults.py``) at an exact point.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from reactq.shared.audit import AuditedBus, MemoryAuditSink
from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import LLMServerError
from reactq.shared.events import BaseEvent, FinalEvent
from reactq.shared.state import open_store
from reactq.shared.state.memory.store import MemoryStateStore
from reactq.shared.turns import TurnStatus
from reactq.worker import Agent, AgentRunner, ScriptedLLM
from reactq.worker.agent.config import (
    DEFAULT_ERROR_FALLBACK_MESSAGE,
    DEFAULT_ERROR_PERMANENT_MESSAGE,
)
from tests.drain_support import Rig, drain_rig
from tests.helpers import wait_until
from tests.redis_faults import FaultyBus


@pytest.fixture
async def rig(redis_url: str, namespace: str, tmp_path: Path) -> AsyncIterator[Rig]:
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    try:
        async with drain_rig(redis_url, namespace, store) as made:
            yield made
    finally:
        await store.close()


def faulty(rig: Rig) -> FaultyBus:
    bus = FaultyBus(rig.redis, rig.keys)
    rig.drainer.bus = bus
    return bus


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


async def test_a_redis_outage_at_a_checkpoint_runs_the_turn_again(rig: Rig) -> None:
    """The user's report: the loop turned the checkpoint's ConnectionError into an
    error result, whose apology the runner committed as the assistant's answer."""
    bus, session = faulty(rig), sid()
    first = True

    def fault(events: Sequence[BaseEvent]) -> Exception | None:
        nonlocal first
        if first and any(e.type == "action" for e in events):
            first = False
            return RedisConnectionError("Redis is restarting")
        return None

    bus.fault = fault
    turn = rig.turn(session, "one")
    await rig.queue.submit(turn)
    with pytest.raises(RedisConnectionError):
        await rig.drainer.drain(session)
    assert bus.raised == 1
    assert await rig.finals(session, turn.turn_id) == []
    assert (await rig.queue.turn_status(turn.turn_id)) == (session, TurnStatus.RUNNING)
    assert await rig.redis.get(rig.keys.running(session)) is not None
    assert await rig.store.get_turn(turn.turn_id) is None
    # The next holder (the reaper dispatches the session once its deadline is due).
    assert await rig.drainer.drain(session) == 1
    (final,) = await rig.finals(session, turn.turn_id)
    assert (final.status, final.attempt, final.text) == (TurnStatus.COMPLETED, 2, "answer to: one")
    assert [e.type for e in await rig.events(session) if e.type == "error"] == []
    contents = [m.content for m in await rig.store.get_messages(session)]
    assert contents[0] == "one" and contents[-1] == "answer to: one"
    assert DEFAULT_ERROR_FALLBACK_MESSAGE not in contents
    assert DEFAULT_ERROR_PERMANENT_MESSAGE not in contents


async def test_a_final_that_cannot_go_out_leaves_the_turn_for_the_next_holder(
    rig: Rig,
) -> None:
    """A worker failure whose error final cannot be published (the bus is down) must
    not finish the turn: it would end with no final, and the turns behind it run."""
    bus, session = faulty(rig), sid()
    bus.fault = lambda _events: RuntimeError("the bus is down")
    one, two = rig.turn(session, "one"), rig.turn(session, "two")
    await rig.queue.submit(one)
    await rig.queue.submit(two)
    with pytest.raises(RuntimeError):
        await rig.drainer.drain(session)
    assert (await rig.queue.turn_status(one.turn_id)) == (session, TurnStatus.RUNNING)
    assert (await rig.queue.turn_status(two.turn_id)) == (session, TurnStatus.QUEUED)
    bus.fault = lambda _events: None
    assert await rig.drainer.drain(session) == 2
    for turn in (one, two):
        (final,) = await rig.finals(session, turn.turn_id)
        assert final.status is TurnStatus.COMPLETED
    assert (await rig.finals(session, one.turn_id))[0].attempt == 2


async def test_a_final_out_before_its_turn_could_finish_ends_the_next_attempt(
    rig: Rig,
) -> None:
    """The other side of the rule: a turn whose final went out while its finish did
    not (Redis went away between them) is over; its next attempt publishes nothing."""
    session = sid()
    turn = rig.turn(session, "one")
    await rig.queue.submit(turn)
    real_finish = rig.queue.finish
    calls = 0

    async def finish_fails_once(*args: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RedisConnectionError("Redis is restarting")
        await real_finish(*args)  # type: ignore[arg-type]

    rig.queue.finish = finish_fails_once  # type: ignore[method-assign]
    rig.drainer.runners.clear()  # a worker that does not host the agent ends the turn
    with pytest.raises(RedisConnectionError):
        await rig.drainer.drain(session)
    (final,) = await rig.finals(session, turn.turn_id)
    assert final.code == "unknown_agent"
    assert await rig.drainer.drain(session) == 1
    assert len(await rig.finals(session, turn.turn_id)) == 1
    assert (await rig.queue.turn_status(turn.turn_id)) == (session, TurnStatus.ERROR)
    assert await rig.slot_and_lease(session) == (None, None)


async def test_an_error_final_is_never_stored_as_a_conversation_message() -> None:
    """An error turn commits its user message and the steps it completed, never the
    apology (``error_fallback_message``): a later turn would replay it to the model."""
    agent = Agent(name="helper", model="m", error_fallback_message="sorry")
    store = MemoryStateStore()
    runner = AgentRunner(agent.build_loop(ScriptedLLM([LLMServerError("down")])), store, "helper")
    bus = _ListBus()
    emitter = TurnEmitter(bus, "s1", "t_1")  # type: ignore[arg-type]
    final = await runner.run_turn(session_id="s1", message="hi", turn_id="t_1", emitter=emitter)
    assert (final.status, final.text) == (TurnStatus.ERROR, "sorry")
    assert [(m.role, m.content) for m in await store.get_messages("s1")] == [("user", "hi")]


class _ListBus:
    def __init__(self) -> None:
        self.events: list[BaseEvent] = []

    async def publish(self, event: FinalEvent) -> FinalEvent:
        self.events.append(event)
        return event


async def test_a_final_whose_reply_was_lost_still_gets_its_audit_rows(rig: Rig) -> None:
    """The fault suite's lone missing row: the call that publishes a final and finishes
    its turn ran on the server, and its reply was lost (the resends failed too, Redis
    restarting). The turn is over, so no later attempt backfills it: the drain looks
    again once Redis answers and records what the audit log lacks."""
    sink = MemoryAuditSink()
    rig.drainer.bus = AuditedBus(rig.bus, sink, close_sink=False)
    session = sid()
    turn = rig.turn(session, "one")
    await rig.queue.submit(turn)
    real_publish_many = rig.bus.publish_many
    lost = 0

    async def reply_lost(events: Sequence[BaseEvent], guard: Any = None) -> Any:
        nonlocal lost
        published = await real_publish_many(events, guard)
        if any(e.type == "final" for e in events) and not lost:
            lost += 1
            raise RedisConnectionError("Redis is restarting")
        return published

    rig.bus.publish_many = reply_lost  # type: ignore[method-assign,assignment]
    with pytest.raises(RedisConnectionError):
        await rig.drainer.drain(session)
    assert lost == 1
    (final,) = await rig.finals(session, turn.turn_id)
    assert final.status is TurnStatus.COMPLETED

    async def recorded() -> bool:
        return "final" in {e.type for e in await sink.turn_events(turn.turn_id)}

    await wait_until(recorded, 10, "the final's audit row")
    rows = [e.type for e in await sink.turn_events(turn.turn_id)]
    assert rows.count("final") == 1 and rows.count("started") == 1
    assert (await rig.queue.turn_status(turn.turn_id)) == (session, TurnStatus.COMPLETED)
