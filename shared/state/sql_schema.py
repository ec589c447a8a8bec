"""The SQL state store's tables, in one place (what migrations will be generated from),
and how message values are stored in them.

Times are Unix seconds (double precision), as in the pydantic models. A session is
a tree of branches: a branch forked from ``parent_branch_id`` at
``fork_sequence`` inherits the parent's messages with ``sequence <
fork_sequence`` and numbers its own from there, so a message's ``sequence`` is its
position in the branch's whole history.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from shared.messages import ChatMessage, ToolCall

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
)

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
    UniqueConstraint("session_id", "branch_id", "sequence", name="uq_messages_position"),
    ForeignKeyConstraint(
        ["session_id", "branch_id"],
        ["branches.session_id", "branches.branch_id"],
        ondelete="CASCADE",
    ),
)
# The unique constraint's index serves reads by (session, branch) in sequence order.
Index("ix_messages_turn", messages.c.turn_id)

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
)


# --- stored values ------------------------------------------------------------

# Text SQL drivers refuse: NUL (PostgreSQL) and lone surrogates (UTF-8). Such a
# value, or one that starts with the marker, is stored as marker + unicode_escape;
# everything else is stored as it is.
MARK = "\ue000"
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def enc(value: str | None) -> str | None:
    """A text value as stored (escaped only if a driver would refuse it)."""
    if value is None or not (value.startswith(MARK) or _UNSAFE.search(value)):
        return value
    return MARK + value.encode("unicode_escape").decode("ascii")


def dec(value: str | None) -> str | None:
    """The text value ``enc`` stored."""
    if value is None or not value.startswith(MARK):
        return value
    return value[1:].encode("ascii").decode("unicode_escape")


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
        name=dec(row["name"]),
        tool_calls=None
        if raw_calls is None
        else [ToolCall.model_validate(call) for call in json.loads(raw_calls)],
        tool_call_id=dec(row["tool_call_id"]),
        turn_id=row["turn_id"],
    )
