"""The SQL state store's tables, in one place, and how message values are stored.

The schema is versioned by the Alembic migrations in ``shared/state/migrations``;
a change here needs a new revision there (``SCHEMA_REVISION`` names the newest).
On PostgreSQL a turn's start and commit are functions (``reactq_begin_turn``,
``reactq_commit_turn``, revision 0014) that name the columns of ``turns`` and
``messages``: a column added to either needs a revision that replaces them.

Times are Unix seconds (double precision), as in the pydantic models. A session is
a tree of branches: a branch forked from ``parent_branch_id`` at
``fork_sequence`` N inherits the parent's messages 1..N and numbers its own from
N+1, so a message's ``sequence`` is its 1-based position in the branch's whole
history. ``audit_events`` is the long-term record of every event of every turn.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.state.text import MARK, dec, dump_extra, dump_parts, enc, load_extra, load_parts

__all__ = ["MARK", "dec", "enc"]  # re-exported: the encoding lives in shared.state.text

SCHEMA_REVISION = "0016"
"""The Alembic revision these tables correspond to."""

metadata = MetaData()

# SQLite only autoincrements an INTEGER PRIMARY KEY.
_ID = BigInteger().with_variant(Integer(), "sqlite")

sessions = Table(
    "sessions",
    metadata,
    Column("session_id", String(128), primary_key=True),
    Column("agent", String(200), nullable=False),
    Column("active_branch", String(128), nullable=False, server_default="trunk"),
    Column("fence", BigInteger, nullable=False, server_default="0"),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    # The application's metadata as JSON text (NULL: none).
    Column("metadata", Text, nullable=True),
)
# list_sessions reads newest first by this key.
Index("ix_sessions_listing", sessions.c.created_at, sessions.c.session_id)

branches = Table(
    "branches",
    metadata,
    Column("session_id", String(128), primary_key=True),
    Column("branch_id", String(128), primary_key=True),
    Column("parent_branch_id", String(128), nullable=True),
    Column("fork_sequence", Integer, nullable=True),
    Column("created_at", Double, nullable=False),
    ForeignKeyConstraint(["session_id"], ["sessions.session_id"], ondelete="CASCADE"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("session_id", String(128), nullable=False),
    Column("branch_id", String(128), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=True),
    Column("name", Text, nullable=True),
    Column("tool_calls", Text, nullable=True),
    Column("tool_call_id", Text, nullable=True),
    Column("turn_id", String(128), nullable=True),
    Column("created_at", Double, nullable=False),
    # An assistant message's reasoning, and the provider's other fields as JSON text.
    Column("reasoning", Text, nullable=True),
    Column("extra", Text, nullable=True),
    # A compaction summary: the last sequence it stands for (NULL: an ordinary message).
    Column("summary_of", Integer, nullable=True),
    # A user message's content parts (text and images) as JSON text (NULL: plain text).
    Column("parts", Text, nullable=True),
    UniqueConstraint("session_id", "branch_id", "sequence", name="uq_messages_position"),
    ForeignKeyConstraint(
        ["session_id", "branch_id"],
        ["branches.session_id", "branches.branch_id"],
        ondelete="CASCADE",
    ),
)
# The unique constraint's index serves reads by (session, branch) in sequence order.
Index("ix_messages_turn", messages.c.turn_id)
# A turn's read starts after what its branch's latest summary stands for: this finds
# that summary among the summaries alone, never walking the branch's messages.
Index(
    "ix_messages_summaries",
    messages.c.session_id,
    messages.c.branch_id,
    messages.c.sequence,
    messages.c.summary_of,
    sqlite_where=messages.c.summary_of.is_not(None),
    postgresql_where=messages.c.summary_of.is_not(None),
)

turns = Table(
    "turns",
    metadata,
    Column("turn_id", String(128), primary_key=True),
    Column("session_id", String(128), nullable=False, index=True),
    Column("status", String(32), nullable=False),
    Column("attempt", Integer, nullable=False, server_default="1"),
    Column("final_text", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("created_at", Double, nullable=False),
    # The producer's metadata as JSON text (NULL: none).
    Column("metadata", Text, nullable=True),
    Column("config_version", String(64), nullable=True),
    # Columns, not JSON, so a session's totals are one SUM (NULL: not reported).
    Column("prompt_tokens", Integer, nullable=True),
    Column("completion_tokens", Integer, nullable=True),
    Column("total_tokens", Integer, nullable=True),
    Column("cost", Double, nullable=True),
)

turn_checkpoints = Table(
    "turn_checkpoints",
    metadata,
    Column("turn_id", String(128), primary_key=True),
    Column("session_id", String(128), nullable=False, index=True),
    Column("branch_id", String(128), nullable=True),
    Column("step", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("messages", Text, nullable=False),
    Column("updated_at", Double, nullable=False),
)

audit_events = Table(
    "audit_events",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("session_id", String(128), nullable=False, index=True),
    Column("turn_id", String(128), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", String(32), nullable=False),
    Column("event_id", String(64), nullable=True),
    Column("payload", Text, nullable=False),
    Column("ts", Double, nullable=False),
    Column("recorded_at", Double, nullable=False),
)
Index("ix_audit_events_turn", audit_events.c.turn_id, audit_events.c.id)

# Scheduled turns (``shared/state/schedule_store.py``): read whole by each beat process.
schedules = Table(
    "schedules",
    metadata,
    Column("schedule_id", String(64), primary_key=True),
    Column("session_id", String(128), nullable=False, index=True),
    Column("agent", String(200), nullable=False),
    Column("message", Text, nullable=False),
    # Exactly one of cron (five fields, UTC) and every (seconds) is set.
    Column("cron", String(200), nullable=True),
    Column("every", Integer, nullable=True),
    Column("paused", Integer, nullable=False, server_default="0"),
    Column("created_at", Double, nullable=False),
    Column("last_run_at", Double, nullable=True),
    Column("last_turn_id", String(128), nullable=True),
    Column("last_error", Text, nullable=True),
    # JSON text (NULL: none).
    Column("metadata", Text, nullable=True),
    # The identity of the key that added it, JSON text (NULL: none).
    Column("tenant", Text, nullable=True),
    # 1: each tick's turn in a new session, ``{session_id}-{tick}``.
    Column("fresh_sessions", Integer, nullable=False, server_default="0"),
)

# The long-term store (``shared/state/document_store.py``): a namespace is stored dotted;
# the primary key's index serves a search in key order (and by key prefix).
documents = Table(
    "documents",
    metadata,
    Column("namespace", String(1100), primary_key=True),
    Column("key", String(256), primary_key=True),
    # The JSON object, as ASCII JSON text.
    Column("value", Text, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
)

# What the file tools did, per turn: changes (with the content they replaced, for
# undo) and reads (the revision seen, for the stale-file guard). Rows of a turn are
# read in ``id`` order.
file_actions = Table(
    "file_actions",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("session_id", String(128), nullable=False, index=True),
    Column("turn_id", String(128), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("subagent", String(200), nullable=True),
    Column("path", Text, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("before", LargeBinary, nullable=True),
    Column("after_hash", String(64), nullable=True),
    Column("created_at", Double, nullable=False),
    Column("undone_at", Double, nullable=True),
)
Index("ix_file_actions_turn", file_actions.c.turn_id, file_actions.c.id)

# A session's todo list (``shared/state/todo_store.py``): replaced whole, one row a session.
todos = Table(
    "todos",
    metadata,
    Column("session_id", String(128), primary_key=True),
    # The items, as JSON text.
    Column("entries", Text, nullable=False),
    Column("updated_at", Double, nullable=False),
)


# --- stored values ------------------------------------------------------------


def dump_calls(calls: list[ToolCall] | None) -> str | None:
    """A message's tool calls as the stored JSON text."""
    if calls is None:
        return None
    return enc(json.dumps([call.model_dump() for call in calls], ensure_ascii=False))


