"""The SQL store's statements, each run on a connection inside the caller's transaction.

They are plain synchronous functions: the store runs a whole transaction in one
call (``engines``: a thread on SQLite, ``run_sync`` on PostgreSQL).

Writers lock the session row first (``lock_session``: FOR UPDATE on PostgreSQL;
``lock_fenced``: an UPDATE of the row; SQLite's write transactions are already
serialised by BEGIN IMMEDIATE), so the read-then-write steps below (next sequence,
fork bounds, fence) cannot race. On PostgreSQL a read that depends on the lock
runs as a statement after it: a statement's snapshot is taken when it starts, so
a read in the locking statement itself could miss what the previous holder wrote.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from sqlalchemy import (
    CTE,
    Integer,
    Select,
    Table,
    Update,
    and_,
    bindparam,
    case,
    cast,
    delete,
    func,
    literal,
    null,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from reactq.shared.errors import BranchNotFoundError, SessionNotFoundError
from reactq.shared.messages import ChatMessage
from reactq.shared.state.base import TRUNK, BranchInfo, SessionRecord
from reactq.shared.state.common import stale
from reactq.shared.state.sql.bulk import insert_many
from reactq.shared.state.sql.schema import (
    branches,
    message_row,
    messages,
    sessions,
    to_message,
    todos,
    turn_checkpoints,
    turns,
)


def session_info(conn: Connection, session_id: str) -> SessionRecord | None:
    """The session row as a SessionRecord, or None."""
    row = (
        conn.execute(select(sessions).where(sessions.c.session_id == session_id)).mappings().first()
    )
    return None if row is None else session_record(row)


def session_record(row: Any) -> SessionRecord:
    """A ``sessions`` row (a mapping) as a SessionRecord."""
    raw = row["metadata"]
    return SessionRecord(
        session_id=row["session_id"],
        agent=row["agent"],
        active_branch=row["active_branch"],
        fence=row["fence"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        metadata={} if raw is None else json.loads(raw),
    )


def sessions_after(
    conn: Connection,
    after: tuple[float, str] | None,
    agent: str | None,
    updated_since: float | None,
    count: int,
) -> list[SessionRecord]:
    """Up to ``count`` sessions after the listing key ``after``, newest first, of
    ``agent`` and written since ``updated_since`` (when given)."""
    query = select(sessions)
    if after is not None:
        created, session_id = after
        query = query.where(
            or_(
                sessions.c.created_at < created,
                and_(sessions.c.created_at == created, sessions.c.session_id < session_id),
            )
        )
    if agent is not None:
        query = query.where(sessions.c.agent == agent)
    if updated_since is not None:
        query = query.where(sessions.c.updated_at >= updated_since)
    query = query.order_by(sessions.c.created_at.desc(), sessions.c.session_id.desc())
    return [session_record(row) for row in conn.execute(query.limit(count)).mappings()]


def delete_session(conn: Connection, session_id: str) -> bool:
    """Delete every row of the session's state; whether it had any."""
    found = False
    # Children first: SQLite enforces no foreign keys unless asked to.
    for table in (messages, branches, turn_checkpoints, turns, todos, sessions):
        found = (
            bool(conn.execute(delete(table).where(table.c.session_id == session_id)).rowcount)
            or found
        )
    return found


def lock_session(conn: Connection, session_id: str) -> tuple[str, int]:
    """The session's (active branch, fence), its row locked until the transaction ends;
    SessionNotFoundError if the store lacks it."""
    found = lock_session_if_any(conn, session_id)
    if found is None:
        raise SessionNotFoundError(f"no session {session_id!r} in the store")
    return found


def lock_fenced(conn: Connection, session_id: str, fence: int | None) -> str:
    """Lock the session's row for a fenced write and return its active branch.

    StaleLeaseError when a newer token than ``fence`` is recorded; a newer ``fence``
    is recorded in the same statement. ``fence`` None writes unfenced.
    SessionNotFoundError if the store lacks the session.
    """
    active, _tip = _lock(conn, session_id, fence, None)
    return active


