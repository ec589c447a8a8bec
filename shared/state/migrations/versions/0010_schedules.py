"""Scheduled turns: one row a schedule (cron or interval), fired by ``reactq beat``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("schedule_id", sa.String(64), primary_key=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("agent", sa.String(200), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("cron", sa.String(200), nullable=True),
        sa.Column("every", sa.Integer, nullable=True),
        sa.Column("paused", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("last_run_at", sa.Double, nullable=True),
        sa.Column("last_turn_id", sa.String(128), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("metadata", sa.Text, nullable=True),
    )
    op.create_index("ix_schedules_session_id", "schedules", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_schedules_session_id", table_name="schedules")
    op.drop_table("schedules")
