"""The SQL store's statements, each run on a connection inside the caller's transaction.

Writers lock the session row first (``_lock_session``: FOR UPDATE on PostgreSQL;
SQLite's write transactions are already serialised by BEGIN IMMEDIATE), so the
read-then-write steps below (next sequence, fork bounds, fence) cannot race.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import and_, delete, func, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from reactq.shared.errors import BranchNotFoundError, SessionNotFoundError
from reactq.shared.messages import ChatMessage
from reactq.shared.state.base import TRUNK, BranchInfo, SessionInfo, stale, view_ranges
from reactq.shared.state.sql_schema import branches, message_row, messages, sessions, to_message


async def session_info(conn: AsyncConnection, session_id: str) -> SessionInfo | None:
    """The session row as a SessionInfo, or None."""
    row = (
        (await conn.execute(select(sessions).where(sessions.c.session_id == session_id)))
        .mappings()
        .first()
    )
    if row is None:
        return None
    return SessionInfo(
        session_id=row["session_id"],
        agent=row["agent"],
        active_branch=row["active_branch"],
        fence=row["fence"],
        created_at=row["created_at"],
    )


async def lock_session(conn: AsyncConnection, session_id: str) -> tuple[str, int]:
    """The session's (active branch, fence), its row locked until the transaction ends;
    SessionNotFoundError if the store lacks it."""
    found = await lock_session_if_any(conn, session_id)
    if found is None:
        raise SessionNotFoundError(f"no session {session_id!r} in the store")
    return found


async def lock_fenced(conn: AsyncConnection, session_id: str, fence: int | None) -> str:
    """Lock the session's row for a fenced write and return its active branch.

    StaleLeaseError when a newer token than ``fence`` is recorded; a newer ``fence``
    is recorded in the same transaction. ``fence`` None writes unfenced.
    """
    active, stored = await lock_session(conn, session_id)
    if fence is not None:
        if stored > fence:
            raise stale(session_id, stored, fence)
        if fence > stored:
            await conn.execute(
                update(sessions)
                .where(sessions.c.session_id == session_id)
                .values(fence=fence, updated_at=time.time())
            )
    return active


async def lock_session_if_any(conn: AsyncConnection, session_id: str) -> tuple[str, int] | None:
    """``lock_session``, or None for a session the store lacks."""
    row = (
        await conn.execute(
            select(sessions.c.active_branch, sessions.c.fence)
            .where(sessions.c.session_id == session_id)
            .with_for_update()
        )
    ).first()
    return None if row is None else (str(row[0]), int(row[1]))


async def branch_tree(conn: AsyncConnection, session_id: str) -> dict[str, tuple[str | None, int]]:
    """branch_id -> (parent, fork point) of every branch of the session."""
    rows = await conn.execute(
        select(branches.c.branch_id, branches.c.parent_branch_id, branches.c.fork_sequence).where(
            branches.c.session_id == session_id
        )
    )
    return {str(b): (p, int(f or 0)) for b, p, f in rows}


async def branch_length(conn: AsyncConnection, session_id: str, branch_id: str, fork: int) -> int:
    """The last sequence of a branch's history: its last own message, or its fork point."""
    last = await conn.scalar(
        select(func.max(messages.c.sequence)).where(
            messages.c.session_id == session_id, messages.c.branch_id == branch_id
        )
    )
    return int(last) if last is not None else fork


async def has_branch(conn: AsyncConnection, session_id: str, branch_id: str) -> bool:
    """Whether the session has the branch."""
    found = await conn.scalar(
        select(func.count())
        .select_from(branches)
        .where(branches.c.session_id == session_id, branches.c.branch_id == branch_id)
    )
    return bool(found)


async def fork_point(conn: AsyncConnection, session_id: str, branch_id: str) -> int:
    """The branch's fork point; BranchNotFoundError if the session has no such branch."""
    row = (
        await conn.execute(
            select(branches.c.fork_sequence).where(
                branches.c.session_id == session_id, branches.c.branch_id == branch_id
            )
        )
    ).first()
    if row is None:
        raise BranchNotFoundError(
            f"session {session_id!r} has no branch {branch_id!r}",
            session_id=session_id,
            branch_id=branch_id,
        )
    return int(row[0] or 0)


