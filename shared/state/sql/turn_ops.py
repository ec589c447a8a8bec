"""The SQL store's statements that begin and commit a turn (``turns.py`` runs them):
on SQLite a few statements in the caller's transaction, on PostgreSQL one call of the
``reactq_begin_turn`` / ``reactq_commit_turn`` function (migration 0014). The other
statements, and what these build on, are in ``ops`` (called through the module,
as the store calls them)."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Boolean, Delete, TextClause, bindparam, delete, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from reactq.shared.errors import SessionNotFoundError
from reactq.shared.messages import ChatMessage
from reactq.shared.state.base import SessionInfo
from reactq.shared.state.common import committed_twice, stale
from reactq.shared.state.sql import ops
from reactq.shared.state.sql.schema import (
    branches,
    message_row,
    messages,
    sessions,
    to_message,
    turn_checkpoints,
    turns,
)


@functools.cache
def upsert_session(dialect: str, *, fenced: bool) -> Any:
    """Insert a session row (run with its columns), or on an existing one check and
    move the fence (``fenced``), returning the row: none when a newer fence is stored."""
    query = ops.dialect_insert(dialect, sessions)
    if fenced:
        query = query.on_conflict_do_update(
            index_elements=["session_id"],
            set_={"fence": query.excluded.fence, "updated_at": query.excluded.updated_at},
            where=sessions.c.fence <= query.excluded.fence,
        )
    else:
        # A no-op update: DO NOTHING would return no row for an existing session.
        query = query.on_conflict_do_update(
            index_elements=["session_id"], set_={"fence": sessions.c.fence}
        )
    return query.returning(
        sessions.c.agent, sessions.c.active_branch, sessions.c.fence, sessions.c.created_at
    )


@functools.cache
def _begin_turn_call() -> TextClause:
    """PostgreSQL: the call of ``reactq_begin_turn`` (migration 0014), run with
    ``p_sid``, ``p_agent``, ``p_bid`` (None: the active branch), ``p_fence`` (None:
    unfenced) and ``p_now``. Its first row is the session's (``s_`` columns), the
    rest the turn's history, as ``messages`` rows (renamed here)."""
    typed = [
        bindparam("p_sid", type_=sessions.c.session_id.type),
        bindparam("p_agent", type_=sessions.c.agent.type),
        bindparam("p_bid", type_=branches.c.branch_id.type),
        bindparam("p_fence", type_=sessions.c.fence.type),
        bindparam("p_now", type_=sessions.c.created_at.type),
    ]
    arguments = ", ".join(f"{p.key} => :{p.key}" for p in typed)
    returned = ", ".join(
        ["s_agent", "s_active_branch", "s_fence", "s_created_at"]
        + [f"m_{c.name} AS {c.name}" for c in messages.c]
    )
    return text(f"SELECT {returned} FROM reactq_begin_turn({arguments})").bindparams(*typed)


def begin_rows(
    conn: Connection,
    session_id: str,
    agent: str,
    fence: int | None,
    branch_id: str | None,
    now: float,
) -> tuple[SessionInfo, list[ChatMessage]]:
    """PostgreSQL: ``begin_turn`` in one statement, atomic on its own: the session's
    upsert, which checks and moves the fence (StaleLeaseError when a newer token is
    stored), inserting its trunk with a new row, then (an existing session of
    ``agent``) ``read_for_turn`` of ``branch_id`` (else the active branch), with a
    snapshot taken after the upsert waited for the row. Returns the session
    (``created_at`` is ``now`` for a new one) and the history.

    ``reactq_begin_turn`` is a function because one SQL statement would read the
    history from the snapshot taken before it waited for the row's previous holder.
    """
    params = {
        "p_sid": session_id,
        "p_agent": agent,
        "p_bid": branch_id,
        "p_fence": fence,
        "p_now": now,
    }
    rows = conn.execute(_begin_turn_call(), params).mappings().all()
    head = rows[0]
    if head["s_agent"] is None:  # the fence refused the update
        if fence is None or head["s_fence"] is None:  # pragma: no cover - a deleted row
            ops.refuse(conn, session_id, fence)
        raise stale(session_id, int(head["s_fence"]), fence)
    info = SessionInfo(
        session_id=session_id,
        agent=head["s_agent"],
        active_branch=head["s_active_branch"],
        fence=head["s_fence"],
        created_at=head["s_created_at"],
    )
    return info, [to_message(r) for r in rows[1:]]


@functools.cache
def insert_trunk(dialect: str) -> Any:
    """Insert a session's trunk unless it has one (run with the branch's columns)."""
    query = ops.dialect_insert(dialect, branches)
    return query.on_conflict_do_nothing(index_elements=["session_id", "branch_id"])


@functools.cache
def insert_turn(dialect: str) -> Any:
    """Insert a turn's record unless it has one (run with its columns)."""
    return ops.dialect_insert(dialect, turns).on_conflict_do_nothing(index_elements=["turn_id"])


_MESSAGE_FIELDS = (
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "turn_id",
    "reasoning",
    "extra",
    "summary_of",
    "parts",
)
"""A ``messages`` row's columns of its own (``message_row``): the rest are the commit's."""


