"""Approvals: a turn parked while tool calls wait for a person's decision.

A worker that reaches a tool call needing approval checkpoints the step (the
model's reply and the results of the calls that ran), then ``park``s the turn: the
session's approvals hash (``keys.approvals``) records the waiting calls and when
they expire, the turn's status becomes ``awaiting_approval``, and the worker
releases the lease and its slot. The turn stays in the running slot, so the
turns behind it wait (FIFO holds); ``queue_claim.lua`` and ``queue_has_work.lua``
see it is parked and hand out nothing.

The hash::

    turn       the parked turn id
    state      waiting | ready | resumed
    calls      JSON [{"call_id", "tool", "arguments"}]
    expires    server ms when undecided calls count as denied
    requested  server ms it was parked
    d:<call>   JSON {"approved", "reason", "by", "at"} (and "result", "failed" for a
               result given in place of the call, "arguments" for an edited call, as
               JSON text): one call's decision

``decide`` records decisions atomically (all or none; a call decided already is a
``DecisionConflictError``: of two racing deciders exactly one wins). Once every
call has one, the turn is ``ready``: the caller dispatches a drain and the next
claim hands the turn out again as attempt n+1, which resumes from its
checkpoint. While it waits, the lease release sets the session's deadline to the
expiry (``lease_release.lua``, through ``deadlines.lua``): the reaper then finds
it, and the claim denies the undecided calls ("no decision in time"). A cancel
ends a waiting turn at once (``queue_cancel.lua``). See docs/architecture.md,
"Session protocol".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from reactq.shared.errors import (
    ApprovalClosedError,
    ApprovalNotFoundError,
    DecisionConflictError,
)
from reactq.shared.keys import Keys
from reactq.shared.redis_client import lua_join, lua_source, once_key_id, text

__all__ = [
    "NO_DECISION_IN_TIME",
    "TIMEOUT_DECIDER",
    "Approvals",
    "DecideOutcome",
    "Decision",
    "PendingApproval",
    "WaitingCall",
]

NO_DECISION_IN_TIME = "no decision in time"
"""The reason of a call denied because nobody decided before it expired."""
TIMEOUT_DECIDER = "reactq:timeout"
"""``by`` of such a denial."""

_PARK = lua_source(__name__, "now_ms", "running_slot", "approval_park")
# A resent decision acts once (once.lua).
_DECIDE = lua_join(
    lua_source("reactq.shared.redis_client", "once"),
    lua_source(__name__, "now_ms", "deadlines", "approval_decide"),
)


@dataclass(frozen=True)
class WaitingCall:
    """A tool call that waits for a decision."""

    call_id: str
    tool: str
    arguments: Any
    """The call's arguments (a dict; the raw text when they were not JSON)."""

    def as_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "tool": self.tool, "arguments": self.arguments}


@dataclass(frozen=True)
class Decision:
    """One call's decision."""

    call_id: str
    approved: bool
    reason: str | None = None
    """An approval's note, or why it was denied."""
    by: str = ""
    """Who decided (``TIMEOUT_DECIDER`` for an expiry)."""
    at: float = 0.0
    """Unix time of the decision."""
    result: str | None = None
    """The call's result, given in place of running it (a client tool's, say)."""
    failed: bool = False
    """True when ``result`` is the error the call failed with."""
    arguments: dict[str, Any] | None = None
    """The arguments an approval runs the call with, when the decider changed the
    model's (checked against the tool's schema when it was decided)."""


@dataclass(frozen=True)
class PendingApproval:
    """A call waiting for a decision, as ``pending`` lists it."""

    session_id: str
    turn_id: str
    call_id: str
    tool: str
    arguments: Any
    requested_at: float
    """Unix time the turn was parked."""
    expires_at: float
    """Unix time the call counts as denied if nobody decides."""


@dataclass(frozen=True)
class DecideOutcome:
    """What ``decide`` did."""

    session_id: str
    turn_id: str
    decided: tuple[Decision, ...]
    """The decisions this call recorded."""
    ready: bool
    """True when every waiting call now has a decision: dispatch a drain."""


