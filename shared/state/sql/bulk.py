"""Many rows into one table, without SQLAlchemy's per-row parameter processing.

``conn.execute(table.insert(), rows)`` runs every row through the compiled
statement's ``construct_params``: under load that was most of the CPU the
audit log cost a worker (bench/pool.py --scenario cpu), more than SQLite's own
insert. The tables written here have plain column types (text, integers,
floats), which no dialect converts on the way in, so the statement is compiled
once per table, columns and dialect, and the rows go to the driver's own
``executemany`` as tuples in the statement's parameter order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Connection

_COMPILED: dict[tuple[str, str, tuple[str, ...]], tuple[str, tuple[str, ...]]] = {}


def insert_many(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` (each with the same keys) into ``table`` in one executemany."""
    if not rows:
        return
    keys = tuple(rows[0])
    cache_key = (table.name, conn.dialect.name, keys)
    compiled = _COMPILED.get(cache_key)
    if compiled is None:
        # inline(): no RETURNING of the new ids, which an executemany would not read.
        statement = table.insert().inline().compile(dialect=conn.dialect, column_keys=list(keys))
        positions = statement.positiontup
        if positions is None:  # a dialect with named parameters: none reactq runs on
            conn.execute(table.insert(), list(rows))
            return
        compiled = _COMPILED[cache_key] = (statement.string, tuple(positions))
    sql, order = compiled
    conn.exec_driver_sql(sql, [tuple(row[key] for key in order) for row in rows])
