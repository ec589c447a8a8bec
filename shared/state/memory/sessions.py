"""A memory store's sessions: their branches and messages, and reading a branch's view."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.messages import ChatMessage
from reactq.shared.state.base import TRUNK, SessionInfo, SessionRecord
from reactq.shared.state.common import new_branch_id, view_ranges


@dataclass(eq=False)
class Branch:
    """One branch of a session: where it forks from its parent and its own messages."""

    parent: str | None
    fork: int
    created_at: float
    own: list[ChatMessage] = field(default_factory=list)
    """Its own messages, sequences fork+1 .. fork+len(own)."""

    @property
    def length(self) -> int:
        """Its last message's sequence (the fork's, with none of its own)."""
        return self.fork + len(self.own)


@dataclass(eq=False)
class Session:
    """One session: its branches, fence, turns and metadata."""

    agent: str
    created_at: float
    active_branch: str = TRUNK
    fence: int = 0
    branches: dict[str, Branch] = field(default_factory=dict)
    turn_ids: set[str] = field(default_factory=set)
    touched: float = 0.0
    updated_at: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)

    def info(self, session_id: str) -> SessionInfo:
        """The session as ``ensure_session`` returns it."""
        return SessionInfo(
            session_id=session_id,
            agent=self.agent,
            active_branch=self.active_branch,
            fence=self.fence,
            created_at=self.created_at,
        )

    def record(self, session_id: str) -> SessionRecord:
        """The session as ``get_session`` returns it."""
        return SessionRecord(
            **dict(self.info(session_id)),
            updated_at=self.updated_at,
            metadata=dict(self.metadata),
        )

    def wrote(self) -> None:
        """Mark it written now."""
        self.updated_at = time.time()


def history(session: Session, branch_id: str, *, from_summary: bool = False) -> list[ChatMessage]:
    """The branch's whole history, oldest first ([] for a branch the session lacks);
    ``from_summary``: only what its latest summary does not stand for (a turn's read)."""
    chain: list[tuple[str, int]] = []
    current: str | None = branch_id
    while current is not None and current in session.branches:
        chain.append((current, session.branches[current].fork))
        current = session.branches[current].parent
    parts: list[tuple[Branch, int]] = []
    for bid, _after, upto in view_ranges(chain):
        branch = session.branches[bid]
        stop = len(branch.own) if upto is None else upto - branch.fork
        parts.append((branch, max(stop, 0)))
    floor = summary_floor(parts) if from_summary else 0
    out: list[ChatMessage] = []
    for branch, stop in parts:
        out.extend(branch.own[max(floor - branch.fork, 0) : stop])
    return out


def summary_floor(parts: Sequence[tuple[Branch, int]]) -> int:
    """What the latest summary of the visible ``parts`` stands for (0: none). The walk
    back from the tip stops at that summary, so it never visits more messages than the
    read that follows it returns."""
    for branch, stop in reversed(parts):
        own = branch.own
        for index in range(stop - 1, -1, -1):  # no slice: it would copy the whole list
            summary_of = own[index].summary_of
            if summary_of is not None:
                # A summary_of past the summary itself would read not even the summary.
                return min(summary_of, branch.fork + index)
    return 0


def extend(branch: Branch, messages: Sequence[ChatMessage], turn_id: str | None) -> None:
    """Append ``messages`` to ``branch``, numbered on from its tip (``turn_id`` theirs
    unless they name one)."""
    start = branch.length + 1
    # Validating a dict is twice as fast as model_copy(update=...), and this runs
    # for every message of every turn.
    validate = ChatMessage.__pydantic_validator__.validate_python
    branch.own.extend(
        validate({**m.__dict__, "sequence": start + i, "turn_id": m.turn_id or turn_id})
        for i, m in enumerate(messages)
    )


def fresh(taken: dict[str, Branch]) -> str:
    """A new branch id none of ``taken`` has."""
    while True:
        candidate = new_branch_id()
        if candidate not in taken:
            return candidate
