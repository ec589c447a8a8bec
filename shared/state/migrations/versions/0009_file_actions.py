"""The file tools' actions per turn (``file_actions``): changes with the content they
replaced (undo) and reads with the revision seen (the stale-file guard).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# SQLite only autoincrements an INTEGER PRIMARY KEY.
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "file_actions",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("turn_id", sa.String(128), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("subagent", sa.String(200), nullable=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("before", sa.LargeBinary, nullable=True),
        sa.Column("after_hash", sa.String(64), nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("undone_at", sa.Double, nullable=True),
    )
    op.create_index("ix_file_actions_session_id", "file_actions", ["session_id"])
    op.create_index("ix_file_actions_turn", "file_actions", ["turn_id", "id"])


def downgrade() -> None:
    op.drop_table("file_actions")
