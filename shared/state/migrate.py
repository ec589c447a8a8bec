"""The SQL schema's versions: Alembic migrations shipped in ``shared/state/migrations``.

``await upgrade(url)`` (``reactq.shared.state.sql.store.upgrade``; ``reactq db upgrade``)
applies every migration the database lacks. ``SqlStateStore.init`` calls
``prepare_schema``: it refuses a schema newer than this code knows, upgrades an
older one when allowed, and recognises a database made before migrations existed
(tables but no version row) as revision 0001.
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from reactq.shared.errors import SchemaVersionError

MIGRATIONS = Path(__file__).resolve().with_name("migrations")
VERSION_TABLE = "reactq_schema_version"
"""The table that holds the database's revision (not Alembic's default, so that an
application sharing the database can keep its own)."""
_PRE_MIGRATIONS = "0001"


def alembic_config() -> Config:
    """An Alembic config pointing at the shipped migrations."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision this code knows."""
    head = _scripts().get_current_head()
    if head is None:  # pragma: no cover - the package ships its migrations
        raise SchemaVersionError("no schema migrations found in the reactq package")
    return head


def current_revision(conn: Connection) -> str | None:
    """The database's revision; 0001 for tables made before migrations; None if empty."""
    current = MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()
    if current is None and inspect(conn).has_table("sessions"):
        return _PRE_MIGRATIONS
    return current


def _check_known(current: str | None) -> None:
    if current is None:
        return
    try:
        _scripts().get_revision(current)
    except CommandError:
        raise SchemaVersionError(
            f"the database schema is at revision {current!r}, newer than this reactq knows "
            f"(up to {head_revision()!r}): upgrade reactq on this machine",
            revision=current,
            head=head_revision(),
        ) from None


def migrate(conn: Connection, revision: str = "head") -> str:
    """Upgrade the database on ``conn`` (inside its transaction) to ``revision``."""
    current = current_revision(conn)
    _check_known(current)
    config = alembic_config()
    config.attributes["connection"] = conn
    stamped = MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()
    if stamped is None and current is not None:
        command.stamp(config, current)
    command.upgrade(config, revision)
    return current_revision(conn) or ""


def prepare_schema(conn: Connection, upgrade: bool | None) -> None:
    """Make the schema usable by this code, or raise SchemaVersionError saying why not.

    ``upgrade`` None: SQLite upgrades itself; PostgreSQL only creates the schema in
    an empty database (upgrading a shared production database is the operator's
    call: ``reactq db upgrade``). True always upgrades; False never does.
    """
    current = current_revision(conn)
    _check_known(current)
    head = head_revision()
    if current == head:
        return
    allowed = upgrade if upgrade is not None else (conn.dialect.name == "sqlite" or not current)
    if not allowed:
        raise SchemaVersionError(
            f"the database schema is at revision {current!r} and this reactq needs {head!r}: "
            "run `reactq db upgrade`",
            revision=current,
            head=head,
        )
    migrate(conn)