COMMITTED, NO_SESSION, STALE, COMMITTED_TWICE, NO_BRANCH = range(5)
"""``reactq_commit_turn``'s outcomes (migration 0014): committed, or refused with
nothing written, for each of the reasons ``commit_rows`` raises."""

_TURN_COLUMNS = tuple(c.name for c in turns.c)


@functools.cache
def _commit_turn_call() -> TextClause:
    """PostgreSQL: the call of ``reactq_commit_turn`` (migration 0014), with its
    parameters named: ``p_sid``, ``p_fence``, ``p_bid`` (None: the active branch),
    ``p_now``, ``p_drop`` (remove the turn's checkpoint), the record's columns
    prefixed ``v_``, and each of ``_MESSAGE_FIELDS`` prefixed ``m_`` as a list, a
    message an item. Returns (outcome, detail)."""
    typed = [
        bindparam("p_sid", type_=sessions.c.session_id.type),
        bindparam("p_fence", type_=sessions.c.fence.type),
        bindparam("p_bid", type_=branches.c.branch_id.type),
        bindparam("p_now", type_=messages.c.created_at.type),
        bindparam("p_drop", type_=Boolean()),
        *(bindparam(f"v_{name}", type_=turns.c[name].type) for name in _TURN_COLUMNS),
        *(
            bindparam(f"m_{name}", type_=postgresql.ARRAY(messages.c[name].type))
            for name in _MESSAGE_FIELDS
        ),
    ]
    arguments = ", ".join(f"{p.key} => :{p.key}" for p in typed)
    call = f"SELECT outcome, detail FROM reactq_commit_turn({arguments})"
    return text(call).bindparams(*typed)


def commit_rows(
    conn: Connection,
    session_id: str,
    fence: int | None,
    branch_id: str | None,
    record: dict[str, Any],
    new: Sequence[ChatMessage],
    *,
    drop_checkpoint: bool,
) -> None:
    """A turn's commit: ``lock_fenced``, the turn's record (its columns) unless it has
    one (TurnCommittedError), its messages after the tip of ``branch_id`` (else the
    active branch; BranchNotFoundError without it), and the removal of the turn's
    checkpoint (``drop_checkpoint``). Messages without a ``turn_id`` get the record's.

    PostgreSQL: one statement, atomic on its own (no transaction needed): the call
    of ``reactq_commit_turn``, which locks the row and then reads the tip, each
    with a snapshot of its own (one SQL statement would read the tip as it was
    before it waited for the lock, missing the previous holder's messages); a
    refused call writes nothing. SQLite, in the caller's transaction (rolled back
    by the raise): the lock, which reads the tip of a named branch too
    (``lock_fenced_at_tip``), the record, the messages' executemany, the removal.
    """
    if conn.dialect.name == "postgresql":
        _call_commit_turn(conn, session_id, fence, branch_id, record, new, drop_checkpoint)
        return
    turn_id = str(record["turn_id"])
    tip: int | None = None
    if branch_id is not None:
        branch = branch_id
        tip = ops.lock_fenced_at_tip(conn, session_id, fence, branch)
    else:
        branch = ops.lock_fenced(conn, session_id, fence)
    # The turn's record first: its primary key makes it the turn's one commit.
    if conn.execute(insert_turn(conn.dialect.name), record).rowcount != 1:
        raise committed_twice(session_id, turn_id)
    ops.append_rows(conn, session_id, branch, new, turn_id, tip)
    if drop_checkpoint:
        conn.execute(delete_checkpoint(), {"tid": turn_id})


def _call_commit_turn(
    conn: Connection,
    session_id: str,
    fence: int | None,
    branch_id: str | None,
    record: dict[str, Any],
    new: Sequence[ChatMessage],
    drop_checkpoint: bool,
) -> None:
    """``commit_rows`` on PostgreSQL: ``reactq_commit_turn``, its outcome raised."""
    turn_id = str(record["turn_id"])
    now = time.time()
    params: dict[str, Any] = {
        "p_sid": session_id,
        "p_fence": fence,
        "p_bid": branch_id,
        "p_now": now,
        "p_drop": drop_checkpoint,
    }
    params.update((f"v_{name}", record.get(name)) for name in _TURN_COLUMNS)
    # The session and branch are the function's to fill in: placeholders here.
    rows = [message_row(session_id, "", 0, m, turn_id, now) for m in new]
    for name in _MESSAGE_FIELDS:
        params[f"m_{name}"] = [row[name] for row in rows]
    outcome, detail = conn.execute(_commit_turn_call(), params).one()
    if outcome == COMMITTED:
        return
    if outcome == NO_SESSION:
        raise SessionNotFoundError(f"no session {session_id!r} in the store")
    if outcome == STALE and fence is not None:
        raise stale(session_id, int(detail), fence)
    if outcome == COMMITTED_TWICE:
        raise committed_twice(session_id, turn_id)
    if outcome == NO_BRANCH:
        raise ops.no_branch(session_id, str(detail))
    raise AssertionError(f"reactq_commit_turn returned {outcome!r} ({detail!r})")


@functools.cache
def delete_checkpoint() -> Delete:
    """Delete a turn's checkpoint (run with ``tid``, the turn)."""
    return delete(turn_checkpoints).where(turn_checkpoints.c.turn_id == bindparam("tid"))
