"""Step checkpoints of running turns, kept apart from the conversation.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "turn_checkpoints",
        sa.Column("turn_id", sa.String(128), primary_key=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("branch_id", sa.String(128), nullable=True),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("messages", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_index("ix_turn_checkpoints_session_id", "turn_checkpoints", ["session_id"])


def downgrade() -> None:
    op.drop_table("turn_checkpoints")