def to_message(row: Any) -> ChatMessage:
    """A ``messages`` row (a mapping) as a ChatMessage."""
    raw_calls = dec(row["tool_calls"])
    return ChatMessage(
        role=row["role"],
        content=dec(row["content"]),
        parts=load_parts(row["parts"]),
        name=dec(row["name"]),
        tool_calls=None
        if raw_calls is None
        else [ToolCall.model_validate(call) for call in json.loads(raw_calls)],
        tool_call_id=dec(row["tool_call_id"]),
        reasoning=dec(row["reasoning"]),
        extra=load_extra(row["extra"]),
        turn_id=row["turn_id"],
        sequence=row["sequence"],
        summary_of=row["summary_of"],
    )


def message_row(
    session_id: str,
    branch_id: str,
    sequence: int,
    message: ChatMessage,
    turn_id: str | None,
    now: float,
) -> dict[str, Any]:
    """A ChatMessage as a ``messages`` row."""
    return {
        "session_id": session_id,
        "branch_id": branch_id,
        "sequence": sequence,
        "role": message.role,
        "content": enc(message.content),
        "name": enc(message.name),
        "tool_calls": dump_calls(message.tool_calls),
        "tool_call_id": enc(message.tool_call_id),
        "turn_id": message.turn_id or turn_id,
        "created_at": now,
        "reasoning": enc(message.reasoning),
        "extra": dump_extra(message.extra),
        "summary_of": message.summary_of,
        "parts": dump_parts(message.parts),
    }
