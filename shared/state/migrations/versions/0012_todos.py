"""Sessions' todo lists: one row a session, its items as JSON text.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "todos",
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("entries", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("todos")