def lock_fenced_at_tip(
    conn: Connection, session_id: str, fence: int | None, branch_id: str
) -> int | None:
    """``lock_fenced``, returning ``branch_tip`` of ``branch_id`` read in the same
    statement (None if the session lacks the branch).

    SQLite only, whose writers hold the database's write lock from BEGIN IMMEDIATE:
    on PostgreSQL the read would see the statement's snapshot, taken before it
    waited for the row, and could miss the previous holder's messages.
    """
    _active, tip = _lock(conn, session_id, fence, branch_id)
    return tip


def _lock(
    conn: Connection, session_id: str, fence: int | None, tip_of: str | None
) -> tuple[str, int | None]:
    """(active branch, tip of ``tip_of`` or None) of the session locked by the fence."""
    params: dict[str, Any] = {"sid": session_id, "now": time.time(), "bid": tip_of}
    if fence is not None:
        params["token"] = fence
    query = _lock_fenced(fenced=fence is not None, tip=tip_of is not None)
    row = conn.execute(query, params).first()
    if row is None:
        refuse(conn, session_id, fence)
    tip = row[1] if tip_of is not None else None
    return str(row[0]), None if tip is None else int(tip)


@functools.cache
def _lock_fenced(*, fenced: bool, tip: bool) -> Update:
    # One UPDATE checks the fence, moves it on and locks the row (a writer's
    # updated_at is touched as well, as the Redis store's writes do).
    query = update(sessions).where(sessions.c.session_id == bindparam("sid"))
    if fenced:
        token = bindparam("token", type_=sessions.c.fence.type)
        query = query.where(sessions.c.fence <= token).values(fence=token)
    returned: list[Any] = [sessions.c.active_branch]
    if tip:
        returned.append(_branch_tip().scalar_subquery())
    return query.values(updated_at=bindparam("now")).returning(*returned)


def refuse(conn: Connection, session_id: str, fence: int | None) -> NoReturn:
    """Raise why a fenced write to the session updated nothing: SessionNotFoundError,
    else StaleLeaseError (the stored token is newer than ``fence``)."""
    stored = conn.scalar(select(sessions.c.fence).where(sessions.c.session_id == session_id))
    if stored is None:
        raise SessionNotFoundError(f"no session {session_id!r} in the store")
    if fence is None:  # pragma: no cover - an unfenced write is refused only without a row
        raise AssertionError(f"an unfenced write to session {session_id!r} was refused")
    raise stale(session_id, int(stored), fence)


def lock_session_if_any(conn: Connection, session_id: str) -> tuple[str, int] | None:
    """``lock_session``, or None for a session the store lacks."""
    row = (
        conn.execute(
            select(sessions.c.active_branch, sessions.c.fence)
            .where(sessions.c.session_id == session_id)
            .with_for_update()
        )
    ).first()
    return None if row is None else (str(row[0]), int(row[1]))


def branch_tree(conn: Connection, session_id: str) -> dict[str, tuple[str | None, int]]:
    """branch_id -> (parent, fork point) of every branch of the session."""
    rows = conn.execute(
        select(branches.c.branch_id, branches.c.parent_branch_id, branches.c.fork_sequence).where(
            branches.c.session_id == session_id
        )
    )
    return {str(b): (p, int(f or 0)) for b, p, f in rows}


def branch_tip(conn: Connection, session_id: str, branch_id: str) -> int:
    """The last sequence of a branch's history: its last own message, or its fork point.

    BranchNotFoundError if the session has no such branch.
    """
    row = conn.execute(_branch_tip(), {"sid": session_id, "bid": branch_id}).first()
    if row is None:
        raise no_branch(session_id, branch_id)
    return int(row[0])


@functools.cache
def _branch_tip() -> Select[Any]:
    sid = bindparam("sid", type_=sessions.c.session_id.type)
    bid = bindparam("bid", type_=branches.c.branch_id.type)
    last = (
        select(func.max(messages.c.sequence))
        .where(messages.c.session_id == sid, messages.c.branch_id == bid)
        .scalar_subquery()
    )
    return select(func.coalesce(last, branches.c.fork_sequence, 0)).where(
        branches.c.session_id == sid, branches.c.branch_id == bid
    )


def has_branch(conn: Connection, session_id: str, branch_id: str) -> bool:
    """Whether the session has the branch."""
    found = conn.scalar(
        select(func.count())
        .select_from(branches)
        .where(branches.c.session_id == session_id, branches.c.branch_id == branch_id)
    )
    return bool(found)


