"""The StateStore protocol: the conversation state every worker shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from shared.messages import ChatMessage
from shared.turns import TurnStatus

TRUNK = "trunk"


class SessionInfo(BaseModel):
    """What the store knows of a session."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    """The session."""
    agent: str
    """The agent of its first turn."""
    active_branch: str = TRUNK
    """The branch new turns run on."""
    fence: int = 0
    """The newest fencing token the store has seen."""
    created_at: float = 0.0
    """Unix time of creation."""


class TurnRecord(BaseModel):
    """A turn's outcome as committed."""

    model_config = ConfigDict(frozen=True)

    turn_id: str
    """The turn."""
    session_id: str
    """Its session."""
    status: TurnStatus
    """How it ended."""
    attempt: int = 1
    """The attempt that committed it."""
    final_text: str | None = None
    """The final answer shown to the user."""
    error: str | None = None
    """The error code when it failed."""
    created_at: float = 0.0
    """Unix time of commit."""


@runtime_checkable
class StateStore(Protocol):
    """Sessions, their messages and their turns' outcomes."""

    async def ensure_session(self, session_id: str, agent: str) -> SessionInfo:
        """Create the session for ``agent`` if new; return it (its agent may differ)."""
        ...

    async def get_session(self, session_id: str) -> SessionInfo | None:
        """The session, or None if the store has never seen it."""
        ...

    async def get_messages(
        self, session_id: str, branch_id: str | None = None
    ) -> list[ChatMessage]:
        """Messages of a branch (the active one by default), oldest first."""
        ...

    async def append(
        self, session_id: str, messages: Sequence[ChatMessage], branch_id: str | None = None
    ) -> None:
        """Append messages to a branch (the active one by default), unfenced."""
        ...

    async def claim(self, session_id: str, fence: int) -> None:
        """Record ``fence`` as the session's newest token.

        Raises StaleLeaseError if the store has already seen a newer one.
        """
        ...

    async def commit_turn(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        record: TurnRecord,
        fence: int | None = None,
    ) -> None:
        """Append a turn's messages and record its outcome in one atomic step.

        With ``fence`` given, the step checks it against the session's newest token
        and raises StaleLeaseError (writing nothing) if a newer one was issued.
        """
        ...

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        """A committed turn's outcome, or None."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
