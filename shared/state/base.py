"""The StateStore protocol: the conversation state every worker shares.

A session is a tree of branches with an active head. Messages are numbered from 1
along a branch's whole history: a branch forked at ``N`` inherits its parent's
messages 1..N (never copied, never deleted by the child) and numbers its own from
N+1. ``trunk`` is the root; a session created before branching reads as its trunk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.messages import ChatMessage
from reactq.shared.state.document_store import DocumentStore
from reactq.shared.state.todo_store import TodoStore
from reactq.shared.turns import TurnStatus

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


class SessionRecord(SessionInfo):
    """A session as ``get_session`` and ``list_sessions`` report it."""

    updated_at: float = 0.0
    """Unix time of its last write (a turn, a branch change, its metadata)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """What the application attached to it (``update_metadata``)."""

    def info(self) -> SessionInfo:
        """The session as ``begin_turn`` reports it (without these fields)."""
        return SessionInfo(**{name: getattr(self, name) for name in SessionInfo.model_fields})


class SessionPage(BaseModel):
    """One page of ``list_sessions``: newest session first."""

    model_config = ConfigDict(frozen=True)

    sessions: list[SessionRecord]
    """The sessions of this page."""
    next_cursor: str | None = None
    """Pass it as ``cursor`` for the next page; None on the last one."""


class TurnStart(BaseModel):
    """What a turn starts from: its session, the branch it runs on, that branch's messages."""

    model_config = ConfigDict(frozen=True)

    info: SessionInfo
    """The session as the step left it (its agent may differ from the one asked for)."""
    branch_id: str
    """The branch the turn reads and commits to: the one asked for, else the active one."""
    messages: list[ChatMessage]
    """That branch's history as the model reads it, oldest first: from the first message
    its latest summary does not stand for (``summary_of`` + 1) on, the whole history
    when it has none ([] when the agent differs)."""


class BranchInfo(BaseModel):
    """One branch of a session, as ``list_branches`` reports it."""

    model_config = ConfigDict(frozen=True)

    branch_id: str
    """The branch (``trunk`` for the root)."""
    parent_branch_id: str | None = None
    """The branch it was forked from; None for the trunk."""
    fork_sequence: int = 0
    """It inherits its parent's messages 1..fork_sequence (0 for the trunk)."""
    length: int = 0
    """Messages in its whole history (inherited and its own): the last sequence."""
    active: bool = False
    """New turns of the session run on it."""
    created_at: float = 0.0
    """Unix time of creation."""


class TurnCheckpoint(BaseModel):
    """A running turn's completed steps, committed apart from the conversation.

    ``messages`` are the turn's steps so far (each model reply and the results of
    its tool calls; the last reply's calls may still lack results). They reach the
    conversation only when the turn commits; a turn that ends any other way leaves
    them behind for ``discard_checkpoint``. See docs/architecture.md, "Session
    protocol", step 3.
    """

    model_config = ConfigDict(frozen=True)

    session_id: str
    """The turn's session."""
    turn_id: str
    """The turn."""
    step: int
    """How many steps are complete (model replies whose tool calls all have results)."""
    messages: list[ChatMessage]
    """The turn's messages after its user message, oldest first."""
    branch_id: str | None = None
    """The branch the turn read its history from (its commit goes there)."""
    attempt: int = 1
    """The attempt that wrote it."""
    updated_at: float = 0.0
    """Unix time of the write."""


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
    metadata: dict[str, Any] = Field(default_factory=dict)
    """What the producer attached to the turn."""
    config_version: str | None = None
    """A hash of the definition of the agent that answered (``Agent.config_version``)."""
    usage: dict[str, int] = Field(default_factory=dict)
    """Its token usage: ``prompt_tokens``, ``completion_tokens``, ``total_tokens``."""
    cost: float | None = None
    """What it cost, when the agent has a price for its model."""


