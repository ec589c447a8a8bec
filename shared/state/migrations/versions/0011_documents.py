"""The long-term store: namespaced JSON documents kept across sessions.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("namespace", sa.String(1100), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("documents")
