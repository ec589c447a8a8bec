"""The session queue: per-session FIFO of turns, the running slot, turn statuses.

Each operation is one Lua call on the session's keys (they share its hash tag),
so a submit, a claim and a cancel racing on one session see one consistent order.

The running slot holds ``<attempt>|<lost>|<turn_id>|<TurnRequest JSON>`` from the
moment a worker claims a turn until it finishes it; ``turn_id`` is a valid one
(``TURN_ID_RE``, never a ``|``) or '' for a payload without one, so ``finish``
always finds it. A turn id runs at most once: a claim drops a copy of a turn id
whose status is past ``queued`` (``ClaimedTurn.already_ran``). ``attempt`` counts
runs; ``lost`` counts runs that died with their worker. A slot found occupied by the
next lease holder means its previous holder died mid-turn: the turn is handed out
again as attempt n+1 with ``lost`` increased. A worker that gives a turn back on
shutdown lowers ``lost`` first, so that run is not charged.

A submit also gives the session a deadline (``deadlines.py``) if it has none, in
the same call: a drain task lost on its way to a worker is then found by the
reaper (docs/architecture.md, "Session protocol").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from reactq.shared.bus import PublishGuard, ScriptGuard
from reactq.shared.keys import Keys
from reactq.shared.protocol.control import CancelMode
from reactq.shared.protocol.lease import SessionLease
from reactq.shared.protocol.outcomes import (
    CancelOutcome,
    CancelResult,
    ClaimedTurn,
    LeaseEnd,
    SubmitOutcome,
    SubmitStatus,
)
from reactq.shared.redis_client import lua_join, lua_source, once_key_id, text
from reactq.shared.turns import MultitaskStrategy, TurnRequest, TurnStatus, validate_turn_id

# A resent call acts once (once.lua): every script here that pushes, claims or
# publishes; the others (has_work, finish, give_back's guard) change nothing a
# second time, or nothing that matters.
_ONCE = lua_source("reactq.shared.redis_client", "once")
_SUBMIT = lua_join(
    _ONCE, lua_source(__name__, "now_ms", "running_slot", "deadlines", "queue_submit")
)
_CLAIM = lua_source(
    __name__, "now_ms", "running_slot", "approval_hold", "claim_next", "queue_claim"
)
_HAS_WORK = lua_source(__name__, "now_ms", "running_slot", "approval_hold", "queue_has_work")
_FINISH = lua_source(__name__, "running_slot", "finish_turn", "queue_finish")
_STEP = (
    "now_ms",
    "running_slot",
    "approval_hold",
    "deadlines",
    "claim_next",
    "finish_turn",
    "lease_token",
    "lease_free",
    "queue_step",
)
"""The preludes of a drain's step between turns (queue_step.lua's function)."""
_NEXT = lua_join(_ONCE, lua_source(__name__, *_STEP, "queue_next"))
# The same step with a turn's final: its status written as bus_publish_many.lua's
# guard writes it (fenced_hset), its events appended by bus_append.lua's function.
_NEXT_FINAL = lua_join(
    lua_source(__name__, *_STEP, "fenced_hset"),
    _ONCE,
    lua_source("reactq.shared.bus", "bus_append"),
    lua_source(__name__, "queue_next_final"),
)
_TAKE = lua_join(
    _ONCE,
    lua_source(
        __name__,
        "now_ms",
        "running_slot",
        "approval_hold",
        "deadlines",
        "claim_next",
        "lease_token",
        "lease_free",
        "lease_take",
        "queue_take",
    ),
)
_GIVE_BACK = lua_source(__name__, "running_slot", "queue_give_back")
_CANCEL = lua_join(
    _ONCE, lua_source(__name__, "now_ms", "running_slot", "deadlines", "queue_cancel")
)


class SessionQueue:
    """The Redis operations on a session's turns (docs/architecture.md, "Session
    protocol": submit, claim, finish, cancel)."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        meta_ttl_seconds: int = 30 * 86400,
        *,
        dispatch_grace_seconds: float = 30.0,
        cancel_ttl_seconds: int = 3600,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.meta_ttl = meta_ttl_seconds
        self.grace_ms = int(dispatch_grace_seconds * 1000)
        self.cancel_ttl = cancel_ttl_seconds
        self._submit = redis.register_script(_SUBMIT)
        self._claim = redis.register_script(_CLAIM)
        self._has_work = redis.register_script(_HAS_WORK)
        self._finish = redis.register_script(_FINISH)
        self._next = redis.register_script(_NEXT)
        self._next_final = redis.register_script(_NEXT_FINAL)
        self._take = redis.register_script(_TAKE)
        self._give_back = redis.register_script(_GIVE_BACK)
        self._cancel = redis.register_script(_CANCEL)

    async def submit(self, turn: TurnRequest) -> SubmitOutcome:
        """Apply the multitask strategy and push the turn, atomically.

        Raises InvalidTurnError (nothing pushed) for a turn id ``TURN_ID_RE`` refuses.
        """
        validate_turn_id(turn.turn_id)
        k, sid = self.keys, turn.session_id
        result: list[Any] = await self._submit(
            keys=[
                k.meta(sid),
                k.pending(sid),
                k.running(sid),
                k.turns(sid),
                k.lease_deadlines(sid),
                k.cancel_prefix(sid),
                k.once(sid, once_key_id()),
            ],
            args=[
                turn.agent,
                turn.model_dump_json(),
                turn.turn_id,
                MultitaskStrategy(turn.strategy).value,
                self.meta_ttl,
                sid,
                self.grace_ms,
                self.cancel_ttl,
            ],
        )
        status, position, agent, stopped, *dropped = result
        outcome = SubmitOutcome(
            status=SubmitStatus(text(status)),
            position=int(position),
            session_agent=text(agent) or None,
            stopped_running=text(stopped) or None,
            dropped_pending=tuple(text(d) for d in dropped),
        )
        if outcome.status is not SubmitStatus.AGENT_MISMATCH:
            await self.redis.set(k.turn_index(turn.turn_id), sid, ex=self.meta_ttl)
        return outcome

    async def claim_next(self, session_id: str) -> ClaimedTurn | None:
        """Move the next turn into the running slot (or re-issue one left there)."""
        result = await self._claim(keys=self._claim_keys(session_id), args=[session_id])
        return None if not result else _claimed(result)

    def _claim_keys(self, session_id: str) -> list[str]:
        """The keys a claim touches (claim_next.lua's parameters, in order)."""
        k = self.keys
        return [
            k.running(session_id),
            k.pending(session_id),
            k.turns(session_id),
            k.approvals(session_id),
            k.cancel_prefix(session_id),
            k.approvals_index(session_id),
        ]

    async def take(
        self, session_id: str, lease: SessionLease
    ) -> tuple[int, ClaimedTurn | LeaseEnd] | None:
        """The drain's first step, in one call: take the session's lease for ``lease``'s
        owner (``SessionLease.acquire``), then claim the first turn under the new token
        (``advance``). None when someone holds the lease (nothing done); else the token
        and the claimed turn, or ``LeaseEnd.RELEASED`` when there was nothing to claim
        (the lease was given back in the same call)."""
        k = self.keys
        result = await self._take(
            keys=[
                *self._claim_keys(session_id),
                k.lease(session_id),
                k.fence(session_id),
                k.lease_deadlines(session_id),
                k.once(session_id, once_key_id()),
            ],
            args=[session_id, lease.ttl_ms, lease.owner],
        )
        if not result:
            return None
        token, *claim = result
        return int(token), _claimed(claim) if claim else LeaseEnd.RELEASED

    async def advance(
        self,
        session_id: str,
        token: int,
        finished: tuple[str, TurnStatus] | None = None,
        *,
        publish: Callable[[ScriptGuard], Awaitable[bool]] | None = None,
    ) -> ClaimedTurn | LeaseEnd:
        """The drain's step between turns, in one call: finish the turn that ran
        (``finished``: its id and status), then claim the next while ``token`` holds
        the lease, or, with nothing to claim, release the lease (the session's
        deadline then follows the release's rule). Returns the claimed turn, or how
        the drain's hold ends: ``RELEASED``, or ``LOST`` (the token no longer held the
        lease: nothing claimed, nothing released).

        ``publish`` (with ``finished``) puts the turn's final in the same call: it is
        given the guard to publish the final's events under (``publish_all(bus,
        events, guard)``, through whatever wraps the bus: the audit log, a child's
        forwarding) and says whether they went out. The guard records the turn's
        status before the events, fenced by ``token``: LOST when the lease moved on,
        with nothing published, finished, claimed or released.
        """
        if publish is not None and finished is not None:
            record = PublishGuard(token, finished[0], str(finished[1]), self.meta_ttl)
            guard = _FinalStep(self, session_id, record)
            return guard.step if await publish(guard) else LeaseEnd.LOST
        k = self.keys
        turn_id, status = finished if finished is not None else ("", "")
        result = await self._next(
            keys=[
                *self._claim_keys(session_id),
                k.steps(session_id),
                k.lease(session_id),
                k.lease_deadlines(session_id),
                k.once(session_id, once_key_id()),
            ],
            args=[session_id, turn_id, str(status), self.meta_ttl, str(token)],
        )
        return _step(result)

    async def finish(self, session_id: str, turn_id: str, status: TurnStatus) -> None:
        """Clear the running slot (if it still holds this turn), record the status, and
        drop the turn's checkpointed steps."""
        k = self.keys
        await self._finish(
            keys=[
                k.running(session_id),
                k.turns(session_id),
                k.approvals(session_id),
                k.steps(session_id),
            ],
            args=[turn_id, str(status), self.meta_ttl],
        )

    async def give_back(self, session_id: str, turn_id: str) -> bool:
        """Leave the turn for another worker without charging this run (shutdown)."""
        return bool(await self._give_back(keys=[self.keys.running(session_id)], args=[turn_id]))

    async def cancel(self, session_id: str, turn_id: str) -> CancelResult:
        """Cancel a turn of the session: drop it if queued, end it if it is parked
        waiting for decisions, flag it if running.

        A queued or parked turn's final is the caller's to publish
        (``endings.cancelled``), and so is dispatching a drain for the turns behind a
        parked one; a running one's final is its worker's, once it stops.
        """
        k = self.keys
        outcome, status = await self._cancel(
            keys=[
                k.pending(session_id),
                k.running(session_id),
                k.turns(session_id),
                k.cancel_flag(session_id, turn_id),
                k.approvals(session_id),
                k.approvals_index(session_id),
                k.lease_deadlines(session_id),
                k.steps(session_id),
                k.once(session_id, once_key_id()),
            ],
            args=[turn_id, self.cancel_ttl, session_id, self.grace_ms],
        )
        return CancelResult(
            turn_id,
            CancelOutcome(text(outcome)),
            session_id,
            TurnStatus(text(status)) if text(status) else None,
        )

    async def cancel_mode(self, session_id: str, turn_id: str) -> CancelMode | None:
        """How the turn was asked to stop, or None if it was not."""
        value = await self.redis.get(self.keys.cancel_flag(session_id, turn_id))
        return None if value is None else CancelMode.read(text(value))

    async def session_agent(self, session_id: str) -> str | None:
        """The agent a session belongs to, if Redis remembers it."""
        value = await self.redis.hget(self.keys.meta(session_id), "agent")
        return None if value is None else text(value)

    async def has_work(self, session_id: str) -> bool:
        """True when a turn is pending or left in the running slot, unless the running
        turn is parked waiting for decisions (then the session holds: FIFO)."""
        k = self.keys
        found = await self._has_work(
            keys=[
                k.running(session_id),
                k.pending(session_id),
                k.approvals(session_id),
                k.cancel_prefix(session_id),
            ]
        )
        return bool(found)

    async def session_of(self, turn_id: str) -> str | None:
        """The session a recent turn belongs to, or None if unknown."""
        sid = await self.redis.get(self.keys.turn_index(turn_id))
        return None if sid is None else text(sid)

    async def turn_status(self, turn_id: str) -> tuple[str, TurnStatus] | None:
        """(session_id, status) of a recent turn, or None if unknown."""
        session_id = await self.session_of(turn_id)
        if session_id is None:
            return None
        raw = await self.redis.hget(self.keys.turns(session_id), turn_id)
        if raw is None:
            return None
        return session_id, TurnStatus(text(raw))


