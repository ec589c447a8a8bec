"""The approvals protocol on a real Redis, without workers: parking holds the session
(claim and has_work hand out nothing, FIFO holds), the lease release sets the
deadline to the expiry, decisions are all or none and once per call, a decided turn
is handed out again uncharged, an expired one with its undecided calls denied."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from reactq.shared.errors import (
    ApprovalClosedError,
    ApprovalNotFoundError,
    DecisionConflictError,
)
from reactq.shared.keys import Keys
from reactq.shared.protocol.approvals import (
    NO_DECISION_IN_TIME,
    TIMEOUT_DECIDER,
    Approvals,
    WaitingCall,
)
from reactq.shared.protocol.deadlines import Deadlines
from reactq.shared.protocol.lease import SessionLease
from reactq.shared.protocol.outcomes import CancelOutcome
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.redis_client import connect
from reactq.shared.turns import TurnRequest, TurnStatus


@pytest.fixture(params=["redis", "cluster"])
def where(request: pytest.FixtureRequest, redis_url: str) -> tuple[str, int]:
    """Each test on a single Redis, then on a Redis Cluster (sessions sharded)."""
    if request.param == "cluster":
        return request.getfixturevalue("redis_cluster_url"), 8
    return redis_url, 0


@pytest.fixture
async def redis(where: tuple[str, int]) -> AsyncIterator[Redis]:
    client = connect(where[0], 32)
    try:
        yield client
    finally:
        await client.aclose()


class Rig:
    def __init__(self, redis: Redis, namespace: str, shards: int = 0) -> None:
        self.keys = Keys(f"{namespace}-ap{uuid.uuid4().hex[:6]}", shards)
        self.redis = redis
        self.queue = SessionQueue(redis, self.keys)
        self.approvals = Approvals(redis, self.keys)
        self.lease = SessionLease(redis, self.keys, 30.0, "test-owner")
        self.deadlines = Deadlines(redis, self.keys)
        self.sid = f"ap-{uuid.uuid4().hex[:10]}"

    async def park_one(self, timeout: float = 60.0) -> tuple[str, int]:
        """Submit, claim and park a turn waiting on calls c1 and c2 under a lease;
        returns (turn id, lease token), the lease still held."""
        turn = TurnRequest(session_id=self.sid, agent="alpha", message="hi")
        await self.queue.submit(turn)
        token = await self.lease.acquire(self.sid)
        assert token is not None
        claimed = await self.queue.claim_next(self.sid)
        assert claimed is not None and claimed.turn_id == turn.turn_id
        calls = [WaitingCall("c1", "pay", {"n": 1}), WaitingCall("c2", "pay", {"n": 2})]
        assert await self.approvals.park(self.sid, turn.turn_id, calls, timeout) is not None
        return turn.turn_id, token


@pytest.fixture
def rig(redis: Redis, namespace: str, where: tuple[str, int]) -> Rig:
    return Rig(redis, namespace, where[1])


async def test_a_parked_turn_holds_its_session(rig: Rig) -> None:
    turn_id, token = await rig.park_one(timeout=60.0)
    behind = TurnRequest(session_id=rig.sid, agent="alpha", message="next")
    await rig.queue.submit(behind)
    assert await rig.queue.claim_next(rig.sid) is None  # FIFO holds behind it
    assert not await rig.queue.has_work(rig.sid)
    assert (await rig.queue.turn_status(turn_id)) == (rig.sid, TurnStatus.AWAITING_APPROVAL)
    assert await rig.lease.release(rig.sid, token)
    # The release left the session due at the expiry, not dropped.
    score = await rig.redis.zscore(rig.keys.lease_deadlines(rig.sid), rig.sid)
    assert score is not None
    waiting = await rig.approvals.pending()
    assert [(w.turn_id, w.call_id) for w in waiting] == [(turn_id, "c1"), (turn_id, "c2")]
    assert abs(waiting[0].expires_at * 1000 - score) < 1

    # All or none: an unknown call refuses the request, nothing recorded.
    with pytest.raises(ApprovalNotFoundError):
        await rig.approvals.decide(rig.sid, turn_id, {"c1": (True, None), "zz": (True, None)}, "a")
    assert await rig.approvals.decisions(rig.sid, turn_id) == {}
    first = await rig.approvals.decide(rig.sid, turn_id, {"c1": (True, "ok")}, "alice")
    assert not first.ready and [d.by for d in first.decided] == ["alice"]
    assert not await rig.queue.has_work(rig.sid)
    # Racing deciders on c2: exactly one wins.
    results = await asyncio.gather(
        rig.approvals.decide(rig.sid, turn_id, {"c2": (False, "no")}, "bob"),
        rig.approvals.decide(rig.sid, turn_id, {"c2": (True, None)}, "carol"),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["DecideOutcome", "DecisionConflictError"]
    assert await rig.queue.has_work(rig.sid)
    assert await rig.approvals.pending() == []

    # Handed out again as attempt 2, not charged as a lost run; the next turn still waits.
    again = await rig.queue.claim_next(rig.sid)
    assert again is not None
    assert (again.turn_id, again.attempt, again.lost, again.parked) == (turn_id, 2, 0, "ready")
    decided = await rig.approvals.decisions(rig.sid, turn_id)
    assert decided["c1"].approved and decided["c1"].reason == "ok"
    with pytest.raises(DecisionConflictError):
        await rig.approvals.decide(rig.sid, turn_id, {"c1": (False, None)}, "late")
    # Lost again after resuming: that one is charged.
    lost = await rig.queue.claim_next(rig.sid)
    assert lost is not None and (lost.attempt, lost.lost, lost.parked) == (3, 1, "")
    await rig.queue.finish(rig.sid, turn_id, TurnStatus.COMPLETED)
    with pytest.raises(ApprovalClosedError):
        await rig.approvals.decide(rig.sid, turn_id, {"c1": (True, None)}, "late")
    nxt = await rig.queue.claim_next(rig.sid)
    assert nxt is not None and nxt.turn_id == behind.turn_id


async def test_expiry_denies_the_undecided_calls(rig: Rig) -> None:
    turn_id, token = await rig.park_one(timeout=0.2)
    await rig.approvals.decide(rig.sid, turn_id, {"c1": (True, None)}, "alice")
    await rig.lease.release(rig.sid, token)

    async def due() -> list[str]:
        return await rig.deadlines.expired()

    for _ in range(100):
        if rig.sid in await due():
            break
        await asyncio.sleep(0.02)
    assert rig.sid in await due()
    with pytest.raises(DecisionConflictError):  # the timeout won
        await rig.approvals.decide(rig.sid, turn_id, {"c2": (True, None)}, "late")
    assert await rig.queue.has_work(rig.sid)
    claimed = await rig.queue.claim_next(rig.sid)
    assert claimed is not None
    assert (claimed.parked, claimed.expired_calls, claimed.lost) == ("expired", ("c2",), 0)
    decided = await rig.approvals.decisions(rig.sid, turn_id)
    assert decided["c1"].approved
    assert (decided["c2"].approved, decided["c2"].reason, decided["c2"].by) == (
        False,
        NO_DECISION_IN_TIME,
        TIMEOUT_DECIDER,
    )


async def test_cancel_ends_a_waiting_turn(rig: Rig) -> None:
    turn_id, token = await rig.park_one()
    await rig.lease.release(rig.sid, token)
    result = await rig.queue.cancel(rig.sid, turn_id)
    assert (result.outcome, result.status) == (CancelOutcome.CANCELLED, TurnStatus.CANCELLED)
    assert not await rig.redis.exists(rig.keys.running(rig.sid))
    assert not await rig.redis.exists(rig.keys.approvals(rig.sid))
    assert await rig.approvals.pending() == []
    assert await rig.redis.zscore(rig.keys.lease_deadlines(rig.sid), rig.sid) is None
    with pytest.raises(ApprovalClosedError):
        await rig.approvals.decide(rig.sid, turn_id, {"c1": (True, None)}, "late")
