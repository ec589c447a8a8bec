"""A schedule may run each tick's turn in a new session (``Schedule.fresh_sessions``:
``{session_id}-{tick}``), as a stateless cron of the Agent Protocol does.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "schedules",
        sa.Column("fresh_sessions", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("fresh_sessions")