class _FinalStep(ScriptGuard):
    """``advance``'s guard for a turn's final: queue_next_final.lua publishes the
    final's events (``RedisEventBus.publish_many`` passes them) and takes the step;
    ``step`` is what the step gave (LOST until it ran)."""

    def __init__(self, queue: SessionQueue, session_id: str, record: PublishGuard) -> None:
        self.record = record
        self.step: ClaimedTurn | LeaseEnd = LeaseEnd.LOST
        self._queue = queue
        self._session_id = session_id

    async def publish(
        self, keys: list[str], args: list[Any], payloads: list[str]
    ) -> list[Any] | None:
        """Publish the events and take the step; their stream ids, or None when the
        lease moved on (nothing done)."""
        k, sid = self._queue.keys, self._session_id
        result = await self._queue._next_final(
            # The stream's, the call's (once.lua), the lease's and the status's keys
            # (``keys``), then the step's.
            keys=[
                *keys,
                k.running(sid),
                k.pending(sid),
                k.approvals(sid),
                k.cancel_prefix(sid),
                k.approvals_index(sid),
                k.steps(sid),
                k.lease_deadlines(sid),
            ],
            args=[*args, sid, *payloads],
        )
        if not result:
            return None
        ids, step = result
        self.step = _step(step)
        return list(ids)


def _step(result: Any) -> ClaimedTurn | LeaseEnd:
    """queue_next.lua's reply: the claimed turn, or how the hold ended."""
    if isinstance(result, int):
        return LeaseEnd.RELEASED if result == -1 else LeaseEnd.LOST
    return _claimed(result)


def _payload_text(raw: bytes | str) -> tuple[str, bool]:
    """A pending list entry as text, and whether it was UTF-8 at all."""
    if isinstance(raw, str):
        return raw, True
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), False


def _claimed(result: list[Any]) -> ClaimedTurn:
    """A claim script's reply as a ClaimedTurn."""
    attempt, lost, turn_id, raw, already_ran, parked, expired, cancel = result
    payload, readable = _payload_text(raw)
    return ClaimedTurn(
        int(attempt),
        int(lost),
        text(turn_id),  # ASCII: the script hands out valid turn ids only, or ''
        payload,
        already_ran=text(already_ran),
        readable=readable,
        parked=text(parked),
        expired_calls=tuple(c for c in text(expired).split(",") if c),
        cancel=CancelMode.read(text(cancel)) if cancel else None,
    )