def fork_point(conn: Connection, session_id: str, branch_id: str) -> int:
    """The branch's fork point; BranchNotFoundError if the session has no such branch."""
    row = (
        conn.execute(
            select(branches.c.fork_sequence).where(
                branches.c.session_id == session_id, branches.c.branch_id == branch_id
            )
        )
    ).first()
    if row is None:
        raise no_branch(session_id, branch_id)
    return int(row[0] or 0)


def no_branch(session_id: str, branch_id: str) -> BranchNotFoundError:
    """The error of a session without ``branch_id``."""
    return BranchNotFoundError(
        f"session {session_id!r} has no branch {branch_id!r}",
        session_id=session_id,
        branch_id=branch_id,
    )


def read_branch(conn: Connection, session_id: str, branch_id: str | None) -> list[ChatMessage]:
    """A branch's whole history (the active branch when None), oldest first, in one
    statement ([] for a session or branch the store lacks)."""
    if branch_id is None:
        rows = conn.execute(_history(active=True), {"sid": session_id})
    else:
        rows = conn.execute(_history(active=False), {"sid": session_id, "bid": branch_id})
    return [to_message(row) for row in rows.mappings()]


def read_for_turn(conn: Connection, session_id: str, branch_id: str) -> list[ChatMessage]:
    """What a turn reads of a branch, oldest first, in one statement: the messages its
    latest summary does not stand for (``summary_of`` + 1 on), all of them without one."""
    rows = conn.execute(_turn_history(), {"sid": session_id, "bid": branch_id})
    return [to_message(row) for row in rows.mappings()]


@functools.cache
def _history(*, active: bool) -> Select[Any]:
    """``read_branch``'s query: the branch's messages joined to ``_chain``'s ranges."""
    sid = bindparam("sid", type_=sessions.c.session_id.type)
    start: Any = bindparam("bid", type_=branches.c.branch_id.type)
    if active:
        start = select(sessions.c.active_branch).where(sessions.c.session_id == sid)
        start = start.scalar_subquery()
    chain = _chain(sid, start)
    return (
        select(messages)
        .join(chain, messages.c.branch_id == chain.c.branch_id)
        .where(
            messages.c.session_id == sid,
            messages.c.sequence > chain.c.lo,
            or_(chain.c.hi.is_(None), messages.c.sequence <= chain.c.hi),
        )
        .order_by(messages.c.sequence)
    )


@functools.cache
def _turn_history() -> Select[Any]:
    """``read_for_turn``'s query: ``_chain``'s ranges raised to the latest summary's
    ``summary_of``, then their messages. PostgreSQL's ``reactq_begin_turn`` holds a
    copy (migration 0014): a change here needs a migration that replaces it.

    Its cost does not grow with the branch. Each range's latest summary is one
    backward seek in the partial index ``ix_messages_summaries`` (summaries only); the
    deepest range that has one holds the branch's latest (the ranges that see any
    message are disjoint, a child's above its ancestors'). Each range's messages are
    then one index seek from a single lower bound. Messages join the ranges on the
    range's session and branch, with no constant of their own, so the planner drives
    the read from the ranges: given ``session_id = :sid``, SQLite walked every message
    of the session instead.
    """
    sid = bindparam("sid", type_=sessions.c.session_id.type)
    chain = _chain(sid, bindparam("bid", type_=branches.c.branch_id.type))

    def of_range(table: Any, ranges: Any) -> Any:
        return and_(
            table.c.session_id == ranges.c.session_id,
            table.c.branch_id == ranges.c.branch_id,
            table.c.sequence > ranges.c.lo,
            or_(ranges.c.hi.is_(None), table.c.sequence <= ranges.c.hi),
        )

    summaries = messages.alias("summaries")
    # A summary_of past the summary itself would read not even the summary.
    upto = case(
        (summaries.c.summary_of < summaries.c.sequence, summaries.c.summary_of),
        else_=summaries.c.sequence - 1,
    )
    in_range = (
        select(upto)
        .where(of_range(summaries, chain), summaries.c.summary_of.is_not(None))
        .order_by(summaries.c.sequence.desc())
        .limit(1)
        .correlate(chain)
        .scalar_subquery()
    )
    found = select(chain.c.lo, in_range.label("upto")).subquery("found")
    latest = (
        select(found.c.upto)
        .where(found.c.upto.is_not(None))
        .order_by(found.c.lo.desc())
        .limit(1)
        .scalar_subquery()
    )
    floor = select(func.coalesce(latest, 0).label("upto")).subquery("floor")
    # One lower bound per range: given two, SQLite seeks by one and filters by the other.
    lo = case((chain.c.lo > floor.c.upto, chain.c.lo), else_=floor.c.upto)
    ranges = (
        select(chain.c.session_id, chain.c.branch_id, lo.label("lo"), chain.c.hi)
        .select_from(chain.join(floor, true()))  # one row: a product, on purpose
        .cte("ranges")
    )
    return select(messages).join(ranges, of_range(messages, ranges)).order_by(messages.c.sequence)


