"""A turn's begin and commit on SQL, and its record in the ``turns`` table
(``SqlStateStore``'s part of the StateStore contract a worker's turn runs through)."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from reactq.shared.messages import ChatMessage
from reactq.shared.state import listing
from reactq.shared.state.base import TRUNK, SessionInfo, SessionUsage, TurnRecord, TurnStart
from reactq.shared.state.common import check_record
from reactq.shared.state.sql import ops, turn_ops
from reactq.shared.state.sql.schema import dec, enc, turns
from reactq.shared.turns import TurnStatus

T = TypeVar("T")


class SqlTurns:
    """Beginning and committing turns on SQL; mixed into ``SqlStateStore``, whose
    transactions and dialect it uses."""

    dialect: str

    async def _read(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def _write(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def _write_each(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def begin_turn(
        self, session_id: str, agent: str, *, fence: int | None = None, branch_id: str | None = None
    ) -> TurnStart:
        """Ensure the session, record ``fence`` and read a branch; see
        StateStore.begin_turn.

        Two statements on the common path: the session's upsert (which checks and
        moves the fence) and the branch's read; a new session's second one inserts
        its trunk instead, and another agent's session needs only the first.

        SQLite runs them in one write transaction. PostgreSQL runs them in one call
        of the ``reactq_begin_turn`` function (``turn_ops.begin_rows``), its own
        transaction (no BEGIN / COMMIT round trips: ``_write_each``). The function
        reads the branch in a statement after the upsert, so the read's snapshot
        holds every commit that landed before, the one the upsert waited for
        included (a staler holder's commit already past its fence check holds the
        row's lock); in the upsert's own statement it would not. Should the
        connection be found dead during the call, it runs once more on a fresh
        one: the same token passes the fence again, and a new session's trunk is
        in already.
        """
        now = time.time()
        if self.dialect == "postgresql":
            return await self._write_each(
                functools.partial(self._begin_in_one, session_id, agent, fence, branch_id, now)
            )
        row_values = {
            "session_id": session_id,
            "agent": agent,
            "active_branch": TRUNK,
            "fence": fence or 0,
            "created_at": now,
            "updated_at": now,
        }
        upsert = turn_ops.upsert_session(self.dialect, fenced=fence is not None)

        def op(conn: Connection) -> TurnStart:
            row = conn.execute(upsert, row_values).first()
            if row is None:  # the fence refused the update
                ops.refuse(conn, session_id, fence)
            info = SessionInfo(
                session_id=session_id,
                agent=row.agent,
                active_branch=row.active_branch,
                fence=row.fence,
                created_at=row.created_at,
            )
            branch = branch_id or info.active_branch
            if info.created_at == now:
                # This upsert inserted the row (an existing one keeps its creation
                # time). Should another session have been created at the very same
                # clock reading, the insert below does nothing: it has its trunk.
                trunk = {"session_id": session_id, "branch_id": TRUNK, "created_at": now}
                conn.execute(turn_ops.insert_trunk(self.dialect), trunk)
                return TurnStart(info=info, branch_id=branch, messages=[])
            if info.agent != agent:
                return TurnStart(info=info, branch_id=branch, messages=[])
            history = ops.read_for_turn(conn, session_id, branch)
            return TurnStart(info=info, branch_id=branch, messages=history)

        return await self._write(op)

    @staticmethod
    def _begin_in_one(
        session_id: str,
        agent: str,
        fence: int | None,
        branch_id: str | None,
        now: float,
        conn: Connection,
    ) -> TurnStart:
        """``begin_turn`` on PostgreSQL: one statement (``turn_ops.begin_rows``)."""
        info, history = turn_ops.begin_rows(conn, session_id, agent, fence, branch_id, now)
        return TurnStart(info=info, branch_id=branch_id or info.active_branch, messages=history)

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
        """Append a turn's messages and record its outcome, atomically, once per turn
        (TurnCommittedError otherwise); see StateStore.

        ``turn_ops.commit_rows``: on PostgreSQL one statement, the call of the
        ``reactq_commit_turn`` function (migration 0014), its own transaction (no
        BEGIN / COMMIT round trips: ``_write_each``); on SQLite one transaction of
        the fence's lock (which reads the tip), the record and the messages. Both
        remove the turn's checkpoint unless ``drop_checkpoint`` is False.
        Messages without a ``turn_id`` get the record's.

        Should PostgreSQL's connection be found dead during the call, it runs once
        more on a fresh one: if the first call had committed, the second is refused
        with TurnCommittedError, as another worker's would be (the turn is
        committed, once).
        """
        check_record(session_id, record)
        values = {
            "turn_id": record.turn_id,
            "session_id": session_id,
            "status": record.status.value,
            "attempt": record.attempt,
            "final_text": enc(record.final_text),
            "error": enc(record.error),
            "created_at": record.created_at or time.time(),
            **_turn_extras(record),
        }

        def op(conn: Connection) -> None:
            # The turn's record is its one commit: a record already there (or one a
            # concurrent transaction is writing, which the insert waits for) refuses
            # the commit, and writes nothing.
            turn_ops.commit_rows(
                conn,
                session_id,
                fence,
                branch_id,
                values,
                messages,
                drop_checkpoint=drop_checkpoint,
            )

        await self._write_each(op)

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        """A committed turn's outcome, or None."""

        def op(conn: Connection) -> TurnRecord | None:
            row = conn.execute(select(turns).where(turns.c.turn_id == turn_id)).mappings().first()
            return None if row is None else turn_record(row)

        return await self._read(op)

    async def session_usage(self, session_id: str) -> SessionUsage:
        """The session's totals over its committed turns (one SUM); see StateStore."""

        def op(conn: Connection) -> SessionUsage:
            query = select(
                func.count(),
                func.sum(turns.c.prompt_tokens),
                func.sum(turns.c.completion_tokens),
                func.sum(turns.c.total_tokens),
                func.sum(turns.c.cost),
            ).where(turns.c.session_id == session_id)
            count, prompt, completion, total, cost = conn.execute(query).one()
            return SessionUsage(
                session_id=session_id,
                turns=count,
                prompt_tokens=prompt or 0,
                completion_tokens=completion or 0,
                total_tokens=total or 0,
                cost=float(cost or 0.0),
            )

        return await self._read(op)


# --- helpers --------------------------------------------------------------------


def turn_record(row: Any) -> TurnRecord:
    """A ``turns`` row as the TurnRecord it stores."""
    return TurnRecord(
        turn_id=row["turn_id"],
        session_id=row["session_id"],
        status=TurnStatus(row["status"]),
        attempt=row["attempt"],
        final_text=dec(row["final_text"]),
        error=dec(row["error"]),
        created_at=row["created_at"],
        metadata=json.loads(row["metadata"]) if row["metadata"] is not None else {},
        config_version=row["config_version"],
        usage={key: row[key] for key in _USAGE_KEYS if row[key] is not None},
        cost=row["cost"],
    )


_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
"""The counts a turn record keeps, each in a column of its own."""


def _turn_extras(record: TurnRecord) -> dict[str, Any]:
    """The record's columns beyond its outcome: metadata, version, usage, cost."""
    return {
        "metadata": listing.dump_value(record.metadata) if record.metadata else None,
        "config_version": record.config_version,
        **{key: record.usage.get(key) for key in _USAGE_KEYS},
        "cost": record.cost,
    }
