"""``ApprovalsMixin``: the ``Producer``'s decisions on the tool calls that wait for one.

``approve``, ``deny`` and ``decide`` record decisions (all or none) and publish them;
``complete_tool`` gives a waiting call's result (a client tool's) in place of running
it. The turn resumes on a free worker once each of its waiting calls has one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reactq.producer.base import ProducerBase
from reactq.shared.errors import ApprovalNotFoundError
from reactq.shared.events import ApprovalDecidedEvent
from reactq.shared.protocol.approvals import DecideOutcome, PendingApproval
from reactq.shared.turn_inputs import check_text
from reactq.shared.turns import validate_session_id

__all__ = ["ApprovalsMixin"]


def _decisions(
    decisions: Mapping[str, bool | str], notes: Mapping[str, str] | None = None
) -> dict[str, tuple[bool, str | None]]:
    """``{call_id: True | False | "reason"}`` as ``{call_id: (approved, reason)}`` (an
    approval's reason is its note, if any)."""
    if not isinstance(decisions, Mapping) or not decisions:
        raise ApprovalNotFoundError("give at least one decision: {call_id: True | False | reason}")
    out: dict[str, tuple[bool, str | None]] = {}
    for call_id, value in decisions.items():
        if not isinstance(call_id, str) or not call_id:
            raise ApprovalNotFoundError(f"a call id must be a non-empty string, got {call_id!r}")
        if isinstance(value, bool):
            out[call_id] = (value, (notes or {}).get(call_id) if value else None)
        elif isinstance(value, str):
            out[call_id] = (False, value)  # a reason is a denial
        else:
            raise ApprovalNotFoundError(
                f"the decision on {call_id!r} must be True, False or a reason, got {value!r:.60}",
                call_id=call_id,
            )
    return out


class ApprovalsMixin(ProducerBase):
    """The ``Producer``'s approval methods."""

    async def approve(
        self, turn_id: str, call_id: str, note: str | None = None, *, by: str | None = None
    ) -> DecideOutcome:
        """Approve a waiting tool call: it runs when the turn resumes. See ``decide``."""
        return await self._decide(turn_id, {call_id: (True, note)}, by)

    async def deny(
        self, turn_id: str, call_id: str, reason: str | None = None, *, by: str | None = None
    ) -> DecideOutcome:
        """Deny a waiting tool call: the model reads a tool error carrying ``reason``."""
        return await self._decide(turn_id, {call_id: (False, reason)}, by)

    async def decide(
        self,
        turn_id: str,
        decisions: Mapping[str, bool | str],
        *,
        notes: Mapping[str, str] | None = None,
        by: str | None = None,
    ) -> DecideOutcome:
        """Decide several waiting calls at once, all or none: ``{call_id: True}``
        approves, ``False`` denies, a string denies with that reason; ``notes`` adds a
        note to an approval.

        Each decision is published as an ``approval_decided`` event naming ``by``
        (``producer`` by default). When every waiting call of the turn has one, the
        turn resumes on a free worker. Raises ApprovalNotFoundError (unknown turn or
        call), ApprovalClosedError (the turn waits for nothing: finished, running,
        queued) or DecisionConflictError (a call was decided already; of two racing
        deciders exactly one wins), InvalidTextError (a reason, note or ``by`` UTF-8
        cannot carry).
        """
        check_text({"decisions": decisions, "notes": notes, "by": by}, "")
        return await self._decide(turn_id, _decisions(decisions, notes), by)

    async def complete_tool(
        self,
        turn_id: str,
        call_id: str,
        result: Any = None,
        *,
        error: str | None = None,
        by: str | None = None,
    ) -> DecideOutcome:
        """Give the result of a call the turn waits for (a client tool's), in place of
        running it: ``result`` (text, or JSON-able data sent as JSON) is the call's
        observation, or ``error`` the error it failed with. The turn resumes on a free
        worker once every call it waits for has a decision or a result. Raises what
        ``decide`` raises."""
        if error is not None:
            given = (error, True)
        else:
            given = (result if isinstance(result, str) else json.dumps(result), False)
        check_text({"result": given[0], "by": by}, "")
        return await self._decide(turn_id, {call_id: (True, None)}, by, {call_id: given})

    async def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        """The tool calls waiting for a decision, of one session or of every session."""
        if session_id is not None:
            validate_session_id(session_id)
        return await self.approvals.pending(session_id)

    async def _decide(
        self,
        turn_id: str,
        decisions: dict[str, tuple[bool, str | None]],
        by: str | None,
        results: dict[str, tuple[str, bool]] | None = None,
    ) -> DecideOutcome:
        session_id = await self.queue.session_of(turn_id)
        if session_id is None:
            raise ApprovalNotFoundError(f"turn {turn_id} is unknown", turn_id=turn_id)
        decider = by or "producer"
        outcome = await self.approvals.decide(session_id, turn_id, decisions, decider, results)
        for decision in outcome.decided:
            await self.publisher.publish(
                ApprovalDecidedEvent(
                    session_id=session_id,
                    turn_id=turn_id,
                    attempt=0,
                    call_id=decision.call_id,
                    approved=decision.approved,
                    reason=decision.reason,
                    by=decision.by,
                )
            )
        if outcome.ready:
            await self._dispatch_if_work(session_id)
        return outcome
