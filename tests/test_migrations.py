"""The SQL schema's Alembic migrations: an empty database, one at the previous
version, one made before migrations existed, and one newer than this code."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import Connection

from reactq.shared.errors import SchemaVersionError
from reactq.shared.state import TRUNK
from reactq.shared.state.migrate import MIGRATIONS, VERSION_TABLE, head_revision
from reactq.shared.state.sql.schema import SCHEMA_REVISION, metadata
from reactq.shared.state.sql.store import SqlStateStore, upgrade

PREVIOUS = "0001"


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database of its own."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/m.db"
        return
    import asyncpg

    base = str(request.getfixturevalue("postgres_url"))
    admin_url = base.replace("postgresql+asyncpg://", "postgresql://")
    name = f"reactq_mig_{uuid.uuid4().hex[:10]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(admin_url, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{base.rpartition('/')[0]}/{name}"
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def execute(url: str, *statements: str) -> None:
    store = SqlStateStore(url, upgrade=False)
    try:
        async with store.engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await store.close()


def schema_diff(conn: Connection) -> list[object]:
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return list(compare_metadata(context, metadata))


async def test_the_head_is_what_the_tables_describe() -> None:
    assert head_revision() == SCHEMA_REVISION
    assert (MIGRATIONS / "script.py.mako").exists() and (MIGRATIONS / "alembic.ini").exists()


async def test_upgrade_an_empty_database(empty_url: str) -> None:
    assert await upgrade(empty_url) == head_revision()
    assert await upgrade(empty_url) == head_revision()  # nothing left to do
    store = await SqlStateStore.open(empty_url)
    try:
        assert await store.schema_revision() == head_revision()
        async with store.engine.connect() as conn:
            assert await conn.run_sync(schema_diff) == []
        await store.ensure_session("s", "a")
    finally:
        await store.close()


async def test_a_store_creates_the_schema_in_an_empty_database(empty_url: str) -> None:
    store = await SqlStateStore.open(empty_url)
    try:
        assert await store.schema_revision() == head_revision()
    finally:
        await store.close()


LEGACY_ROWS = (
    "INSERT INTO sessions VALUES ('old', 'agent', 'trunk', 4, 1.0, 2.0)",
    "INSERT INTO branches VALUES ('old', 'trunk', NULL, NULL, 1.0)",
    "INSERT INTO messages (session_id, branch_id, sequence, role, content, turn_id, created_at)"
    " VALUES ('old', 'trunk', 0, 'user', 'hi', 't1', 1.0),"
    " ('old', 'trunk', 1, 'assistant', 'hello', 't1', 1.0),"
    " ('old', 'trunk', 2, 'user', 'again', 't2', 1.0)",
    "INSERT INTO turns VALUES ('t1', 'old', 'completed', 1, 'hello', NULL, 1.0)",
)


async def check_legacy_session(store: SqlStateStore) -> None:
    info = await store.get_session("old")
    assert info is not None and (info.agent, info.active_branch, info.fence) == ("agent", TRUNK, 4)
    got = await store.get_messages("old")
    assert [(m.sequence, m.content) for m in got] == [(1, "hi"), (2, "hello"), (3, "again")]
    assert [b.branch_id for b in await store.list_branches("old")] == [TRUNK]
    turn = await store.get_turn("t1")
    assert turn is not None and turn.final_text == "hello"
    branch = await store.fork("old", 2)
    await store.append("old", [got[2].model_copy(update={"content": "edited"})])
    assert [m.content for m in await store.get_messages("old", branch)] == ["hi", "hello", "edited"]


async def test_upgrade_a_database_at_the_previous_version(empty_url: str) -> None:
    assert await upgrade(empty_url, PREVIOUS) == PREVIOUS
    await execute(empty_url, *LEGACY_ROWS)
    assert await upgrade(empty_url) == head_revision()
    store = await SqlStateStore.open(empty_url)
    try:
        await check_legacy_session(store)
    finally:
        await store.close()


async def test_a_database_from_before_migrations_reads_as_the_first_revision(
    empty_url: str,
) -> None:
    await upgrade(empty_url, PREVIOUS)
    await execute(empty_url, *LEGACY_ROWS, f"DROP TABLE {VERSION_TABLE}")
    store = await SqlStateStore.open(empty_url, upgrade=True)
    try:
        assert await store.schema_revision() == head_revision()
        await check_legacy_session(store)
    finally:
        await store.close()


async def test_sqlite_upgrades_itself_postgres_asks_the_operator(empty_url: str) -> None:
    await upgrade(empty_url, PREVIOUS)
    if empty_url.startswith("sqlite"):
        store = await SqlStateStore.open(empty_url)
        assert await store.schema_revision() == head_revision()
        await store.close()
        return
    with pytest.raises(SchemaVersionError, match="run `reactq db upgrade`"):
        await SqlStateStore.open(empty_url)
    with pytest.raises(SchemaVersionError, match="run `reactq db upgrade`"):
        await SqlStateStore.open(empty_url, upgrade=False)
    store = await SqlStateStore.open(empty_url, upgrade=True)
    assert await store.schema_revision() == head_revision()
    await store.close()


async def test_a_newer_schema_is_refused_with_a_clear_message(empty_url: str) -> None:
    await upgrade(empty_url)
    await execute(empty_url, f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    with pytest.raises(SchemaVersionError, match="newer than this reactq knows") as info:
        await SqlStateStore.open(empty_url)
    assert info.value.details["revision"] == "9999"
    with pytest.raises(SchemaVersionError, match="newer"):
        await upgrade(empty_url)


def test_a_worker_refuses_a_schema_newer_than_it_knows(
    tmp_path: Path, redis_url: str, namespace: str
) -> None:
    import sqlite3
    import subprocess
    import sys

    from tests.helpers import ROOT

    db = tmp_path / "state.db"
    url = f"sqlite+aiosqlite:///{db}"
    asyncio.run(_open_and_close(url))  # the embedded default upgrades itself to head
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE reactq_schema_version SET version_num = '9999_from_the_future'")
    env = {
        **os.environ,
        "REACTQ_DATABASE_URL": url,
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-schema",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_API_KEY": "unused",
    }
    worker = subprocess.run(
        [sys.executable, "-m", "reactq.cli", "worker", "--agents", "tests.pool_agents:agent"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert worker.returncode != 0
    assert "newer than this reactq knows" in worker.stdout + worker.stderr


async def _open_and_close(url: str) -> None:
    from reactq.shared.state import open_store

    store = await open_store(url)
    await store.close()
