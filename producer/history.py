"""``HistoryMixin``: the ``Producer``'s reads and edits of stored sessions.

A conversation's messages, its branches (``fork``, ``switch_branch``, ``truncate``),
the session listing, metadata, token usage and todo list, as the state store keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reactq.producer.base import ProducerBase
from reactq.shared.messages import MAX_SEQUENCE, ChatMessage
from reactq.shared.state import BranchInfo, SessionPage, SessionUsage
from reactq.shared.state.todo_store import TodoItem
from reactq.shared.turn_inputs import check_metadata
from reactq.shared.turns import validate_session_id

__all__ = ["HistoryMixin"]


class HistoryMixin(ProducerBase):
    """The ``Producer``'s session history, branch and metadata methods."""

    async def history(self, session_id: str, branch: str | None = None) -> list[ChatMessage]:
        """Every message of the session's conversation (its active branch, or
        ``branch``), oldest first; each carries its 1-based ``sequence``."""
        validate_session_id(session_id)
        return await (await self.state_store()).get_messages(session_id, branch)

    async def fork(
        self,
        session_id: str,
        from_sequence: int,
        *,
        branch: str | None = None,
        new_branch: str | None = None,
        activate: bool = True,
    ) -> str:
        """Start a branch keeping messages 1..``from_sequence`` of ``branch`` (the active
        one by default); it becomes the active branch, so the next turn submitted runs
        on it ("edit a turn" is fork, then submit). Returns the new branch's id."""
        validate_session_id(session_id)
        return await (await self.state_store()).fork(
            session_id,
            from_sequence,
            branch_id=branch,
            new_branch_id=new_branch,
            activate=activate,
        )

    async def branches(self, session_id: str) -> list[BranchInfo]:
        """The session's branches, oldest first (which one is active, their lengths)."""
        validate_session_id(session_id)
        return await (await self.state_store()).list_branches(session_id)

    async def switch_branch(self, session_id: str, branch_id: str) -> None:
        """Make ``branch_id`` the session's active branch (for the turns that start next)."""
        validate_session_id(session_id)
        await (await self.state_store()).switch_branch(session_id, branch_id)

    async def truncate(
        self, session_id: str, after_sequence: int, *, branch: str | None = None
    ) -> None:
        """Hard-delete the messages after ``after_sequence`` of ``branch`` (the active one
        by default). Inherited messages stay, and a branch forked inside the cut keeps its
        history; a no-op on an unknown session or branch (see ``StateStore.truncate_after``)."""
        validate_session_id(session_id)
        # No message sits past MAX_SEQUENCE: a cut there is one at the end, which a SQL
        # column could not even compare with.
        after_sequence = min(after_sequence, MAX_SEQUENCE)
        await (await self.state_store()).truncate_after(session_id, after_sequence, branch)

    async def list_sessions(
        self,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        updated_since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """Stored sessions, newest first, a page at a time: those of ``agent``, whose
        metadata holds every key of ``metadata`` with that value, written since
        ``updated_since`` (Unix time). Pass a page's ``next_cursor`` as ``cursor``."""
        return await (await self.state_store()).list_sessions(
            agent=agent,
            metadata=metadata,
            updated_since=updated_since,
            limit=limit,
            cursor=cursor,
        )

    async def update_session_metadata(
        self, session_id: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Merge ``patch`` into the session's metadata (a key set to None is removed);
        returns the result. SessionNotFoundError for a session the store lacks;
        InvalidMetadataError for a patch that is not a JSON object UTF-8 can carry
        (nothing is stored)."""
        validate_session_id(session_id)
        check_metadata(patch)
        return await (await self.state_store()).update_metadata(session_id, patch)

    async def usage(self, session_id: str) -> SessionUsage:
        """The session's token and cost totals over its committed turns, as the state
        store keeps them (what ``session_max_tokens`` / ``session_max_cost`` check);
        zeros for a session the store does not have."""
        validate_session_id(session_id)
        return await (await self.state_store()).session_usage(session_id)

    async def todos(self, session_id: str) -> list[TodoItem]:
        """The session's todo list (``reactq.bundles.todos``), in order, as the agent
        last wrote it; [] when it has none."""
        validate_session_id(session_id)
        return await (await self.state_store()).get_todos(session_id)