def _chain(sid: Any, start: Any) -> CTE:
    """The branch ``start`` and its ancestors up to the trunk (and their session), each
    with the range of its own messages the branch sees: ``lo < sequence <= hi`` (``hi``
    NULL: no bound). The recursive form of ``base.view_ranges``: a parent is capped at its child's
    fork point, or at the child's own cap if lower."""
    chain = (
        select(
            branches.c.session_id,
            branches.c.branch_id,
            branches.c.parent_branch_id.label("parent"),
            func.coalesce(branches.c.fork_sequence, 0).label("lo"),
            # Typed: PostgreSQL takes a recursive CTE's column types from this first part.
            cast(null(), Integer).label("hi"),
        )
        .where(branches.c.session_id == sid, branches.c.branch_id == start)
        .cte("chain", recursive=True)
    )
    up = branches.alias("up")
    parent_hi = case(
        (chain.c.hi.is_(None), chain.c.lo), (chain.c.lo < chain.c.hi, chain.c.lo), else_=chain.c.hi
    )
    return chain.union_all(
        select(
            up.c.session_id,
            up.c.branch_id,
            up.c.parent_branch_id,
            func.coalesce(up.c.fork_sequence, 0),
            parent_hi,
        ).where(up.c.session_id == sid, up.c.branch_id == chain.c.parent)
    )


def append_rows(
    conn: Connection,
    session_id: str,
    branch_id: str,
    new: Sequence[ChatMessage],
    turn_id: str | None,
    tip: int | None = None,
) -> None:
    """Insert messages after the branch's last one (the session row must be locked);
    BranchNotFoundError, even with nothing to insert, if the session lacks the branch.
    ``tip`` is the branch's ``branch_tip`` when already read under the lock."""
    if tip is None:
        tip = branch_tip(conn, session_id, branch_id)
    start = tip + 1
    if not new:
        return
    now = time.time()
    insert_many(
        conn,
        messages,
        [
            message_row(session_id, branch_id, start + offset, message, turn_id, now)
            for offset, message in enumerate(new)
        ],
    )


def list_branches(conn: Connection, session_id: str) -> list[BranchInfo]:
    """Every branch of the session with its length, oldest first."""
    active = conn.scalar(
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
    rows = conn.execute(
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


def truncate(conn: Connection, session_id: str, sequence: int, branch_id: str) -> None:
    """Delete the branch's own messages after ``sequence``, first copying into each child
    branch forked inside that tail the messages it inherits from it."""
    tree = branch_tree(conn, session_id)
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
        conn.execute(
            messages.insert().from_select([*(c.name for c in columns), "branch_id"], copied)
        )
        conn.execute(
            update(branches)
            .where(branches.c.session_id == session_id, branches.c.branch_id == child)
            .values(fork_sequence=cut)
        )
    conn.execute(delete(messages).where(own, messages.c.sequence > cut))


# --- statements of a turn's steps, built once per dialect and run with parameters ---
# (building a statement costs more CPU than compiling it, which SQLAlchemy caches)


def dialect_insert(dialect: str, table: Table) -> Any:
    """An INSERT of ``table`` with the dialect's ON CONFLICT clauses."""
    return (postgresql if dialect == "postgresql" else sqlite).insert(table)