async def read_branch(
    conn: AsyncConnection, session_id: str, branch_id: str | None
) -> list[ChatMessage]:
    """A branch's whole history (the active branch when None), oldest first."""
    tree = await branch_tree(conn, session_id)
    if branch_id is None:
        active = await conn.scalar(
            select(sessions.c.active_branch).where(sessions.c.session_id == session_id)
        )
        if active is None:
            return []
        branch_id = str(active)
    chain: list[tuple[str, int]] = []
    current: str | None = branch_id
    while current is not None and current in tree:
        parent, fork = tree[current]
        chain.append((current, fork))
        current = parent
    if not chain:
        return []
    clauses = []
    for bid, after, upto in view_ranges(chain):
        conditions = [messages.c.branch_id == bid, messages.c.sequence > after]
        if upto is not None:
            conditions.append(messages.c.sequence <= upto)
        clauses.append(and_(*conditions))
    query = (
        select(messages)
        .where(messages.c.session_id == session_id, or_(*clauses))
        .order_by(messages.c.sequence)
    )
    return [to_message(row) for row in (await conn.execute(query)).mappings()]


async def append_rows(
    conn: AsyncConnection,
    session_id: str,
    branch_id: str,
    new: Sequence[ChatMessage],
    turn_id: str | None,
) -> None:
    """Insert messages after the branch's last one (the session row must be locked)."""
    fork = await fork_point(conn, session_id, branch_id)
    if not new:
        return
    start = await branch_length(conn, session_id, branch_id, fork) + 1
    now = time.time()
    await conn.execute(
        messages.insert(),
        [
            message_row(session_id, branch_id, start + offset, message, turn_id, now)
            for offset, message in enumerate(new)
        ],
    )


async def list_branches(conn: AsyncConnection, session_id: str) -> list[BranchInfo]:
    """Every branch of the session with its length, oldest first."""
    active = await conn.scalar(
        select(sessions.c.active_branch).where(sessions.c.session_id == session_id)
    )
    if active is None:
        return []
    last = (
        select(messages.c.branch_id, func.max(messages.c.sequence).label("last"))
        .where(messages.c.session_id == session_id)
        .group_by(messages.c.branch_id)
        .subquery()
    )
    rows = await conn.execute(
        select(branches, last.c.last)
        .select_from(branches.outerjoin(last, last.c.branch_id == branches.c.branch_id))
        .where(branches.c.session_id == session_id)
        .order_by(branches.c.created_at, branches.c.branch_id != TRUNK, branches.c.branch_id)
    )
    out = []
    for row in rows.mappings():
        fork = int(row["fork_sequence"] or 0)
        out.append(
            BranchInfo(
                branch_id=row["branch_id"],
                parent_branch_id=row["parent_branch_id"],
                fork_sequence=fork,
                length=int(row["last"]) if row["last"] is not None else fork,
                active=row["branch_id"] == active,
                created_at=row["created_at"],
            )
        )
    return out


async def truncate(conn: AsyncConnection, session_id: str, sequence: int, branch_id: str) -> None:
    """Delete the branch's own messages after ``sequence``, first copying into each child
    branch forked inside that tail the messages it inherits from it."""
    tree = await branch_tree(conn, session_id)
    if branch_id not in tree:
        return
    fork = tree[branch_id][1]
    cut = max(sequence, fork)
    own = and_(messages.c.session_id == session_id, messages.c.branch_id == branch_id)
    for child, (parent, child_fork) in tree.items():
        if parent != branch_id or child_fork <= cut:
            continue
        columns = [c for c in messages.c if c.name not in ("id", "branch_id")]
        copied = select(*columns, literal(child)).where(
            own, messages.c.sequence > cut, messages.c.sequence <= child_fork
        )
        await conn.execute(
            messages.insert().from_select([*(c.name for c in columns), "branch_id"], copied)
        )
        await conn.execute(
            update(branches)
            .where(branches.c.session_id == session_id, branches.c.branch_id == child)
            .values(fork_sequence=cut)
        )
    await conn.execute(delete(messages).where(own, messages.c.sequence > cut))
