"""A Redis that lost its data: existing sessions recover on their next turn (issue 28,
item 7).

A Redis restarted without persistence (or a failover to an empty replica) starts the
sessions' lease counters again from 0, while the state store's fence stays at the last
token it saw: every token the counter gives is refused as stale. The drain finds the
store's fence ahead with no other holder, re-seeds the counter above it and runs the
turn at once. The test flushes a private redis-server (``private_redis``) between two
turns of a session.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import redis as redis_sync

from reactq.shared.state import open_store
from reactq.shared.turns import TurnStatus
from tests.drain_support import drain_rig
from tests.redis_faults import private_redis


async def test_a_session_recovers_on_its_next_turn_after_redis_lost_its_data(
    tmp_path: Path, namespace: str
) -> None:
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    session = f"s-{uuid.uuid4().hex[:12]}"
    try:
        with private_redis(tmp_path) as url:
            async with drain_rig(url, namespace, store) as rig:
                for n in range(3):  # a token a drain: the store's fence is now 3
                    turn = rig.turn(session, f"before {n}")
                    await rig.queue.submit(turn)
                    assert await rig.drainer.drain(session) == 1
                flusher = redis_sync.Redis.from_url(url)
                try:
                    flusher.flushall()  # the private server loses its data
                finally:
                    flusher.close()
                turn = rig.turn(session, "after")
                await rig.queue.submit(turn)
                await rig.drainer.drain(session)
                (final,) = await rig.finals(session, turn.turn_id)
                assert (final.status, final.text) == (TurnStatus.COMPLETED, "answer to: after")
                assert final.attempt == 2  # run again at once, uncharged
                assert await rig.slot_and_lease(session) == (None, None)
                assert int(await rig.redis.get(rig.keys.fence(session))) == 4
                # The next turn takes a token above the fence straight away.
                again = rig.turn(session, "later")
                await rig.queue.submit(again)
                assert await rig.drainer.drain(session) == 1
                (final,) = await rig.finals(session, again.turn_id)
                assert (final.status, final.attempt) == (TurnStatus.COMPLETED, 1)
        texts = [m.content for m in await store.get_messages(session)]
        assert texts.count("after") == 1 and texts[-1] == "answer to: later"
    finally:
        await store.close()
