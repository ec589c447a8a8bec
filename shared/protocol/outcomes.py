"""The typed results of the session protocol's operations.

What a submit, a claim and a cancel did, as values a caller matches on: no
caller parses a reply string. The Lua scripts return these enums' values and
``queue.py`` builds the types from them, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from reactq.shared.turns import TurnRequest, TurnStatus


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


@dataclass(frozen=True)
class ClaimedTurn:
    """A turn taken into the running slot (the result of ``SessionQueue.claim_next``)."""

    attempt: int
    """1 for a first run; n+1 for each time it is handed out again."""
    lost: int
    """How many earlier runs died with their worker (charged against max_attempts)."""
    turn_id: str
    """The turn id ('' when the payload could not be read)."""
    payload: str
    """The TurnRequest JSON as submitted (possibly malformed)."""

    def parse(self) -> TurnRequest:
        """The TurnRequest; raises on a malformed payload."""
        return TurnRequest.parse(self.payload)


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