class SessionUsage(BaseModel):
    """A session's token and cost totals over its committed turns."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    """The session."""
    turns: int = 0
    """Committed turns counted."""
    prompt_tokens: int = 0
    """Prompt tokens summed."""
    completion_tokens: int = 0
    """Completion tokens summed."""
    total_tokens: int = 0
    """Total tokens summed."""
    cost: float = 0.0
    """Cost summed over the turns that had a price (0.0 when none had)."""

    @classmethod
    def of(cls, session_id: str, records: Sequence[TurnRecord]) -> SessionUsage:
        """The totals of ``records``."""
        return cls(
            session_id=session_id,
            turns=len(records),
            prompt_tokens=sum(r.usage.get("prompt_tokens", 0) for r in records),
            completion_tokens=sum(r.usage.get("completion_tokens", 0) for r in records),
            total_tokens=sum(r.usage.get("total_tokens", 0) for r in records),
            cost=sum(r.cost or 0.0 for r in records),
        )


class FileAction(BaseModel):
    """One thing a turn did to a file of its session's workspace (the file tools record
    them): a change, with what it replaced so that undo can put it back, or a read,
    with the revision it saw (the stale-file guard compares a write with it)."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    """The session whose workspace holds the file."""
    turn_id: str
    """The turn that acted."""
    attempt: int = 1
    """The turn's attempt."""
    subagent: str | None = None
    """The subagent that acted for the turn (None: the turn's own agent)."""
    path: str
    """The file, relative to the workspace."""
    kind: str
    """``read``, ``created``, ``modified`` or ``deleted`` (a move is a delete and a create)."""
    before: bytes | None = None
    """A change's previous content (None: the file did not exist; always None for a read)."""
    after_hash: str | None = None
    """SHA-256 (hex) of the content after the change, or of the content read; None once
    deleted."""
    created_at: float = 0.0
    """When it was recorded (Unix seconds)."""
    undone_at: float | None = None
    """When the turn's changes were undone (None: not undone)."""


@runtime_checkable
class StepStore(Protocol):
    """Where a running turn's completed steps are kept until it ends: a StateStore
    (the embedded mode), or the worker pool's ``TurnSteps`` in Redis."""

    async def checkpoint_step(self, checkpoint: TurnCheckpoint, fence: int | None = None) -> None:
        """Store the turn's steps, replacing its previous checkpoint (StaleLeaseError,
        nothing written, when a newer token was issued)."""
        ...

    async def get_checkpoint(self, session_id: str, turn_id: str) -> TurnCheckpoint | None:
        """The turn's last checkpoint, or None."""
        ...

    async def discard_checkpoint(self, session_id: str, turn_id: str) -> None:
        """Forget the turn's checkpoint (a turn cancelled, rolled back or failed). Idempotent."""
        ...


