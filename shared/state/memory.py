"""MemoryStateStore: the state of one process, in dicts (embedded mode and tests)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.errors import SessionNotFoundError, StaleLeaseError
from shared.messages import ChatMessage
from shared.state.base import TRUNK, SessionInfo, TurnRecord


@dataclass(eq=False)
class _Session:
    agent: str
    created_at: float
    active_branch: str = TRUNK
    fence: int = 0
    branches: dict[str, list[ChatMessage]] = field(default_factory=lambda: {TRUNK: []})
    turn_ids: set[str] = field(default_factory=set)
    touched: float = 0.0

    def info(self, session_id: str) -> SessionInfo:
        return SessionInfo(
            session_id=session_id,
            agent=self.agent,
            active_branch=self.active_branch,
            fence=self.fence,
            created_at=self.created_at,
        )


class MemoryStateStore:
    """The StateStore contract in process-local dicts; every operation is O(1) + its data.

    For one event loop. ``max_sessions`` keeps the most recently used sessions and
    ``ttl_seconds`` forgets a session that long after its last use; both drop the
    session's turns with it. None means unbounded.
    """

    def __init__(
        self, *, ttl_seconds: float | None = None, max_sessions: int | None = None
    ) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be positive or None, got {ttl_seconds}")
        if max_sessions is not None and max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1 or None, got {max_sessions}")
        self.ttl_seconds = ttl_seconds
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._turns: dict[str, TurnRecord] = {}
        self._lock = asyncio.Lock()

    # Sessions are kept in order of last use, so the ones to drop are at the front.
    def _touch(self, session_id: str) -> _Session | None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.touched = time.monotonic()
            self._sessions.move_to_end(session_id)
        return session

    def _evict(self) -> None:
        now = time.monotonic()
        while self._sessions:
            session_id, oldest = next(iter(self._sessions.items()))
            too_many = self.max_sessions is not None and len(self._sessions) > self.max_sessions
            too_old = self.ttl_seconds is not None and now - oldest.touched >= self.ttl_seconds
            if not (too_many or too_old):
                return
            del self._sessions[session_id]
            for turn_id in oldest.turn_ids:
                self._turns.pop(turn_id, None)

    def _require(self, session_id: str) -> _Session:
        session = self._touch(session_id)
        if session is None:
            raise SessionNotFoundError(f"no session {session_id!r} in the store")
        return session

    async def ensure_session(self, session_id: str, agent: str) -> SessionInfo:
        """Create the session for ``agent`` if new; return it (its agent may differ)."""
        async with self._lock:
            self._evict()
            session = self._touch(session_id)
            if session is None:
                session = _Session(agent=agent, created_at=time.time(), touched=time.monotonic())
                self._sessions[session_id] = session
                self._evict()
            return session.info(session_id)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        """The session, or None if the store has never seen it (or has forgotten it)."""
        async with self._lock:
            self._evict()
            session = self._touch(session_id)
            return None if session is None else session.info(session_id)

    async def get_messages(
        self, session_id: str, branch_id: str | None = None
    ) -> list[ChatMessage]:
        """Messages of a branch (the active one by default), oldest first."""
        async with self._lock:
            self._evict()
            session = self._touch(session_id)
            if session is None:
                return []
            return list(session.branches.get(branch_id or session.active_branch, ()))

    async def append(
        self, session_id: str, messages: Sequence[ChatMessage], branch_id: str | None = None
    ) -> None:
        """Append messages to a branch (the active one by default), unfenced."""
        async with self._lock:
            session = self._require(session_id)
            self._branch(session, session_id, branch_id).extend(messages)

    @staticmethod
    def _branch(session: _Session, session_id: str, branch_id: str | None) -> list[ChatMessage]:
        branch = session.branches.get(branch_id or session.active_branch)
        if branch is None:
            raise ValueError(f"session {session_id!r} has no branch {branch_id!r}")
        return branch

    async def claim(self, session_id: str, fence: int) -> None:
        """Record ``fence`` as the session's newest token (StaleLeaseError if older).

        A session the store does not have yet is left alone (nothing to fence).
        """
        async with self._lock:
            session = self._touch(session_id)
            if session is None:
                return
            _check_fence(session_id, session.fence, fence)
            session.fence = fence

    async def commit_turn(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        record: TurnRecord,
        fence: int | None = None,
    ) -> None:
        """Append a turn's messages (active branch) and record its outcome, atomically.

        Messages without a ``turn_id`` get the record's.
        """
        if record.session_id != session_id:
            raise ValueError(
                f"turn {record.turn_id} belongs to session {record.session_id!r}, "
                f"not {session_id!r}"
            )
        async with self._lock:
            session = self._require(session_id)
            if fence is not None:
                _check_fence(session_id, session.fence, fence)
                session.fence = fence
            self._branch(session, session_id, None).extend(
                m if m.turn_id else m.model_copy(update={"turn_id": record.turn_id})
                for m in messages
            )
            if not record.created_at:
                record = record.model_copy(update={"created_at": time.time()})
            self._turns[record.turn_id] = record
            session.turn_ids.add(record.turn_id)

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        """A committed turn's outcome, or None."""
        async with self._lock:
            return self._turns.get(turn_id)

    async def close(self) -> None:
        """Nothing to release; the data stays readable."""


def _check_fence(session_id: str, stored: int, fence: int) -> None:
    if stored > fence:
        raise StaleLeaseError(
            f"session {session_id!r} has fencing token {stored}; a write with {fence} is stale",
            session_id=session_id,
            fence=fence,
            newest=stored,
        )
