"""``ApprovalsMixin``: the ``Producer``'s decisions on the tool calls that wait for one.

``approve``, ``deny`` and ``decide`` record decisions (all or none) and publish them;
an approval may replace the call's arguments (checked here against the JSON Schema the
agent's workers published for the tool); ``complete_tool`` gives a waiting call's
result (a client tool's, or a person's in place of running the tool). The turn resumes
on a free worker once each of its waiting calls has one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reactq.producer.base import ProducerBase
from reactq.shared.errors import ApprovalNotFoundError, InvalidEditError
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
        self,
        turn_id: str,
        call_id: str,
        note: str | None = None,
        *,
        arguments: Mapping[str, Any] | None = None,
        by: str | None = None,
    ) -> DecideOutcome:
        """Approve a waiting tool call: it runs when the turn resumes, with
        ``arguments`` in place of the model's when given. See ``decide``."""
        edits = {call_id: arguments} if arguments is not None else None
        notes = {call_id: note} if note is not None else None
        return await self.decide(turn_id, {call_id: True}, notes=notes, by=by, arguments=edits)

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
        arguments: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> DecideOutcome:
        """Decide several waiting calls at once, all or none: ``{call_id: True}``
        approves, ``False`` denies, a string denies with that reason; ``notes`` adds a
        note to an approval; ``arguments`` (``{call_id: {...}}``) runs an approved call
        with these arguments instead of the model's. The model reads that a person
        changed them; the ``approval_decided`` event and the audit log carry them.

        Each decision is published as an ``approval_decided`` event naming ``by``
        (``producer`` by default). When every waiting call of the turn has one, the
        turn resumes on a free worker. Raises ApprovalNotFoundError (unknown turn or
        call), ApprovalClosedError (the turn waits for nothing: finished, running,
        queued) or DecisionConflictError (a call was decided already; of two racing
        deciders exactly one wins), InvalidTextError (a reason, note, ``by`` or an
        argument UTF-8 cannot carry), InvalidEditError (edited arguments for a denial,
        not a JSON object, or refused by the tool's JSON Schema; nothing recorded).
        """
        check_text({"decisions": decisions, "notes": notes, "by": by, "arguments": arguments}, "")
        return await self._decide(turn_id, _decisions(decisions, notes), by, arguments=arguments)

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

    async def _check_edits(
        self,
        session_id: str,
        turn_id: str,
        decisions: Mapping[str, tuple[bool, str | None]],
        arguments: Mapping[str, Mapping[str, Any]],
    ) -> dict[str, dict[str, Any]]:
        """``arguments`` checked: each for an approval of a waiting call, a JSON object
        the tool's published schema accepts (a tool no worker published, a client's,
        is checked by what runs it)."""
        # Only a decision that edits arguments needs them.
        from jsonschema.exceptions import best_match
        from jsonschema.validators import validator_for

        waiting = {c.call_id: c for c in await self.approvals.waiting(session_id)}
        agent = await self.queue.session_agent(session_id)
        catalogue = await self.registry.catalogue(agent) if agent else None
        schemas = {t.name: t.parameters for t in catalogue.tools} if catalogue else {}
        out: dict[str, dict[str, Any]] = {}
        for call_id, edited in arguments.items():
            if call_id not in decisions or not decisions[call_id][0]:
                raise InvalidEditError(
                    f"arguments for call {call_id!r} come with its approval, not without one",
                    call_id=call_id,
                )
            if not isinstance(edited, Mapping):
                raise InvalidEditError(
                    f"the arguments for call {call_id!r} must be a JSON object, got "
                    f"{type(edited).__name__}",
                    call_id=call_id,
                )
            call = waiting.get(call_id)
            if call is None or call.turn_id != turn_id:
                raise ApprovalNotFoundError(
                    f"turn {turn_id} has no call {call_id!r} waiting for a decision",
                    turn_id=turn_id,
                    call_id=call_id,
                )
            schema = schemas.get(call.tool)
            value = json.loads(json.dumps(edited))  # as the worker will read it
            if schema:
                error = best_match(validator_for(schema)(schema).iter_errors(value))
                if error is not None:
                    where = "/".join(str(p) for p in error.absolute_path) or "(the object)"
                    raise InvalidEditError(
                        f"the arguments for call {call_id!r} ({call.tool}) do not match its "
                        f"schema at {where}: {error.message}",
                        call_id=call_id,
                        tool=call.tool,
                        path=where,
                    )
            out[call_id] = value
        return out

    async def _decide(
        self,
        turn_id: str,
        decisions: dict[str, tuple[bool, str | None]],
        by: str | None,
        results: dict[str, tuple[str, bool]] | None = None,
        arguments: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> DecideOutcome:
        session_id = await self.queue.session_of(turn_id)
        if session_id is None:
            raise ApprovalNotFoundError(f"turn {turn_id} is unknown", turn_id=turn_id)
        edits = (
            await self._check_edits(session_id, turn_id, decisions, arguments)
            if arguments
            else None
        )
        decider = by or "producer"
        outcome = await self.approvals.decide(
            session_id, turn_id, decisions, decider, results, edits
        )
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
                    arguments=decision.arguments,
                )
            )
        if outcome.ready:
            await self._dispatch_if_work(session_id)
        return outcome
