"""The files a turn's tools changed, in the SQL ``file_actions`` table (``SqlStateStore``'s
part of the StateStore contract that ``reactq undo`` reads)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from reactq.shared.state.base import FileAction
from reactq.shared.state.sql.schema import file_actions

T = TypeVar("T")


class SqlFiles:
    """File actions on SQL; mixed into ``SqlStateStore``, whose transactions it uses."""

    async def _read(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def _write(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def record_file_actions(self, actions: Sequence[FileAction]) -> None:
        """Append file actions in one transaction; see StateStore.record_file_actions."""
        if not actions:
            return
        now = time.time()
        rows = [
            {**a.model_dump(exclude={"undone_at"}), "created_at": a.created_at or now}
            for a in actions
        ]

        def op(conn: Connection) -> None:
            conn.execute(insert(file_actions), rows)

        await self._write(op)

    async def file_actions(self, turn_id: str) -> list[FileAction]:
        """A turn's file actions, oldest first."""

        def op(conn: Connection) -> list[FileAction]:
            query = (
                select(file_actions)
                .where(file_actions.c.turn_id == turn_id)
                .order_by(file_actions.c.id)
            )
            return [
                FileAction.model_validate({k: v for k, v in row.items() if k != "id"})
                for row in conn.execute(query).mappings()
            ]

        return await self._read(op)

    async def mark_file_actions_undone(self, turn_id: str, undone_at: float) -> bool:
        """Mark a turn's file actions undone, once (one conditional UPDATE)."""

        def op(conn: Connection) -> bool:
            done = conn.execute(
                update(file_actions)
                .where(file_actions.c.turn_id == turn_id, file_actions.c.undone_at.is_(None))
                .values(undone_at=undone_at)
            )
            return bool(done.rowcount)

        return await self._write(op)