class Approvals:
    """The Redis operations on parked turns."""

    def __init__(self, redis: Redis, keys: Keys, meta_ttl_seconds: int = 30 * 86400) -> None:
        self.redis = redis
        self.keys = keys
        self.meta_ttl = meta_ttl_seconds
        self._park = redis.register_script(_PARK)
        self._decide = redis.register_script(_DECIDE)

    async def park(
        self, session_id: str, turn_id: str, calls: list[WaitingCall], timeout_seconds: float
    ) -> float | None:
        """Park the running turn; the Unix time its calls expire, or None if the running
        slot no longer holds it (nothing was written)."""
        k = self.keys
        reply = await self._park(
            keys=[
                k.running(session_id),
                k.turns(session_id),
                k.approvals(session_id),
                k.approvals_index(session_id),
            ],
            args=[
                turn_id,
                json.dumps([c.as_dict() for c in calls], ensure_ascii=False),
                max(1, int(timeout_seconds * 1000)),
                session_id,
                self.meta_ttl,
            ],
        )
        if text(reply[0]) != "ok":
            return None
        return int(text(reply[1])) / 1000

    async def decide(
        self,
        session_id: str,
        turn_id: str,
        decisions: dict[str, tuple[bool, str | None]],
        by: str,
        results: dict[str, tuple[str, bool]] | None = None,
        edits: dict[str, dict[str, Any]] | None = None,
    ) -> DecideOutcome:
        """Record ``{call_id: (approved, reason)}`` for the parked turn, all or none;
        ``results`` (``{call_id: (text, failed)}``) gives calls' results in place of
        running them; ``edits`` (``{call_id: arguments}``) the arguments an approved
        call runs with instead of the model's.

        Raises ApprovalNotFoundError (no such turn or call), ApprovalClosedError (the
        turn waits for nothing) or DecisionConflictError (a call has a decision).
        """
        k = self.keys
        given = results or {}
        edited = edits or {}
        wanted = [
            {"call_id": call_id, "approved": approved, "reason": reason}
            | (
                {"result": given[call_id][0], "failed": given[call_id][1]}
                if call_id in given
                else {}
            )
            # As JSON text: Lua's cjson would turn an empty list into an object.
            | ({"arguments": json.dumps(edited[call_id])} if call_id in edited else {})
            for call_id, (approved, reason) in decisions.items()
        ]
        reply = [
            text(r)
            for r in await self._decide(
                keys=[
                    k.approvals(session_id),
                    k.turns(session_id),
                    k.approvals_index(session_id),
                    k.lease_deadlines(session_id),
                    k.once(session_id, once_key_id()),
                ],
                args=[
                    turn_id,
                    json.dumps(wanted, ensure_ascii=False),
                    by,
                    session_id,
                    30_000,
                ],
            )
        ]
        outcome = reply[0]
        if outcome == "closed":
            status = reply[1]
            if not status:
                raise ApprovalNotFoundError(
                    f"turn {turn_id} is unknown", turn_id=turn_id, session_id=session_id
                )
            raise ApprovalClosedError(
                f"turn {turn_id} is not waiting for a decision (its status is {status})",
                turn_id=turn_id,
                status=status,
            )
        if outcome == "expired":
            raise DecisionConflictError(
                f"turn {turn_id}: the time to decide is up; undecided calls count as denied "
                f"({NO_DECISION_IN_TIME})",
                turn_id=turn_id,
            )
        if outcome == "unknown_call":
            raise ApprovalNotFoundError(
                f"turn {turn_id} has no call {reply[1]!r} waiting for a decision",
                turn_id=turn_id,
                call_id=reply[1],
            )
        if outcome == "conflict":
            prior = _decision(reply[1], reply[2])
            verdict = "approved" if prior.approved else "denied"
            raise DecisionConflictError(
                f"call {reply[1]!r} of turn {turn_id} was {verdict} already by {prior.by!r}",
                turn_id=turn_id,
                call_id=reply[1],
                approved=prior.approved,
                by=prior.by,
            )
        decided = await self.decisions(session_id, turn_id)
        mine = tuple(decided[c] for c in decisions if c in decided)
        return DecideOutcome(session_id, turn_id, mine, outcome == "ready")

    async def decisions(self, session_id: str, turn_id: str) -> dict[str, Decision]:
        """The decisions recorded for the turn (empty when it was not parked)."""
        raw = await self.redis.hgetall(self.keys.approvals(session_id))
        data = {text(f): text(v) for f, v in raw.items()}
        if data.get("turn") != turn_id:
            return {}
        return {
            field[2:]: _decision(field[2:], value)
            for field, value in data.items()
            if field.startswith("d:")
        }

    async def waiting(self, session_id: str) -> list[PendingApproval]:
        """The session's calls that wait for a decision, in the model's order."""
        raw = await self.redis.hgetall(self.keys.approvals(session_id))
        data = {text(f): text(v) for f, v in raw.items()}
        if data.get("state") != "waiting" or data.get("kind") == "children":
            return []  # a turn parked for its child turns waits for no person
        requested = int(data.get("requested", "0")) / 1000
        expires = int(data.get("expires", "0")) / 1000
        return [
            PendingApproval(
                session_id=session_id,
                turn_id=data["turn"],
                call_id=call["call_id"],
                tool=call["tool"],
                arguments=call["arguments"],
                requested_at=requested,
                expires_at=expires,
            )
            for call in json.loads(data.get("calls", "[]"))
            if f"d:{call['call_id']}" not in data
        ]

    async def pending(self, session_id: str | None = None) -> list[PendingApproval]:
        """Every call waiting for a decision (of one session, or of all)."""
        if session_id is not None:
            return await self.waiting(session_id)
        members: set[str] = set()
        for index in self.keys.approvals_indexes():
            members.update(text(s) for s in await self.redis.smembers(index))
        found: list[PendingApproval] = []
        for member in sorted(members):
            found += await self.waiting(member)
        return found


def _decision(call_id: str, raw: str) -> Decision:
    data = json.loads(raw)
    reason = data.get("reason")
    result = data.get("result")
    return Decision(
        call_id=call_id,
        approved=bool(data.get("approved")),
        reason=reason if isinstance(reason, str) else None,
        by=str(data.get("by") or ""),
        at=float(data.get("at") or 0) / 1000,
        result=result if isinstance(result, str) else None,
        failed=bool(data.get("failed")),
        arguments=json.loads(edited) if isinstance(edited := data.get("arguments"), str) else None,
    )
