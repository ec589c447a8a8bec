"""Schedules in the ``schedules`` table, on a SQL state store's engine."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from reactq.shared.schedules import Schedule
from reactq.shared.state.schedule_store import check_fields
from reactq.shared.state.sql.schema import schedules as table
from reactq.shared.state.sql.store import SqlStateStore
from reactq.shared.tenancy import TenantIdentity

__all__ = ["SqlScheduleStore"]


def _row(schedule: Schedule) -> dict[str, Any]:
    tenant = schedule.tenant
    return {
        **schedule.model_dump(exclude={"metadata", "paused", "tenant", "fresh_sessions"}),
        "paused": int(schedule.paused),
        "fresh_sessions": int(schedule.fresh_sessions),
        "metadata": json.dumps(schedule.metadata) if schedule.metadata else None,
        "tenant": None if tenant is None else tenant.model_dump_json(),
    }


def _schedule(row: Any) -> Schedule:
    tenant = row.get("tenant")
    return Schedule(
        **{
            **row,
            "paused": bool(row["paused"]),
            "fresh_sessions": bool(row.get("fresh_sessions") or 0),
            "metadata": json.loads(row["metadata"]) if row["metadata"] else {},
            "tenant": None if tenant is None else TenantIdentity.model_validate_json(tenant),
        }
    )


class SqlScheduleStore:
    """Schedules in the ``schedules`` table, on a SqlStateStore's engine."""

    def __init__(self, store: SqlStateStore) -> None:
        self.store = store

    async def add(self, schedule: Schedule) -> None:
        """Store a new schedule."""

        def op(conn: Connection) -> None:
            conn.execute(table.insert().values(**_row(schedule)))

        # The store's transaction helpers, as the audit log uses them: one hop to the
        # writer thread on SQLite, run_sync on PostgreSQL.
        await self.store._write(op)

    async def get(self, schedule_id: str) -> Schedule | None:
        """The schedule, or None."""

        def op(conn: Connection) -> Schedule | None:
            row = conn.execute(select(table).where(table.c.schedule_id == schedule_id)).first()
            return None if row is None else _schedule(row._mapping)

        return await self.store._read(op)

    async def find(self, session_id: str | None = None) -> list[Schedule]:
        """Every schedule (of ``session_id``), oldest first."""

        def op(conn: Connection) -> list[Schedule]:
            query = select(table).order_by(table.c.created_at, table.c.schedule_id)
            if session_id is not None:
                query = query.where(table.c.session_id == session_id)
            return [_schedule(row._mapping) for row in conn.execute(query)]

        return await self.store._read(op)

    async def update(self, schedule_id: str, **fields: Any) -> Schedule | None:
        """Change its editable fields; the schedule as it is now, or None."""
        check_fields(fields)
        values = {k: int(v) if k == "paused" else v for k, v in fields.items()}

        def op(conn: Connection) -> Schedule | None:
            if values:
                conn.execute(
                    update(table).where(table.c.schedule_id == schedule_id).values(**values)
                )
            row = conn.execute(select(table).where(table.c.schedule_id == schedule_id)).first()
            return None if row is None else _schedule(row._mapping)

        return await self.store._write(op)

    async def delete(self, schedule_id: str) -> bool:
        """Remove the schedule; False when there was none."""

        def op(conn: Connection) -> bool:
            result = conn.execute(delete(table).where(table.c.schedule_id == schedule_id))
            return bool(result.rowcount)

        return await self.store._write(op)
