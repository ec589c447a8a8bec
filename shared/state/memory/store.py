"""MemoryStateStore: the state of one process, in dicts (embedded mode and tests)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar

from reactq.shared.errors import BranchError, BranchNotFoundError, SessionNotFoundError
from reactq.shared.messages import ChatMessage
from reactq.shared.state import listing
from reactq.shared.state.base import (
    TRUNK,
    BranchInfo,
    FileAction,
    SessionInfo,
    SessionPage,
    SessionRecord,
    SessionUsage,
    TurnCheckpoint,
    TurnRecord,
    TurnStart,
)
from reactq.shared.state.common import (
    check_branch_id,
    check_fork_point,
    check_record,
    committed_twice,
    stale,
)
from reactq.shared.state.memory.documents import MemoryDocuments
from reactq.shared.state.memory.files import MemoryFiles
from reactq.shared.state.memory.sessions import Branch, Session, extend, fresh, history
from reactq.shared.state.memory.steps import MemorySteps
from reactq.shared.state.memory.todos import MemoryTodos


class MemoryStateStore(MemoryDocuments, MemoryTodos, MemorySteps, MemoryFiles):
    """The StateStore contract in process-local dicts, for one event loop.

    No method awaits anything, so each runs to completion on its loop: that is
    what makes commits atomic here, with no lock to take.

    ``ttl_seconds`` forgets a session that long after its last use (reads count;
    monotonic clock; checked lazily on every call) and ``max_sessions`` keeps the
    most recently used ones; both drop the session's turns with it. None disables
    either bound.
    """

    backend: ClassVar[str] = "memory"
    """Its entry in ``shared/state/backends.py``."""

    def __init__(
        self, *, ttl_seconds: float | None = 3600.0, max_sessions: int | None = 1000
    ) -> None:
        if ttl_seconds is not None and ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be positive or None, got {ttl_seconds}")
        if max_sessions is not None and max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1 or None, got {max_sessions}")
        self.ttl_seconds = ttl_seconds
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._turns: dict[str, TurnRecord] = {}
        self._checkpoints: dict[tuple[str, str], TurnCheckpoint] = {}
        # Kept apart from the sessions (never evicted with them): undo needs them later.
        self._file_actions: dict[str, list[FileAction]] = {}
        self._swept = float("-inf")

    # Sessions are kept in order of last use, so the ones to drop are at the front.
    def _touch(self, session_id: str) -> Session | None:
        self._evict()
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = time.monotonic()
        if self.ttl_seconds is not None and now - session.touched >= self.ttl_seconds:
            # Expired since the last sweep: the sweep is periodic, the TTL exact.
            self._drop(session_id, session)
            return None
        session.touched = now
        self._sessions.move_to_end(session_id)
        return session

    def _drop(self, session_id: str, session: Session) -> None:
        del self._sessions[session_id]
        for turn_id in session.turn_ids:
            self._turns.pop(turn_id, None)
        for key in [k for k in self._checkpoints if k[0] == session_id]:
            del self._checkpoints[key]

    def _evict(self, *, force: bool = False) -> None:
        now = time.monotonic()
        # A sweep a second is enough for a TTL counted in seconds; a new session
        # forces one so max_sessions holds exactly.
        if not force and now - self._swept < 1.0:
            return
        self._swept = now
        while self._sessions:
            session_id, oldest = next(iter(self._sessions.items()))
            too_many = self.max_sessions is not None and len(self._sessions) > self.max_sessions
            too_old = self.ttl_seconds is not None and now - oldest.touched >= self.ttl_seconds
            if not (too_many or too_old):
                return
            self._drop(session_id, oldest)

    def _require(self, session_id: str) -> Session:
        session = self._touch(session_id)
        if session is None:
            raise SessionNotFoundError(f"no session {session_id!r} in the store")
        return session

    @staticmethod
    def _branch(session: Session, session_id: str, branch_id: str | None) -> Branch:
        branch_id = branch_id or session.active_branch
        branch = session.branches.get(branch_id)
        if branch is None:
            raise BranchNotFoundError(
                f"session {session_id!r} has no branch {branch_id!r}",
                session_id=session_id,
                branch_id=branch_id,
            )
        return branch

    async def ensure_session(self, session_id: str, agent: str) -> SessionInfo:
        """Create the session for ``agent`` if new; return it (its agent may differ)."""
        return self._ensure(session_id, agent).record(session_id)

    def _ensure(self, session_id: str, agent: str) -> Session:
        session = self._touch(session_id)
        if session is None:
            now = time.time()
            session = Session(agent=agent, created_at=now, touched=time.monotonic(), updated_at=now)
            session.branches[TRUNK] = Branch(parent=None, fork=0, created_at=now)
            self._sessions[session_id] = session
            self._evict(force=True)
        return session

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None if the store has never seen it (or has forgotten it)."""
        session = self._touch(session_id)
        return None if session is None else session.record(session_id)

    async def list_sessions(
        self,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        updated_since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """Sessions newest first, filtered, a page at a time; see StateStore."""
        limit = listing.check_limit(limit)
        after = listing.decode_cursor(cursor)
        self._evict()
        # Listing is not a use: it leaves the sessions' TTLs as they are.
        records = sorted(
            (s.record(sid) for sid, s in self._sessions.items()),
            key=listing.key_of,
            reverse=True,
        )

        async def newest_first() -> AsyncIterator[SessionRecord]:
            for record in records:
                if after is None or listing.key_of(record) < after:
                    yield record

        return await listing.collect(
            newest_first(),
            agent=agent,
            metadata=metadata,
            updated_since=updated_since,
            limit=limit,
        )

    async def update_metadata(self, session_id: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``patch`` into the session's metadata; see StateStore."""
        patch = listing.check_metadata(patch)
        session = self._require(session_id)
        session.metadata = listing.merged(session.metadata, patch)
        session.wrote()
        return dict(session.metadata)

    async def delete_session(self, session_id: str) -> bool:
        """Forget the session and its turns; see StateStore."""
        todos = self._todo_lists().pop(session_id, None)
        files = [t for t, a in self._file_actions.items() if a and a[0].session_id == session_id]
        for turn_id in files:
            del self._file_actions[turn_id]
        session = self._touch(session_id)
        if session is None:
            return todos is not None or bool(files)
        self._drop(session_id, session)
        return True

    async def list_turns(self, session_id: str) -> list[TurnRecord]:
        """The session's committed turns, oldest first."""
        session = self._touch(session_id)
        if session is None:
            return []
        found = (self._turns[t] for t in session.turn_ids if t in self._turns)
        return sorted(found, key=lambda r: (r.created_at, r.turn_id))

    async def get_messages(
        self, session_id: str, branch_id: str | None = None
    ) -> list[ChatMessage]:
        """Messages of a branch (the active one by default), oldest first."""
        session = self._touch(session_id)
        if session is None:
            return []
        return history(session, branch_id or session.active_branch)

    async def append(
        self, session_id: str, messages: Sequence[ChatMessage], branch_id: str | None = None
    ) -> None:
        """Append messages to a branch (the active one by default), unfenced."""
        session = self._require(session_id)
        extend(self._branch(session, session_id, branch_id), messages, None)
        session.wrote()

    async def fork(
        self,
        session_id: str,
        from_sequence: int,
        *,
        branch_id: str | None = None,
        new_branch_id: str | None = None,
        activate: bool = True,
    ) -> str:
        """Start a branch keeping messages 1..``from_sequence``; see StateStore.fork."""
        new_id = check_branch_id(new_branch_id) if new_branch_id else None
        session = self._require(session_id)
        source_id = branch_id or session.active_branch
        source = self._branch(session, session_id, source_id)
        check_fork_point(session_id, source_id, from_sequence, source.length)
        new_id = new_id or fresh(session.branches)
        if new_id in session.branches:
            raise BranchError(
                f"session {session_id!r} already has a branch {new_id!r}",
                session_id=session_id,
                branch_id=new_id,
            )
        session.branches[new_id] = Branch(
            parent=source_id, fork=from_sequence, created_at=time.time()
        )
        if activate:
            session.active_branch = new_id
        session.wrote()
        return new_id

    async def list_branches(self, session_id: str) -> list[BranchInfo]:
        """The session's branches, oldest first ([] for an unknown session)."""
        session = self._touch(session_id)
        if session is None:
            return []
        return [
            BranchInfo(
                branch_id=bid,
                parent_branch_id=b.parent,
                fork_sequence=b.fork,
                length=b.length,
                active=bid == session.active_branch,
                created_at=b.created_at,
            )
            for bid, b in session.branches.items()
        ]

    async def switch_branch(self, session_id: str, branch_id: str) -> None:
        """Make ``branch_id`` the active branch (BranchNotFoundError if it has none)."""
        session = self._require(session_id)
        self._branch(session, session_id, branch_id)
        session.active_branch = branch_id
        session.wrote()

    async def truncate_after(
        self, session_id: str, sequence: int, branch_id: str | None = None
    ) -> None:
        """Hard-delete a branch's own messages after ``sequence``; see StateStore."""
        session = self._touch(session_id)
        if session is None:
            return
        bid = branch_id or session.active_branch
        branch = session.branches.get(bid)
        if branch is None:
            return
        cut = max(sequence, branch.fork)
        if branch.length <= cut:
            return
        for child in session.branches.values():
            if child.parent == bid and child.fork > cut:
                inherited = branch.own[cut - branch.fork : child.fork - branch.fork]
                child.own[:0] = inherited
                child.fork = cut
        del branch.own[cut - branch.fork :]
        session.wrote()

    async def claim(self, session_id: str, fence: int) -> None:
        """Record ``fence`` as the session's newest token (StaleLeaseError if older).

        A session the store does not have yet is left alone (nothing to fence).
        """
        session = self._touch(session_id)
        if session is None:
            return
        if session.fence > fence:
            raise stale(session_id, session.fence, fence)
        session.fence = fence

    async def begin_turn(
        self, session_id: str, agent: str, *, fence: int | None = None, branch_id: str | None = None
    ) -> TurnStart:
        """Ensure the session, record ``fence`` and read a branch, atomically; see
        StateStore.begin_turn."""
        session = self._touch(session_id)
        if session is not None and fence is not None and session.fence > fence:
            raise stale(session_id, session.fence, fence)
        session = session or self._ensure(session_id, agent)
        if fence is not None:
            session.fence = fence
        branch = branch_id or session.active_branch
        mine = session.agent == agent
        return TurnStart(
            info=session.info(session_id),
            branch_id=branch,
            messages=history(session, branch, from_summary=True) if mine else [],
        )

    async def commit_turn(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        record: TurnRecord,
        fence: int | None = None,
        branch_id: str | None = None,
        *,
        drop_checkpoint: bool = True,
    ) -> None:
        """Append a turn's messages and record its outcome, atomically; see StateStore.

        Messages without a ``turn_id`` get the record's.
        """
        check_record(session_id, record)
        session = self._require(session_id)
        if fence is not None and session.fence > fence:
            raise stale(session_id, session.fence, fence)
        if record.turn_id in self._turns:
            raise committed_twice(session_id, record.turn_id)
        branch = self._branch(session, session_id, branch_id)
        if fence is not None:
            session.fence = fence
        extend(branch, messages, record.turn_id)
        if not record.created_at:
            record = record.model_copy(update={"created_at": time.time()})
        self._turns[record.turn_id] = record
        session.turn_ids.add(record.turn_id)
        session.wrote()
        if drop_checkpoint:
            self._checkpoints.pop((session_id, record.turn_id), None)

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        """A committed turn's outcome, or None."""
        self._evict()
        return self._turns.get(turn_id)

    async def session_usage(self, session_id: str) -> SessionUsage:
        """The session's totals over its committed turns; see StateStore."""
        return SessionUsage.of(session_id, await self.list_turns(session_id))

    async def close(self) -> None:
        """Nothing to release; the data stays readable."""
