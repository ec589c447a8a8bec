"""Sessions carry the application's metadata; an index lists them newest first.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # JSON text (ASCII), NULL for none: the same column on SQLite and PostgreSQL.
    op.add_column("sessions", sa.Column("metadata", sa.Text, nullable=True))
    op.create_index("ix_sessions_listing", "sessions", ["created_at", "session_id"])


def downgrade() -> None:
    op.drop_index("ix_sessions_listing", "sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("metadata")
