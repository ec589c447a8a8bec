"""A lost lease stops its turn, and a drain's failure is nobody's orphan (issue 28,
item 8, first part).

On Python 3.11 a cancel that lands as redis-py sends a command is swallowed
(asyncio.wait_for), so one cancel did not stop a turn whose lease was lost: it ran on,
and its later StaleLeaseError was logged as "Task exception was never retrieved",
labelled with whichever session's context the task was made in. The turn here
swallows its first cancel the same way, at an exact point (its step's publish).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from reactq.shared.bus import E, Guard
from reactq.shared.state import open_store
from tests.drain_support import Rig, drain_rig
from tests.redis_faults import FaultyBus


class _SwallowingBus(FaultyBus):
    """Holds the step's ``action`` publish until released, and swallows the first
    cancel that lands there, as Python 3.11's wait_for does."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.cancels = 0

    async def publish_many(self, events: Sequence[E], guard: Guard | None = None) -> list[E] | None:
        if any(e.type == "action" for e in events) and not self.release.is_set():
            self.reached.set()
            while not self.release.is_set():
                try:
                    await self.release.wait()
                except asyncio.CancelledError:
                    self.cancels += 1
                    if self.cancels > 1:
                        raise
        return await super().publish_many(events, guard)


@pytest.fixture
async def rig(redis_url: str, namespace: str, tmp_path: Path) -> AsyncIterator[Rig]:
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    try:
        async with drain_rig(redis_url, namespace, store, lease_ttl=0.6) as made:
            yield made
    finally:
        await store.close()


async def test_a_lost_lease_stops_a_turn_that_swallowed_its_cancel(rig: Rig) -> None:
    bus = _SwallowingBus(rig.redis, rig.keys)
    rig.drainer.bus = bus
    session = f"s-{uuid.uuid4().hex[:12]}"
    await rig.queue.submit(rig.turn(session, "one"))
    drain = asyncio.ensure_future(rig.drainer.drain(session))
    await asyncio.wait_for(bus.reached.wait(), 10)
    # Another worker takes the session over (the lease's token is no longer ours).
    await rig.redis.set(rig.keys.fence(session), 99)
    await rig.redis.set(rig.keys.lease(session), "99:w-other", px=30_000)
    done, _ = await asyncio.wait({drain}, timeout=10)
    bus.release.set()  # unblock a turn that ran on, so the test ends either way
    assert done, "the drain waited on a turn whose lease was lost"
    assert drain.result() == 0 and bus.cancels == 2
    assert rig.drainer.in_flight == 0


async def test_a_drain_started_here_that_fails_is_logged_with_its_session(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    bus = FaultyBus(rig.redis, rig.keys)
    bus.fault = lambda _events: RuntimeError("the bus is down")
    rig.drainer.bus = bus
    session = f"s-{uuid.uuid4().hex[:12]}"
    await rig.queue.submit(rig.turn(session, "one"))
    with caplog.at_level(logging.ERROR):
        await rig.drainer.dispatch(session)  # what the reaper does
        (task,) = rig.drainer._background
        await asyncio.wait({task}, timeout=10)
        del task
        gc.collect()
        await asyncio.sleep(0)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "never retrieved" in m], messages
    (failed,) = [r for r in caplog.records if "a drain failed" in r.getMessage()]
    assert getattr(failed, "session_id", None) == session
