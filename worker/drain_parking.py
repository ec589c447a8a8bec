"""Turns that wait: parked for people or for child turns, and resumed.

A run that stops at calls waiting for a person (``AwaitingApproval``) or for child
turns (``AwaitingChildren``) is parked here with nothing held (no lease, no slot); a
parked turn resumed reads the people's decisions, and a parent's final its children's
usage. ``ParkedTurns`` is a base of ``Drainer``; it uses the drain's attributes named
on it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from redis.exceptions import RedisError

from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import LeaseLostError
from reactq.shared.events import ApprovalDecidedEvent, ApprovalRequestedEvent
from reactq.shared.protocol.approvals import Approvals, Decision, WaitingCall
from reactq.shared.protocol.children import DELEGATION_METADATA, ChildLink, Children
from reactq.shared.protocol.outcomes import ClaimedTurn
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnRequest, TurnStatus
from reactq.worker.agent.delegation import tasks_of
from reactq.worker.agent.suspend import AwaitingApproval, AwaitingChildren
from reactq.worker.child_turns import fold_children

__all__ = ["ParkedTurns"]

log = logging.getLogger("reactq.worker")


class ParkedTurns:
    """Parking and resuming turns (a base of ``Drainer``, which sets these attributes)."""

    approvals: Approvals
    children: Children
    settings: Settings

    async def _decisions(
        self, sid: str, turn_id: str, claimed: ClaimedTurn, emitter: TurnEmitter
    ) -> dict[str, Decision]:
        """The pool can wait for people: decisions on the calls a parked turn waited
        for (each expired call told by an ``approval_decided`` event)."""
        decisions: dict[str, Decision] = {}
        if claimed.parked:
            decisions = await self.approvals.decisions(sid, turn_id)
            for call_id in claimed.expired_calls:
                expired = decisions.get(call_id)
                if expired is not None:
                    await emitter.emit(
                        ApprovalDecidedEvent,
                        call_id=call_id,
                        approved=False,
                        reason=expired.reason,
                        by=expired.by,
                    )
        return decisions

    async def _park(
        self, sid: str, turn_id: str, emitter: TurnEmitter, waiting: AwaitingApproval
    ) -> None:
        """The turn waits for people: park it (its step is checkpointed), announce the
        waiting calls, and let the drain go on: it finds the session held and releases
        the lease, so no worker holds anything while a person thinks."""
        calls = [WaitingCall(c.id, c.name, _arguments(c.arguments)) for c in waiting.calls]
        expires = await self.approvals.park(
            sid, turn_id, calls, self.settings.approval_timeout_seconds
        )
        if expires is None:  # the slot holds another turn: the lease was lost meanwhile
            raise LeaseLostError(f"turn {turn_id} left the running slot", session_id=sid)
        await emitter.emit(
            ApprovalRequestedEvent, calls=[c.as_dict() for c in calls], expires_at=expires
        )
        log.info(
            "turn %s awaits approval of %s (session %s)",
            turn_id,
            ", ".join(f"{c.tool}/{c.call_id}" for c in calls),
            sid,
            extra={"turn_id": turn_id, "status": str(TurnStatus.AWAITING_APPROVAL)},
        )

    async def _park_children(self, sid: str, turn_id: str, waiting: AwaitingChildren) -> None:
        """The turn waits for its child turns: park it like a turn waiting for people
        (no lease, no slot); the last child's end makes it ready again."""
        calls = [
            {"call_id": c.id, "tool": c.name, "keys": [f"{c.id}#{i}" for i in range(n)]}
            for c in waiting.calls
            for n in [len(tasks_of(c) or ())]
        ]
        state = await self.children.park(
            sid, turn_id, calls, self.settings.delegation_timeout_seconds
        )
        if state is None:
            raise LeaseLostError(f"turn {turn_id} left the running slot", session_id=sid)
        log.info(
            "turn %s awaits its child turns (%s; session %s)",
            turn_id,
            state,
            sid,
            extra={"turn_id": turn_id, "status": str(TurnStatus.AWAITING_CHILDREN)},
        )

    async def _fold(self, sid: str, turn_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The final's fields with the turn's children's usage folded in."""
        try:
            _, results = await self.children.state(sid, turn_id)
        except RedisError:
            return fields
        return fold_children(fields, list(results.values()))

    async def _link_of(self, sid: str, turn: TurnRequest) -> ChildLink | None:
        """The turn's parent, if it is a child turn (its metadata says so; Redis says
        which parent, so a producer's metadata cannot make a turn forward elsewhere)."""
        if DELEGATION_METADATA not in turn.metadata:
            return None
        link = await self.children.link_of(turn.turn_id)
        if link is None or link.session_id != sid:
            return None
        return link


def _arguments(raw: str) -> Any:
    """A call's arguments as JSON data, or the raw text when they are not JSON."""
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw
