"""Sessions' todo lists in the SQL ``todos`` table (``SqlStateStore``): one row per
session, its items as JSON text."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection

from reactq.shared.state.common import stale
from reactq.shared.state.sql.ops import dialect_insert, lock_session_if_any
from reactq.shared.state.sql.schema import todos
from reactq.shared.state.todo_store import TodoItem, dump_todos, load_todos

T = TypeVar("T")


class SqlTodos:
    """The TodoStore contract on SQL; mixed into ``SqlStateStore``, whose transactions
    and dialect it uses."""

    dialect: str

    async def _read(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def _write(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def get_todos(self, session_id: str) -> list[TodoItem]:
        """The session's list; see TodoStore."""

        def op(conn: Connection) -> str | None:
            query = select(todos.c.entries).where(todos.c.session_id == session_id)
            return conn.execute(query).scalar_one_or_none()

        return load_todos(await self._read(op))

    async def set_todos(
        self, session_id: str, items: Sequence[TodoItem], fence: int | None = None
    ) -> None:
        """Replace the session's list (one upsert, or a delete for an empty one), fenced
        in the same transaction: the session's row is locked while the token is checked
        and the list written; see TodoStore."""
        text, now = dump_todos(items), time.time()

        def op(conn: Connection) -> None:
            if fence is not None:
                found = lock_session_if_any(conn, session_id)
                if found is not None and found[1] > fence:
                    raise stale(session_id, found[1], fence)
            if not items:
                conn.execute(delete(todos).where(todos.c.session_id == session_id))
                return
            insert = dialect_insert(self.dialect, todos)
            conn.execute(
                insert.values(
                    session_id=session_id, entries=text, updated_at=now
                ).on_conflict_do_update(
                    index_elements=["session_id"],
                    set_={"entries": insert.excluded.entries, "updated_at": now},
                )
            )

        await self._write(op)