@runtime_checkable
class StateStore(StepStore, DocumentStore, TodoStore, Protocol):
    """Sessions, their messages and their turns' outcomes (and, as a StepStore, the
    steps of turns that run; as a DocumentStore, the long-term store's documents; as
    a TodoStore, sessions' todo lists)."""

    async def ensure_session(self, session_id: str, agent: str) -> SessionInfo:
        """Create the session for ``agent`` if new; return it (its agent may differ) as
        ``get_session`` would."""
        ...

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None if the store has never seen it."""
        ...

    async def list_sessions(
        self,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        updated_since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """Sessions newest first (by creation), at most ``limit`` (1..1000) a page:
        those of ``agent``, whose metadata holds every key of ``metadata`` with an
        equal value, written at or after ``updated_since``. ``cursor`` is a page's
        ``next_cursor`` (InvalidCursorError for anything else)."""
        ...

    async def update_metadata(self, session_id: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``patch`` into the session's metadata (a key set to None is removed)
        and return the result. SessionNotFoundError for an unknown session;
        InvalidMetadataError for a patch that is not a JSON object."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Forget the session: its branches, messages, turn records, checkpoints and
        metadata (the audit log keeps its events). False if the store had none of it."""
        ...

    async def list_turns(self, session_id: str) -> list[TurnRecord]:
        """The session's committed turns, oldest first ([] for an unknown session)."""
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

    async def fork(
        self,
        session_id: str,
        from_sequence: int,
        *,
        branch_id: str | None = None,
        new_branch_id: str | None = None,
        activate: bool = True,
    ) -> str:
        """Start a branch that keeps messages 1..``from_sequence`` of ``branch_id``
        (the active branch by default) and return its id; it becomes the active
        branch unless ``activate`` is False. The original line stays as it was.

        Raises SessionNotFoundError, BranchNotFoundError, or BranchError for a fork
        point outside 0..length or a ``new_branch_id`` that is taken or malformed.
        """
        ...

    async def list_branches(self, session_id: str) -> list[BranchInfo]:
        """The session's branches, oldest first ([] for an unknown session)."""
        ...

    async def switch_branch(self, session_id: str, branch_id: str) -> None:
        """Make ``branch_id`` the active branch (BranchNotFoundError if it has none)."""
        ...

    async def truncate_after(
        self, session_id: str, sequence: int, branch_id: str | None = None
    ) -> None:
        """Hard-delete a branch's own messages after ``sequence`` (the active branch by
        default). Inherited messages are never deleted; a branch forked inside the
        deleted tail keeps its history (the messages it inherited are copied into
        it first). Idempotent; a no-op on an unknown session or branch."""
        ...

    async def claim(self, session_id: str, fence: int) -> None:
        """Record ``fence`` as the session's newest token.

        Raises StaleLeaseError if the store has already seen a newer one.
        """
        ...

    async def begin_turn(
        self, session_id: str, agent: str, *, fence: int | None = None, branch_id: str | None = None
    ) -> TurnStart:
        """Create the session for ``agent`` if new, record ``fence`` as its newest token
        and read the messages of ``branch_id`` (the active branch by default), in one
        atomic step: ``ensure_session``, ``claim`` and ``get_messages`` at once.

        The read starts after what the branch's latest summary (the visible message
        with the highest sequence and a ``summary_of``) stands for, found without
        reading the messages before it: a turn costs the same however long the
        session is. ``get_messages`` still reads the whole history.

        A new session starts with ``fence`` as its token (0 when None). Raises
        StaleLeaseError, changing nothing, if the store has seen a newer token than
        ``fence``; with ``fence`` None no token is checked or recorded. A call that
        fails otherwise (the database went away) may have recorded the fence, as
        ``claim`` would, but never leaves a session half made. When the
        session belongs to another agent, ``messages`` is empty (the caller refuses
        the turn) and the fence is recorded all the same: the lease it stands for is
        the session's, whatever agent a turn asks for, as with ``claim``.
        """
        ...

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
        """Append a turn's messages and record its outcome in one atomic step.

        The messages go to ``branch_id`` (the branch the turn read its history
        from), the active branch by default. With ``fence`` given, the step checks
        it against the session's newest token and raises StaleLeaseError (writing
        nothing) if a newer one was issued; a newer token moves the fence on.

        A turn is committed at most once: if ``record.turn_id`` already has a
        committed record, the step raises TurnCommittedError and writes nothing,
        whatever the fence (checked in the same atomic step as the write).

        The same step drops the turn's checkpoint (``checkpoint_step``) from this
        store. ``drop_checkpoint=False``, for a caller that keeps the turn's steps
        elsewhere (the worker pool's ``TurnSteps``), leaves the store's checkpoints
        as they are and spares the commit that work.
        """
        ...

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        """A committed turn's outcome, or None."""
        ...

    async def session_usage(self, session_id: str) -> SessionUsage:
        """The session's token and cost totals over its committed turns (zeros for an
        unknown session). A turn counts once it is committed, whatever its status; a
        cancelled turn that committed nothing does not count."""
        ...

    async def record_file_actions(self, actions: Sequence[FileAction]) -> None:
        """Append a turn's file actions, in order, in one atomic step."""
        ...

    async def file_actions(self, turn_id: str) -> list[FileAction]:
        """A turn's file actions, oldest first (empty for an unknown turn)."""
        ...

    async def mark_file_actions_undone(self, turn_id: str, undone_at: float) -> bool:
        """Mark a turn's file actions undone, once: False (nothing changed) when they
        were undone already or there are none."""
        ...

    async def checkpoint_step(self, checkpoint: TurnCheckpoint, fence: int | None = None) -> None:
        """Store a running turn's completed steps, replacing its previous checkpoint.

        Fenced like ``commit_turn`` (StaleLeaseError, nothing written, when a newer
        token was issued); TurnCommittedError when the turn is committed already.
        The steps stay out of the conversation until ``commit_turn``, which drops
        the checkpoint in the same atomic step (unless told not to).
        """
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
