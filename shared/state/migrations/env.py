"""Alembic's entry point: runs the migrations on the connection reactq hands over
(``config.attributes["connection"]``), or on ``-x url=...`` / ``sqlalchemy.url``."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from reactq.shared.state.migrate import VERSION_TABLE
from reactq.shared.state.sql.schema import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_url(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("give the database URL: alembic -x url=postgresql+asyncpg://... upgrade")
    return url


given = config.attributes.get("connection")
if given is not None:
    _run(given)
elif context.is_offline_mode():
    context.configure(url=_url(), target_metadata=metadata, version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_url(_url()))
