"""A running turn's steps in the SQL ``turn_checkpoints`` table (``SqlStateStore``'s
StepStore part): one row a turn, replaced each step, written only under the fence."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import bindparam, delete, select
from sqlalchemy.engine import Connection

from reactq.shared.state.base import TurnCheckpoint
from reactq.shared.state.common import committed_twice, dump_steps, load_steps
from reactq.shared.state.sql import ops
from reactq.shared.state.sql.ops import dialect_insert
from reactq.shared.state.sql.schema import sessions, turn_checkpoints, turns

T = TypeVar("T")


class SqlSteps:
    """The StepStore contract on SQL; mixed into ``SqlStateStore``, whose transactions
    and dialect it uses."""

    dialect: str

    async def _read(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def _write(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def checkpoint_step(self, checkpoint: TurnCheckpoint, fence: int | None = None) -> None:
        """Store a running turn's completed steps; see StateStore.checkpoint_step.

        One statement when the fence is the stored one: the upsert checks it, and
        that the turn is not committed, as it writes.
        """
        session_id, turn_id = checkpoint.session_id, checkpoint.turn_id
        params: dict[str, Any] = {
            "v_turn_id": turn_id,
            "v_session_id": session_id,
            "v_branch_id": checkpoint.branch_id,
            "v_step": checkpoint.step,
            "v_attempt": checkpoint.attempt,
            "v_messages": dump_steps(checkpoint.messages),
            "v_updated_at": checkpoint.updated_at or time.time(),
        }
        if fence is not None:
            params["fence"] = fence

        def op(conn: Connection) -> None:
            guarded = guarded_checkpoint(self.dialect, fenced=fence is not None)
            if conn.execute(guarded, params).rowcount:
                return
            # Nothing written: no session, a token other than the stored one, or a
            # committed turn. Check the fence (raising, or moving a newer token on),
            # then write unless the turn is committed.
            ops.lock_fenced(conn, session_id, fence)
            unfenced = guarded_checkpoint(self.dialect, fenced=False)
            if not conn.execute(unfenced, params).rowcount:
                raise committed_twice(session_id, turn_id)

        await self._write(op)

    async def get_checkpoint(self, session_id: str, turn_id: str) -> TurnCheckpoint | None:
        """The turn's last checkpoint, or None."""

        def op(conn: Connection) -> TurnCheckpoint | None:
            table = turn_checkpoints
            query = select(table).where(
                table.c.turn_id == turn_id, table.c.session_id == session_id
            )
            row = conn.execute(query).mappings().first()
            if row is None:
                return None
            return TurnCheckpoint(
                session_id=row["session_id"],
                turn_id=row["turn_id"],
                step=row["step"],
                messages=load_steps(row["messages"]),
                branch_id=row["branch_id"],
                attempt=row["attempt"],
                updated_at=row["updated_at"],
            )

        return await self._read(op)

    async def discard_checkpoint(self, session_id: str, turn_id: str) -> None:
        """Forget the turn's checkpoint. Idempotent."""

        def op(conn: Connection) -> None:
            table = turn_checkpoints
            conn.execute(
                delete(table).where(table.c.turn_id == turn_id, table.c.session_id == session_id)
            )

        await self._write(op)


_CHECKPOINT_COLUMNS = ("turn_id", "session_id", "branch_id", "step", "attempt", "messages")


@functools.cache
def guarded_checkpoint(dialect: str, *, fenced: bool) -> Any:
    """A checkpoint's upsert, written only if the session exists, its fence is
    ``:fence`` (``fenced``) and the turn has no committed record. Run with the
    checkpoint's columns prefixed ``v_`` (plain names are the INSERT's own)."""
    columns = [*_CHECKPOINT_COLUMNS, "updated_at"]
    session_id = bindparam("v_session_id", type_=sessions.c.session_id.type)
    committed = select(turns.c.turn_id).where(turns.c.turn_id == bindparam("v_turn_id")).exists()
    source = select(
        *(bindparam(f"v_{name}", type_=turn_checkpoints.c[name].type) for name in columns)
    ).where(sessions.c.session_id == session_id, ~committed)
    if fenced:
        source = source.where(sessions.c.fence == bindparam("fence", type_=sessions.c.fence.type))
    if dialect == "postgresql":
        # Held until the commit: a claim by a newer holder (an UPDATE of the row)
        # waits for this write, or this write, having waited, sees the new token and
        # writes nothing. SQLite's BEGIN IMMEDIATE already serialises writers.
        source = source.with_for_update(key_share=True, of=sessions)
    query = dialect_insert(dialect, turn_checkpoints).from_select(columns, source)
    return query.on_conflict_do_update(
        index_elements=["turn_id"], set_={name: query.excluded[name] for name in columns[1:]}
    )
