"""The typed results of the session protocol's operations.

What a submit, a claim and a cancel did, as values a caller matches on: no
caller parses a reply string. The Lua scripts return these enums' values and
``queue.py`` builds the types from them, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from reactq.shared.errors import InvalidTurnError
from reactq.shared.protocol.control import CancelMode
from reactq.shared.turns import TurnRequest, TurnStatus, validate_turn_id


class SubmitStatus(StrEnum):
    """What the session queue did with a submitted turn."""

    QUEUED = "queued"
    """Pushed on the session's pending list."""
    REJECTED = "rejected"
    """Refused: the strategy is ``reject`` and the session was busy."""
    AGENT_MISMATCH = "agent_mismatch"
    """Refused: the session belongs to another agent (nothing changed)."""


@dataclass(frozen=True)
class SubmitOutcome:
    """The result of ``SessionQueue.submit``."""

    status: SubmitStatus
    position: int = 0
    """The turn's 1-based place in the pending list once queued; 0 otherwise."""
    session_agent: str | None = None
    """The agent the session belongs to, on ``AGENT_MISMATCH``."""
    stopped_running: str | None = None
    """The running turn an interrupt/rollback asked to stop, if any."""
    dropped_pending: tuple[str, ...] = ()
    """The waiting turns an interrupt/rollback cancelled."""

    @property
    def needs_dispatch(self) -> bool:
        """True when this turn needs a drain task of its own.

        Only the first turn of an empty pending list does: a turn queued behind
        others is reached by the drain sent for the first of them, or by the
        lease holder's recheck on release (and the session's deadline covers a
        drain task lost with its worker).
        """
        return self.status is SubmitStatus.QUEUED and self.position == 1


class LeaseEnd(StrEnum):
    """How a drain's hold on a session ended when no next turn was claimed
    (``SessionQueue.advance``)."""

    RELEASED = "released"
    """Nothing left to claim: the lease was given up in the same call."""
    LOST = "lost"
    """The token no longer held the lease: a newer holder owns the session."""


@dataclass(frozen=True)
class ClaimedTurn:
    """A turn taken into the running slot (the result of ``SessionQueue.claim_next``)."""

    attempt: int
    """1 for a first run; n+1 for each time it is handed out again (0 for a copy
    that ``already_ran``: it was not put in the running slot)."""
    lost: int
    """How many earlier runs died with their worker (charged against max_attempts)."""
    turn_id: str
    """The turn id ('' when the payload has no valid one: see ``TURN_ID_RE``)."""
    payload: str
    """The TurnRequest JSON as submitted (possibly malformed)."""
    already_ran: str = ""
    """For a copy of a turn id that has run already (or runs, or was cancelled), the
    status that turn has: the copy left pending without entering the running slot
    and must not run. '' for a turn to run."""
    readable: bool = True
    """False when the payload is not UTF-8 text: ``payload`` then shows it with
    replacement characters, and ``parse`` refuses it."""
    parked: str = ""
    """For a turn handed out again after it waited for decisions: ``ready`` (every
    call decided), ``expired`` (the undecided ones were denied) or ``cancelled``
    (a cancel flag was raised while it waited); '' otherwise."""
    expired_calls: tuple[str, ...] = ()
    """The calls this claim denied because their decision did not come in time."""
    cancel: CancelMode | None = None
    """How the turn was asked to stop before this claim (its cancel flag), if it was."""

    def parse(self) -> TurnRequest:
        """The TurnRequest; raises on a payload that cannot be this turn: malformed,
        not UTF-8, or without the valid turn id it was claimed under."""
        if not self.readable:
            raise InvalidTurnError("the turn payload is not UTF-8 text")
        turn = TurnRequest.parse(self.payload)
        validate_turn_id(turn.turn_id)
        if turn.turn_id != self.turn_id:
            raise InvalidTurnError(
                f"the payload's turn id {turn.turn_id!r} is not the one it was claimed "
                f"under ({self.turn_id!r})"
            )
        return turn


class CancelOutcome(StrEnum):
    """What a cancel request did."""

    CANCELLED = "cancelled"
    """The turn was still queued: it was removed and will never run."""
    CANCELLING = "cancelling"
    """The turn is running: it was flagged and stops at its next step."""
    ALREADY_FINISHED = "already_finished"
    """The turn had ended; nothing to do."""
    UNKNOWN = "unknown"
    """No recent turn has that id."""


@dataclass(frozen=True)
class CancelResult:
    """The result of a cancel (``SessionQueue.cancel``, ``Producer.cancel``)."""

    turn_id: str
    """The turn asked about."""
    outcome: CancelOutcome
    """What the request did."""
    session_id: str | None = None
    """Its session, when known."""
    status: TurnStatus | None = field(default=None)
    """Its status after the call, when known."""
